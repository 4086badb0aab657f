"""What the importers of models PyTorch already quantized share.

Both :mod:`pytorch_ref.frontends.torch_ao` (``torch.ao`` eager mode) and
:mod:`pytorch_ref.frontends.pt2e` (torchao's pt2e flow) read PyTorch's int8 weight codes,
scales and activation quantization, and build the same layers from them:

* :func:`code_offset`: PyTorch's unsigned activations (codes 0..255) become ours
  (signed) by subtracting 128 from codes and zero points, which changes no real value.
* :func:`weighted_layer`: a Dense or Conv2d layer from weight codes and scales; the
  float bias is quantized to int32 in units of ``input_scale * weight_scale``.
* :func:`fuse_relu`: a ReLU folded into the clamp of the weighted layer before it.
* :func:`compare_codes`: how closely our integer reference reproduces PyTorch's codes.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from pytorch_ref.frontends.quantize import make_requantization, quantize_bias
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer, QuantParams

__all__ = ["code_offset", "our_codes", "check_symmetric", "weighted_layer", "fuse_relu", "compare_codes"]

#: Offset from PyTorch's 8-bit activation codes to ours, by dtype (quantized tensors of
#: torch.ao, plain integer tensors of pt2e).
_CODE_OFFSET = {torch.quint8: -128, torch.uint8: -128, torch.qint8: 0, torch.int8: 0}


def code_offset(dtype: torch.dtype, where: str) -> int:
    """What to add to PyTorch's activation codes and zero points of ``dtype``."""
    if dtype not in _CODE_OFFSET:
        raise ValueError(f"{where}: activations must be 8-bit ({', '.join(map(str, _CODE_OFFSET))}), not {dtype}")
    return _CODE_OFFSET[dtype]


def our_codes(codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """PyTorch's integer activation codes of ``dtype`` as our int8 codes."""
    return (codes.to(torch.int16) + code_offset(dtype, "codes")).to(torch.int8)


def check_symmetric(where: str, zero_points) -> None:
    """Our weights are symmetric: every zero point must be 0."""
    zero_points = np.asarray(zero_points).reshape(-1)
    if (zero_points != 0).any():
        raise ValueError(f"{where}: weights must be symmetric (zero point 0), not zero points "
                         f"{sorted(set(zero_points.tolist()))}")


def weighted_layer(name: str, where: str, codes: np.ndarray, scales: np.ndarray, bias: torch.Tensor | None,
                   input_quant: QuantParams, output_quant: QuantParams, relu: bool = False,
                   conv: dict | None = None, output_range: tuple[int, int] | None = None):
    """A :class:`DenseLayer` (``conv`` None) or :class:`Conv2dLayer` (``conv``: ``stride``,
    ``padding``, ``dilation``, ``groups``) from int8 weight ``codes`` and per-output-channel
    ``scales``. ``output_range`` narrows the output codes (ours) to PyTorch's quantization
    range, when that is narrower than [-128, 127]."""
    requant = make_requantization(input_quant.scale, scales, output_quant, low=0.0 if relu else None)
    if output_range is not None:
        low, high = output_range
        requant = replace(requant, clamp_min=max(requant.clamp_min, low), clamp_max=min(requant.clamp_max, high))
    common = dict(name=name, weight=codes, bias=quantize_bias(bias, input_quant.scale, scales, name),
                  input_quant=input_quant, output_quant=output_quant, requant=requant)
    if conv is None:
        return DenseLayer(**common)
    if tuple(conv["dilation"]) != (1, 1):
        raise ValueError(f"{where}: dilation must be 1, not {tuple(conv['dilation'])}")
    return Conv2dLayer(**common, stride=tuple(conv["stride"]), padding=tuple(conv["padding"]), groups=conv["groups"])


def fuse_relu(layers: list, where: str) -> None:
    """A quantized ReLU is ``max(q, zero_point)``: fold it into the clamp of the weighted
    layer before it (max-pooling and flattening commute with it)."""
    index = next((i for i in reversed(range(len(layers)))
                  if isinstance(layers[i], (DenseLayer, Conv2dLayer))), None)
    if index is None or not all(isinstance(l, (MaxPool2dLayer, FlattenLayer)) for l in layers[index + 1:]):
        raise ValueError(f"{where} has no quantized Conv2d or Linear before it to fuse into")
    layers[index] = with_relu(layers[index])


def with_relu(layer):
    """``layer`` (a Conv2d, Linear or add) with a ReLU fused into its clamp."""
    clamp_min = max(layer.requant.clamp_min, sem.relu_clamp_min(layer.requant.zero_point, True))
    return replace(layer, requant=replace(layer.requant, clamp_min=clamp_min))


def compare_codes(ours: torch.Tensor, theirs: torch.Tensor) -> dict:
    """Agreement of two batches of int8 output codes: ``outputs``, ``equal`` (fraction of
    codes equal), ``within_one`` (fraction off by at most one code), ``max_difference``
    (in codes) and, for flat outputs, ``same_class`` (fraction of inputs whose argmax agrees)."""
    difference = (ours.to(torch.int16) - theirs.to(torch.int16)).abs()
    result = dict(outputs=difference.numel(),
                  equal=float((difference == 0).float().mean()),
                  within_one=float((difference <= 1).float().mean()),
                  max_difference=int(difference.max()))
    if ours.dim() == 2:
        result["same_class"] = float((ours.argmax(1) == theirs.argmax(1)).float().mean())
    return result
