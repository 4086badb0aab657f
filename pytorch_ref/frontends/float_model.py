"""The float front end: a PyTorch model to a :class:`QuantizedModel`.

:func:`quantize_model` compiles in five passes:

1. trace the model with ``torch.fx`` and walk its graph (:mod:`pytorch_ref.frontends.graph`),
   one handler per layer type turning each node into a neutral float op that names the
   ops it reads;
2. fuse: fold each BatchNorm2d into the Conv2d before it (eval-mode running
   statistics), and fuse each ReLU, ReLU6 and Hardtanh into the clamp of the
   Conv2d/Linear before it (through MaxPool2d and Flatten, which commute with a clamp);
3. propagate shapes, stopping with a message naming the layer that cannot work;
4. calibrate: run the float ops on calibration data, with a ``torch.ao`` observer
   (``MinMaxObserver`` unless told otherwise) on the input and on every weighted
   layer's output;
5. lower each op to its integer layer (weights per-channel symmetric, biases int32,
   requantization multiplier and shift; see :mod:`pytorch_ref.frontends.quantize`).

Supported: Conv2d (any kernel, stride, padding, groups; zeros padding, dilation 1),
Conv1d (as a Conv2d of kernel height 1: a model whose input is ``(C, L)`` becomes an
integer model of input ``(C, 1, L)``; reshape its inputs so),
Linear, ReLU, ReLU6, Hardtanh, MaxPool2d (dilation 1, no ceil mode), AvgPool2d
(``count_include_pad``, no ceil mode), AdaptiveAvgPool2d(1), BatchNorm1d (after a Linear), BatchNorm2d (after
a Conv2d), Flatten, Dropout and Identity (no-ops in eval mode), and the functions and
methods ``torch.relu``, ``F.relu``, ``F.relu6``, ``F.hardtanh``, ``F.max_pool2d``,
``F.avg_pool2d``, ``F.adaptive_avg_pool2d``, ``x.mean((2, 3))``,
``torch.flatten``, ``x.flatten(1)``,
``x.view(x.size(0), -1)`` and ``x.reshape(...)`` of the same form; and graphs: the sum
of two tensors (``x + y``, ``torch.add``, ``x.add(y)``; a residual connection) and
``torch.cat``/``torch.concat`` along channels. A Conv2d, Linear or add that only a
concatenation reads takes the concatenation's scale and zero point (so that the hardware
writes it in place).
"""
from __future__ import annotations

import copy
import operator
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.ao.quantization.observer import MinMaxObserver, ObserverBase

from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.frontends.graph import Registry, Step, flatten_spec, pair, trace, walk
from pytorch_ref.frontends.precision import WeightBitsSpec, resolve_weight_bits
from pytorch_ref.frontends.quantize import make_add, make_concat, make_requantization, quantize_bias, quantize_weight
from pytorch_ref.ir.quantized_model import (Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer, QuantizedModel,
                              QuantParams)

__all__ = ["quantize_model", "fold_batchnorm", "float_ops", "activation_observer", "REGISTRY"]

#: The float front end's handlers, one per layer type.
REGISTRY = Registry("float front end")


# -- neutral float ops -------------------------------------------------------------

class _Clamped:
    """An op whose output is clamped to ``[low, high]`` by the activations fused into it
    (ReLU: ``low = 0``; ReLU6: ``[0, 6]``; Hardtanh; ``None``: unbounded)."""

    @property
    def relu(self) -> bool:
        return self.low is not None and self.low >= 0

    @property
    def clamped(self) -> bool:
        return self.low is not None or self.high is not None

    def clamp(self, low: float | None, high: float | None):
        """Fuse one more clamp: the bounds intersect (a second ReLU changes nothing)."""
        if low is not None:
            self.low = low if self.low is None else max(self.low, low)
        if high is not None:
            self.high = high if self.high is None else min(self.high, high)
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"{self.where}: the activations after it clamp to an empty range "
                             f"[{self.low}, {self.high}]")

    def clamped_output(self, y: torch.Tensor) -> torch.Tensor:
        return y.clamp(self.low, self.high) if self.clamped else y


