"""Tracing a PyTorch module into a chain of layers, with handlers registered by type.

Both front ends (:mod:`pytorch_ref.frontends.float_model` for float models and
:mod:`pytorch_ref.frontends.torch_ao` for models PyTorch already quantized) work the same way,
as hls4ml does: :func:`trace` turns the module into a ``torch.fx`` graph, and
:func:`walk` visits its nodes in order, looks up one handler per node in a
:class:`Registry` (by module type, by function, or by tensor-method name) and checks
that the nodes form a chain (each layer reads the output of the one before it), or,
for the float front end, records which earlier nodes each one reads (a graph).
A node that no handler claims stops the conversion with an error naming the node,
its type and the supported set (:class:`UnsupportedGraph`).

A front end may also name nodes that are not layers (``skip``): in a ``torch.export``
graph, the constants (weights and their dequantization) and the export's own guards.

Shape arithmetic such as ``x.size(0)`` or ``x.shape[0]`` only feeds the arguments of a
``view``/``reshape``; such nodes are "shape helpers": skipped by the walk and
interpreted by the handler of the node that uses them.
"""
from __future__ import annotations

import dataclasses
import inspect
import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import fx, nn

__all__ = ["Registry", "UnsupportedGraph", "trace", "walk", "describe", "type_name", "is_batch_size", "flatten_spec", "pair"]


class UnsupportedGraph(TypeError, ValueError):
    """A node no handler claims, or nodes that are not a chain. Both a ``TypeError`` (as
    the torch.fx front ends have always raised) and a ``ValueError``."""


def trace(model: nn.Module) -> fx.GraphModule:
    """``torch.fx.symbolic_trace``, with a readable error when the model cannot be traced."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    try:
        return fx.symbolic_trace(model)
    except Exception as error:      # fx raises many types; name the model and re-raise one
        raise TypeError(f"cannot trace {type(model).__name__} with torch.fx "
                        f"({type(error).__name__}: {error}); write it as an nn.Sequential "
                        f"or give it a forward without data-dependent control flow") from error


def _callable_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):     # an ATen or other operator of an exported graph
        return f"torch.ops.{target}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    if module in ("_operator", "builtins"):
        return f"{'operator' if module == '_operator' else 'builtins'}.{name}"
    if name.startswith("boolean_dispatch"):     # e.g. F.max_pool2d
        name = getattr(target, "__name__", name)
    if name.startswith("_VariableFunctionsClass."):     # torch.relu and the other C functions
        module, name = "torch", name.split(".", 1)[1]
    if module == "torch._C._nn":
        module = "torch.nn.functional"
    return f"{module}.{name}" if module else name


def type_name(module_type: type) -> str:
    """A module type's name as PyTorch prints it: ``Conv2d``, ``QuantizedConv2d``."""
    name = module_type.__name__
    if ".quantized." in module_type.__module__ and not name.endswith("Quantize"):
        return "Quantized" + name
    return name


def describe(node: fx.Node, graph_module: fx.GraphModule) -> str:
    """``module 'features.0' (Conv2d)``, ``function 'add' (operator.add)``, ..."""
    if node.op == "call_module":
        return f"module {node.target!r} ({type_name(type(graph_module.get_submodule(node.target)))})"
    if node.op == "call_function":
        return f"function {node.name!r} ({_callable_name(node.target)})"
    if node.op == "call_method":
        return f"method {node.name!r} (Tensor.{node.target})"
    if node.op == "get_attr":
        return f"attribute {node.target!r} (get_attr)"
    return f"node {node.name!r} ({node.op})"


def _is_shape_helper(node) -> bool:
    """``x.size(...)``, ``x.shape`` and indexing into them: integers, not tensors."""
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_method" and node.target in ("size", "dim"):
        return True
    if node.op == "call_function" and node.target is getattr and node.args[1:] == ("shape",):
        return True
    if node.op == "call_function" and node.target is operator.getitem:
        return _is_shape_helper(node.args[0])
    return False


def is_batch_size(value) -> bool:
    """True for ``x.size(0)`` and ``x.shape[0]`` nodes: the batch dimension."""
    if not isinstance(value, fx.Node):
        return False
    if value.op == "call_method" and value.target == "size":
        dim = value.args[1] if len(value.args) > 1 else value.kwargs.get("dim")
        return dim == 0
    if value.op == "call_function" and value.target is operator.getitem:
        source, index = value.args
        if source.op == "call_function" and source.target is getattr:
            return index == 0
        if source.op == "call_method" and source.target == "size" and len(source.args) == 1:
            return index == 0
    return False


def pair(value, what: str, where: str) -> tuple[int, int]:
    """An int or a pair of ints as ``(h, w)``."""
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (value[0], value[1])
    raise ValueError(f"{where}: {what} must be an int or a pair of ints, not {value!r}")


def _flatten_signature(input, start_dim=0, end_dim=-1):   # noqa: A002  (torch.flatten's names)
    pass


