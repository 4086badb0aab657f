"""Importing models quantized by PyTorch's eager mode, and agreement with PyTorch's own engines."""
import pytest
import torch
from torch import nn

from pytorch_ref.zoo import data, models, train
from pytorch_ref.ir.quantized_model import Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer
from pytorch_ref.frontends.torch_ao import import_torch_ao, measure_agreement, torch_ao_codes, torch_ao_quantize

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")     # torch.ao's own deprecation notices

ENGINES = [e for e in ("fbgemm", "qnnpack") if e in torch.backends.quantized.supported_engines]


@pytest.fixture(autouse=True)
def _restore_engine():
    engine = torch.backends.quantized.engine
    yield
    torch.backends.quantized.engine = engine


def _check_agreement(agreement: dict):
    """The acceptance bar: >= 99% of output codes equal, all within one code, >= 99%
    of predicted classes equal."""
    assert agreement["equal"] >= 0.99, agreement
    assert agreement["within_one"] == 1.0, agreement
    assert agreement["max_difference"] <= 1, agreement
    if "same_class" in agreement:
        assert agreement["same_class"] >= 0.99, agreement


def _import_and_measure(name: str, engine: str) -> dict:
    model = train.trained_model(name, log=lambda _: None)
    split = data.dataset(name)
    converted = torch_ao_quantize(model, split.x_train, engine=engine)
    quantized = import_torch_ao(converted, models.INPUT_SHAPES[name], name=name)
    return measure_agreement(converted, quantized, split.x_test)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ["mlp", "lenet", "stem", "dwsep"])
def test_reference_reproduces_pytorch_engine(name, engine):
    """Measured (fbgemm / qnnpack), on the held-out split: mlp 99.92% / 100% equal codes,
    lenet 99.25% / 100%, stem 99.93% / 100%, dwsep 99.82% / 100%; never more than one
    code apart; predicted classes 100% equal."""
    _check_agreement(_import_and_measure(name, engine))


def test_imported_structure_and_code_offset():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 5))
    x = torch.rand(32, 1, 6, 6)
    converted = torch_ao_quantize(model, x)
    quantized = import_torch_ao(converted, (1, 6, 6), name="small")
    assert [type(l) for l in quantized.layers] == [Conv2dLayer, MaxPool2dLayer, FlattenLayer, DenseLayer]
    assert quantized.layers[0].name == "module.0.QuantizedConvReLU2d"
    # quint8 zero points move down by 128; scales stay.
    assert quantized.input_quant.zero_point == int(converted.quant.zero_point) - 128
    assert quantized.input_quant.scale == pytest.approx(float(converted.quant.scale))
    conv = converted.module[0]
    assert quantized.layers[0].output_quant.zero_point == conv.zero_point - 128
    assert quantized.layers[0].requant.clamp_min == max(-128, conv.zero_point - 128)     # fused ReLU
    assert (quantized.layers[0].weight == conv.weight().int_repr().numpy()).all()
    codes_in, codes_out = torch_ao_codes(converted, x)
    assert codes_in.dtype == codes_out.dtype == torch.int8
    _check_agreement(measure_agreement(converted, quantized, x))


def test_standalone_relu_after_pool_is_fused():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(12, 4))
    x = torch.randn(64, 2, 6, 6)
    converted = torch_ao_quantize(model, x)
    assert type(converted.module[2]) is nn.ReLU          # not fused by PyTorch: it follows the pool
    quantized = import_torch_ao(converted, (2, 6, 6))
    conv = quantized.layers[0]
    assert conv.requant.clamp_min == max(-128, conv.output_quant.zero_point)
    _check_agreement(measure_agreement(converted, quantized, x))


def test_weight_code_minus_128_imports_unchanged():
    """PyTorch's weights use the whole qint8 range; so do ours (8-bit weights)."""
    import torch.ao.nn.quantized as nnq
    torch.backends.quantized.engine = "fbgemm"
    linear = nnq.Linear(3, 2)
    scales = torch.tensor([0.01, 0.02], dtype=torch.float64)
    codes = torch.tensor([[-128.0, 5, 7], [127, -127, 0]])
    weight = torch.quantize_per_channel(codes * scales.view(-1, 1).float(), scales, torch.zeros(2, dtype=torch.int64),
                                        0, torch.qint8)
    linear.set_weight_bias(weight, None)
    model = nn.Sequential(nnq.Quantize(0.1, 128, torch.quint8), linear, nnq.DeQuantize())
    quantized = import_torch_ao(model, (3,))
    assert quantized.layers[0].weight_bits == 8
    assert (quantized.layers[0].weight == codes.to(torch.int8).numpy()).all()
    _check_agreement(measure_agreement(model, quantized, torch.randn(64, 3) * 10))


def test_pytorch_default_x86_qconfig_imports():
    """PyTorch's own default qconfig (histogram activations with reduce_range, per-channel
    weights in [-128, 127]) imports as it is. Measured on LeNet's held-out split: see the
    assertion; the weights do use -128."""
    import torch.ao.quantization as tq
    model = train.trained_model("lenet", log=lambda _: None)
    split = data.dataset("lenet")
    converted = torch_ao_quantize(model, split.x_train[:256], engine="x86", qconfig=tq.get_default_qconfig("x86"))
    quantized = import_torch_ao(converted, models.INPUT_SHAPES["lenet"], name="lenet")
    assert min(int(layer.weight.min()) for layer in quantized.weighted_layers) == -128
    _check_agreement(measure_agreement(converted, quantized, split.x_test))


class FloatInside(nn.Module):
    def __init__(self):
        super().__init__()
        import torch.ao.quantization as tq
        self.quant, self.fc, self.dequant = tq.QuantStub(), nn.Linear(3, 3), tq.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.fc(self.quant(x)))


def test_errors_name_the_module():
    with pytest.raises(TypeError, match=r"^module 'fc' \(Linear\) is not supported; supported by the "
                                        r"torch\.ao importer: modules DeQuantize, .*QuantizedConvReLU2d.*"):
        import_torch_ao(FloatInside(), (3,))
    with pytest.raises(ValueError, match=r"^module '0' \(Flatten\) comes before any Quantize: the model must start "
                                         r"with a QuantStub converted by torch\.ao\.quantization\.convert$"):
        import_torch_ao(nn.Sequential(nn.Flatten()), (2,))
    with pytest.raises(TypeError, match=r"^module '0' \(Linear\) is not supported; supported by the torch\.ao importer"):
        import_torch_ao(nn.Sequential(nn.Linear(2, 2)), (2,))