@dataclass
class WeightedOp(_Clamped):
    """A Conv2d or Linear (BatchNorm already folded), its output clamped (see :class:`_Clamped`)."""
    name: str
    where: str
    module: nn.Conv2d | nn.Linear
    low: float | None = None
    high: float | None = None
    from_1d: bool = False           # a Conv1d, run as a Conv2d on a (C, 1, L) image
    #: The ops whose outputs it reads: indices into the op list, -1 for the model's input.
    inputs: tuple[int, ...] = ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.from_1d and x.dim() == 3:           # [B, C, L] -> [B, C, 1, L]
            x = x.unsqueeze(2)
        return self.clamped_output(self.module(x))

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        m = self.module
        if isinstance(m, nn.Linear):
            if len(shape) != 1:
                raise ValueError(f"{self.where}: a Linear layer needs a flat (features,) input, not "
                                 f"shape {shape}; flatten before it")
            if shape[0] != m.in_features:
                raise ValueError(f"{self.where}: expects {m.in_features} input features, not {shape[0]} "
                                 f"(the input shape of the model does not match this layer)")
            return (m.out_features,)
        if self.from_1d and len(shape) == 2:
            shape = (shape[0], 1, shape[1])
        if len(shape) != 3:
            kind = "(channels, length)" if self.from_1d else "(channels, height, width)"
            raise ValueError(f"{self.where}: a {type(m).__name__ if not self.from_1d else 'Conv1d'} needs a "
                             f"{kind} input, not shape {shape}")
        if shape[0] != m.in_channels:
            raise ValueError(f"{self.where}: expects {m.in_channels} input channels, not {shape[0]}")
        return (m.out_channels,) + _window_output(shape, m.kernel_size, m.stride, m.padding, "kernel", self.where)


@dataclass
class MaxPoolOp:
    name: str
    where: str
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    #: The ops whose outputs it reads: indices into the op list, -1 for the model's input.
    inputs: tuple[int, ...] = ()

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def output_shape(self, shape):
        if len(shape) != 3:
            raise ValueError(f"{self.where}: max-pooling needs a (channels, height, width) input, not shape {shape}")
        return (shape[0],) + _window_output(shape, self.kernel_size, self.stride, self.padding, "pooling window",
                                            self.where)


@dataclass
class AvgPoolOp:
    """Average pooling (``count_include_pad``), lowered to a depthwise convolution of unit
    weights (:func:`~pytorch_ref.ir.integer_semantics.average_pool_weights`); its output keeps
    its input's scale and zero point, as in PyTorch's quantized engine. ``kernel_size`` None:
    global average pooling (the whole input), output ``(C, 1, 1)``."""
    name: str
    where: str
    kernel_size: tuple[int, int] | None
    stride: tuple[int, int] | None = None
    padding: tuple[int, int] = (0, 0)
    flatten: bool = False               # ``x.mean((2, 3))``: the result is flat ``(C,)``
    #: The ops whose outputs it reads: indices into the op list, -1 for the model's input.
    inputs: tuple[int, ...] = ()

    def window(self, shape) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        kernel = self.kernel_size or tuple(shape[1:])
        return kernel, self.stride or kernel, self.padding

    def forward(self, x):
        kernel, stride, padding = self.window(x.shape[1:])
        y = F.avg_pool2d(x, kernel, stride, padding, count_include_pad=True)
        return y.flatten(1) if self.flatten else y

    def output_shape(self, shape):
        if len(shape) != 3:
            raise ValueError(f"{self.where}: average pooling needs a (channels, height, width) input, not shape {shape}")
        kernel, stride, padding = self.window(shape)
        out = (shape[0],) + _window_output(shape, kernel, stride, padding, "pooling window", self.where)
        return (shape[0] * out[1] * out[2],) if self.flatten else out


@dataclass
class FlattenOp:
    name: str
    where: str
    features: int | None = None     # what a view(-1, N) names, checked against the shape
    #: The ops whose outputs it reads: indices into the op list, -1 for the model's input.
    inputs: tuple[int, ...] = ()

    def forward(self, x):
        return x.flatten(1)

    def output_shape(self, shape):
        features = 1
        for d in shape:
            features *= d
        if self.features is not None and self.features != features:
            raise ValueError(f"{self.where}: reshapes to {self.features} features, but its input "
                             f"{shape} has {features}")
        return (features,)


@dataclass
class AddOp(_Clamped):
    """The sum of two tensors of one shape (a residual connection), clamped by the
    activations fused into it; lowered to an :class:`~pytorch_ref.ir.quantized_model.AddLayer`."""
    name: str
    where: str
    low: float | None = None
    high: float | None = None
    #: The ops whose outputs it reads: indices into the op list, -1 for the model's input.
    inputs: tuple[int, ...] = ()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.clamped_output(a + b)

    def output_shape(self, a_shape, b_shape):
        if tuple(a_shape) != tuple(b_shape):
            raise ValueError(f"{self.where}: adds tensors of shapes {tuple(a_shape)} and {tuple(b_shape)}; "
                             f"both must have one shape (no broadcasting)")
        return tuple(a_shape)


