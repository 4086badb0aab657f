"""The float front end: tracing, handlers, BatchNorm folding, fusion, and every error message."""
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.zoo import models
from pytorch_ref.frontends.float_model import float_ops, fold_batchnorm, quantize_model
from pytorch_ref.ir.quantized_model import Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer
from pytorch_ref.reference import run_integer_reference

def _randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _batchnorm(channels, seed=0):
    bn = nn.BatchNorm2d(channels)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bn.running_mean.normal_(0, 0.5, generator=generator)
        bn.running_var.uniform_(0.3, 3.0, generator=generator)
        bn.weight.uniform_(0.5, 1.5, generator=generator)
        bn.bias.normal_(0, 0.3, generator=generator)
    return bn.eval()


def _relu_fused(layer) -> bool:
    """ReLU clamps at the output zero point (often -128 itself after a ReLU: calibration
    sees no negative values, so ``Requantization.relu`` reads False and the clamp does it)."""
    return layer.requant.clamp_min == max(-128, layer.output_quant.zero_point)


# -- BatchNorm folding -----------------------------------------------------------------------

@pytest.mark.parametrize("groups, bias", [(1, True), (1, False), (6, True)])
def test_fold_batchnorm_matches_conv_then_batchnorm(groups, bias):
    torch.manual_seed(0)
    conv = nn.Conv2d(6, 6, 3, padding=1, groups=groups, bias=bias).eval()
    bn = _batchnorm(6)
    x = _randn(4, 6, 9, 9)
    folded = fold_batchnorm(conv, bn)
    with torch.no_grad():
        torch.testing.assert_close(folded(x), bn(conv(x)), rtol=1e-5, atol=1e-5)
    assert folded is not conv and conv.weight.shape == folded.weight.shape


def test_fold_batchnorm1d_matches_linear_then_batchnorm():
    torch.manual_seed(0)
    linear, bn = nn.Linear(7, 5).eval(), nn.BatchNorm1d(5)
    bn.load_state_dict({**_batchnorm(5).state_dict()})
    bn.eval()
    x = _randn(6, 7)
    folded = fold_batchnorm(linear, bn)
    with torch.no_grad():
        torch.testing.assert_close(folded(x), bn(linear(x)), rtol=1e-5, atol=1e-5)
    ops = float_ops(nn.Sequential(linear, bn, nn.ReLU()).eval())
    assert len(ops) == 1 and ops[0].relu and isinstance(ops[0].module, nn.Linear)


def test_batchnorm_is_folded_at_compile_time():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _batchnorm(8), nn.ReLU()).eval()
    ops = float_ops(model)
    assert len(ops) == 1 and ops[0].relu
    x = _randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(ops[0].forward(x), model(x), rtol=1e-5, atol=1e-5)
    quantized = quantize_model(model, x)
    assert [type(l) for l in quantized.layers] == [Conv2dLayer]
    assert _relu_fused(quantized.layers[0])


def test_front_end_leaves_the_model_alone():
    model = models.build("stem").train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    quantize_model(model, _randn(4, 3, 32, 32))
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# -- layers and fusion ---------------------------------------------------------------------------

def test_stride_two_and_depthwise_compile():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4), _batchnorm(4), nn.ReLU(),
                          nn.Conv2d(4, 8, (3, 1), stride=(2, 1), padding=(1, 0)), nn.ReLU(),
                          nn.MaxPool2d((2, 3), stride=(1, 2), padding=(1, 1))).eval()
    x = _randn(16, 4, 11, 10)
    quantized = quantize_model(model, x, name="strided")
    depthwise, pointwise, pool = quantized.layers
    assert (depthwise.groups, depthwise.stride, depthwise.padding) == (4, (2, 2), (1, 1))
    assert depthwise.weight.shape == (4, 1, 3, 3)
    assert (pointwise.stride, pointwise.padding, pointwise.kernel_size) == ((2, 1), (1, 0), (3, 1))
    assert (pool.kernel_size, pool.stride, pool.padding) == ((2, 3), (1, 2), (1, 1))
    with torch.no_grad():
        expected = model(x)
    assert quantized.output_shape == tuple(expected.shape[1:])
    codes = sem.quantize_activation(x, quantized.input_quant.scale, quantized.input_quant.zero_point)
    out = run_integer_reference(quantized, codes, device="cpu")
    o = quantized.output_quant
    error = (sem.dequantize_activation(out, o.scale, o.zero_point) - expected).abs() / o.scale
    assert error.max() < 4


