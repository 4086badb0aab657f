"""Import a model that PyTorch's eager mode already quantized (``torch.ao.quantization``).

:func:`import_torch_ao` turns the output of ``prepare``/``convert`` (``Quantize``,
``QuantizedConv2d``, ``QuantizedConvReLU2d``, ``QuantizedLinear``,
``QuantizedLinearReLU``, ``MaxPool2d``, ``ReLU``, ``Flatten``, ``DeQuantize``) into a
:class:`QuantizedModel`, one handler per module type on the same traced chain as the
float front end (:mod:`pytorch_ref.frontends.graph`).

Number formats:

* PyTorch's activations are usually ``quint8`` (codes 0..255, zero point 0..255);
  ours are signed: codes and zero points are shifted by -128, which changes no real
  value. ``qint8`` activations are taken as they are.
* PyTorch's weights are ``qint8`` in [-128, 127], symmetric: ours too, so a model
  quantized with any of PyTorch's default qconfigs (``get_default_qconfig("x86")``, whose
  per-channel weights use -128) imports unchanged, as 8-bit weights.
* PyTorch keeps the bias in float and adds it in float inside fbgemm/qnnpack; ours is
  int32 in units of ``input_scale * weight_scale``. With PyTorch's float requantization
  against our 31-bit fixed point, this is why outputs may differ by one code
  (:func:`measure_agreement` counts how often).

:func:`torch_ao_quantize` produces such models from a float ``nn.Sequential`` (fusing
Conv/BN/ReLU and Linear/ReLU), for tests and examples.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq
import torch.ao.quantization as tq
from torch import nn
from torch.ao.quantization.observer import MinMaxObserver, PerChannelMinMaxObserver

from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.frontends.float_model import ClampOp, FlattenOp, MaxPoolOp, maxpool_op
from pytorch_ref.frontends.graph import Registry, Step, flatten_spec, trace, type_name, walk
from pytorch_ref.frontends.imported import check_symmetric, code_offset, compare_codes, fuse_relu, our_codes, \
    weighted_layer
from pytorch_ref.ir.quantized_model import FlattenLayer, MaxPool2dLayer, QuantizedModel, QuantParams
from pytorch_ref.reference import run_integer_reference

__all__ = ["import_torch_ao", "torch_ao_quantize", "torch_ao_codes", "measure_agreement", "REGISTRY"]

#: The torch.ao importer's handlers, one per quantized module type.
REGISTRY = Registry("torch.ao importer")

@dataclass
class _Quantize:
    where: str
    scale: float
    zero_point: int         # PyTorch's
    offset: int             # to add to PyTorch's codes and zero points


@dataclass
class _DeQuantize:
    where: str


@dataclass
class _Weighted:
    name: str
    where: str
    module: nn.Module
    relu: bool


def _name(step: Step) -> str:
    return f"{step.node.target}.{type_name(type(step.module))}" if step.module is not None else step.node.name


@REGISTRY.module(nnq.Quantize)
def _quantize(step: Step):
    m = step.module
    return _Quantize(step.where, float(m.scale), int(m.zero_point), code_offset(m.dtype, step.where))


@REGISTRY.module(nnq.DeQuantize)
def _dequantize(step: Step):
    return _DeQuantize(step.where)


@REGISTRY.module(nnq.Conv2d, nnq.Linear)
def _weighted(step: Step):
    return _Weighted(_name(step), step.where, step.module, relu=False)


@REGISTRY.module(nniq.ConvReLU2d, nniq.LinearReLU)
def _weighted_relu(step: Step):
    return _Weighted(_name(step), step.where, step.module, relu=True)


@REGISTRY.module(nn.ReLU)
@REGISTRY.function(torch.relu, torch.nn.functional.relu)
@REGISTRY.method("relu")
def _relu(step: Step):
    return ClampOp(_name(step), step.where, 0.0, None)


@REGISTRY.module(nn.MaxPool2d)
def _maxpool(step: Step):
    m = step.module
    return maxpool_op(_name(step), step.where, m.kernel_size, m.stride, m.padding, m.dilation,
                      m.ceil_mode, m.return_indices)


@REGISTRY.module(nn.Flatten)
def _flatten_module(step: Step):
    if (step.module.start_dim, step.module.end_dim) != (1, -1):
        raise ValueError(f"{step.where}: only Flatten(start_dim=1, end_dim=-1) is supported")
    return FlattenOp(_name(step), step.where)


@REGISTRY.function(torch.flatten)
@REGISTRY.method("flatten", "view", "reshape")
def _flatten_call(step: Step):
    return FlattenOp(_name(step), step.where, flatten_spec(step.node, step.where))


@REGISTRY.module(nn.Identity, nn.Dropout, nnq.Dropout)
def _no_op(step: Step):
    return None


def _weights(op: _Weighted) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's int8 weight codes and per-output-channel scales."""
    w = op.module.weight()
    if w.dtype != torch.qint8:
        raise ValueError(f"{op.where}: weights must be qint8, not {w.dtype}")
    out_channels = w.shape[0]
    if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        if w.q_per_channel_axis() != 0:
            raise ValueError(f"{op.where}: per-channel weights must be quantized along axis 0, "
                             f"not {w.q_per_channel_axis()}")
        scales = w.q_per_channel_scales().double().numpy()
        zero_points = w.q_per_channel_zero_points().numpy()
    else:
        scales = np.full(out_channels, w.q_scale(), dtype=np.float64)
        zero_points = np.full(out_channels, w.q_zero_point())
    check_symmetric(op.where, zero_points)
    return w.int_repr().numpy(), scales