@dataclass
class ConcatOp:
    """Tensors joined along channels (``torch.cat(..., dim=1)``); lowered to a
    :class:`~pytorch_ref.ir.quantized_model.ConcatLayer`."""
    name: str
    where: str
    dim: int
    tensors: tuple = ()                 # the fx nodes joined, in order (a node may repeat)
    #: The ops whose outputs it reads: indices into the op list, -1 for the model's input.
    inputs: tuple[int, ...] = ()

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return torch.cat(tensors, dim=1)

    def output_shape(self, *shapes):
        if self.dim % (len(shapes[0]) + 1) != 1:
            raise ValueError(f"{self.where}: only a concatenation along channels (dim 1) is supported, "
                             f"not dim {self.dim}")
        if len({tuple(shape[1:]) for shape in shapes}) != 1 or len({len(shape) for shape in shapes}) != 1:
            raise ValueError(f"{self.where}: joins tensors of shapes {', '.join(str(tuple(s)) for s in shapes)}; "
                             f"all but the channels must agree")
        return (sum(shape[0] for shape in shapes),) + tuple(shapes[0][1:])


@dataclass
class BatchNormOp:
    """Folded into the Conv2d (BatchNorm2d) or Linear (BatchNorm1d) before it by :func:`_fuse`;
    never lowered."""
    name: str
    where: str
    module: nn.BatchNorm2d | nn.BatchNorm1d


@dataclass
class ClampOp:
    """ReLU, ReLU6 or Hardtanh: a clamp to ``[low, high]``, fused into the weighted layer
    before it by :func:`_fuse`; never lowered."""
    name: str
    where: str
    low: float | None = 0.0
    high: float | None = None


FloatOp = WeightedOp | MaxPoolOp | AvgPoolOp | FlattenOp | AddOp | ConcatOp


def _window_output(shape, kernel, stride, padding, what, where) -> tuple[int, int]:
    _, h, w = shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (w + 2 * pw - kw) // sw + 1
    if h + 2 * ph < kh or w + 2 * pw < kw:
        raise ValueError(f"{where}: a {kh}x{kw} {what} does not fit its {h}x{w} input (padding {ph}, {pw}); "
                         f"the model's input is too small for this layer")
    return (oh, ow)


# -- handlers ------------------------------------------------------------------------

def _name(step: Step) -> str:
    """Layer names in the QuantizedModel: ``<module path>.<type>`` or the fx node name."""
    if step.module is not None:
        return f"{step.node.target}.{type(step.module).__name__}"
    return step.node.name


@REGISTRY.module(nn.Conv1d)
def _conv1d(step: Step):
    """A Conv1d as a Conv2d of kernel height 1 over a (C, 1, L) image."""
    c = step.module
    padding = c.padding if isinstance(c.padding, str) else (0, c.padding[0])
    conv = nn.Conv2d(c.in_channels, c.out_channels, (1, c.kernel_size[0]), (1, c.stride[0]), padding,
                     (1, c.dilation[0]), c.groups, bias=c.bias is not None, padding_mode=c.padding_mode)
    with torch.no_grad():
        conv.weight.copy_(c.weight.unsqueeze(2))
        if c.bias is not None:
            conv.bias.copy_(c.bias)
    op = _checked_conv(step, conv)
    op.from_1d = True
    return op


@REGISTRY.module(nn.Conv2d)
def _conv2d(step: Step):
    return _checked_conv(step, step.module)


