"""Post-training quantization of a float ``nn.Sequential`` into a :class:`QuantizedModel`.

Activation ranges come from PyTorch's observers on calibration data (affine, int8,
min/max); weights use a per-output-channel symmetric observer. ReLU after a weighted
layer is fused into that layer's clamp. Rounding of weights and biases is to nearest
(``torch.round``, ties to even); the integer arithmetic afterwards follows
:mod:`pytorch_ref.integer_semantics`.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.ao.quantization.observer import MinMaxObserver, PerChannelMinMaxObserver

from . import integer_semantics as sem
from .quantized_model import DenseLayer, FlattenLayer, QuantizedModel, QuantParams, Requantization

SUPPORTED = (nn.Linear, nn.ReLU, nn.Flatten)


def _activation_observer() -> MinMaxObserver:
    return MinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_affine,
                          quant_min=sem.ACTIVATION_MIN, quant_max=sem.ACTIVATION_MAX)


def _quant_params(observer: MinMaxObserver) -> QuantParams:
    scale, zero_point = observer.calculate_qparams()
    return QuantParams(float(scale.item()), int(zero_point.item()))


def quantize_weight(weight: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8 weights in [-127, 127]; returns (codes, scales)."""
    observer = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                        quant_min=sem.WEIGHT_MIN, quant_max=sem.WEIGHT_MAX)
    observer(weight.detach().float())
    scales, _ = observer.calculate_qparams()
    shape = (-1,) + (1,) * (weight.dim() - 1)
    codes = torch.round(weight.detach() / scales.view(shape)).clamp(sem.WEIGHT_MIN, sem.WEIGHT_MAX)
    return codes.to(torch.int8).numpy(), scales.double().numpy()


def make_requantization(input_scale: float, weight_scales: np.ndarray, output: QuantParams,
                        relu: bool) -> Requantization:
    pairs = [sem.quantize_multiplier(input_scale * float(ws) / output.scale) for ws in weight_scales]
    return Requantization(multiplier=np.array([m for m, _ in pairs], dtype=np.int64),
                          shift=np.array([s for _, s in pairs], dtype=np.int64),
                          zero_point=output.zero_point,
                          clamp_min=sem.relu_clamp_min(output.zero_point, relu))


def quantize_bias(bias: torch.Tensor | None, input_scale: float, weight_scales: np.ndarray,
                  name: str) -> np.ndarray:
    if bias is None:
        return np.zeros(len(weight_scales), dtype=np.int32)
    q = np.round(bias.detach().double().numpy() / (input_scale * weight_scales))
    if (np.abs(q) > sem.ACCUMULATOR_MAX).any():
        raise OverflowError(f"{name}: quantized bias exceeds int32")
    return q.astype(np.int32)


@torch.no_grad()
def quantize_sequential(model: nn.Sequential, calibration: torch.Tensor, name: str = "model") -> QuantizedModel:
    """Quantize a Sequential of Linear, ReLU and Flatten modules.

    ``calibration`` is a float batch ``[B, *input_shape]`` whose ranges set every
    activation's scale and zero point.
    """
    modules = list(model.eval().children())
    for index, module in enumerate(modules):
        if not isinstance(module, SUPPORTED):
            raise TypeError(f"layer {index} ({type(module).__name__}) is not supported here; "
                            f"supported: {', '.join(t.__name__ for t in SUPPORTED)}")
    observer = _activation_observer()
    observer(calibration)
    input_quant = _quant_params(observer)
    current_quant = input_quant
    x = calibration
    layers = []
    index = 0
    while index < len(modules):
        module = modules[index]
        layer_name = f"{index}.{type(module).__name__}"
        if isinstance(module, nn.Flatten):
            x = module(x)
            layers.append(FlattenLayer(layer_name))
            index += 1
            continue
        if isinstance(module, nn.ReLU):
            raise TypeError(f"layer {index} (ReLU) must follow a Linear layer to be fused")
        relu = index + 1 < len(modules) and isinstance(modules[index + 1], nn.ReLU)
        x = module(x)
        if relu:
            x = torch.relu(x)
        observer = _activation_observer()
        observer(x)
        output_quant = _quant_params(observer)
        codes, weight_scales = quantize_weight(module.weight)
        layers.append(DenseLayer(
            name=layer_name, weight=codes,
            bias=quantize_bias(module.bias, current_quant.scale, weight_scales, layer_name),
            input_quant=current_quant, output_quant=output_quant,
            requant=make_requantization(current_quant.scale, weight_scales, output_quant, relu)))
        current_quant = output_quant
        index += 2 if relu else 1
    return QuantizedModel(name=name, input_shape=tuple(calibration.shape[1:]), input_quant=input_quant,
                          layers=tuple(layers))
