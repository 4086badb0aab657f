"""``QuantizedModel``: the neutral integer description of a network.

This is the only type that :mod:`hdl` imports from :mod:`pytorch_ref`. It holds plain
NumPy integer arrays and Python numbers, no torch modules, so the hardware side sees
exactly the integers that the reference executes. The arithmetic is defined in
:mod:`pytorch_ref.ir.integer_semantics`.

Shapes: activations are ``(channels, height, width)`` for convolutional layers and
``(features,)`` for dense ones; a batch dimension is added in front by the reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pytorch_ref.ir import integer_semantics as sem


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization of an activation tensor: ``real = scale * (q - zero_point)``."""
    scale: float
    zero_point: int

    def __post_init__(self):
        if not (self.scale > 0):
            raise ValueError(f"scale must be positive, not {self.scale!r}")
        if not (sem.ACTIVATION_MIN <= self.zero_point <= sem.ACTIVATION_MAX):
            raise ValueError(f"zero point must be in [-128, 127], not {self.zero_point!r}")


@dataclass(frozen=True)
class Requantization:
    """Per-output-channel rescale of the accumulators to int8 (see integer_semantics)."""
    multiplier: np.ndarray      # int64 [N], each in [2**30, 2**31)
    shift: np.ndarray           # int64 [N], each in [1, 62]
    zero_point: int             # output zero point
    clamp_min: int              # == max(-128, zero_point) when ReLU is fused
    clamp_max: int = sem.ACTIVATION_MAX

    def __post_init__(self):
        if self.multiplier.shape != self.shift.shape or self.multiplier.ndim != 1:
            raise ValueError("multiplier and shift must be 1-D arrays of the same length")
        if ((self.multiplier < 0) | (self.multiplier > sem.MULTIPLIER_MAX)).any():
            raise ValueError("multiplier must be in [0, 2**31)")
        if ((self.shift < sem.SHIFT_MIN) | (self.shift > sem.SHIFT_MAX)).any():
            raise ValueError(f"shift must be in [{sem.SHIFT_MIN}, {sem.SHIFT_MAX}]")
        if not (sem.ACTIVATION_MIN <= self.clamp_min <= self.clamp_max <= sem.ACTIVATION_MAX):
            raise ValueError(f"clamp range must lie in [-128, 127], not [{self.clamp_min}, {self.clamp_max}]")

    @property
    def relu(self) -> bool:
        return self.clamp_min > sem.ACTIVATION_MIN


@dataclass(frozen=True)
class _WeightedLayer:
    name: str
    weight: np.ndarray          # int8
    bias: np.ndarray            # int32 [N], units of input_scale * weight_scale
    input_quant: QuantParams
    output_quant: QuantParams
    requant: Requantization
    #: Width of the weight codes, in [2, 8]; the codes lie in ``sem.weight_range(weight_bits)``.
    weight_bits: int = field(default=sem.WEIGHT_BITS, kw_only=True)

    def __post_init__(self):
        if self.weight.dtype != np.int8:
            raise TypeError(f"{self.name}: weight must be int8, not {self.weight.dtype}")
        low, high = sem.weight_range(sem.check_weight_bits(self.weight_bits, self.name))
        if self.weight.size and not low <= self.weight.min() <= self.weight.max() <= high:
            raise ValueError(f"{self.name}: {self.weight_bits}-bit weights must be in [{low}, {high}], "
                             f"not [{self.weight.min()}, {self.weight.max()}]")
        if self.bias.dtype != np.int32 or self.bias.shape != (self.out_features,):
            raise ValueError(f"{self.name}: bias must be int32 of shape ({self.out_features},)")
        if self.requant.multiplier.shape != (self.out_features,):
            raise ValueError(f"{self.name}: requantization must have {self.out_features} channels")
        if self.requant.zero_point != self.output_quant.zero_point:
            raise ValueError(f"{self.name}: requantization zero point differs from the output's")
        zp = self.input_quant.zero_point
        low, high = sem.accumulator_range(self.weight, self.bias, sem.ACTIVATION_MIN - zp, sem.ACTIVATION_MAX - zp)
        if not sem.ACCUMULATOR_MIN <= low <= high <= sem.ACCUMULATOR_MAX:
            raise ValueError(f"{self.name}: bias + sum of (x - zero point) * weight reaches [{low}, {high}] for some "
                             f"int8 input, beyond the {sem.ACCUMULATOR_BITS}-bit accumulator; the bias is too large "
                             f"for the input and weight scales (widen the calibration range or shrink the bias)")

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]