def flatten_spec(node: fx.Node, where: str) -> int | None:
    """Check that a ``flatten``/``view``/``reshape`` node flattens all but the batch
    dimension; returns the feature count it names (``None`` when it leaves it as -1).
    """
    if node.target in ("view", "reshape"):
        shape = list(node.args[1:]) or [node.kwargs.get("shape", node.kwargs.get("size"))]
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = list(shape[0])
        ok = len(shape) == 2 and (
            (is_batch_size(shape[0]) and (shape[1] == -1 or isinstance(shape[1], int)))
            or (shape[0] == -1 and isinstance(shape[1], int) and shape[1] > 0))
        if not ok:
            raise ValueError(f"{where}: only a {node.target} to (batch, features) is supported, such as "
                             f"x.{node.target}(x.size(0), -1), not shape {tuple(shape)!r}")
        return shape[1] if isinstance(shape[1], int) and shape[1] > 0 else None
    try:
        bound = inspect.signature(_flatten_signature).bind(*node.args, **node.kwargs).arguments
    except TypeError as error:
        raise ValueError(f"{where}: cannot read the flatten arguments ({error})") from None
    start, end = bound.get("start_dim", 0), bound.get("end_dim", -1)
    if (start, end) != (1, -1):
        raise ValueError(f"{where}: only flattening from dimension 1 to -1 (all but the batch) is "
                         f"supported, not start_dim={start!r}, end_dim={end!r}")
    return None


Handler = Callable[..., object]


@dataclass(frozen=True)
class Step:
    """One node of the chain (or graph) and the handler that claimed it."""
    node: fx.Node
    handler: Handler
    module: nn.Module | None        # the called module, for call_module nodes
    where: str                      # describe(node): for error messages
    reads: tuple[fx.Node, ...] = ()     # the tensors it reads (filled in by walk)


class Registry:
    """Handlers for one front end, registered by module type, function or method name.

    A handler is called as ``handler(step)`` and returns whatever the front end wants
    (a neutral layer description). Module types are matched exactly, not by subclass:
    a subclass may change what the layer computes.
    """

    def __init__(self, what: str):
        self.what = what
        self.modules: dict[type, Handler] = {}
        self.functions: dict[object, Handler] = {}
        self.methods: dict[str, Handler] = {}

    @staticmethod
    def _registrar(table: dict, keys):
        """A decorator that files its handler in ``table`` under each of ``keys``."""
        def register(handler):
            for key in keys:
                table[key] = handler
            return handler
        return register

    def module(self, *types: type):
        return self._registrar(self.modules, types)

    def function(self, *functions):
        return self._registrar(self.functions, functions)

    def method(self, *names: str):
        return self._registrar(self.methods, names)

    def supported(self) -> str:
        groups = [("modules", {type_name(t) for t in self.modules}),
                  ("functions", {_callable_name(f) for f in self.functions}),
                  ("tensor methods", set(self.methods))]
        listed = "; ".join(f"{kind} {', '.join(sorted(names))}" for kind, names in groups if names)
        return f"supported by the {self.what}: {listed}"

    def lookup(self, node: fx.Node, graph_module: fx.GraphModule) -> Step:
        where = describe(node, graph_module)
        handler, module = None, None
        if node.op == "call_module":
            module = graph_module.get_submodule(node.target)
            handler = self.modules.get(type(module))
        elif node.op == "call_function":
            try:
                handler = self.functions.get(node.target)
            except TypeError:       # unhashable target
                handler = None
        elif node.op == "call_method":
            handler = self.methods.get(node.target)
        if handler is None:
            raise UnsupportedGraph(f"{where} is not supported; {self.supported()}")
        return Step(node, handler, module, where)


def walk(graph_module: fx.GraphModule, registry: Registry, chain: bool = True,
         skip: Callable[[fx.Node], bool] | None = None, tuple_output: bool = False) -> list[Step]:
    """The nodes of ``graph_module`` in order, each with its handler and the tensor nodes
    it reads (the placeholder stands for the model's input).

    With ``chain``, each node must read only the output of the one before it; otherwise
    a node may read any earlier one (a graph, such as a residual network's). Nodes for
    which ``skip`` is true are not steps, and reading them does not count. With
    ``tuple_output`` the graph may return its last layer's output as a tuple of one (as
    ``torch.export`` graphs do).
    """
    def skipped(node) -> bool:
        return _is_shape_helper(node) or (skip is not None and skip(node))

    graph = graph_module.graph
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise UnsupportedGraph(f"the model's forward must take exactly one tensor, not {len(inputs)} "
                               f"({', '.join(n.name for n in inputs)})")
    current = inputs[0]
    steps = []
    for node in graph.nodes:
        if node.op == "placeholder" or skipped(node):
            continue
        if node.op == "output":
            result = node.args[0]
            if tuple_output and isinstance(result, (tuple, list)) and len(result) == 1:
                result = result[0]
            if result is not current:
                raise UnsupportedGraph(f"the model must return the output of its last layer "
                                       f"{current.name!r} as one tensor, not {node.args[0]!r}")
            break
        step = registry.lookup(node, graph_module)
        reads = [n for n in node.all_input_nodes if not skipped(n)]
        if chain and reads != [current]:
            raise UnsupportedGraph(f"{step.where} reads {', '.join(repr(n.name) for n in reads) or 'nothing'}, "
                                   f"not only the output of the layer before it ({current.name!r}): only a "
                                   f"chain of layers is supported (no branches or skip connections)")
        if not reads:
            raise UnsupportedGraph(f"{step.where} reads no tensor")
        steps.append(dataclasses.replace(step, reads=tuple(reads)))
        current = node
    return steps
