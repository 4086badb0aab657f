"""The integer semantics of the accelerator: the one source of truth.

Everything that turns numbers into other numbers is defined here, once; the integer
reference (:mod:`pytorch_ref.reference`), the quantizer and the hardware generator
(:mod:`hdl`) follow this module.

Number formats
--------------
* Activations are int8, asymmetric: ``real = scale * (q - zero_point)``, ``q`` in
  ``[-128, 127]``, ``zero_point`` in ``[-128, 127]``.
* Weights are signed integers of ``b`` bits, ``b`` in ``[2, 8]`` chosen per layer (8 by
  default), symmetric with one scale per output channel and zero point 0, over the full
  two's-complement range: ``q`` in ``[-2**(b-1), 2**(b-1) - 1]`` (``[-128, 127]`` at 8 bits).
  See :func:`weight_range` and :func:`quantize_weight_codes`.
* Biases are int32 in units of ``input_scale * weight_scale``.
* Accumulation is exact in a signed accumulator of :data:`ACCUMULATOR_BITS` bits;
  the compiler checks that no layer can overflow it.

A layer computes, per output ``n``::

    acc[n] = bias[n] + sum_k (x[k] - x_zero_point) * w[n, k]          (exact)
    y[n]   = clamp(rounding_shift_right_half_up(acc[n] * multiplier[n], shift[n])
                   + y_zero_point, clamp_min, clamp_max)

ReLU is fused as ``clamp_min = max(-128, y_zero_point)``; ReLU6 and Hardtanh as both bounds,
each quantized like an activation (:func:`activation_clamp`). Padding of a convolution
reads as ``x_zero_point`` (a real zero); padding of a max-pool reads as -128 (the
smallest code, so it never wins).

Residual add
------------
An element-wise sum of two int8 tensors ``a`` and ``b`` of one shape, each at its own
scale and zero point, to an output at its own scale (PyTorch's quantized ``add``)::

    acc = w_a * (a - a_zero_point) + w_b * (b - b_zero_point)          (exact)
    y   = clamp(rounding_shift_right_half_up(acc * multiplier, shift) + y_zero_point, ...)

with the same rounding, multiplier and clamps as a layer. ``w_a`` and ``w_b`` are int8
weights in ``[1, 127]`` whose ratio is the nearest such ratio to ``a_scale / b_scale``
(:func:`add_weights`), and ``multiplier * 2**-shift`` approximates ``a_scale / (w_a *
y_scale)`` (exact for the input of the larger scale). It is a layer of two kernel taps,
one per input, so it runs on the array like any other. PyTorch computes the sum in
float and rounds half to even, so the two agree but for ties and the ratio's error
(at most ``1 / (2 * 127)`` of the smaller input's share).

Concatenation
-------------
Concatenating tensors along channels requantizes each input to the output's scale and
zero point (PyTorch's quantized ``cat``): ``y = clamp(rounding_shift_right_half_up((x -
x_zero_point) * multiplier, shift) + y_zero_point, -128, 127)`` with ``multiplier * 2**-shift``
approximating ``x_scale / y_scale``. An input already at the output's scale and zero point
passes unchanged (the factor 1 is exact: ``2**30 * 2**-30``); the quantizer gives a
concatenation's inputs its scale where it can, so that they are written in place.

Requantization
--------------
``multiplier`` is an int32 in ``[2**30, 2**31)`` and ``shift`` an integer in
``[1, 62]``, so ``multiplier * 2**-shift`` approximates the real rescale factor
``input_scale * weight_scale / output_scale`` to 31 significant bits.
The product ``acc * multiplier`` is exact (64-bit) and is rounded **once**, to
nearest with ties towards plus infinity ("round half up"): add ``2**(shift-1)``, then
shift right arithmetically. This is one adder and a shifter in hardware, and it differs
from PyTorch's float round-half-to-even only on exact ties.

Arrays
------
The functions take NumPy arrays or torch tensors and return the same kind (a torch
result on the argument's device). Each formula is written once with the operations
both libraries share (operators, ``.any()``, ``.clip()``, ``.round()``); only the
conversion to a dtype (:func:`_convert`) differs. This module does not import torch:
the hardware path (:mod:`hdl`) runs without it, and an argument can only be a torch
tensor if torch is already imported.
"""
from __future__ import annotations

