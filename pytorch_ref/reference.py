"""The integer reference: executes a :class:`QuantizedModel` exactly, with torch.

Convolutions and matrix products run in float64: every product of int8 codes and every
partial sum of one layer stays below 2**53 (checked), so float64 arithmetic is exact
here and works on CUDA and CPU alike (CUDA has no int64 matmul). Everything after the
accumulation (requantization, clamping, pooling) is done in int64 as
:mod:`pytorch_ref.ir.integer_semantics` defines it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import (AddLayer, ConcatLayer, Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer,
                                            QuantizedModel)

_FLOAT64_EXACT = 2 ** 53


def default_device() -> torch.device:
    """CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _accumulate(layer, x: torch.Tensor) -> torch.Tensor:
    """``bias + sum (x - zp) * w`` exactly, as int64; ``x`` holds int8 codes."""
    if layer.fan_in * 255 * 127 >= _FLOAT64_EXACT:
        raise OverflowError(f"{layer.name}: fan-in {layer.fan_in} too large for an exact float64 sum")
    centered = x.to(torch.float64) - layer.input_quant.zero_point
    weight = torch.as_tensor(layer.weight, device=x.device).to(torch.float64)
    bias = torch.as_tensor(layer.bias, device=x.device).to(torch.float64)
    if isinstance(layer, DenseLayer):
        acc = centered @ weight.T + bias
    else:
        # Padding with zeros on the centred input is padding with the zero point on codes.
        acc = F.conv2d(centered, weight, bias, stride=layer.stride, padding=layer.padding,
                       groups=layer.groups)
    return acc.round().to(torch.int64)


def _requantize(layer, acc: torch.Tensor, rq=None) -> torch.Tensor:
    rq = rq or layer.requant
    shape = (1, -1) + (1,) * (acc.dim() - 2)
    multiplier = torch.as_tensor(rq.multiplier, device=acc.device).view(shape)
    shift = torch.as_tensor(rq.shift, device=acc.device).view(shape)
    return sem.requantize_half_up(acc, multiplier, shift, rq.zero_point, rq.clamp_min, rq.clamp_max)


def _add(layer: AddLayer, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``weights[0] * (a - za) + weights[1] * (b - zb)``, requantized (exact in int64)."""
    (w_a, w_b), (qa, qb) = layer.weights, layer.input_quants
    acc = w_a * (a.to(torch.int64) - qa.zero_point) + w_b * (b.to(torch.int64) - qb.zero_point)
    return _requantize(layer, acc)


def _concat(layer: ConcatLayer, tensors) -> torch.Tensor:
    """Each input requantized to the output's scale, then joined along dimension 1."""
    return torch.cat([_requantize(layer, x.to(torch.int64) - q.zero_point, rq)
                      for x, q, rq in zip(tensors, layer.input_quants, layer.requants)], dim=1)


def run_layer(layer, x: torch.Tensor, *more: torch.Tensor) -> torch.Tensor:
    """One layer on a batch of int8 codes (more batches for an add or a concatenation);
    returns int8 codes."""
    if isinstance(layer, AddLayer):
        return _add(layer, x, *more)
    if isinstance(layer, ConcatLayer):
        return _concat(layer, (x,) + more)
    if isinstance(layer, (DenseLayer, Conv2dLayer)):
        return _requantize(layer, _accumulate(layer, x))
    if isinstance(layer, MaxPool2dLayer):
        # Pad with the smallest code explicitly so padding never wins, as PyTorch's -inf.
        ph, pw = layer.padding
        padded = F.pad(x.to(torch.float32), (pw, pw, ph, ph), value=float(sem.MAXPOOL_PAD_VALUE))
        return F.max_pool2d(padded, layer.kernel_size, layer.stride).to(torch.int8)
    if isinstance(layer, FlattenLayer):
        return x.flatten(1)
    raise TypeError(f"unsupported layer type {type(layer).__name__}")


def run_integer_reference(model: QuantizedModel, x_codes: torch.Tensor,
                          device: torch.device | str | None = None,
                          return_all: bool = False):
    """Execute ``model`` on a batch of int8 input codes ``[B, *model.input_shape]``.

    Returns the int8 output codes ``[B, *model.output_shape]`` (on the CPU), or, with
    ``return_all``, the list of every layer's output.
    """
    device = torch.device(device) if device is not None else default_device()
    x = torch.as_tensor(x_codes)
    if x.dtype != torch.int8:
        raise TypeError(f"input codes must be int8, not {x.dtype}")
    if tuple(x.shape[1:]) != tuple(model.input_shape):
        raise ValueError(f"input must have shape [batch, {', '.join(map(str, model.input_shape))}], "
                         f"not {list(x.shape)}")
    tensors = [x.to(device)]
    for layer, reads in zip(model.layers, model.layer_inputs):
        tensors.append(run_layer(layer, *(tensors[t] for t in reads)))
    return [t.cpu() for t in tensors[1:]] if return_all else tensors[-1].cpu()