def test_relu_fuses_through_maxpool_and_flatten():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2), nn.Flatten(), nn.ReLU(), nn.Linear(8, 3))
    quantized = quantize_model(model, _randn(8, 1, 6, 6))
    assert [type(l) for l in quantized.layers] == [Conv2dLayer, MaxPool2dLayer, FlattenLayer, DenseLayer]
    assert _relu_fused(quantized.layers[0]) and quantized.layers[3].requant.clamp_min == -128
    assert [getattr(op, "relu", None) for op in float_ops(model)] == [True, None, None, False]


class Functional(nn.Module):
    """LeNet written with functional calls, as torch.fx traces it."""

    def __init__(self, reference: nn.Sequential, reshape: str):
        super().__init__()
        self.conv1, self.conv2, self.conv3 = reference[0], reference[3], reference[6]
        self.fc1, self.fc2 = reference[9], reference[11]
        self.reshape = reshape

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = torch.relu(self.conv2(x))
        x = nn.functional.max_pool2d(x, kernel_size=2, stride=2)
        x = self.conv3(x).relu()
        if self.reshape == "view":
            x = x.view(x.size(0), -1)
        elif self.reshape == "shape":
            x = x.reshape(x.shape[0], -1)
        elif self.reshape == "features":
            x = x.view(-1, 800)
        else:
            x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


@pytest.mark.parametrize("reshape", ["view", "shape", "features", "flatten"])
def test_traced_functional_model_equals_sequential(reshape):
    sequential = models.build("lenet")
    x = _randn(8, 1, 44, 44)
    expected = quantize_model(sequential, x)
    traced = quantize_model(Functional(sequential, reshape), x)
    assert len(traced.layers) == len(expected.layers)
    for a, b in zip(traced.layers, expected.layers):
        assert type(a) is type(b)
        for f in dataclasses.fields(a):
            if f.name != "name":
                va, vb = getattr(a, f.name), getattr(b, f.name)
                if isinstance(va, np.ndarray):
                    assert np.array_equal(va, vb), (a.name, f.name)
                elif f.name == "requant":
                    assert np.array_equal(va.multiplier, vb.multiplier) and va.clamp_min == vb.clamp_min
                else:
                    assert va == vb, (a.name, f.name)


def test_layer_names_and_model_name():
    model = models.build("mlp")
    x = _randn(32, 64)
    quantized = quantize_model(model, x, name="mlp")
    assert [l.name for l in quantized.layers] == ["0.Linear", "2.Linear"]
    assert quantized.name == "mlp" and quantized.input_shape == (64,)


def test_dropout_and_identity_are_no_ops():
    model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.5), nn.Identity(), nn.ReLU())
    quantized = quantize_model(model, _randn(8, 4))
    assert len(quantized.layers) == 1 and _relu_fused(quantized.layers[0])
    assert [op.relu for op in float_ops(model)] == [True]


def test_calibration_batches_are_observed_together():
    model = models.build("mlp")
    x = _randn(64, 64)
    whole = quantize_model(model, x, batch_size=64)
    pieces = quantize_model(model, iter(x.split(10)), input_shape=(64,))
    assert whole.input_quant == pieces.input_quant
    assert [l.output_quant for l in whole.weighted_layers] == [l.output_quant for l in pieces.weighted_layers]


# -- error messages -------------------------------------------------------------------------------