@dataclass(frozen=True)
class DenseLayer(_WeightedLayer):
    """``y = requant(bias + W @ (x - zp))``; ``weight`` is ``[out_features, in_features]``."""

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def fan_in(self) -> int:
        return self.in_features

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if input_shape != (self.in_features,):
            raise ValueError(f"{self.name}: expects {self.in_features} input features, "
                             f"not an input of shape {input_shape}")
        return (self.out_features,)


@dataclass(frozen=True)
class Conv2dLayer(_WeightedLayer):
    """2-D convolution; ``weight`` is ``[out_channels, in_channels // groups, kh, kw]``."""
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    groups: int = 1

    @property
    def kernel_size(self) -> tuple[int, int]:
        return tuple(self.weight.shape[2:])

    @property
    def fan_in(self) -> int:
        return int(np.prod(self.weight.shape[1:]))

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"{self.name}: expects a (channels, height, width) input, not {input_shape}")
        c, h, w = input_shape
        if c != self.weight.shape[1] * self.groups:
            raise ValueError(f"{self.name}: expects {self.weight.shape[1] * self.groups} input channels, not {c}")
        kh, kw = self.kernel_size
        oh = (h + 2 * self.padding[0] - kh) // self.stride[0] + 1
        ow = (w + 2 * self.padding[1] - kw) // self.stride[1] + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"{self.name}: a {kh}x{kw} kernel does not fit an input of {h}x{w} "
                             f"with padding {self.padding}")
        return (self.out_features, oh, ow)


@dataclass(frozen=True)
class MaxPool2dLayer:
    """Max-pooling on int8 codes (monotonic, so it commutes with quantization)."""
    name: str
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int] = (0, 0)

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"{self.name}: expects a (channels, height, width) input, not {input_shape}")
        c, h, w = input_shape
        kh, kw = self.kernel_size
        oh = (h + 2 * self.padding[0] - kh) // self.stride[0] + 1
        ow = (w + 2 * self.padding[1] - kw) // self.stride[1] + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"{self.name}: a {kh}x{kw} pooling window does not fit an input of {h}x{w}")
        return (c, oh, ow)


@dataclass(frozen=True)
class FlattenLayer:
    """``(C, H, W)`` to ``(C*H*W,)`` in PyTorch's (channel-major) order."""
    name: str

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (int(np.prod(input_shape)),)


@dataclass(frozen=True)
class AddLayer:
    """The element-wise sum of two tensors of one shape (a residual connection), each at
    its own scale: ``y = requant(weights[0] * (a - za) + weights[1] * (b - zb))`` with
    one requantization for every element (see ``integer_semantics``, "Residual add")."""
    name: str
    input_quants: tuple[QuantParams, QuantParams]
    output_quant: QuantParams
    weights: tuple[int, int]
    requant: Requantization     # one channel, for all

    def __post_init__(self):
        if len(self.input_quants) != 2 or len(self.weights) != 2:
            raise ValueError(f"{self.name}: an add has two inputs, so two input quantizations and two weights")
        if not all(isinstance(w, int) and 1 <= w <= sem.ADD_WEIGHT_MAX for w in self.weights):
            raise ValueError(f"{self.name}: add weights must be integers in [1, {sem.ADD_WEIGHT_MAX}], "
                             f"not {self.weights}")
        if self.requant.multiplier.shape != (1,):
            raise ValueError(f"{self.name}: an add has one requantization for all channels")
        if self.requant.zero_point != self.output_quant.zero_point:
            raise ValueError(f"{self.name}: requantization zero point differs from the output's")

    @property
    def arity(self) -> int:
        return 2

    def output_shape(self, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...]:
        if tuple(a_shape) != tuple(b_shape):
            raise ValueError(f"{self.name}: adds tensors of one shape, not {tuple(a_shape)} and {tuple(b_shape)}")
        return tuple(a_shape)


@dataclass(frozen=True)
class ConcatLayer:
    """Tensors of one height and width joined along channels (features, if flat), each
    requantized to the output's scale by its one-channel ``requants[i]`` (see
    ``integer_semantics``, "Concatenation")."""
    name: str
    input_quants: tuple[QuantParams, ...]
    output_quant: QuantParams
    requants: tuple[Requantization, ...]

    def __post_init__(self):
        if len(self.input_quants) < 2 or len(self.requants) != len(self.input_quants):
            raise ValueError(f"{self.name}: a concatenation joins two or more tensors, each with its "
                             f"requantization")
        for rq in self.requants:
            if rq.multiplier.shape != (1,) or rq.zero_point != self.output_quant.zero_point:
                raise ValueError(f"{self.name}: each input's requantization has one channel and the output's "
                                 f"zero point")

    @property
    def arity(self) -> int:
        return len(self.input_quants)

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        rest = {tuple(shape[1:]) for shape in shapes}
        if len(rest) != 1:
            raise ValueError(f"{self.name}: joins tensors along channels, so all but the channels must agree, "
                             f"not {', '.join(str(tuple(s)) for s in shapes)}")
        return (sum(shape[0] for shape in shapes),) + rest.pop()


