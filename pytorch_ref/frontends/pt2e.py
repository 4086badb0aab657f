"""Import a model quantized with torchao's pt2e flow (``prepare_pt2e`` / ``convert_pt2e``).

:func:`from_pt2e` reads the converted graph of a ``torch.export``-ed model: a graph of
``quantize_per_tensor`` / ``dequantize_per_tensor`` pairs around ``aten.conv2d``,
``aten.linear``, ``aten.relu``, ``aten.max_pool2d``, ``aten.flatten`` / ``view`` /
``reshape``, ``aten.add`` and ``aten.cat``, whose weights are int8 constants behind ``dequantize_per_channel`` (or
``dequantize_per_tensor``) nodes. The walk and its errors are those of the other front
ends (:mod:`pytorch_ref.frontends.graph`); the layers are built as
:mod:`pytorch_ref.frontends.torch_ao` builds them (:mod:`pytorch_ref.frontends.imported`).

The graph is read in *segments*: each ``quantize_per_tensor`` (Q) is a tensor of codes,
and its segment the float ops from the dequantizes of earlier tensors up to it. A segment
holds at most one Conv2d, Linear, ``add`` or ``cat``, which becomes a layer from its
inputs' scales to Q's; ReLUs fold into the clamp of the Conv2d, Linear or add before them;
max-pooling and flattening run on the codes (both commute with quantization, which is
monotonic). A segment without such an op must keep its input's quantization. A tensor may
be read by several segments (a residual network's shortcut), so the model is a graph.

Number formats: ``uint8`` activations (X86InductorQuantizer) are shifted by -128 as
torch.ao's ``quint8``; ``int8`` ones (XNNPACKQuantizer) are taken as they are. A
quantization range narrower than 8 bits (e.g. [-127, 127]) becomes the clamp of the layer
that produces it. Weights must be int8 and symmetric (XNNPACK's [-127, 127] and X86's
[-128, 127] both are). The float bias is quantized to int32 in units of
``input_scale * weight_scale``; PyTorch's own execution of the graph dequantizes, runs the
op in float32 and quantizes again, so outputs may differ by a code
(:func:`measure_pt2e_agreement` counts how often).

:func:`pt2e_quantize` produces such models from a float module, for tests and examples.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers the quantized_decomposed operators)
from torch import fx, nn
from torch.fx.operator_schemas import normalize_function

from pytorch_ref.frontends.float_model import ClampOp, FlattenOp, MaxPoolOp, maxpool_op
from pytorch_ref.frontends.quantize import make_add, make_concat
from pytorch_ref.frontends.graph import Registry, Step, walk
from pytorch_ref.frontends.imported import check_symmetric, code_offset, compare_codes, our_codes, \
    weighted_layer, with_relu
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import (AddLayer, Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer,
                                            QuantizedModel, QuantParams)
from pytorch_ref.reference import run_integer_reference

__all__ = ["from_pt2e", "pt2e_quantize", "pt2e_codes", "measure_pt2e_agreement", "REGISTRY"]

_Q = torch.ops.quantized_decomposed
_ATEN = torch.ops.aten
_WEIGHT_DEQUANTIZE = (_Q.dequantize_per_channel.default, _Q.dequantize_per_tensor.default)

#: The pt2e importer's handlers, one per operator of the converted graph.
REGISTRY = Registry("pt2e importer")


@dataclass
class _Quantize:
    where: str
    node: fx.Node
    key: tuple              # PyTorch's (scale, zero point, quant_min, quant_max, dtype)
    quant: QuantParams      # ours
    low: int                # our codes' range
    high: int


@dataclass
class _Dequantize:
    where: str
    key: tuple


@dataclass
class _Weighted:
    name: str
    where: str
    codes: np.ndarray
    scales: np.ndarray
    bias: torch.Tensor | None
    conv: dict | None       # stride, padding, dilation, groups; None for a Linear


def _arguments(node: fx.Node) -> dict:
    """The node's arguments by name, defaults filled in (from the operator's schema)."""
    normalized = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    return dict(normalized.kwargs)


def _name(step: Step) -> str:
    """``0.Conv2d`` as the float front end names layers, from the module the node came from."""
    stack = step.node.meta.get("nn_module_stack")
    if stack:
        path, module_type = list(stack.values())[-1]
        type_name = module_type if isinstance(module_type, str) else module_type.__name__
        if path:        # empty: a call in the top module's forward
            return f"{path}.{type_name.rsplit('.', 1)[-1]}"
    return step.node.name


def _constant(graph_module: fx.GraphModule, value):
    """The value of a node that depends only on the graph's constants (``get_attr``)."""
    if not isinstance(value, fx.Node):
        return value
    if value.op == "get_attr":
        return functools.reduce(getattr, value.target.split("."), graph_module)
    if value.op == "call_function":
        args = fx.node.map_arg(value.args, functools.partial(_constant, graph_module))
        kwargs = fx.node.map_arg(value.kwargs, functools.partial(_constant, graph_module))
        return value.target(*args, **kwargs)
    raise ValueError(f"node {value.name!r} ({value.op}) is not a constant")