import math
import sys

import numpy as np

ACTIVATION_MIN = -128
ACTIVATION_MAX = 127
WEIGHT_BITS = 8                 # the default width of a layer's weights
WEIGHT_BITS_MIN = 2
WEIGHT_BITS_MAX = 8
WEIGHT_MIN = -(2 ** (WEIGHT_BITS_MAX - 1))
WEIGHT_MAX = 2 ** (WEIGHT_BITS_MAX - 1) - 1
ACCUMULATOR_BITS = 32
ACCUMULATOR_MIN = -(2 ** (ACCUMULATOR_BITS - 1))
ACCUMULATOR_MAX = 2 ** (ACCUMULATOR_BITS - 1) - 1
MULTIPLIER_BITS = 32            # signed width of the multiplier register
MULTIPLIER_MIN = 2 ** 30        # normalised: the top magnitude bit is always set
MULTIPLIER_MAX = 2 ** 31 - 1
SHIFT_MIN = 1
SHIFT_MAX = 62
#: Padding value of max-pooling: the smallest int8 code.
MAXPOOL_PAD_VALUE = ACTIVATION_MIN


def quantize_multiplier(real_scale: float) -> tuple[int, int]:
    """Split a positive real rescale factor into ``(multiplier, shift)``.

    ``multiplier * 2**-shift`` is the nearest such number to ``real_scale``, with
    ``multiplier`` in ``[2**30, 2**31)`` and ``shift`` in ``[1, 62]``. A factor too
    small for 62 bits of shift loses low multiplier bits (the result is then 0 or
    the zero point for every accumulator that fits 32 bits, as it should be).
    """
    if not (isinstance(real_scale, (int, float)) and math.isfinite(real_scale) and real_scale > 0):
        raise ValueError(f"rescale factor must be a positive finite number, not {real_scale!r}")
    mantissa, exponent = math.frexp(real_scale)        # real = mantissa * 2**exponent, mantissa in [0.5, 1)
    multiplier = round(mantissa * 2 ** 31)
    shift = 31 - exponent
    if multiplier == 2 ** 31:                          # rounding carried into the next power of two
        multiplier //= 2
        shift -= 1
    if shift < SHIFT_MIN:
        raise ValueError(f"rescale factor must be below 2**30, not {real_scale!r}")
    if shift > SHIFT_MAX:
        multiplier >>= shift - SHIFT_MAX
        shift = SHIFT_MAX
        multiplier = max(multiplier, 0)
    return multiplier, shift


def check_weight_bits(bits, name: str) -> int:
    """``bits`` if it is a valid weight width, else a :class:`ValueError` naming the layer."""
    if type(bits) is not int or not WEIGHT_BITS_MIN <= bits <= WEIGHT_BITS_MAX:
        raise ValueError(f"{name}: weight bits must be an integer in [{WEIGHT_BITS_MIN}, {WEIGHT_BITS_MAX}], "
                         f"not {bits!r}")
    return bits


def weight_range(bits: int) -> tuple[int, int]:
    """The codes of a ``bits``-bit weight: the full two's-complement range."""
    check_weight_bits(bits, "weights")
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def quantize_weight_codes(weight, scale, bits: int):
    """Weights to ``bits``-bit codes: ``round(w / scale)`` (half to even), clamped to
    :func:`weight_range`. ``scale`` broadcasts against ``weight`` (output channel first)."""
    low, high = weight_range(bits)
    return _convert((_as_array(weight) / scale).round().clip(low, high), "int8")


