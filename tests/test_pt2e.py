"""Importing models quantized with torchao's pt2e flow, agreement with PyTorch's own
execution of the converted graph, and one such model on the hardware."""
import numpy as np
import pytest
import torch
from torch import nn

import torchao  # noqa: F401  (pinned; a missing install fails here rather than skipping)

from hdl.config import AcceleratorConfig
from pytorch_ref.frontends.imported import compare_codes
from pytorch_ref.frontends.pt2e import from_pt2e, measure_pt2e_agreement, pt2e_codes, pt2e_quantize
from pytorch_ref.ir.quantized_model import Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer
from pytorch_ref.reference import run_layer
from pytorch_ref.zoo import data, models, train
from sim.cases import make_case

# torchao's deprecation notice of XNNPACKQuantizer, torch.export's notices.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning:torch.*")


def _zoo_model(name: str) -> nn.Module:
    """LeNet and the MLP untrained (seed 0: training is not what is measured here), the
    stem and depthwise blocks with their BatchNorm statistics."""
    return train.trained_model(name, log=lambda _: None) if name in ("stem", "dwsep") else models.build(name, seed=0)


def _layer_agreement(graph_module, quantized, x) -> list[dict]:
    """Each layer of the integer reference on PyTorch's own codes at its input, against
    PyTorch's codes at its output (XNNPACK quantizes after every layer)."""
    codes = pt2e_codes(graph_module, x)
    assert len(codes) == len(quantized.layers) + 1
    return [compare_codes(run_layer(layer, codes[i]), codes[i + 1]) for i, layer in enumerate(quantized.layers)]


# Measured with XNNPACKQuantizer (per-channel weights), on the held-out split, end to end:
# mlp 99.83% of output codes equal, lenet 97.64%, stem 99.90%, dwsep 99.78%; never more than
# one code apart; classes 100% equal. Layer by layer (each on PyTorch's own input codes):
# 99.86% to 100% equal (mlp 99.991 / 99.861, lenet's five weighted layers 99.987 to 100,
# stem 99.922, dwsep 99.883 / 99.932), every difference one code on a value within 0.005
# of a tie (PyTorch rounds its float32 result with the float bias; we round the bias to
# int32 first). LeNet's lower end-to-end figure is those one-code differences of its inner
# layers carried through its 800- and 500-wide dense layers.
END_TO_END_EQUAL = {"mlp": 0.995, "lenet": 0.97, "stem": 0.995, "dwsep": 0.995}
LAYER_EQUAL = 0.998


@pytest.mark.parametrize("name", list(END_TO_END_EQUAL))
def test_reference_reproduces_pt2e_execution(name):
    split = data.dataset(name)
    converted = pt2e_quantize(_zoo_model(name), split.x_train[:512])
    quantized = from_pt2e(converted, split.x_test, name=name)
    agreement = measure_pt2e_agreement(converted, quantized, split.x_test)
    assert agreement["equal"] >= END_TO_END_EQUAL[name], agreement
    assert agreement["max_difference"] <= 1, agreement
    if "same_class" in agreement:
        assert agreement["same_class"] >= 0.99, agreement
    for layer, figures in zip(quantized.layers, _layer_agreement(converted, quantized, split.x_test)):
        assert figures["equal"] >= LAYER_EQUAL and figures["max_difference"] <= 1, (layer.name, figures)


class SmallCNN(nn.Module):
    """ReLU after the pool, a view to (batch, -1): ReLU fused across the pool."""

    def __init__(self):
        super().__init__()
        self.conv, self.pool, self.fc = nn.Conv2d(1, 4, 3, padding=1), nn.MaxPool2d(2), nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.pool(self.conv(x)))
        return self.fc(x.view(x.size(0), -1))


def _small_cnn_case():
    torch.manual_seed(0)
    split = data.digits((1, 8, 8))
    converted = pt2e_quantize(SmallCNN().eval(), split.x_train)
    return split, converted, from_pt2e(converted, split.x_test, name="small")


def test_imported_structure_weights_and_relu():
    split, converted, quantized = _small_cnn_case()
    assert [type(l) for l in quantized.layers] == [Conv2dLayer, MaxPool2dLayer, FlattenLayer, DenseLayer]
    assert [l.name for l in quantized.layers] == ["conv.Conv2d", "pool.MaxPool2d", "view", "fc.Linear"]
    conv, fc = quantized.layers[0], quantized.layers[3]
    # XNNPACK: int8 activations taken as they are, symmetric weights in [-127, 127].
    codes = pt2e_codes(converted, split.x_test[:4])
    assert codes[0].dtype == torch.int8
    assert all(-127 <= int(l.weight.min()) and int(l.weight.max()) <= 127 for l in (conv, fc))
    assert conv.requant.clamp_min == max(-128, conv.output_quant.zero_point)         # the ReLU after the pool
    assert fc.requant.clamp_min == -128
    assert conv.stride == (1, 1) and conv.padding == (1, 1)
    weight = dict(converted.named_buffers())
    assert any(np.array_equal(conv.weight, w.numpy()) for w in weight.values() if w.dtype == torch.int8)
    agreement = measure_pt2e_agreement(converted, quantized, split.x_test)
    assert agreement["equal"] >= 0.99 and agreement["max_difference"] <= 1, agreement


