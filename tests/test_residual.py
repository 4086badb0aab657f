"""Residual graphs: the add's integer semantics against PyTorch's quantized add, the graph
IR and front end (with their errors), the lowering's lifetime allocation, and the hardware
exact against the integer reference on Verilator, Icarus and GHDL, ResNet-8 included."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from hdl.compiler.program import _Lowering
from hdl.config import AcceleratorConfig
from pytorch_ref.frontends.float_model import float_ops, quantize_model
from pytorch_ref.frontends.quantize import make_add
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import AddLayer, QuantizedModel, QuantParams
from pytorch_ref.reference import run_integer_reference, run_layer
from pytorch_ref.zoo.models import ResidualBlock
from sim.cases import make_case, random_case

from test_accelerator import check_phase_cycles


def residual_model(seed: int = 0) -> nn.Module:
    """A stem, an identity block and a downsampling block (1x1 shortcut), a classifier."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          ResidualBlock(8, 8), ResidualBlock(8, 16, stride=2), nn.Flatten(), nn.Linear(256, 10))
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def quantized_residual(seed: int = 0) -> QuantizedModel:
    return quantize_model(residual_model(seed), torch.randn(64, 3, 8, 8), name="residual")


# -- semantics ---------------------------------------------------------------------------

@pytest.mark.parametrize("ratio", [1.0, 0.5, 1 / 3, 0.0123, 0.9999, 2.5, 77.0, 1e-4])
def test_add_weights_approximate_the_ratio_of_scales(ratio):
    scale_a, scale_b, scale_out = 0.02 * ratio, 0.02, 0.03
    w_a, w_b, real = sem.add_weights(scale_a, scale_b, scale_out)
    assert all(isinstance(w, int) and 1 <= w <= sem.ADD_WEIGHT_MAX for w in (w_a, w_b))
    big, small = max(scale_a, scale_b), min(scale_a, scale_b)
    w_big, w_small = (w_a, w_b) if scale_a >= scale_b else (w_b, w_a)
    assert w_big >= w_small
    assert math.isclose(real * w_big * scale_out, big, rel_tol=1e-12)     # exact for the larger scale
    if small / big >= 1 / sem.ADD_WEIGHT_MAX:
        assert abs(w_small / w_big - small / big) <= 0.5 / sem.ADD_WEIGHT_MAX
    else:
        assert w_small == 1


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_add_weights_reject_bad_scales(bad):
    with pytest.raises(ValueError, match="input b scale of an add must be a positive finite number"):
        sem.add_weights(0.1, bad, 0.1)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_add_agrees_with_pytorch_quantized_add():
    """Against ``torch.ops.quantized.add`` (float sum, round half to even) on 200 random
    scale and zero-point triples: measured 99.2% of codes identical, the rest off by one."""
    generator = torch.Generator().manual_seed(0)
    total = same = worst = 0
    for _ in range(200):
        scales = [float(torch.empty(1).uniform_(0.005, 0.1, generator=generator)) for _ in range(3)]
        zero_points = [int(z) for z in torch.randint(-60, 60, (3,), generator=generator)]
        a_q, b_q, out_q = (QuantParams(s, z) for s, z in zip(scales, zero_points))
        layer = make_add("add", a_q, b_q, out_q)
        a, b = (torch.randint(-128, 128, (1, 8, 16, 16), generator=generator, dtype=torch.int8) for _ in range(2))
        ours = run_layer(layer, a, b).to(torch.int64)
        # PyTorch's add takes quint8: the same reals at codes and zero points 128 higher.
        qa, qb = (torch._make_per_tensor_quantized_tensor((x.to(torch.int16) + 128).to(torch.uint8), q.scale,
                                                          q.zero_point + 128) for x, q in ((a, a_q), (b, b_q)))
        theirs = torch.ops.quantized.add(qa, qb, out_q.scale, out_q.zero_point + 128).int_repr().to(torch.int64) - 128
        difference = (ours - theirs).abs()
        total, same = total + difference.numel(), same + int((difference == 0).sum())
        worst = max(worst, int(difference.max()))
    assert worst <= 1
    assert same / total >= 0.99, same / total