def _key(args: dict) -> tuple:
    return (float(args["scale"]), int(args["zero_point"]), int(args["quant_min"]), int(args["quant_max"]),
            args["dtype"])


@REGISTRY.function(_Q.quantize_per_tensor.default)
def _quantize(step: Step):
    key = _key(_arguments(step.node))
    scale, zero_point, quant_min, quant_max, dtype = key
    offset = code_offset(dtype, step.where)
    low, high = quant_min + offset, quant_max + offset
    if not sem.ACTIVATION_MIN <= low <= zero_point + offset <= high <= sem.ACTIVATION_MAX:
        raise ValueError(f"{step.where}: quantization range [{quant_min}, {quant_max}] with zero point "
                         f"{zero_point} ({dtype}) does not fit 8-bit codes")
    return _Quantize(step.where, step.node, key, QuantParams(scale, zero_point + offset), low, high)


@REGISTRY.function(_Q.dequantize_per_tensor.default)
def _dequantize(step: Step):
    return _Dequantize(step.where, _key(_arguments(step.node)))


def _weights(step: Step, weight: fx.Node) -> tuple[np.ndarray, np.ndarray]:
    """Int8 weight codes and per-output-channel scales behind a dequantize node."""
    if not (isinstance(weight, fx.Node) and weight.op == "call_function" and weight.target in _WEIGHT_DEQUANTIZE):
        raise ValueError(f"{step.where}: its weight must be quantized (a dequantize_per_channel or "
                         f"dequantize_per_tensor of int8 codes), not {weight!r}; quantize the model with "
                         f"prepare_pt2e/convert_pt2e and a quantizer that annotates this layer")
    graph_module = step.node.graph.owning_module
    args = {k: _constant(graph_module, v) for k, v in _arguments(weight).items()}
    codes = args["input"]
    if args["dtype"] != torch.int8 or codes.dtype != torch.int8:
        raise ValueError(f"{step.where}: weights must be int8, not {args['dtype']}")
    out_channels = codes.shape[0]
    if weight.target == _Q.dequantize_per_channel.default:
        if args["axis"] != 0:
            raise ValueError(f"{step.where}: per-channel weights must be quantized along axis 0, not {args['axis']}")
        scales = torch.as_tensor(args["scales"]).double().numpy()
        zero_points = torch.as_tensor(args["zero_points"]).numpy()
    else:
        scales = np.full(out_channels, float(args["scale"]), dtype=np.float64)
        zero_points = np.full(out_channels, int(args["zero_point"]))
    check_symmetric(step.where, zero_points)
    return codes.numpy().astype(np.int8), scales


@REGISTRY.function(_ATEN.conv2d.default, _ATEN.linear.default)
def _weighted(step: Step):
    args = _arguments(step.node)
    codes, scales = _weights(step, args["weight"])
    bias = _constant(step.node.graph.owning_module, args["bias"])
    conv = None
    if step.node.target == _ATEN.conv2d.default:
        conv = {key: args[key] for key in ("stride", "padding", "dilation", "groups")}
    return _Weighted(_name(step), step.where, codes, scales, bias, conv)


@dataclass
class _Add:
    name: str
    where: str


@dataclass
class _Concat:
    name: str
    where: str


@REGISTRY.function(_ATEN.add.Tensor)
def _add(step: Step):
    args = _arguments(step.node)
    if args.get("alpha", 1) != 1 or not all(isinstance(args[k], fx.Node) for k in ("input", "other")):
        raise ValueError(f"{step.where}: only the plain sum of two tensors is supported")
    return _Add(step.node.name, step.where)


@REGISTRY.function(_ATEN.cat.default)
def _cat(step: Step):
    args = _arguments(step.node)
    tensors = args["tensors"]
    if args["dim"] % (tensors[0].meta["val"].dim() if "val" in tensors[0].meta else 4) != 1:
        raise ValueError(f"{step.where}: only a concatenation along channels (dim 1) is supported, not dim "
                         f"{args['dim']}")
    return _Concat(step.node.name, step.where)