def test_x86_quantizer_uint8_activations_shift_by_128():
    """X86InductorQuantizer: uint8 activations (codes and zero points move down by 128),
    weights in [-128, 127]. Measured on the stem: 99.91% of codes equal, max 1 apart."""
    split = data.dataset("stem")
    converted = pt2e_quantize(_zoo_model("stem"), split.x_train[:512], quantizer="x86")
    quantize = next(n for n in converted.graph.nodes if "quantize_per_tensor" in str(n.target))
    assert quantize.args[5] == torch.uint8
    quantized = from_pt2e(converted, split.x_test, name="stem")
    assert quantized.input_quant.zero_point == quantize.args[2] - 128
    agreement = measure_pt2e_agreement(converted, quantized, split.x_test)
    assert agreement["equal"] >= 0.995 and agreement["max_difference"] <= 1, agreement


@pytest.mark.parametrize("per_channel, fold", [(False, True), (True, False)],
                         ids=["per-tensor weights", "unfolded weight quantize"])
def test_per_tensor_and_unfolded_weights(per_channel, fold):
    """Per-tensor weight scales (one multiplier for all channels), and weights left as
    float constants behind quantize_per_channel (convert_pt2e(fold_quantize=False)).
    Measured: 99.45% / 99.14% of output codes equal, max one code apart."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64, 5)).eval()
    x = torch.randn(512, 2, 6, 6)
    exported = torch.export.export(model, (x[:2],), dynamic_shapes=({0: torch.export.Dim("batch")},)).module()
    prepared = prepare_pt2e(exported, XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=per_channel)))
    prepared(x)
    converted = convert_pt2e(prepared, fold_quantize=fold)
    quantized = from_pt2e(converted, x)
    assert (len(set(quantized.layers[0].requant.multiplier.tolist())) == 1) == (not per_channel)
    agreement = measure_pt2e_agreement(converted, quantized, x)
    assert agreement["equal"] >= 0.98 and agreement["max_difference"] <= 1, agreement


def test_errors_name_the_node():
    torch.manual_seed(0)
    x = torch.randn(16, 6)
    tanh = pt2e_quantize(nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 2)).eval(), x)
    with pytest.raises(ValueError, match=r"^function 'tanh' \(torch\.ops\.aten\.tanh\.default\) is not supported; "
                                         r"supported by the pt2e importer: functions .*torch\.ops\.aten\.conv2d\.default, "
                                         r".*torch\.ops\.aten\.linear\.default, .*"
                                         r"torch\.ops\.quantized_decomposed\.quantize_per_tensor\.default$"):
        from_pt2e(tanh, x)
    # X86 leaves the last Linear's output float: we have no float output.
    x86 = pt2e_quantize(nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2)).eval(), x, quantizer="x86")
    with pytest.raises(ValueError, match=r"^function 'linear_1' \(torch\.ops\.aten\.linear\.default\): the model's "
                                         r"output is float; it must be quantized"):
        from_pt2e(x86, x)
    with pytest.raises(TypeError, match=r"^expected the fx\.GraphModule that convert_pt2e returns, not Sequential$"):
        from_pt2e(nn.Sequential(nn.Linear(2, 2)), x)
    with pytest.raises(ValueError, match=r"^quantizer must be 'xnnpack' or 'x86', not 'arm'$"):
        pt2e_quantize(nn.Sequential(nn.Linear(6, 2)).eval(), x, quantizer="arm")


@pytest.mark.slow               # (make test runs the pt2e residual graph below on Verilator)
def test_pt2e_model_runs_exactly_on_verilator(simulate_case):
    """A pt2e model (XNNPACK) on a 4x4 array in Verilator: every output equal to the
    integer reference."""
    split, _, quantized = _small_cnn_case()
    case = make_case(quantized, AcceleratorConfig(rows=4, cols=4), split.x_test[:2])
    simulate_case(case, seed=5)


def _graph_models():
    from test_concat import Inception
    from test_residual import residual_model
    return {"residual": residual_model(), "inception": Inception().eval()}


# Measured end to end on 256 seeded inputs: residual 83.5% of codes equal, the rest within two
# codes (one-code differences of each of its seven layers and two adds, carried through),
# the same class on all; inception 96.7%, the rest one off.
@pytest.mark.parametrize("name, equal", [("residual", 0.8),
                                         pytest.param("inception", 0.95, marks=pytest.mark.slow)])
def test_graphs_import_with_adds_and_concatenations(name, equal, simulate_case):
    """XNNPACK quantizes residual adds and concatenations; they import as AddLayer and
    ConcatLayer in a graph, agree with PyTorch's execution within a code, and run exactly
    on Verilator."""
    torch.manual_seed(0)
    calibration = torch.randn(128, 3, 8, 8)
    converted = pt2e_quantize(_graph_models()[name], calibration)
    quantized = from_pt2e(converted, calibration, name=name)
    kinds = {type(layer).__name__ for layer in quantized.layers}
    assert ("AddLayer" if name == "residual" else "ConcatLayer") in kinds and quantized.inputs is not None
    agreement = measure_pt2e_agreement(converted, quantized, torch.randn(256, 3, 8, 8))
    assert agreement["equal"] >= equal and agreement["max_difference"] <= 2, agreement
    assert agreement["same_class"] >= 0.99, agreement
    case = make_case(quantized, AcceleratorConfig(rows=8, cols=8), torch.randn(1, 3, 8, 8))
    simulate_case(case, seed=3)