def _lower_weighted(op: _Weighted, input_quant: QuantParams, offset: int):
    m = op.module
    output_quant = QuantParams(float(m.scale), int(m.zero_point) + offset)
    codes, scales = _weights(op)
    conv = None
    if not isinstance(m, nnq.Linear):
        if m.padding_mode != "zeros":
            raise ValueError(f"{op.where}: padding mode must be 'zeros', not {m.padding_mode!r}")
        conv = dict(stride=m.stride, padding=m.padding, dilation=m.dilation, groups=m.groups)
    return weighted_layer(op.name, op.where, codes, scales, m.bias(), input_quant, output_quant, op.relu, conv)


def import_torch_ao(model: nn.Module, input_shape: tuple[int, ...], name: str = "model") -> QuantizedModel:
    """A :class:`QuantizedModel` computing what ``model`` (converted by torch.ao eager
    mode) computes, on inputs of shape ``input_shape`` (without the batch)."""
    graph_module = trace(copy.deepcopy(model).eval())
    ops = [step.handler(step) for step in walk(graph_module, REGISTRY)]
    ops = [op for op in ops if op is not None]
    quantize, layers, dequantized = None, [], False
    current: QuantParams | None = None
    for op in ops:
        if isinstance(op, _Quantize):
            if quantize is not None:
                raise ValueError(f"{op.where}: the model quantizes twice; only one Quantize "
                                 f"(QuantStub) at its input is supported")
            quantize = op
            current = QuantParams(op.scale, op.zero_point + op.offset)
            continue
        if quantize is None:
            raise ValueError(f"{op.where} comes before any Quantize: the model must start with a "
                             f"QuantStub converted by torch.ao.quantization.convert")
        if dequantized:
            raise ValueError(f"{op.where} follows the DeQuantize: float layers after the DeQuantStub "
                             f"are not supported")
        if isinstance(op, _DeQuantize):
            dequantized = True
        elif isinstance(op, _Weighted):
            layers.append(_lower_weighted(op, current, quantize.offset))
            current = layers[-1].output_quant
        elif isinstance(op, MaxPoolOp):
            layers.append(MaxPool2dLayer(op.name, op.kernel_size, op.stride, op.padding))
        elif isinstance(op, FlattenOp):
            layers.append(FlattenLayer(op.name))
        elif isinstance(op, ClampOp):
            fuse_relu(layers, op.where)
    if quantize is None:
        raise ValueError("the model has no Quantize module: convert it with torch.ao.quantization first")
    if not dequantized:
        raise ValueError("the model has no DeQuantize module at its output")
    return QuantizedModel(name=name, input_shape=tuple(input_shape), input_quant=QuantParams(
        quantize.scale, quantize.zero_point + quantize.offset), layers=tuple(layers))