def _torch_of(x):
    """The torch module if ``x`` is a torch tensor, else None; never imports torch."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else None


def _convert(x, dtype: str, like=None):
    """``x`` as a ``dtype`` (``"int8"``, ``"int64"``, ``"float32"``) array of the library of
    ``like`` (default ``x`` itself): a torch tensor on ``like``'s device, else NumPy.
    Floats convert to integers by truncation in both."""
    like = x if like is None else like
    torch = _torch_of(like)
    if torch is not None:
        return torch.as_tensor(x, device=like.device).to(getattr(torch, dtype))
    return np.asarray(x).astype(dtype, copy=False)


def _as_array(x):
    """``x`` unchanged if it is a torch tensor, else as a NumPy array."""
    return x if _torch_of(x) is not None else np.asarray(x)


def rounding_shift_right_half_up(value, shift):
    """``round(value / 2**shift)`` with ties towards plus infinity, as int64.

    ``value`` is a NumPy array or a torch tensor (the result is of the same kind);
    ``shift`` an int or an array broadcasting against it, at least 1. Examples:
    ``5 >> 1`` gives 3 (2.5 -> 3), ``-5 >> 1`` gives -2 (-2.5 -> -2), ``-7 >> 1``
    gives -3 (-3.5 -> -3).
    """
    value = _convert(value, "int64")
    shift = _convert(shift, "int64", like=value)
    if bool((shift < SHIFT_MIN).any()) or bool((shift > SHIFT_MAX).any()):
        raise ValueError(f"shift must be in [{SHIFT_MIN}, {SHIFT_MAX}]")
    rounding = 1 << (shift - 1)
    return (value + rounding) >> shift


def requantize_half_up(acc, multiplier, shift, zero_point: int, clamp_min: int, clamp_max: int):
    """Rescale int32 accumulators to int8 codes (see the module docstring).

    ``acc`` (a NumPy array or a torch tensor; the result is int8 of the same kind) has
    the output channel in its last dimension ... or dimension 1 for convolutions:
    ``multiplier`` and ``shift`` must broadcast against ``acc``.
    The product is exact: ``|acc| < 2**31`` and ``multiplier < 2**31`` fit int64.
    """
    acc = _convert(acc, "int64")
    if bool((acc < ACCUMULATOR_MIN).any()) or bool((acc > ACCUMULATOR_MAX).any()):
        raise OverflowError(f"accumulator exceeds {ACCUMULATOR_BITS} bits")
    product = acc * _convert(multiplier, "int64", like=acc)
    scaled = rounding_shift_right_half_up(product, shift) + zero_point
    return _convert(scaled.clip(clamp_min, clamp_max), "int8")


def quantize_activation(x, scale: float, zero_point: int):
    """Float to int8 activation codes: round half to even (as ``torch.round`` and
    ``numpy.round``), then clamp. ``x`` is a NumPy array or a torch tensor."""
    q = (_as_array(x) / scale).round() + zero_point
    return _convert(q.clip(ACTIVATION_MIN, ACTIVATION_MAX), "int8")


def dequantize_activation(q, scale: float, zero_point: int):
    """int8 codes to float32 reals; ``q`` is a NumPy array or a torch tensor."""
    return (_convert(q, "float32") - zero_point) * scale


def activation_clamp(scale: float, zero_point: int, low: float | None, high: float | None) -> tuple[int, int]:
    """``(clamp_min, clamp_max)`` codes of an activation clamped to ``[low, high]`` (reals;
    ``None``: unbounded): each bound quantized as an activation is (round half to even, as
    PyTorch's quantized ``hardtanh`` does), within ``[-128, 127]``. ReLU is ``low = 0``,
    ReLU6 ``[0, 6]``."""
    def code(bound, default):
        if bound is None:
            return default
        return int(min(ACTIVATION_MAX, max(ACTIVATION_MIN, round(bound / scale) + zero_point)))
    lo, hi = code(low, ACTIVATION_MIN), code(high, ACTIVATION_MAX)
    if lo > hi:
        raise ValueError(f"clamp [{low}, {high}] is empty at scale {scale} and zero point {zero_point}")
    return lo, hi


def average_pool_weights(channels: int, kernel: tuple[int, int]):
    """Average pooling as a depthwise convolution: weight codes 1 (``[channels, 1, kh, kw]``)
    of scale ``1 / (kh * kw)`` and no bias. The layer then computes
    ``round_half_up(sum(x - x_zero_point) * multiplier, shift) + y_zero_point`` with
    ``multiplier * 2**-shift ~ x_scale / (kh * kw * y_scale)``: padding counts as a real
    zero and in the divisor (``count_include_pad=True``). PyTorch's quantized engine rounds
    the same quotient half to even in float32, so the two differ only on exact ties (a
    window sum that is an odd multiple of half the window's area)."""
    kh, kw = kernel
    codes = np.ones((channels, 1, kh, kw), dtype=np.int8)
    return codes, np.full(channels, 1.0 / (kh * kw))


#: The largest weight of a residual add's inputs (:func:`add_weights`).
ADD_WEIGHT_MAX = 127


def add_weights(scale_a: float, scale_b: float, scale_out: float) -> tuple[int, int, float]:
    """``(w_a, w_b, real_multiplier)`` of a residual add (see the module docstring): the
    weights in ``[1, ADD_WEIGHT_MAX]`` whose ratio is nearest ``scale_a / scale_b`` (the
    larger weights on a tie), and the rescale factor ``multiplier * 2**-shift`` should
    approximate, exact for the input of the larger scale."""
    for what, value in (("input a", scale_a), ("input b", scale_b), ("output", scale_out)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{what} scale of an add must be a positive finite number, not {value!r}")
    big, small = max(scale_a, scale_b), min(scale_a, scale_b)
    best = None
    for w_big in range(ADD_WEIGHT_MAX, 0, -1):
        w_small = min(ADD_WEIGHT_MAX, max(1, round(w_big * small / big)))
        error = abs(w_small / w_big - small / big)
        if best is None or error < best[0]:
            best = (error, w_big, w_small)
    _, w_big, w_small = best
    w_a, w_b = (w_big, w_small) if scale_a >= scale_b else (w_small, w_big)
    return w_a, w_b, big / (w_big * scale_out)


def relu_clamp_min(zero_point: int, relu: bool) -> int:
    """Lower clamp of a layer output: the zero point when ReLU is fused, else -128."""
    return max(ACTIVATION_MIN, zero_point) if relu else ACTIVATION_MIN


def accumulator_range(weight, bias, x_min: int, x_max: int) -> tuple[int, int]:
    """The least and greatest value an accumulator of these weights can hold.

    ``weight`` is ``[N, ...]``, ``bias`` ``[N]``, and every input ``x`` lies in
    ``[x_min, x_max]`` with ``x_min <= 0 <= x_max``. The bound covers ``bias + sum_k x[k] * w[n, k]``
    and every partial sum of it, in any order, with or without the bias, over every
    channel ``n``: each term lies in ``[min(x_min*w, x_max*w), max(...)]``, which
    contains 0, so no partial sum leaves ``[bias + negatives, bias + positives]`` or
    ``[negatives, positives]``. It is reached by the extreme inputs, so it is tight.
    """
    if not x_min <= 0 <= x_max:
        raise ValueError(f"the input range must contain 0, not [{x_min}, {x_max}]")
    w = np.asarray(weight, dtype=np.int64).reshape(len(weight), -1)
    b = np.asarray(bias, dtype=np.int64).reshape(-1)
    negatives = np.minimum(w * x_min, w * x_max).sum(axis=1)
    positives = np.maximum(w * x_min, w * x_max).sum(axis=1)
    return (int(np.minimum(negatives, negatives + b).min(initial=0)),
            int(np.maximum(positives, positives + b).max(initial=0)))


def signed_bits(low: int, high: int) -> int:
    """Bits of the narrowest two's-complement integer that holds ``[low, high]``."""
    low, high = int(low), int(high)
    return max((-low - 1).bit_length() if low < 0 else 0, max(high, 0).bit_length()) + 1
