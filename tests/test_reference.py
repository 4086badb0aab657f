"""The integer reference against plain Python-integer loops (exact), and against the float model."""
import itertools

import numpy as np
import pytest
import torch

from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.zoo import models
from pytorch_ref.frontends.float_model import quantize_model
from pytorch_ref.ir.quantized_model import (Conv2dLayer, DenseLayer, MaxPool2dLayer, QuantizedModel, QuantParams,
                                         Requantization)
from pytorch_ref.reference import run_integer_reference

def _requant_int(acc: int, multiplier: int, shift: int, zero_point: int, lo: int, hi: int) -> int:
    """Requantization with Python integers: round half up, add the zero point, clamp."""
    return min(max(((acc * multiplier + (1 << (shift - 1))) >> shift) + zero_point, lo), hi)


def _random_conv(rng, in_channels, out_channels, kernel, stride, padding, groups, x_zp, y_zp, relu):
    weight = rng.integers(-127, 128, size=(out_channels, in_channels // groups, *kernel)).astype(np.int8)
    bias = rng.integers(-5000, 5000, size=out_channels).astype(np.int32)
    multiplier = rng.integers(2 ** 30, 2 ** 31, size=out_channels).astype(np.int64)
    shift = rng.integers(37, 42, size=out_channels).astype(np.int64)
    return Conv2dLayer(name="conv", weight=weight, bias=bias, input_quant=QuantParams(0.02, x_zp),
                       output_quant=QuantParams(0.05, y_zp),
                       requant=Requantization(multiplier, shift, y_zp, sem.relu_clamp_min(y_zp, relu)),
                       stride=stride, padding=padding, groups=groups)


def _conv_loops(layer: Conv2dLayer, x: np.ndarray) -> np.ndarray:
    """The convolution by its definition: padding reads the input zero point."""
    batch, channels, height, width = x.shape
    (kh, kw), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
    zp = layer.input_quant.zero_point
    padded = np.full((batch, channels, height + 2 * ph, width + 2 * pw), zp, dtype=np.int64)
    padded[:, :, ph:ph + height, pw:pw + width] = x
    out_channels = layer.out_features
    per_group_in, per_group_out = channels // layer.groups, out_channels // layer.groups
    oh, ow = (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1
    rq = layer.requant
    out = np.zeros((batch, out_channels, oh, ow), dtype=np.int64)
    for b, n, i, j in itertools.product(range(batch), range(out_channels), range(oh), range(ow)):
        group = n // per_group_out
        acc = int(layer.bias[n])
        for c, u, v in itertools.product(range(per_group_in), range(kh), range(kw)):
            code = int(padded[b, group * per_group_in + c, i * sh + u, j * sw + v])
            acc += (code - zp) * int(layer.weight[n, c, u, v])
        out[b, n, i, j] = _requant_int(acc, int(rq.multiplier[n]), int(rq.shift[n]), rq.zero_point,
                                       rq.clamp_min, rq.clamp_max)
    return out


@pytest.mark.parametrize("in_channels, out_channels, kernel, stride, padding, groups, x_zp, relu", [
    (3, 4, (3, 3), (1, 1), (1, 1), 1, 37, False),      # padding reads a non-zero zero point
    (3, 4, (3, 3), (1, 1), (1, 1), 1, -90, True),
    (2, 3, (3, 2), (2, 2), (1, 0), 1, 12, True),       # stride 2, rectangular kernel, asymmetric padding
    (2, 2, (5, 5), (2, 1), (2, 2), 1, -128, False),
    (4, 4, (3, 3), (1, 1), (1, 1), 4, 25, True),       # depthwise
    (4, 4, (3, 3), (2, 2), (1, 1), 4, -7, False),      # depthwise, stride 2
    (4, 6, (1, 1), (1, 1), (0, 0), 2, 3, False),       # two groups, pointwise
])
def test_conv_matches_integer_loops(in_channels, out_channels, kernel, stride, padding, groups, x_zp, relu):
    rng = np.random.default_rng(hash((in_channels, kernel, stride, groups, x_zp)) % 2 ** 32)
    layer = _random_conv(rng, in_channels, out_channels, kernel, stride, padding, groups, x_zp, y_zp=-20,
                         relu=relu)
    x = rng.integers(-128, 128, size=(2, in_channels, 7, 6)).astype(np.int8)
    model = QuantizedModel("conv", (in_channels, 7, 6), layer.input_quant, (layer,))
    ours = run_integer_reference(model, torch.from_numpy(x), device="cpu")
    expected = _conv_loops(layer, x)
    assert ours.dtype == torch.int8
    assert np.array_equal(ours.numpy().astype(np.int64), expected)
    assert len(set(expected.flatten().tolist())) > 10          # not all saturated


def test_padding_reads_the_zero_point():
    """A 3x3 all-ones kernel over a constant input equal to the zero point gives the bias
    everywhere, border included: padding is a real zero."""
    layer = Conv2dLayer(name="ones", weight=np.ones((1, 1, 3, 3), dtype=np.int8), bias=np.array([40], np.int32),
                        input_quant=QuantParams(0.1, 55), output_quant=QuantParams(0.1, 0),
                        requant=Requantization(np.array([2 ** 30]), np.array([30]), 0, -128),
                        padding=(1, 1))
    model = QuantizedModel("pad", (1, 4, 4), layer.input_quant, (layer,))
    out = run_integer_reference(model, torch.full((1, 1, 4, 4), 55, dtype=torch.int8), device="cpu")
    assert out.tolist() == [[[[40] * 4] * 4]]


def test_dense_matches_integer_loops():
    rng = np.random.default_rng(3)
    weight = rng.integers(-127, 128, size=(5, 9)).astype(np.int8)
    bias = rng.integers(-3000, 3000, size=5).astype(np.int32)
    rq = Requantization(rng.integers(2 ** 30, 2 ** 31, size=5), rng.integers(35, 39, size=5), 7, 7)
    layer = DenseLayer("fc", weight, bias, QuantParams(0.1, -3), QuantParams(0.1, 7), rq)
    x = rng.integers(-128, 128, size=(4, 9)).astype(np.int8)
    ours = run_integer_reference(QuantizedModel("fc", (9,), layer.input_quant, (layer,)), torch.from_numpy(x),
                                 device="cpu")
    for b, n in itertools.product(range(4), range(5)):
        acc = int(bias[n]) + sum((int(x[b, k]) + 3) * int(weight[n, k]) for k in range(9))
        assert ours[b, n].item() == _requant_int(acc, int(rq.multiplier[n]), int(rq.shift[n]), 7, 7, 127)


def test_maxpool_padding_never_wins():
    layer = MaxPool2dLayer("pool", kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))
    x = torch.full((1, 1, 4, 4), -127, dtype=torch.int8)
    x[0, 0, 0, 0] = -128
    model = QuantizedModel("pool", (1, 4, 4), QuantParams(1.0, 0), (layer,))
    out = run_integer_reference(model, x, device="cpu")
    assert out.tolist() == [[[[-127, -127], [-127, -127]]]]


def _layer_rescale_check(quantized: QuantizedModel, codes: torch.Tensor) -> float:
    """Each weighted layer's output codes against the real-valued rescale of its exact
    accumulator (float64): equal but for ties and the 31-bit multiplier. Returns the
    fraction equal; raises if any differs by more than one code."""
    outputs = run_integer_reference(quantized, codes, device="cpu", return_all=True)
    inputs = [codes] + outputs[:-1]
    equal, total = 0, 0
    for layer, x, y in zip(quantized.layers, inputs, outputs):
        if not isinstance(layer, (DenseLayer, Conv2dLayer)):
            continue
        centered = x.double() - layer.input_quant.zero_point
        w = torch.from_numpy(layer.weight).double()
        b = torch.from_numpy(layer.bias).double()
        if isinstance(layer, DenseLayer):
            acc = centered @ w.T + b
        else:
            acc = torch.nn.functional.conv2d(centered, w, b, layer.stride, layer.padding, groups=layer.groups)
        scales = torch.from_numpy(layer.input_quant.scale * _weight_scales(layer) / layer.output_quant.scale)
        shape = (1, -1) + (1,) * (acc.dim() - 2)
        real = acc * scales.view(shape) + layer.output_quant.zero_point
        expected = real.round().clamp(layer.requant.clamp_min, 127)
        difference = (expected - y.double()).abs()
        assert difference.max() <= 1, layer.name
        equal += int((difference == 0).sum())
        total += difference.numel()
    return equal / total


def _weight_scales(layer) -> np.ndarray:
    # The requantization encodes input_scale * weight_scale / output_scale.
    return layer.requant.multiplier * 2.0 ** -layer.requant.shift * layer.output_quant.scale / layer.input_quant.scale


@pytest.mark.parametrize("name", ["linear", "mlp", "lenet", "stem", "dwsep"])
def test_reference_close_to_float_model(name):
    """Dequantized int8 outputs are within a few output codes of the float model, and
    every layer's codes are its exact accumulator rescaled and rounded."""
    model = models.build(name)
    for module in model.modules():        # make BatchNorm non-trivial
        if isinstance(module, torch.nn.BatchNorm2d):
            generator = torch.Generator().manual_seed(5)
            module.running_mean.normal_(0, 0.3, generator=generator)
            module.running_var.uniform_(0.5, 2.0, generator=generator)
            module.weight.data.uniform_(0.5, 1.5, generator=generator)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn((48, *models.INPUT_SHAPES[name]), generator=generator)
    quantized = quantize_model(model, x, name=name)      # ranges cover the inputs checked: no clamping
    q = quantized.input_quant
    codes = sem.quantize_activation(x[32:], q.scale, q.zero_point)
    out = run_integer_reference(quantized, codes, device="cpu")
    with torch.no_grad():
        expected = model(x[32:])
    o = quantized.output_quant
    error = (sem.dequantize_activation(out, o.scale, o.zero_point) - expected).abs() / o.scale
    assert error.mean() < 1.0
    assert error.max() < 6
    assert _layer_rescale_check(quantized, codes) > 0.999