@REGISTRY.function(_ATEN.relu.default, _ATEN.relu_.default)
def _relu(step: Step):
    return ClampOp(_name(step), step.where, 0.0, None)


@REGISTRY.function(_ATEN.max_pool2d.default)
def _maxpool(step: Step):
    args = _arguments(step.node)
    return maxpool_op(_name(step), step.where, args["kernel_size"], args["stride"], args["padding"],
                      args["dilation"], args["ceil_mode"], False)


@REGISTRY.function(_ATEN.flatten.using_ints, _ATEN.view.default, _ATEN.reshape.default)
def _flatten(step: Step):
    """Only a flattening to ``(batch, features)``, read from the shapes export recorded."""
    placeholder = next(n for n in step.node.graph.nodes if n.op == "placeholder")
    value, source = step.node.meta.get("val"), placeholder.meta.get("val")
    if value is None or source is None:
        raise ValueError(f"{step.where}: the graph carries no shapes; export the model with torch.export")
    if value.dim() != 2 or str(value.shape[0]) != str(source.shape[0]):       # the same size or symbol
        raise ValueError(f"{step.where}: only a flattening to (batch, features) is supported, not to shape "
                         f"{tuple(value.shape)} from an input of shape {tuple(source.shape)}")
    return FlattenOp(_name(step), step.where)


def _is_constant(node: fx.Node) -> bool:
    """A ``get_attr``, or a call on constants only (a weight's dequantization)."""
    if node.op == "get_attr":
        return True
    return node.op == "call_function" and bool(node.all_input_nodes) and all(map(_is_constant, node.all_input_nodes))


def _skip(node: fx.Node) -> bool:
    """Not a layer: constants, the batch size (``sym_size``) and the guards that
    ``torch.export`` adds to its module."""
    if _is_constant(node):
        return True
    if node.op == "call_module":
        return node.target == "_guards_fn" and not node.users
    return node.op == "call_function" and node.target == _ATEN.sym_size.int


def _steps(graph_module: fx.GraphModule) -> list[Step]:
    if not isinstance(graph_module, fx.GraphModule):
        raise TypeError(f"expected the fx.GraphModule that convert_pt2e returns, not {type(graph_module).__name__}")
    return walk(graph_module, REGISTRY, chain=False, skip=_skip, tuple_output=True)


def _ops(graph_module: fx.GraphModule) -> list:
    return [step.handler(step) for step in _steps(graph_module)]