def _checked_conv(step: Step, conv: nn.Conv2d) -> "WeightedOp":
    if conv.padding_mode != "zeros":
        raise ValueError(f"{step.where}: padding mode must be 'zeros', not {conv.padding_mode!r}")
    if tuple(conv.dilation) != (1, 1):
        raise ValueError(f"{step.where}: dilation must be 1, not {tuple(conv.dilation)}")
    if isinstance(conv.padding, str):
        conv = copy.deepcopy(conv)
        if conv.padding == "valid":
            conv.padding = (0, 0)
        else:   # "same": PyTorch allows it only with stride 1
            if any(k % 2 == 0 for k in conv.kernel_size):
                raise ValueError(f"{step.where}: padding='same' with an even kernel {tuple(conv.kernel_size)} "
                                 f"pads asymmetrically, which is not supported")
            conv.padding = tuple((k - 1) // 2 for k in conv.kernel_size)
        conv._reversed_padding_repeated_twice = [p for p in reversed(conv.padding) for _ in range(2)]
    return WeightedOp(_name(step), step.where, conv)


@REGISTRY.module(nn.Linear)
def _linear(step: Step):
    return WeightedOp(_name(step), step.where, step.module)


@REGISTRY.module(nn.BatchNorm2d, nn.BatchNorm1d)
def _batchnorm(step: Step):
    bn = step.module
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError(f"{step.where}: needs running statistics to be folded "
                         f"(track_running_stats=True)")
    return BatchNormOp(_name(step), step.where, bn)


@REGISTRY.module(nn.ReLU)
@REGISTRY.function(torch.relu, torch.relu_, F.relu, F.relu_)
@REGISTRY.method("relu", "relu_")
def _relu(step: Step):
    return ClampOp(_name(step), step.where, 0.0, None)


def _hardtanh_signature(input, min_val=-1.0, max_val=1.0, inplace=False):    # noqa: A002
    return float(min_val), float(max_val)


@REGISTRY.module(nn.ReLU6, nn.Hardtanh)
@REGISTRY.function(F.relu6, F.hardtanh, F.hardtanh_)
def _hardtanh(step: Step):
    if step.module is not None:
        low, high = float(step.module.min_val), float(step.module.max_val)
    elif step.node.target is F.relu6:
        low, high = 0.0, 6.0
    else:
        low, high = _hardtanh_signature(*step.node.args, **step.node.kwargs)
    if not low < high:
        raise ValueError(f"{step.where}: min_val must be below max_val, not [{low}, {high}]")
    return ClampOp(_name(step), step.where, low, high)


def _max_pool_signature(input, kernel_size, stride=None, padding=0, dilation=1,   # noqa: A002
                        ceil_mode=False, return_indices=False):
    return dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
                ceil_mode=ceil_mode, return_indices=return_indices)


@REGISTRY.module(nn.MaxPool2d)
@REGISTRY.function(F.max_pool2d)
def _maxpool(step: Step):
    if step.module is not None:
        m = step.module
        args = dict(kernel_size=m.kernel_size, stride=m.stride, padding=m.padding, dilation=m.dilation,
                    ceil_mode=m.ceil_mode, return_indices=m.return_indices)
    else:
        args = _max_pool_signature(*step.node.args, **step.node.kwargs)
    return maxpool_op(_name(step), step.where, **args)


def maxpool_op(name, where, kernel_size, stride, padding, dilation, ceil_mode, return_indices) -> MaxPoolOp:
    """Validate MaxPool2d arguments (shared with the torch.ao front end)."""
    if pair(dilation, "dilation", where) != (1, 1):
        raise ValueError(f"{where}: dilation must be 1, not {dilation!r}")
    if ceil_mode:
        raise ValueError(f"{where}: ceil_mode must be False")
    if return_indices:
        raise ValueError(f"{where}: return_indices must be False")
    kernel = pair(kernel_size, "kernel_size", where)
    stride = kernel if stride is None or stride == () or stride == [] else pair(stride, "stride", where)
    padding = pair(padding, "padding", where)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{where}: padding {padding} must be at most half the kernel {kernel}")
    return MaxPoolOp(name, where, kernel, stride, padding)


def _avg_pool_signature(input, kernel_size, stride=None, padding=0, ceil_mode=False,   # noqa: A002
                        count_include_pad=True, divisor_override=None):
    return dict(kernel_size=kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                count_include_pad=count_include_pad, divisor_override=divisor_override)


@REGISTRY.module(nn.AvgPool2d)
@REGISTRY.function(F.avg_pool2d)
def _avgpool(step: Step):
    if step.module is not None:
        m = step.module
        args = dict(kernel_size=m.kernel_size, stride=m.stride, padding=m.padding, ceil_mode=m.ceil_mode,
                    count_include_pad=m.count_include_pad, divisor_override=m.divisor_override)
    else:
        args = _avg_pool_signature(*step.node.args, **step.node.kwargs)
    if args["ceil_mode"]:
        raise ValueError(f"{step.where}: ceil_mode must be False")
    if not args["count_include_pad"]:
        raise ValueError(f"{step.where}: count_include_pad must be True (the divisor is the window's area)")
    if args["divisor_override"] is not None:
        raise ValueError(f"{step.where}: divisor_override is not supported")
    kernel = pair(args["kernel_size"], "kernel_size", step.where)
    stride = args["stride"]
    stride = kernel if stride is None or stride == () or stride == [] else pair(stride, "stride", step.where)
    padding = pair(args["padding"], "padding", step.where)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{step.where}: padding {padding} must be at most half the kernel {kernel}")
    return AvgPoolOp(_name(step), step.where, kernel, stride, padding)