class Sigmoid(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


class SigmoidMethod(Sigmoid):
    def forward(self, x):
        return self.fc(x).sigmoid()


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return x + self.fc(x)


class Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        self.a(x)
        return self.b(x)


class DataDependent(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


class TwoInputs(nn.Module):
    def forward(self, x, y):
        return x


class Flat0(nn.Module):
    def forward(self, x):
        return torch.flatten(x)


class ViewBad(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), 2, -1)


def _no_stats():
    bn = nn.BatchNorm2d(2, track_running_stats=False)
    return nn.Sequential(nn.Conv2d(1, 2, 3), bn)


@pytest.mark.parametrize("model, shape, error, message", [
    (nn.Sequential(nn.Linear(4, 4), nn.Sigmoid()), (4,), TypeError,
     r"^module '1' \(Sigmoid\) is not supported; supported by the float front end: modules "
     r"AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, Dropout, Flatten, Hardtanh, "
     r"Identity, Linear, MaxPool2d, ReLU, ReLU6; functions .*torch\.flatten.*; "
     r"tensor methods add, add_, flatten, mean, relu, relu_, reshape, view$"),
    (nn.Sequential(nn.Conv2d(1, 1, 3), nn.BatchNorm1d(1)), (1, 5, 5), ValueError,
     r"^module '1' \(BatchNorm1d\) must directly follow a Linear to be folded into it$"),
    (nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(4)), (4,), ValueError,
     r"^module '1' \(BatchNorm1d\): BatchNorm1d has 4 features but the Linear before it has 3 outputs$"),
    (Sigmoid(), (4,), TypeError, r"^function 'sigmoid' \(torch\.sigmoid\) is not supported; "),
    (SigmoidMethod(), (4,), TypeError, r"^method 'sigmoid' \(Tensor\.sigmoid\) is not supported; "),
    (Residual(), (5,), ValueError, r"^module 'fc' \(Linear\): expects 4 input features, not 5 "),
    (Branch(), (4,), ValueError,
     r"^module 'a' \(Linear\): its output is never read \(only the last layer's output is the model's\)$"),
    (DataDependent(), (4,), TypeError, r"^cannot trace DataDependent with torch\.fx \(TraceError: "),
    (TwoInputs(), (4,), TypeError, r"^the model's forward must take exactly one tensor, not 2 \(x, y\)$"),
    (nn.Sequential(nn.Conv2d(1, 1, 3, padding=1, padding_mode="reflect")), (1, 5, 5), ValueError,
     r"^module '0' \(Conv2d\): padding mode must be 'zeros', not 'reflect'$"),
    (nn.Sequential(nn.Conv2d(1, 1, 3, dilation=2)), (1, 9, 9), ValueError,
     r"^module '0' \(Conv2d\): dilation must be 1, not \(2, 2\)$"),
    (nn.Sequential(nn.Conv2d(1, 1, 2, padding="same")), (1, 9, 9), ValueError,
     r"^module '0' \(Conv2d\): padding='same' with an even kernel \(2, 2\) pads asymmetrically, "
     r"which is not supported$"),
    (nn.Sequential(nn.Conv2d(1, 1, 3), nn.MaxPool2d(2, ceil_mode=True)), (1, 9, 9), ValueError,
     r"^module '1' \(MaxPool2d\): ceil_mode must be False$"),
    (nn.Sequential(nn.Conv2d(1, 1, 3), nn.MaxPool2d(2, dilation=2)), (1, 9, 9), ValueError,
     r"^module '1' \(MaxPool2d\): dilation must be 1, not 2$"),
    (nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.BatchNorm2d(2)), (1, 5, 5), ValueError,
     r"^module '2' \(BatchNorm2d\) must directly follow a Conv2d to be folded into it$"),
    (nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(3)), (1, 5, 5), ValueError,
     r"^module '1' \(BatchNorm2d\): BatchNorm2d has 3 features but the Conv2d before it has 2 outputs$"),
    (_no_stats(), (1, 5, 5), ValueError,
     r"^module '1' \(BatchNorm2d\): needs running statistics to be folded \(track_running_stats=True\)$"),
    (nn.Sequential(nn.ReLU(), nn.Linear(4, 4)), (4,), ValueError,
     r"^module '0' \(ReLU\) has no Conv2d, Linear or add before it to fuse into "
     r"\(only MaxPool2d and Flatten may stand between them\)$"),
    (nn.Sequential(nn.Flatten(0)), (4,), ValueError,
     r"^module '0' \(Flatten\): only Flatten\(start_dim=1, end_dim=-1\) is supported, not start_dim=0, end_dim=-1$"),
    (Flat0(), (2, 2), ValueError,
     r"^function 'flatten' \(torch\.flatten\): only flattening from dimension 1 to -1 \(all but the batch\) "
     r"is supported, not start_dim=0, end_dim=-1$"),
    (ViewBad(), (2, 2), ValueError,
     r"^method 'view' \(Tensor\.view\): only a view to \(batch, features\) is supported"),
    (models.build("lenet"), (1, 28, 28), ValueError,
     r"^module '6' \(Conv2d\): a 5x5 kernel does not fit its 4x4 input \(padding 0, 0\); the model's input "
     r"is too small for this layer \(shapes from the model input: 1x28x28 -> 10x24x24 -> 10x12x12 -> "
     r"20x8x8 -> 20x4x4\)$"),
    (models.build("lenet"), (1, 48, 48), ValueError,
     r"^module '9' \(Linear\): expects 800 input features, not 1250 \(the input shape of the model does not "
     r"match this layer\) \(shapes from the model input: .* -> 50x5x5 -> 1250\)$"),
    (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(2, 2)), (1, 5, 5), ValueError,
     r"^module '1' \(Linear\): a Linear layer needs a flat \(features,\) input, not shape \(2, 3, 3\); "
     r"flatten before it"),
    (nn.Sequential(nn.Conv2d(3, 2, 3)), (1, 5, 5), ValueError,
     r"^module '0' \(Conv2d\): expects 3 input channels, not 1 "),
    (nn.Sequential(nn.Linear(64, 10)), (8, 8), ValueError,
     r"^module '0' \(Linear\): a Linear layer needs a flat \(features,\) input, not shape \(8, 8\)"),
])
def test_errors_name_the_layer(model, shape, error, message):
    with pytest.raises(error, match=message):
        quantize_model(model, _randn(2, *shape))


