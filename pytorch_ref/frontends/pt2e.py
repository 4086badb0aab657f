"""Import a model quantized with torchao's pt2e flow (``prepare_pt2e`` / ``convert_pt2e``).

:func:`from_pt2e` reads the converted graph of a ``torch.export``-ed model: a chain of
``quantize_per_tensor`` / ``dequantize_per_tensor`` pairs around ``aten.conv2d``,
``aten.linear``, ``aten.relu``, ``aten.max_pool2d`` and ``aten.flatten`` / ``view`` /
``reshape``, whose weights are int8 constants behind ``dequantize_per_channel`` (or
``dequantize_per_tensor``) nodes. The walk and its errors are those of the other front
ends (:mod:`pytorch_ref.frontends.graph`); the layers are built as
:mod:`pytorch_ref.frontends.torch_ao` builds them (:mod:`pytorch_ref.frontends.imported`).

The graph is read in *segments*: the float ops between a dequantize (codes of scale and
zero point P) and the next quantize (Q). A segment holds at most one Conv2d or Linear,
which becomes a layer from P to Q; ReLUs fold into the clamp of the weighted layer before
them; max-pooling and flattening run on the codes (both commute with quantization, which
is monotonic). A segment without a weighted op must requantize to the same P.

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
from dataclasses import dataclass

import numpy as np
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers the quantized_decomposed operators)
from torch import fx, nn
from torch.fx.operator_schemas import normalize_function

from pytorch_ref.frontends.float_model import ClampOp, FlattenOp, MaxPoolOp, maxpool_op
from pytorch_ref.frontends.graph import Registry, Step, walk
from pytorch_ref.frontends.imported import check_symmetric, code_offset, compare_codes, fuse_relu, our_codes, \
    weighted_layer
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import FlattenLayer, MaxPool2dLayer, QuantizedModel, QuantParams
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


def _ops(graph_module: fx.GraphModule) -> list:
    if not isinstance(graph_module, fx.GraphModule):
        raise TypeError(f"expected the fx.GraphModule that convert_pt2e returns, not {type(graph_module).__name__}")
    steps = walk(graph_module, REGISTRY, skip=_skip, tuple_output=True)
    return [step.handler(step) for step in steps]


def _segments(ops: list) -> tuple[_Quantize, list[tuple[_Quantize, list, _Quantize]]]:
    """The input's quantize, then ``(P, float ops, Q)`` for every dequantize of P."""
    if not ops or not isinstance(ops[0], _Quantize):
        where = ops[0].where if ops else "the graph"
        raise ValueError(f"{where} comes before any quantize_per_tensor: the model's input must be quantized "
                         f"(prepare_pt2e/convert_pt2e with a quantizer that annotates its first layer)")
    segments, index = [], 0
    while index < len(ops):
        quantize = ops[index]
        following = ops[index + 1] if index + 1 < len(ops) else None
        if not isinstance(following, _Dequantize):
            raise ValueError(f"{quantize.where}: its codes must be dequantized next, not read by "
                             f"{following.where if following else 'the output'}")
        if following.key != quantize.key:
            raise ValueError(f"{following.where}: dequantizes with {following.key}, not with the {quantize.key} "
                             f"they were quantized with")
        end = next((i for i in range(index + 2, len(ops)) if isinstance(ops[i], _Quantize)), None)
        body = ops[index + 2:end if end is not None else len(ops)]
        if end is None:
            if body:
                raise ValueError(f"{body[-1].where}: the model's output is float; it must be quantized "
                                 f"(XNNPACKQuantizer quantizes every layer's output; X86InductorQuantizer "
                                 f"leaves the last layer's float)")
            break
        segments.append((quantize, body, ops[end]))
        index = end
    return ops[0], segments


def _lower_segment(layers: list, source: _Quantize, body: list, target: _Quantize) -> None:
    weighted = [op for op in body if isinstance(op, _Weighted)]
    if len(weighted) > 1:
        raise ValueError(f"{weighted[1].where} follows {weighted[0].where} without a quantize between them")
    if not weighted and (source.quant, source.low, source.high) != (target.quant, target.low, target.high):
        raise ValueError(f"{target.where}: requantizes from {source.key} to {target.key} without a Conv2d or "
                         f"Linear; only max-pooling, flattening and ReLU at unchanged quantization are supported")
    for op in body:
        if isinstance(op, _Weighted):
            layers.append(weighted_layer(op.name, op.where, op.codes, op.scales, op.bias, source.quant, target.quant,
                                         conv=op.conv, output_range=(target.low, target.high)))
        elif isinstance(op, ClampOp):
            fuse_relu(layers, op.where)
        elif isinstance(op, MaxPoolOp):
            layers.append(MaxPool2dLayer(op.name, op.kernel_size, op.stride, op.padding))
        elif isinstance(op, FlattenOp):
            layers.append(FlattenLayer(op.name))
        else:
            raise ValueError(f"{op.where} is not supported between a dequantize and a quantize")


def from_pt2e(graph_module: fx.GraphModule, example_input: torch.Tensor, name: str = "model") -> QuantizedModel:
    """A :class:`QuantizedModel` computing what ``graph_module`` (the output of torchao's
    ``convert_pt2e``) computes, on inputs shaped as ``example_input`` (with its batch)."""
    first, segments = _segments(_ops(graph_module))
    if (first.low, first.high) != (sem.ACTIVATION_MIN, sem.ACTIVATION_MAX):
        raise ValueError(f"{first.where}: the input must be quantized over the whole 8-bit range, not "
                         f"[{first.key[2]}, {first.key[3]}] ({first.key[4]})")
    layers: list = []
    for source, body, target in segments:
        _lower_segment(layers, source, body, target)
    return QuantizedModel(name=name, input_shape=tuple(example_input.shape[1:]), input_quant=first.quant,
                          layers=tuple(layers))


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