@REGISTRY.module(nn.AdaptiveAvgPool2d)
@REGISTRY.function(F.adaptive_avg_pool2d)
def _global_avgpool(step: Step):
    size = step.module.output_size if step.module is not None else (
        step.node.args[1] if len(step.node.args) > 1 else step.node.kwargs["output_size"])
    if size not in (1, (1, 1), [1, 1]):
        raise ValueError(f"{step.where}: only global average pooling (output size 1) is supported, not {size!r}")
    return AvgPoolOp(_name(step), step.where, None)


@REGISTRY.function(torch.mean)
@REGISTRY.method("mean")
def _mean(step: Step):
    args = list(step.node.args[1:]) + [step.node.kwargs.get(k) for k in ("dim", "keepdim") if k in step.node.kwargs]
    dims = args[0] if args else None
    keepdim = bool(args[1]) if len(args) > 1 else False
    if dims is None or sorted(d % 4 for d in ([dims] if isinstance(dims, int) else dims)) != [2, 3]:
        raise ValueError(f"{step.where}: only a mean over height and width (dims 2 and 3, or -2 and -1) is "
                         f"supported, not dims {dims!r}")
    return AvgPoolOp(_name(step), step.where, None, flatten=not keepdim)


@REGISTRY.module(nn.Flatten)
def _flatten_module(step: Step):
    if (step.module.start_dim, step.module.end_dim) != (1, -1):
        raise ValueError(f"{step.where}: only Flatten(start_dim=1, end_dim=-1) is supported, not "
                         f"start_dim={step.module.start_dim}, end_dim={step.module.end_dim}")
    return FlattenOp(_name(step), step.where)


@REGISTRY.function(torch.flatten)
@REGISTRY.method("flatten", "view", "reshape")
def _flatten_call(step: Step):
    return FlattenOp(_name(step), step.where, flatten_spec(step.node, step.where))


def _add_signature(input, other, *, alpha=1, out=None):    # noqa: A002  (torch.add's names)
    return alpha, out


@REGISTRY.function(operator.add, operator.iadd, torch.add)
@REGISTRY.method("add", "add_")
def _add(step: Step):
    args = step.node.args                       # (a, b), or (self, other) of a method
    if step.node.target in (torch.add, "add", "add_"):
        alpha, out = _add_signature(*args, **step.node.kwargs)
        if alpha != 1 or out is not None:
            raise ValueError(f"{step.where}: only a plain sum of two tensors is supported, not alpha={alpha!r}"
                             f"{' or out=' if out is not None else ''}")
    if len(args) < 2 or not all(isinstance(a, fx.Node) for a in args[:2]):
        raise ValueError(f"{step.where}: only the sum of two tensors is supported, not of "
                         f"{', '.join(repr(a) if not isinstance(a, fx.Node) else a.name for a in args)}")
    return AddOp(_name(step), step.where)


def _cat_signature(tensors, dim=0, *, out=None):
    return tensors, dim, out


@REGISTRY.function(torch.cat, torch.concat, torch.concatenate)
def _concat(step: Step):
    tensors, dim, out = _cat_signature(*step.node.args, **step.node.kwargs)
    if out is not None:
        raise ValueError(f"{step.where}: out= is not supported")
    if not isinstance(tensors, (tuple, list)) or len(tensors) < 2 or not all(isinstance(t, fx.Node) for t in tensors):
        raise ValueError(f"{step.where}: only a concatenation of two or more tensors is supported, not {tensors!r}")
    if not isinstance(dim, int):
        raise ValueError(f"{step.where}: the dimension must be an int, not {dim!r}")
    return ConcatOp(_name(step), step.where, dim, tuple(tensors))


@REGISTRY.module(nn.Identity, nn.Dropout)
def _no_op(step: Step):
    return None


# -- fusion --------------------------------------------------------------------------

@torch.no_grad()
def fold_batchnorm(layer: nn.Conv2d | nn.Linear, bn: nn.BatchNorm2d | nn.BatchNorm1d) -> nn.Conv2d | nn.Linear:
    """A new layer equal to ``bn(layer(x))`` with ``bn`` in eval mode (running statistics):
    a BatchNorm2d after a Conv2d, or a BatchNorm1d after a Linear.

    ``w' = w * g / sqrt(var + eps)`` per output channel and
    ``b' = (b - mean) * g / sqrt(var + eps) + beta``, computed in float64.
    """
    out = layer.out_channels if isinstance(layer, nn.Conv2d) else layer.out_features
    if bn.num_features != out:
        raise ValueError(f"{type(bn).__name__} has {bn.num_features} features but the {type(layer).__name__} "
                         f"before it has {out} outputs")
    gamma = bn.weight.double() if bn.weight is not None else torch.ones(bn.num_features, dtype=torch.float64)
    beta = bn.bias.double() if bn.bias is not None else torch.zeros(bn.num_features, dtype=torch.float64)
    factor = gamma / torch.sqrt(bn.running_var.double() + bn.eps)
    bias = layer.bias.double() if layer.bias is not None else torch.zeros(out, dtype=torch.float64)
    folded = copy.deepcopy(layer)
    shape = (-1,) + (1,) * (layer.weight.dim() - 1)
    folded.weight = nn.Parameter((layer.weight.double() * factor.view(shape)).to(layer.weight.dtype))
    folded.bias = nn.Parameter(((bias - bn.running_mean.double()) * factor + beta).to(layer.weight.dtype))
    return folded