class _Segments:
    """The graph as tensors and segments. Each ``quantize_per_tensor`` is a tensor of
    codes; the float ops from the dequantizes of earlier tensors up to it are its
    segment, lowered to our layers with the tensor's scale as their output's."""

    def __init__(self, graph_module: fx.GraphModule):
        steps = _steps(graph_module)
        self.ops = {step.node: step.handler(step) for step in steps}
        self.reads = {step.node: step.reads for step in steps}
        self.layers, self.inputs, self.quants, self.ranges = [], [], [], []
        self.tensor: dict[fx.Node, int] = {}            # quantize or float node -> our tensor
        self.quantize_of: dict[int, fx.Node] = {}       # our tensor -> the quantize that holds it
        ops = list(self.ops.values())
        if not ops or not isinstance(ops[0], _Quantize):
            where = ops[0].where if ops else "the graph"
            raise ValueError(f"{where} comes before any quantize_per_tensor: the model's input must be quantized "
                             f"(prepare_pt2e/convert_pt2e with a quantizer that annotates its first layer)")
        last = steps[-1]
        if not isinstance(self.ops[last.node], _Dequantize):
            raise ValueError(f"{last.where}: the model's output is float; it must be quantized "
                             f"(XNNPACKQuantizer quantizes every layer's output; X86InductorQuantizer "
                             f"leaves the last layer's float)")
        self.first = ops[0]
        self.tensor[self.first.node] = 0
        self.quants.append(self.first.quant)
        self.ranges.append((self.first.low, self.first.high))
        for node, op in self.ops.items():
            if isinstance(op, _Quantize) and node is not self.first.node:
                self.lower(op)

    def source(self, node: fx.Node) -> int:
        """Our tensor behind a node a segment reads: a dequantize of a tensor, or an op of
        the segment already lowered."""
        op = self.ops.get(node)
        if isinstance(op, _Dequantize):
            quantize = self.ops.get(node.args[0])
            if not isinstance(quantize, _Quantize) or node.args[0] not in self.tensor:
                raise ValueError(f"{op.where}: dequantizes {node.args[0].name!r}, which is not a quantized tensor")
            if op.key != quantize.key:
                raise ValueError(f"{op.where}: dequantizes with {op.key}, not with the {quantize.key} "
                                 f"they were quantized with")
            return self.tensor[node.args[0]]
        return self.tensor[node]

    def body(self, node: fx.Node, seen: list) -> list:
        """The float nodes of a segment ending in ``node``, producers first."""
        op = self.ops.get(node)
        if isinstance(op, _Dequantize) or node in seen:
            return seen
        if isinstance(op, _Quantize):
            raise ValueError(f"{op.where}: its codes must be dequantized before a float op reads them")
        for read in self.reads[node]:
            self.body(read, seen)
        seen.append(node)
        return seen

    def emit(self, layer, reads: tuple[int, ...], quant: QuantParams, target: _Quantize | None = None) -> int:
        """Append ``layer``, reading our tensors ``reads``; its output is quantized as
        ``quant``, over ``target``'s range (a rescaling layer's) or its input's."""
        self.layers.append(layer)
        self.inputs.append(reads)
        self.quants.append(quant)
        self.ranges.append((target.low, target.high) if target else self.ranges[reads[0]])
        return len(self.layers)

    def lower(self, target: _Quantize) -> None:
        body = self.body(target.node.args[0], [])
        rescaling = [node for node in body if isinstance(self.ops[node], (_Weighted, _Add, _Concat))]
        if len(rescaling) > 1:
            raise ValueError(f"{self.ops[rescaling[1]].where} follows {self.ops[rescaling[0]].where} without a "
                             f"quantize between them")
        for node in body:
            op = self.ops[node]
            reads = tuple(self.source(read) for read in self.reads[node])
            narrow = dict(output_range=(target.low, target.high))
            if isinstance(op, _Weighted):
                layer = weighted_layer(op.name, op.where, op.codes, op.scales, op.bias, self.quants[reads[0]],
                                       target.quant, conv=op.conv, **narrow)
                self.tensor[node] = self.emit(layer, reads, target.quant, target)
            elif isinstance(op, _Add):
                layer = make_add(op.name, self.quants[reads[0]], self.quants[reads[1]], target.quant)
                self.tensor[node] = self.emit(replace(layer, requant=_narrowed(layer.requant, target)), reads,
                                              target.quant, target)
            elif isinstance(op, _Concat):
                layer = make_concat(op.name, [self.quants[t] for t in reads], target.quant)
                layer = replace(layer, requants=tuple(_narrowed(rq, target) for rq in layer.requants))
                self.tensor[node] = self.emit(layer, reads, target.quant, target)
            elif isinstance(op, ClampOp):
                self.fuse_relu(op, reads[0])
                self.tensor[node] = reads[0]
            elif isinstance(op, MaxPoolOp):
                layer = MaxPool2dLayer(op.name, op.kernel_size, op.stride, op.padding)
                self.tensor[node] = self.emit(layer, reads, self.quants[reads[0]])
            elif isinstance(op, FlattenOp):
                self.tensor[node] = self.emit(FlattenLayer(op.name), reads, self.quants[reads[0]])
            else:
                raise ValueError(f"{op.where} is not supported between a dequantize and a quantize")
        result = self.source(target.node.args[0])
        if not rescaling and (self.quants[result], self.ranges[result]) != (target.quant, (target.low, target.high)):
            raise ValueError(f"{target.where}: requantizes to {target.key} without a Conv2d, Linear, add or "
                             f"concatenation; only max-pooling, flattening and ReLU at unchanged quantization "
                             f"are supported")
        self.tensor[target.node] = result
        self.quantize_of.setdefault(result, target.node)

    def fuse_relu(self, op: ClampOp, tensor: int) -> None:
        """A quantized ReLU is ``max(q, zero_point)``: fold it into the clamp of the
        Conv2d, Linear or add that produced ``tensor``, through max-pools and flattens
        (which commute with it), if nothing else reads what it changes."""
        t = tensor
        while t > 0 and isinstance(self.layers[t - 1], (MaxPool2dLayer, FlattenLayer)):
            if self.readers(t) > 1:
                break
            t = self.inputs[t - 1][0]
        layer = self.layers[t - 1] if t > 0 else None
        if not isinstance(layer, (DenseLayer, Conv2dLayer, AddLayer)) or (t != tensor and self.readers(t) > 1):
            raise ValueError(f"{op.where} has no quantized Conv2d, Linear or add before it to fuse into (only "
                             f"max-pooling and flattening, read by nothing else, may stand between them)")
        self.layers[t - 1] = with_relu(layer)

    def readers(self, t: int) -> int:
        """How many ops read our tensor ``t``: the users of the dequantizes of its
        quantize, or 1 for a tensor inside a segment."""
        quantize = self.quantize_of.get(t)
        if quantize is None:
            return 1
        return sum(len(dequantize.users) for dequantize in quantize.users)

    def model(self, name: str, input_shape: tuple[int, ...]) -> QuantizedModel:
        return QuantizedModel(name=name, input_shape=input_shape, input_quant=self.first.quant,
                              layers=tuple(self.layers), inputs=tuple(self.inputs))