def test_errors_on_calibration_data():
    with pytest.raises(ValueError, match=r"^calibration must be a batch \[B, \*input_shape\], not shape \(4,\)$"):
        quantize_model(models.build("mlp"), _randn(4))
    with pytest.raises(ValueError, match=r"^input_shape is needed when calibration is not a tensor$"):
        quantize_model(models.build("mlp"), [_randn(4, 64)])
    with pytest.raises(ValueError, match=r"^calibration data is empty$"):
        quantize_model(models.build("mlp"), [], input_shape=(64,))
    with pytest.raises(TypeError, match=r"^model must be a torch\.nn\.Module, not function$"):
        quantize_model(lambda x: x, _randn(2, 4))


@pytest.mark.parametrize("where, message", [
    ("calibration", r"^calibration data is not finite: samples 0 to 7 hold NaN or inf$"),
    ("weight", r"^0\.Linear: its weights are not finite \(NaN or inf\)$"),
    ("bias", r"^0\.Linear: its bias is not finite \(NaN or inf\)$"),
    ("overflow", r"^0\.Linear: its output on the calibration data is not finite \(NaN or inf\)$"),
])
def test_non_finite_values_are_named(where, message):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = _randn(8, 4)
    with torch.no_grad():
        if where == "calibration":
            x[2, 1] = float("nan")
        elif where == "weight":
            model[0].weight[0, 0] = float("inf")
        elif where == "bias":
            model[0].bias[1] = float("nan")
        else:
            model[0].weight.fill_(3e38)
            x = x.abs() + 1
    with pytest.raises(ValueError, match=message):
        quantize_model(model, x)