def _fuse(ops: list, sources: list[tuple[int, ...]], output: int) -> list[FloatOp]:
    """Fold each BatchNorm into the Conv2d/Linear it reads and each clamp (ReLU, ReLU6,
    Hardtanh) into the Conv2d, Linear or add before it, through max-pools and flattens
    (which commute with a clamp). ``ops[i]`` reads ``sources[i]`` (indices; -1 is the
    model's input) and ``ops[output]`` is the model's output. A fold needs every op it
    passes to be read by nothing else, or the other readers would see it changed.
    Returns the remaining ops, their ``inputs`` renumbered."""
    users = Counter(j for reads in sources for j in reads)
    users[output] += 1
    alias: dict[int, int] = {}                  # a folded op -> the op that now computes it

    def resolve(j: int) -> int:
        while j in alias:
            j = alias[j]
        return j

    resolved = []
    for i, op in enumerate(ops):
        reads = tuple(resolve(j) for j in sources[i])
        resolved.append(reads)
        if isinstance(op, BatchNormOp):
            j = reads[0]
            before = ops[j] if j >= 0 else None
            wanted = nn.Conv2d if isinstance(op.module, nn.BatchNorm2d) else nn.Linear
            if not (isinstance(before, WeightedOp) and isinstance(before.module, wanted) and not before.clamped):
                raise ValueError(f"{op.where} must directly follow a {wanted.__name__} to be folded into it")
            if users[j] > 1:
                raise ValueError(f"{op.where} cannot be folded into {before.where}: its output is also read "
                                 f"by another layer")
            try:
                before.module = fold_batchnorm(before.module, op.module)
            except ValueError as error:
                raise ValueError(f"{op.where}: {error}") from None
        elif isinstance(op, ClampOp):
            j = reads[0]
            path = []
            while j >= 0 and isinstance(ops[j], (MaxPoolOp, FlattenOp)):
                path.append(j)
                j = resolved[j][0]
            if j < 0 or not isinstance(ops[j], _Clamped):
                raise ValueError(f"{op.where} has no Conv2d, Linear or add before it to fuse into "
                                 f"(only MaxPool2d and Flatten may stand between them)")
            if any(users[k] > 1 for k in [j] + path):
                raise ValueError(f"{op.where} cannot be fused into {ops[j].where}: a tensor between them is "
                                 f"also read by another layer, which must see it unclamped")
            ops[j].clamp(op.low, op.high)
        else:
            continue
        alias[i] = reads[0]
        users[reads[0]] += users[i] - 1
    kept = [i for i, op in enumerate(ops) if not isinstance(op, (BatchNormOp, ClampOp))]
    number = {i: n for n, i in enumerate(kept)}
    for i in kept:
        ops[i].inputs = tuple(number[resolve(j)] if j >= 0 else -1 for j in sources[i])
    return [ops[i] for i in kept]


def float_ops(model: nn.Module) -> list[FloatOp]:
    """The model as fused float ops in execution order (on a copy in eval mode); each
    op's ``inputs`` names the ops it reads (-1: the model's input), and the last op's
    output is the model's."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    model = copy.deepcopy(model).eval()
    graph_module = trace(model)
    steps = walk(graph_module, REGISTRY, chain=False)
    placeholder = next(n for n in graph_module.graph.nodes if n.op == "placeholder")
    value = {placeholder: -1}                   # fx node -> index of the op computing it
    ops, sources = [], []
    for step in steps:
        op = step.handler(step)
        reads = tuple(value[n] for n in (op.tensors if isinstance(op, ConcatOp) else step.reads))
        if op is None:                          # Identity, Dropout: the value passes through
            value[step.node] = reads[0]
            continue
        arity = 2 if isinstance(op, AddOp) else len(reads) if isinstance(op, ConcatOp) else 1
        if len(reads) != arity:
            raise TypeError(f"{step.where} reads {len(reads)} tensors, not {arity}")
        value[step.node] = len(ops)
        ops.append(op)
        sources.append(reads)
    if not ops:
        raise ValueError("the model has no layer")
    read = {j for reads in sources for j in reads}
    for index, op in enumerate(ops[:-1]):
        if index not in read:
            raise ValueError(f"{op.where}: its output is never read (only the last layer's output is the model's)")
    output = value[steps[-1].node]
    if output != len(ops) - 1:
        raise ValueError("the model must return the output of its last layer")
    return _fuse(ops, sources, output)


def check_shapes(ops, input_shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The model input's shape, then every op's output shape; a layer that cannot work
    raises a ValueError naming it and the shapes up to it."""
    shapes = [tuple(input_shape)]
    for op in ops:
        try:
            shapes.append(op.output_shape(*(shapes[j + 1] for j in op.inputs)))
        except ValueError as error:
            trail = " -> ".join("x".join(map(str, s)) for s in shapes)
            raise ValueError(f"{error} (shapes from the model input: {trail})") from None
    return shapes