Layer = DenseLayer | Conv2dLayer | MaxPool2dLayer | FlattenLayer | AddLayer | ConcatLayer


def chain_inputs(count: int) -> tuple[tuple[int, ...], ...]:
    """The inputs of ``count`` layers in a chain: each reads the tensor before it."""
    return tuple((index,) for index in range(count))


@dataclass(frozen=True)
class QuantizedModel:
    """A network as integers: input quantization, then layers executed in order.

    Tensor 0 is the model's input and tensor ``k + 1`` the output of ``layers[k]``;
    ``inputs[k]`` lists the tensors layer ``k`` reads (one, or two for an add), each
    produced before it. ``None`` (the default) is a chain: layer ``k`` reads tensor ``k``.
    The model's output is the last layer's; every other layer's output must be read."""
    name: str
    input_shape: tuple[int, ...]
    input_quant: QuantParams
    layers: tuple[Layer, ...]
    inputs: tuple[tuple[int, ...], ...] | None = None
    shapes: tuple[tuple[int, ...], ...] = field(init=False, repr=False)

    def __post_init__(self):
        if not self.layers:
            raise ValueError("a model needs at least one layer")
        inputs = chain_inputs(len(self.layers)) if self.inputs is None else tuple(
            tuple(int(t) for t in reads) for reads in self.inputs)
        if len(inputs) != len(self.layers):
            raise ValueError(f"inputs must list the tensors of each of the {len(self.layers)} layers, "
                             f"not of {len(inputs)}")
        read = set()
        for index, (layer, reads) in enumerate(zip(self.layers, inputs)):
            if len(reads) != getattr(layer, "arity", 1):
                raise ValueError(f"{layer.name}: reads {getattr(layer, 'arity', 1)} tensors, not {len(reads)}")
            if not all(0 <= t <= index for t in reads):
                raise ValueError(f"{layer.name}: reads tensors {reads}, but only tensors 0 (the input) to "
                                 f"{index} exist before it")
            read.update(reads)
        unread = [self.layers[t - 1].name for t in range(1, len(self.layers)) if t not in read]
        if unread:
            raise ValueError(f"the outputs of {', '.join(unread)} are never read (only the last layer's output "
                             f"is the model's)")
        object.__setattr__(self, "inputs", None if inputs == chain_inputs(len(self.layers)) else inputs)
        shapes = [tuple(self.input_shape)]
        for layer, reads in zip(self.layers, inputs):
            shapes.append(layer.output_shape(*(shapes[t] for t in reads)))
        object.__setattr__(self, "shapes", tuple(shapes))

    @property
    def layer_inputs(self) -> tuple[tuple[int, ...], ...]:
        """The tensors each layer reads (see the class docstring), chain or not."""
        return chain_inputs(len(self.layers)) if self.inputs is None else self.inputs

    @property
    def is_chain(self) -> bool:
        return self.inputs is None

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.shapes[-1]

    def quant_of(self, tensor: int) -> QuantParams:
        """The scale and zero point of tensor ``tensor`` (pooling and flattening keep their
        input's)."""
        while tensor > 0:
            layer = self.layers[tensor - 1]
            if isinstance(layer, (DenseLayer, Conv2dLayer, AddLayer, ConcatLayer)):
                return layer.output_quant
            tensor = self.layer_inputs[tensor - 1][0]
        return self.input_quant

    @property
    def output_quant(self) -> QuantParams:
        return self.quant_of(len(self.layers))

    @property
    def weighted_layers(self) -> list[DenseLayer | Conv2dLayer]:
        return [l for l in self.layers if isinstance(l, (DenseLayer, Conv2dLayer))]

    def macs(self) -> list[int]:
        """Multiply-accumulates per inference of each layer (0 for layers without weights)."""
        out = []
        for layer, shape_out in zip(self.layers, self.shapes[1:]):
            if isinstance(layer, (DenseLayer, Conv2dLayer)):
                out.append(int(np.prod(shape_out)) * layer.fan_in)
            elif isinstance(layer, AddLayer):
                out.append(2 * int(np.prod(shape_out)))         # one product per input element
            else:
                out.append(0)
        return out