def test_relu6_and_hardtanh_fuse_as_clamps():
    """ReLU6, Hardtanh and their functions clamp the weighted layer before them, through
    max-pooling and flattening; two clamps intersect; Dropout and Identity vanish."""
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(1, 2, 3), nn.Linear(8, 4)

        def forward(self, x):
            x = F.relu6(self.conv(x))
            x = F.max_pool2d(x, 2).flatten(1)
            return F.hardtanh(F.hardtanh(self.fc(x), -2.0, 3.0), min_val=-1.0, max_val=5.0)

    ops = float_ops(Functional())
    assert [(op.low, op.high) for op in ops if hasattr(op, "low")] == [(0.0, 6.0), (-1.0, 3.0)]
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(), nn.ReLU6(), nn.Identity(), nn.Hardtanh(-1, 2), nn.ReLU())
    assert [(op.low, op.high) for op in float_ops(model)] == [(0.0, 2.0)]


def test_clamp_errors_name_the_layer():
    with pytest.raises(ValueError, match=r"has no Conv2d, Linear or add before it to fuse into"):
        float_ops(nn.Sequential(nn.ReLU6(), nn.Linear(2, 2)))
    class Flat(nn.Module):                     # nn.Hardtanh itself refuses min_val >= max_val
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return F.hardtanh(self.fc(x), 1.0, 1.0)

    with pytest.raises(ValueError, match=r"min_val must be below max_val, not \[1.0, 1.0\]"):
        float_ops(Flat())
    with pytest.raises(ValueError, match=r"clamp to an empty range \[2.0, 1.0\]"):
        float_ops(nn.Sequential(nn.Linear(2, 2), nn.Hardtanh(-1.0, 1.0), nn.Hardtanh(2.0, 3.0)))