def test_add_clamps_a_fused_relu_and_saturates():
    q = QuantParams(0.1, -5)
    layer = make_add("add", q, q, QuantParams(0.1, -20), low=0.0)
    assert layer.weights == (127, 127) and layer.requant.clamp_min == -20
    a = torch.tensor([[-128, -5, 0, 127]], dtype=torch.int8)
    # Reals -12.3, 0, 0.5, 13.2 doubled: clamped at 0 (code -20), then 1.0, then saturated.
    assert run_layer(layer, a, a).tolist() == [[-20, -20, -10, 127]]


# -- IR and front end -----------------------------------------------------------------

def test_graph_model_records_what_each_layer_reads():
    quantized = quantized_residual()
    names = [layer.name for layer in quantized.layers]
    assert names == ["0.Conv2d", "3.conv1.Conv2d", "3.conv2.Conv2d", "add", "4.conv1.Conv2d", "4.conv2.Conv2d",
                     "4.shortcut.Conv2d", "add_1", "5.Flatten", "6.Linear"]
    assert quantized.inputs == ((0,), (1,), (2,), (1, 3), (4,), (5,), (4,), (7, 6), (8,), (9,))
    adds = [op for op in float_ops(residual_model()) if type(op).__name__ == "AddOp"]
    assert [(op.low, op.high) for op in adds] == [(0.0, None), (0.0, None)]     # the ReLU after each add
    # The reference against the float model: every logit within 10% of the output's range
    # (measured: 4%, the int8 rounding of seven layers; a wrong wiring is far off).
    x = torch.randn(32, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    codes = sem.quantize_activation(x, quantized.input_quant.scale, quantized.input_quant.zero_point)
    out = run_integer_reference(quantized, codes, device="cpu")
    q = quantized.output_quant
    error = (sem.dequantize_activation(out, q.scale, q.zero_point) - residual_model()(x)).abs().max()
    assert error <= 0.1 * 255 * q.scale, (error, q.scale)


@pytest.mark.parametrize("inputs, message", [
    (((0,), (1, 0)), r"add: adds tensors of one shape, not \(8, 4, 4\) and \(3, 4, 4\)"),
    (((0,), (1,)), "add: reads 2 tensors, not 1"),
    (((0,), (1, 2)), r"add: reads tensors \(1, 2\), but only tensors 0 \(the input\) to 1 exist before it"),
    (((0,), (1, 1), (0,)), "inputs must list the tensors of each of the 2 layers, not of 3"),
])
def test_graph_ir_rejects_bad_inputs(inputs, message):
    conv = quantize_model(nn.Sequential(nn.Conv2d(3, 8, 1)), torch.randn(8, 3, 4, 4)).layers[0]
    q = conv.output_quant
    add = make_add("add", q, q, q)
    with pytest.raises(ValueError, match=message):
        QuantizedModel("bad", (3, 4, 4), conv.input_quant, (conv, add), inputs=inputs)


def test_graph_ir_rejects_an_output_nobody_reads():
    conv = quantize_model(nn.Sequential(nn.Conv2d(3, 3, 1)), torch.randn(8, 3, 4, 4)).layers[0]
    with pytest.raises(ValueError, match=r"the outputs of 0.Conv2d are never read"):
        QuantizedModel("bad", (3, 4, 4), conv.input_quant, (conv, conv), inputs=((0,), (0,)))


class _ReadTwice(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.what, self.conv, self.bn = what, nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)

    def forward(self, x):
        y = self.conv(x)
        if self.what == "batchnorm":
            return self.bn(y) + y
        if self.what == "relu":
            return torch.relu(y) + y
        if self.what == "constant":
            return y + 1
        if self.what == "alpha":
            return torch.add(y, x, alpha=2)
        return y + x.mean((2, 3), keepdim=True)


@pytest.mark.parametrize("what, message", [
    ("batchnorm", r"module 'bn' \(BatchNorm2d\) cannot be folded into module 'conv' \(Conv2d\): its output is "
                  r"also read by another layer"),
    ("relu", r"function 'relu' \(torch.relu\) cannot be fused into module 'conv' \(Conv2d\): a tensor between "
             r"them is also read by another layer"),
    ("constant", r"function 'add' \(operator.add\): only the sum of two tensors is supported, not of conv, 1"),
    ("alpha", r"function 'add' \(torch.add\): only a plain sum of two tensors is supported, not alpha=2"),
    ("broadcast", r"function 'add' \(operator.add\): adds tensors of shapes \(3, 4, 4\) and \(3, 1, 1\)"),
])
def test_front_end_explains_what_a_graph_cannot_do(what, message):
    with pytest.raises(ValueError, match=message):
        quantize_model(_ReadTwice(what).eval(), torch.randn(8, 3, 4, 4))


def test_front_end_follows_identity_shortcuts():
    ops = float_ops(residual_model())
    assert [(type(op).__name__, op.inputs) for op in ops][:4] == [
        ("WeightedOp", (-1,)), ("WeightedOp", (0,)), ("WeightedOp", (1,)), ("AddOp", (0, 2))]


# -- lowering ---------------------------------------------------------------------------

def test_lifetime_allocation_keeps_live_tensors_apart():
    """ResNet-8 at 8x8: no two tensors alive at once share a word, and each add's inputs
    lie a whole number of pixels apart (its view's rows)."""
    model = random_case("resnet8", AcceleratorConfig(rows=8, cols=8), count=1).model
    lowering = _Lowering(model, AcceleratorConfig(rows=8, cols=8), 1, True)
    placed = lowering.allocate()
    end = len(model.layers)
    life = {t: (t - 1, end if t == lowering.stored(end) else max(lowering.consumers(t))) for t in placed}
    for t, a in placed.items():
        for u, b in placed.items():
            if t < u and not (life[t][1] < life[u][0] or life[u][1] < life[t][0]):
                assert a.base + a.words <= b.base or b.base + b.words <= a.base, (t, u, a, b)
    for layer, reads in zip(model.layers, model.layer_inputs):
        if isinstance(layer, AddLayer):
            a, b = (placed[lowering.stored(t)] for t in reads)
            assert (b.base - a.base) % a.words_per_pixel == 0
    # Lifetimes save memory here: ping-pong would need the two largest tensors twice over.
    assert max(p.base + p.words for p in placed.values()) == 7304


# -- hardware ---------------------------------------------------------------------------

# (GHDL, 70 s: make test-all; make test runs the VHDL of concatenations and taps-on-rows.)
@pytest.mark.parametrize("simulator, rows, cols, batch", [
    ("verilator", 4, 8, 2), ("icarus", 3, 5, 1), pytest.param("ghdl", 4, 4, 1, marks=pytest.mark.slow)])
def test_residual_graph_matches_reference(simulator, rows, cols, batch, simulate_case):
    quantized = quantized_residual()
    inferences = 1 if simulator == "icarus" else 2          # Icarus: a few hundred cycles a second
    inputs = torch.randn(inferences * batch, 3, 8, 8, generator=torch.Generator().manual_seed(rows + cols))
    case = make_case(quantized, AcceleratorConfig(rows=rows, cols=cols), inputs, batch)
    report = simulate_case(case, simulator, seed=rows)
    check_phase_cycles(case, report)


# MLPerf Tiny's ResNet-8 (12.5M MACs) with seeded random weights: 205,200 cycles on 8x8,
# 95.7% of the array; Icarus and GHDL take minutes for it, Verilator 100 s (make test-all;
# make test runs residual adds in the graph above on all three simulators).
@pytest.mark.slow
@pytest.mark.parametrize("simulator", ["verilator", "icarus", "ghdl"])
def test_mlperf_tiny_resnet8_matches_reference(simulator, simulate_case):
    config = AcceleratorConfig(rows=8, cols=8)
    case = random_case("resnet8", config, count=1, seed=2)
    assert sum(isinstance(layer, AddLayer) for layer in case.model.layers) == 3
    report = simulate_case(case, simulator, seed=2, gap_probability=0.0, stall_probability=0.0)
    check_phase_cycles(case, report)
    cycles = report.results[0]["cycles"]
    macs = sum(case.model.macs())
    print(f"resnet8 8x8: {cycles} cycles, utilization {macs / (config.pes * cycles):.1%}")
    assert cycles <= 205_200 * 1.02, cycles