# -- calibration and lowering ----------------------------------------------------------

def activation_observer() -> ObserverBase:
    """The default observer: per-tensor affine int8 min/max."""
    return MinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_affine,
                          quant_min=sem.ACTIVATION_MIN, quant_max=sem.ACTIVATION_MAX)


def _quant_params(observer: ObserverBase) -> QuantParams:
    scale, zero_point = observer.calculate_qparams()
    return QuantParams(float(scale.item()), int(zero_point.item()))


def _batches(calibration, batch_size: int) -> Iterable[torch.Tensor]:
    if isinstance(calibration, torch.Tensor):
        yield from calibration.split(batch_size)
    else:
        yield from calibration


@torch.no_grad()
def quantize_model(model: nn.Module, calibration: torch.Tensor | Iterable[torch.Tensor], *,
                   name: str = "model", input_shape: tuple[int, ...] | None = None,
                   observer: Callable[[], ObserverBase] = activation_observer,
                   batch_size: int = 256, weight_bits: WeightBitsSpec = None) -> QuantizedModel:
    """Compile a float model into a :class:`QuantizedModel` (see the module docstring).

    ``calibration`` is a float batch ``[B, *input_shape]`` (run in chunks of
    ``batch_size``) or an iterable of such batches; its ranges set every activation's
    scale and zero point through ``observer()`` instances. ``input_shape`` defaults
    to the calibration batch's shape without the batch dimension. ``weight_bits`` gives
    the width of each layer's weights (see :mod:`pytorch_ref.frontends.precision`).
    """
    ops = float_ops(model)
    bits = resolve_weight_bits(weight_bits, weighted_layer_kinds(ops))
    if isinstance(calibration, torch.Tensor):
        if calibration.dim() < 2:
            raise ValueError(f"calibration must be a batch [B, *input_shape], not shape {tuple(calibration.shape)}")
        input_shape = input_shape or tuple(calibration.shape[1:])
    if input_shape is None:
        raise ValueError("input_shape is needed when calibration is not a tensor")
    input_shape = tuple(input_shape)
    shapes = check_shapes(ops, input_shape)

    for op in ops:
        if isinstance(op, WeightedOp):
            for what, tensor in (("weights are", op.module.weight), ("bias is", op.module.bias)):
                if tensor is not None and not torch.isfinite(tensor).all():
                    raise ValueError(f"{op.name}: its {what} not finite (NaN or inf)")
    input_observer = observer()
    observers = {id(op): observer() for op in ops if isinstance(op, (WeightedOp, AddOp, ConcatOp))}
    seen = 0
    for batch in _batches(calibration, batch_size):
        if tuple(batch.shape[1:]) != input_shape:
            raise ValueError(f"calibration batches must have shape [B, {', '.join(map(str, input_shape))}], "
                             f"not {list(batch.shape)}")
        x = batch.float()
        if not torch.isfinite(x).all():
            raise ValueError(f"calibration data is not finite: samples {seen} to {seen + len(batch) - 1} "
                             f"hold NaN or inf")
        input_observer(x)
        values = [x]                            # values[j + 1]: op j's output
        for op in ops:
            y = op.forward(*(values[j + 1] for j in op.inputs))
            if not torch.isfinite(y).all():
                raise ValueError(f"{op.name}: its output on the calibration data is not finite (NaN or inf)")
            if id(op) in observers:
                observers[id(op)](y)
            values.append(y)
        seen += len(batch)
    if seen == 0:
        raise ValueError("calibration data is empty")

    input_quant = _quant_params(input_observer)
    quant = {-1: input_quant}                   # op index -> its output's quantization
    tensor = {-1: 0}                            # op index -> its output's tensor in the integer model
    layers, inputs = [], []

    def emit(layer, reads: tuple[int, ...]):
        layers.append(layer)
        inputs.append(reads)
        return len(layers)

    shared = _shared_quantization(ops)
    for index, op in enumerate(ops):
        reads = tuple(tensor[j] for j in op.inputs)
        current = quant[op.inputs[0]]
        if isinstance(op, WeightedOp):
            quant[index] = _quant_params(observers[id(ops[shared.get(index, index)])])
            tensor[index] = emit(_lower_weighted(op, current, quant[index], bits[op.name]), reads)
        elif isinstance(op, ConcatOp):
            quant[index] = _quant_params(observers[id(op)])
            tensor[index] = emit(make_concat(op.name, [quant[j] for j in op.inputs], quant[index]), reads)
        elif isinstance(op, AddOp):
            quant[index] = _quant_params(observers[id(ops[shared.get(index, index)])])
            tensor[index] = emit(make_add(op.name, current, quant[op.inputs[1]], quant[index], op.low, op.high),
                                 reads)
        else:
            quant[index] = current
            if isinstance(op, MaxPoolOp):
                tensor[index] = emit(MaxPool2dLayer(op.name, op.kernel_size, op.stride, op.padding), reads)
            elif isinstance(op, AvgPoolOp):
                tensor[index] = emit(_lower_average(op, shapes[op.inputs[0] + 1], current), reads)
                if op.flatten:
                    tensor[index] = emit(FlattenLayer(f"{op.name}.flatten"), (tensor[index],))
            else:
                tensor[index] = emit(FlattenLayer(op.name), reads)
    first = next((op for op in ops if isinstance(op, WeightedOp)), None)
    if first is not None and first.from_1d and len(input_shape) == 2:
        input_shape = (input_shape[0], 1, input_shape[1])   # the integer model sees a height-1 image
    return QuantizedModel(name=name, input_shape=input_shape, input_quant=input_quant, layers=tuple(layers),
                          inputs=tuple(inputs))