def test_conv1d_is_a_conv2d_of_height_one():
    """Conv1d (strided, padded, depthwise with padding='same') lowers to Conv2d layers over
    a (C, 1, L) input, and the integer model follows the float one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(3, 8, 5, stride=2, padding=2), nn.ReLU(),
                          nn.Conv1d(8, 8, 3, groups=8, padding="same"), nn.ReLU6(),
                          nn.Flatten(), nn.Linear(8 * 10, 4)).eval()
    x = torch.randn(64, 3, 20)
    quantized = quantize_model(model, x, name="c1d")
    assert quantized.input_shape == (3, 1, 20)
    convs = [layer for layer in quantized.layers if isinstance(layer, Conv2dLayer)]
    assert [(c.weight.shape, c.stride, c.padding, c.groups) for c in convs] == [
        ((8, 3, 1, 5), (1, 2), (0, 2), 1), ((8, 1, 1, 3), (1, 1), (0, 1), 8)]
    codes = sem.quantize_activation(x, quantized.input_quant.scale, quantized.input_quant.zero_point)
    out = run_integer_reference(quantized, codes.reshape(64, 3, 1, 20), device="cpu")
    q = quantized.output_quant
    error = (sem.dequantize_activation(out, q.scale, q.zero_point) - model(x).detach()).abs().max() / q.scale
    assert error < 4, f"{error:.2f} LSB"


def test_average_pooling_lowers_to_unit_depthwise_convolutions():
    """AvgPool2d, AdaptiveAvgPool2d(1), F.avg_pool2d and x.mean((2, 3)) become depthwise
    convolutions of unit weights at their input's scale and zero point."""
    class Pools(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.pool, self.gap, self.fc = nn.Conv2d(2, 4, 3, padding=1), nn.AvgPool2d(2), \
                nn.AdaptiveAvgPool2d(1), nn.Linear(4, 3)

        def forward(self, x):
            x = F.avg_pool2d(self.pool(F.relu(self.conv(x))), 3, stride=1, padding=1)
            return self.fc(self.gap(x).flatten(1) + x.mean((2, 3)))

    class Mean(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(2, 4, 3), nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(F.relu(self.conv(x)).mean((-2, -1)))

    torch.manual_seed(0)
    quantized = quantize_model(Mean().eval(), torch.randn(16, 2, 8, 8), name="mean")
    pool = quantized.layers[1]
    assert isinstance(pool, Conv2dLayer) and pool.groups == 4 and pool.kernel_size == (6, 6)
    assert (pool.weight == 1).all() and pool.input_quant == pool.output_quant
    assert isinstance(quantized.layers[2], FlattenLayer)
    ops = float_ops(Pools())        # a graph: two global poolings of one tensor, added
    assert [(type(op).__name__, op.inputs) for op in ops] == [
        ("WeightedOp", (-1,)), ("AvgPoolOp", (0,)), ("AvgPoolOp", (1,)), ("AvgPoolOp", (2,)), ("FlattenOp", (3,)),
        ("AvgPoolOp", (2,)), ("AddOp", (4, 5)), ("WeightedOp", (6,))]


@pytest.mark.parametrize("make, message", [
    (lambda: nn.AvgPool2d(2, ceil_mode=True), r"ceil_mode must be False"),
    (lambda: nn.AvgPool2d(3, padding=1, count_include_pad=False), r"count_include_pad must be True"),
    (lambda: nn.AvgPool2d(2, divisor_override=3), r"divisor_override is not supported"),
    (lambda: nn.AdaptiveAvgPool2d(2), r"only global average pooling \(output size 1\) is supported, not 2"),
])
def test_average_pooling_errors(make, message):
    with pytest.raises(ValueError, match=message):
        float_ops(nn.Sequential(nn.Conv2d(1, 1, 1), make()))


@pytest.mark.parametrize("kernel, padding", [(2, 0), (3, 1), (3, 0), (4, 0)])
def test_average_pooling_against_pytorchs_quantized_engine(kernel, padding):
    """Odd window areas: equal to torch.ao's quantized avg_pool2d code for code. Even areas:
    PyTorch rounds exact ties half to even where this design rounds them up, so the codes
    differ by one exactly on ties, and nowhere else (see integer_semantics.average_pool_weights)."""
    import torch.ao.nn.quantized.functional as qF
    from pytorch_ref.frontends.quantize import make_requantization
    from pytorch_ref.ir.quantized_model import QuantizedModel, QuantParams
    channels, size, q = 4, 12, QuantParams(0.05, -7)
    codes, scales = sem.average_pool_weights(channels, (kernel, kernel))
    layer = Conv2dLayer(name="avg", weight=codes, weight_bits=8, bias=np.zeros(channels, np.int32), input_quant=q,
                        output_quant=q, requant=make_requantization(q.scale, scales, q), stride=(kernel, kernel),
                        padding=(padding, padding), groups=channels)
    model = QuantizedModel(name="avg", input_shape=(channels, size, size), input_quant=q, layers=(layer,))
    x = torch.randint(-128, 128, (32, channels, size, size), generator=torch.Generator().manual_seed(kernel),
                      dtype=torch.int8)
    ours = run_integer_reference(model, x, device="cpu").numpy().astype(int)
    qx = torch._make_per_tensor_quantized_tensor((x.int() + 128).to(torch.uint8), q.scale, q.zero_point + 128)
    theirs = qF.avg_pool2d(qx, kernel, kernel, padding).int_repr().numpy().astype(int) - 128
    window_sums = torch.nn.functional.avg_pool2d((x.double() - q.zero_point), kernel, kernel, padding) * kernel ** 2
    ties = (window_sums.numpy() % kernel ** 2) == kernel ** 2 / 2
    if kernel % 2:
        assert not ties.any() and np.array_equal(ours, theirs)
    else:
        differ = ours != theirs
        assert ties.any() and differ.any() and not (differ & ~ties).any()
        assert ((ours - theirs)[differ] == 1).all() and (theirs[differ] % 2 == 0).all()   # up, where even stays
