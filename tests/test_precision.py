"""Weight widths per layer: the semantics' ranges, the policy, the quantizer, the errors."""
import numpy as np
import pytest
import torch
from torch import nn
from torch.ao.quantization.observer import PerChannelMinMaxObserver

from pytorch_ref.frontends.float_model import quantize_model
from pytorch_ref.frontends.precision import parse_weight_bits, resolve_weight_bits
from pytorch_ref.frontends.quantize import quantize_weight
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import DenseLayer, QuantParams, Requantization
from pytorch_ref.ir.serialize import load_model, save_model
from pytorch_ref.zoo import models

LENET_LAYERS = [("0.Conv2d", "conv"), ("3.Conv2d", "conv"), ("6.Conv2d", "conv"), ("9.Linear", "dense"),
                ("11.Linear", "dense")]


@pytest.mark.parametrize("bits, low, high", [(2, -2, 1), (3, -4, 3), (4, -8, 7), (8, -128, 127)])
def test_weight_range_is_the_full_twos_complement_range(bits, low, high):
    assert sem.weight_range(bits) == (low, high)


@pytest.mark.parametrize("bits", [0, 1, 9, 4.0, True, "4"])
def test_check_weight_bits_names_the_layer(bits):
    with pytest.raises(ValueError, match=rf"^fc1: weight bits must be an integer in \[2, 8\], not {bits!r}$"):
        sem.check_weight_bits(bits, "fc1")


@pytest.mark.parametrize("bits", range(2, 9))
def test_quantized_weights_match_pytorch_quantization_and_use_the_range(bits):
    """Our scales are PyTorch's per-channel symmetric observer's over the same range, the
    extreme codes are used, and our codes are PyTorch's quantization except on exact ties:
    we round ``w / scale`` half to even, PyTorch multiplies by ``1 / scale`` first, which can
    tip a tie or a near one (the largest weight of a channel is always one: it maps to ``high + 0.5``)."""
    torch.manual_seed(bits)
    weight = torch.randn(6, 5, 3, 3)
    codes, scales = quantize_weight(weight, bits)
    low, high = sem.weight_range(bits)
    assert codes.dtype == np.int8 and low <= codes.min() and codes.max() <= high and np.abs(codes).max() >= high
    observer = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                        quant_min=low, quant_max=high)
    observer(weight)
    scale, zero_point = observer.calculate_qparams()
    assert np.array_equal(scales, scale.double().numpy())
    ratio = weight / scale.view(-1, 1, 1, 1)
    assert torch.equal(torch.from_numpy(codes), ratio.round().clamp(low, high).to(torch.int8))
    theirs = torch.quantize_per_channel(weight, scale.double(), zero_point, 0, torch.qint8).int_repr()
    ties = ((ratio - ratio.floor()) - 0.5).abs() < 1e-5          # ties up to float32 rounding
    differ = torch.from_numpy(codes) != theirs.clamp(low, high)
    assert not (differ & ~ties).any()


def test_policy_resolution_name_beats_kind_beats_all():
    assert resolve_weight_bits(None, LENET_LAYERS) == {name: 8 for name, _ in LENET_LAYERS}
    assert resolve_weight_bits(4, LENET_LAYERS) == {name: 4 for name, _ in LENET_LAYERS}
    assert resolve_weight_bits("dense=4", LENET_LAYERS) == {"0.Conv2d": 8, "3.Conv2d": 8, "6.Conv2d": 8,
                                                            "9.Linear": 4, "11.Linear": 4}
    assert resolve_weight_bits({"all": 4, "conv": 6, "9.Linear": 2, "0.Conv2d": 8}, LENET_LAYERS) == {
        "0.Conv2d": 8, "3.Conv2d": 6, "6.Conv2d": 6, "9.Linear": 2, "11.Linear": 4}
    assert parse_weight_bits(" dense = 3 , 0.Conv2d=5 ,") == {"dense": 3, "0.Conv2d": 5}


@pytest.mark.parametrize("spec, error, message", [
    ("9.Linear=0", ValueError, r"^9\.Linear: weight bits must be an integer in \[2, 8\], not 0$"),
    ("9.Linear=1", ValueError, r"^9\.Linear: weight bits must be an integer in \[2, 8\], not 1$"),
    ({"dense": 9}, ValueError, r"^dense: weight bits must be an integer in \[2, 8\], not 9$"),
    ("conv=four", ValueError, r"^conv: weight bits must be an integer in \[2, 8\], not 'four'$"),
    (9, ValueError, r"^all layers: weight bits must be an integer in \[2, 8\], not 9$"),
    ("fc9=4", ValueError, r"^weight bits name 'fc9', which is not a weighted layer of the model; its weighted "
                          r"layers are 0\.Conv2d, 3\.Conv2d, 6\.Conv2d, 9\.Linear, 11\.Linear, and the selectors "
                          r"are all, conv, dense$"),
    ("dense", ValueError, r"^weight bits must be 'layer=bits' items separated by commas, not 'dense'$"),
    ("dense=4,dense=2", ValueError, r"^weight bits give 'dense' twice$"),
    (True, TypeError, r"^weight bits must be an int, a string or a mapping, not True$"),
    ([4], TypeError, r"^weight bits must be an int, a string or a mapping, not list$"),
])
def test_bad_weight_bits_stop_with_a_clear_error(spec, error, message):
    with pytest.raises(error, match=message):
        resolve_weight_bits(spec, LENET_LAYERS)


def test_quantize_model_applies_the_policy_and_saves_it():
    model = models.build("lenet")
    x = torch.randn(16, 1, 44, 44, generator=torch.Generator().manual_seed(0))
    quantized = quantize_model(model, x, name="lenet", weight_bits="all=4,9.Linear=2,11.Linear=3")
    widths = {layer.name: layer.weight_bits for layer in quantized.weighted_layers}
    assert widths == {"0.Conv2d": 4, "3.Conv2d": 4, "6.Conv2d": 4, "9.Linear": 2, "11.Linear": 3}
    for layer in quantized.weighted_layers:
        low, high = sem.weight_range(layer.weight_bits)
        assert low <= layer.weight.min() and layer.weight.max() <= high <= np.abs(layer.weight).max(), layer.name
    with pytest.raises(ValueError, match=r"^weight bits name 'nope'"):
        quantize_model(model, x, weight_bits="nope=4")


def test_saved_widths_round_trip(tmp_path):
    model = quantize_model(models.build("mlp"), torch.randn(32, 64), name="mlp", weight_bits="0.Linear=3")
    save_model(model, tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert [layer.weight_bits for layer in loaded.weighted_layers] == [3, 8]
    assert all((a.weight == b.weight).all() for a, b in zip(loaded.weighted_layers, model.weighted_layers))


def test_layer_rejects_codes_outside_its_width():
    requant = Requantization(np.array([2 ** 30]), np.array([31]), 0, -128)
    common = dict(name="fc", bias=np.zeros(1, np.int32), input_quant=QuantParams(0.1, 0),
                  output_quant=QuantParams(0.1, 0), requant=requant)
    DenseLayer(weight=np.array([[-8, 7]], np.int8), weight_bits=4, **common)
    with pytest.raises(ValueError, match=r"^fc: 4-bit weights must be in \[-8, 7\], not \[-8, 8\]$"):
        DenseLayer(weight=np.array([[-8, 8]], np.int8), weight_bits=4, **common)
    with pytest.raises(ValueError, match=r"^fc: weight bits must be an integer in \[2, 8\], not 1$"):
        DenseLayer(weight=np.array([[0, 0]], np.int8), weight_bits=1, **common)