def _shared_quantization(ops: list[FloatOp]) -> dict[int, int]:
    """``{op: concatenation}`` for each Conv2d, Linear or add read by one concatenation
    alone: it takes the concatenation's scale and zero point, so that the hardware writes
    it in place, into its channels of the joined tensor (nothing to requantize)."""
    readers = Counter(j for op in ops for j in op.inputs)
    shared = {}
    for index, op in enumerate(ops):
        if isinstance(op, ConcatOp):
            for j in op.inputs:
                if j >= 0 and isinstance(ops[j], (WeightedOp, AddOp)) and readers[j] == 1:
                    shared[j] = index
    return shared


def weighted_layer_kinds(ops: list[FloatOp]) -> list[tuple[str, str]]:
    """``(name, kind)`` of each weighted op, ``kind`` ``"dense"`` or ``"conv"``, as
    :func:`~pytorch_ref.frontends.precision.resolve_weight_bits` takes them."""
    return [(op.name, "dense" if isinstance(op.module, nn.Linear) else "conv")
            for op in ops if isinstance(op, WeightedOp)]


def _lower_average(op: AvgPoolOp, shape: tuple[int, ...], quant: QuantParams) -> Conv2dLayer:
    """Average pooling as a depthwise convolution of unit weights, its output at its input's
    scale and zero point (see :func:`~pytorch_ref.ir.integer_semantics.average_pool_weights`)."""
    kernel, stride, padding = op.window(shape)
    codes, scales = sem.average_pool_weights(shape[0], kernel)
    return Conv2dLayer(name=op.name, weight=codes, weight_bits=sem.WEIGHT_BITS,
                       bias=np.zeros(shape[0], dtype=np.int32), input_quant=quant, output_quant=quant,
                       requant=make_requantization(quant.scale, scales, quant), stride=tuple(stride),
                       padding=tuple(padding), groups=shape[0])


def _lower_weighted(op: WeightedOp, input_quant: QuantParams, output_quant: QuantParams, bits: int):
    m = op.module
    codes, weight_scales = quantize_weight(m.weight, bits)
    common = dict(name=op.name, weight=codes, weight_bits=bits,
                  bias=quantize_bias(m.bias, input_quant.scale, weight_scales, op.name),
                  input_quant=input_quant, output_quant=output_quant,
                  requant=make_requantization(input_quant.scale, weight_scales, output_quant, op.low, op.high))
    if isinstance(m, nn.Linear):
        return DenseLayer(**common)
    return Conv2dLayer(**common, stride=tuple(m.stride), padding=tuple(m.padding), groups=m.groups)