def _narrowed(rq, target: _Quantize):
    """``rq`` clamped to PyTorch's quantization range, where that is narrower than 8 bits."""
    return replace(rq, clamp_min=max(rq.clamp_min, target.low), clamp_max=min(rq.clamp_max, target.high))


def from_pt2e(graph_module: fx.GraphModule, example_input: torch.Tensor, name: str = "model") -> QuantizedModel:
    """A :class:`QuantizedModel` computing what ``graph_module`` (the output of torchao's
    ``convert_pt2e``) computes, on inputs shaped as ``example_input`` (with its batch)."""
    segments = _Segments(graph_module)
    first = segments.first
    if (first.low, first.high) != (sem.ACTIVATION_MIN, sem.ACTIVATION_MAX):
        raise ValueError(f"{first.where}: the input must be quantized over the whole 8-bit range, not "
                         f"[{first.key[2]}, {first.key[3]}] ({first.key[4]})")
    return segments.model(name, tuple(example_input.shape[1:]))


# -- producing and measuring pt2e models ----------------------------------------------------

def _quantizer(kind: str):
    if kind == "xnnpack":
        # torchao keeps XNNPACK's quantizer among its testing helpers (the maintained one is ExecuTorch's).
        from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
        return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    if kind == "x86":
        from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
            X86InductorQuantizer, get_default_x86_inductor_quantization_config)
        return X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    raise ValueError(f"quantizer must be 'xnnpack' or 'x86', not {kind!r}")


@torch.no_grad()
def pt2e_quantize(model: nn.Module, calibration: torch.Tensor, quantizer: str = "xnnpack") -> fx.GraphModule:
    """Quantize a float model with torchao's pt2e flow, as a user would: ``torch.export``
    (batch dimension dynamic), ``prepare_pt2e``, calibration on ``calibration``,
    ``convert_pt2e``. ``quantizer``: ``"xnnpack"`` (int8 activations, per-channel weights
    in [-127, 127]) or ``"x86"`` (X86InductorQuantizer: uint8 activations, weights in
    [-128, 127])."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    example = (calibration[:2],)
    exported = torch.export.export(model.eval(), example, dynamic_shapes=({0: torch.export.Dim("batch")},))
    prepared = prepare_pt2e(exported.module(), _quantizer(quantizer))
    for batch in calibration.split(256):
        prepared(batch)
    return convert_pt2e(prepared)


class _Recorder(fx.Interpreter):
    def __init__(self, graph_module, nodes):
        super().__init__(graph_module)
        self.nodes, self.seen = nodes, {}

    def run_node(self, node):
        result = super().run_node(node)
        if node in self.nodes:
            self.seen[node] = result
        return result


@torch.no_grad()
def pt2e_codes(graph_module: fx.GraphModule, x: torch.Tensor) -> list[torch.Tensor]:
    """Run the converted graph (PyTorch's own execution) on float ``x``; return the codes
    of every quantize on the chain in our signed convention, in order: the input's first,
    the output's last."""
    quantizes = [op for op in _ops(graph_module) if isinstance(op, _Quantize)]
    recorder = _Recorder(graph_module, {op.node for op in quantizes})
    recorder.run(x)
    return [our_codes(recorder.seen[op.node], op.key[4]) for op in quantizes]


def measure_pt2e_agreement(graph_module: fx.GraphModule, quantized: QuantizedModel, x: torch.Tensor) -> dict:
    """How closely the integer reference reproduces PyTorch's execution of the converted
    graph on float inputs ``x``, both on PyTorch's own input codes
    (:func:`~pytorch_ref.frontends.imported.compare_codes`'s figures)."""
    codes = pt2e_codes(graph_module, x)
    return compare_codes(run_integer_reference(quantized, codes[0], device="cpu"), codes[-1])