# -- producing and measuring torch.ao models ---------------------------------------------

def _fusion_groups(model: nn.Sequential, prefix: str) -> list[list[str]]:
    children = list(model.named_children())
    groups, i = [], 0
    patterns = [(nn.Conv2d, nn.BatchNorm2d, nn.ReLU), (nn.Conv2d, nn.BatchNorm2d), (nn.Conv2d, nn.ReLU),
                (nn.Linear, nn.ReLU)]
    while i < len(children):
        for pattern in patterns:
            window = children[i:i + len(pattern)]
            if len(window) == len(pattern) and all(type(m) is t for (_, m), t in zip(window, pattern)):
                groups.append([prefix + n for n, _ in window])
                i += len(pattern)
                break
        else:
            i += 1
    return groups


@torch.no_grad()
def torch_ao_quantize(model: nn.Sequential, calibration: torch.Tensor, engine: str = "fbgemm",
                      qconfig: tq.QConfig | None = None) -> nn.Module:
    """Quantize a float ``nn.Sequential`` with PyTorch's eager mode, as a user would.

    Conv/BN/ReLU and Linear/ReLU are fused. ``qconfig`` defaults to: activations quint8
    with min/max observers (codes 0..127 on fbgemm, whose kernels need 7-bit activations
    to avoid 16-bit saturation, as its ``reduce_range``), weights per-channel symmetric
    qint8 in [-128, 127]; pass ``torch.ao.quantization.get_default_qconfig("x86")`` for
    PyTorch's own default.
    Sets ``torch.backends.quantized.engine`` to ``engine`` (PyTorch's setting is global,
    and the converted model runs only on the engine it was packed for).
    """
    if engine not in torch.backends.quantized.supported_engines:
        raise ValueError(f"engine must be one of {torch.backends.quantized.supported_engines}, not {engine!r}")
    torch.backends.quantized.engine = engine
    wrapped = tq.QuantWrapper(copy.deepcopy(model)).eval()
    groups = _fusion_groups(wrapped.module, "module.")
    if groups:
        tq.fuse_modules(wrapped, groups, inplace=True)
    wrapped.qconfig = qconfig or tq.QConfig(
        activation=MinMaxObserver.with_args(dtype=torch.quint8, quant_min=0,
                                            quant_max=127 if engine == "fbgemm" else 255),
        weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                                  quant_min=sem.WEIGHT_MIN, quant_max=sem.WEIGHT_MAX))
    tq.prepare(wrapped, inplace=True)
    for batch in calibration.split(256):
        wrapped(batch)
    return tq.convert(wrapped)


@torch.no_grad()
def torch_ao_codes(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a converted model on float ``x``; return its input and output codes in our
    signed convention (the Quantize module's output and the DeQuantize module's input)."""
    seen = {}

    def grab(key, index):
        def hook(module, inputs, output):
            tensor = output if index is None else inputs[index]
            seen[key] = our_codes(tensor.int_repr(), tensor.dtype)
        return hook

    quantizers = [m for m in model.modules() if isinstance(m, nnq.Quantize)]
    dequantizers = [m for m in model.modules() if isinstance(m, nnq.DeQuantize)]
    if len(quantizers) != 1 or len(dequantizers) != 1:
        raise ValueError("the model must have exactly one Quantize and one DeQuantize module")
    handles = [quantizers[0].register_forward_hook(grab("in", None)),
               dequantizers[0].register_forward_hook(grab("out", 0))]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen["in"], seen["out"]


def measure_agreement(torch_model: nn.Module, quantized: QuantizedModel, x: torch.Tensor) -> dict:
    """How closely the integer reference reproduces PyTorch's quantized engine on float
    inputs ``x``: both run on PyTorch's own input codes.

    Returns :func:`~pytorch_ref.frontends.imported.compare_codes`'s figures.
    """
    codes_in, theirs = torch_ao_codes(torch_model, x)
    return compare_codes(run_integer_reference(quantized, codes_in, device="cpu"), theirs)
