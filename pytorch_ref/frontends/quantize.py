"""Post-training quantization helpers: weights, biases and requantization.

The front end that walks a model and calibrates it is :mod:`pytorch_ref.frontends.float_model`;
this module holds the per-layer arithmetic it uses. Activation ranges come from
PyTorch's observers on calibration data (affine, int8, min/max); weights use a
per-output-channel symmetric observer. Rounding of weights and biases is to nearest
(``torch.round``, ties to even); the integer arithmetic afterwards follows
:mod:`pytorch_ref.ir.integer_semantics`.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.ao.quantization.observer import PerChannelMinMaxObserver

from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import AddLayer, ConcatLayer, QuantParams, Requantization

def weight_observer(bits: int = sem.WEIGHT_BITS) -> PerChannelMinMaxObserver:
    """PyTorch's per-output-channel symmetric observer over the ``bits``-bit codes of
    :func:`~pytorch_ref.ir.integer_semantics.weight_range`."""
    low, high = sem.weight_range(bits)
    return PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                    quant_min=low, quant_max=high)


def quantize_weight(weight: torch.Tensor, bits: int = sem.WEIGHT_BITS) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric ``bits``-bit weights; returns (codes, scales)."""
    observer = weight_observer(bits)
    observer(weight.detach().float())
    scales, _ = observer.calculate_qparams()
    shape = (-1,) + (1,) * (weight.dim() - 1)
    codes = sem.quantize_weight_codes(weight.detach(), scales.view(shape), bits)
    return codes.numpy(), scales.double().numpy()


def make_requantization(input_scale: float, weight_scales: np.ndarray, output: QuantParams,
                        low: float | None = None, high: float | None = None) -> Requantization:
    """The requantization of a layer whose output is clamped to ``[low, high]`` (reals;
    ``None``: unbounded; ReLU: ``low = 0``)."""
    pairs = [sem.quantize_multiplier(input_scale * float(ws) / output.scale) for ws in weight_scales]
    clamp_min, clamp_max = sem.activation_clamp(output.scale, output.zero_point, low, high)
    return Requantization(multiplier=np.array([m for m, _ in pairs], dtype=np.int64),
                          shift=np.array([s for _, s in pairs], dtype=np.int64),
                          zero_point=output.zero_point, clamp_min=clamp_min, clamp_max=clamp_max)


def quantize_bias(bias: torch.Tensor | None, input_scale: float, weight_scales: np.ndarray,
                  name: str) -> np.ndarray:
    if bias is None:
        return np.zeros(len(weight_scales), dtype=np.int32)
    q = np.round(bias.detach().double().numpy() / (input_scale * weight_scales))
    if (np.abs(q) > sem.ACCUMULATOR_MAX).any():
        raise OverflowError(f"{name}: quantized bias exceeds int32")
    return q.astype(np.int32)



def make_add(name: str, a: QuantParams, b: QuantParams, output: QuantParams,
             low: float | None = None, high: float | None = None) -> AddLayer:
    """The residual add of inputs quantized as ``a`` and ``b`` to ``output``, clamped to
    ``[low, high]`` (reals; see :func:`~pytorch_ref.ir.integer_semantics.add_weights`)."""
    w_a, w_b, real = sem.add_weights(a.scale, b.scale, output.scale)
    clamp = sem.activation_clamp(output.scale, output.zero_point, low, high)
    return AddLayer(name, (a, b), output, (w_a, w_b), _one_channel_requantization(real, output, clamp))


def make_concat(name: str, inputs: list[QuantParams], output: QuantParams) -> ConcatLayer:
    """The concatenation of inputs quantized as ``inputs`` to ``output`` (see
    ``integer_semantics``, "Concatenation")."""
    full = (sem.ACTIVATION_MIN, sem.ACTIVATION_MAX)
    requants = tuple(_one_channel_requantization(q.scale / output.scale, output, full) for q in inputs)
    return ConcatLayer(name, tuple(inputs), output, requants)


def _one_channel_requantization(real_scale: float, output: QuantParams, clamp: tuple[int, int]) -> Requantization:
    """The requantization by ``real_scale`` to ``output``, clamped, that serves every channel."""
    multiplier, shift = sem.quantize_multiplier(real_scale)
    return Requantization(np.array([multiplier], dtype=np.int64), np.array([shift], dtype=np.int64),
                          output.zero_point, *clamp)
