"""Concatenation along channels: its semantics against PyTorch's quantized cat, the front
end's shared scales (inputs written in place), the lowering's copies and its error, and
the hardware exact against the integer reference on Verilator, Icarus and GHDL."""
import pytest
import torch
from torch import nn

from hdl.compiler.program import GemmOp, lower
from hdl.config import AcceleratorConfig
from pytorch_ref.frontends.float_model import quantize_model
from pytorch_ref.frontends.quantize import make_concat
from pytorch_ref.ir.quantized_model import ConcatLayer, QuantizedModel, QuantParams
from pytorch_ref.reference import run_layer
from sim.cases import make_case
from sim.report import op_kind

from test_accelerator import check_phase_cycles


class Inception(nn.Module):
    """Two concatenations: of two convolutions and a max-pool (the pool's output is copied,
    the convolutions write in place), and of a tensor that another layer also reads
    (copied) with a convolution of 5 channels (in place, the last input)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a, self.b, self.pool = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 3, padding=1), nn.MaxPool2d(3, 1, 1)
        self.c, self.d = nn.Conv2d(24, 8, 1), nn.Conv2d(8, 5, 3, padding=1)
        self.fc = nn.Linear(13 * 16, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = torch.cat([torch.relu(self.a(x)), self.b(x), self.pool(x)], dim=1)
        z = torch.relu(self.c(y))
        w = torch.cat((z, self.d(z)), 1)
        return self.fc(nn.functional.max_pool2d(w, 2).flatten(1))


def quantized_inception() -> QuantizedModel:
    torch.manual_seed(0)
    return quantize_model(Inception().eval(), torch.randn(64, 3, 8, 8), name="inception")


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_concat_equals_pytorch_quantized_cat():
    """Against ``torch.ops.quantized.cat`` on 200 random scale and zero-point triples:
    every code identical (measured)."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        qs = [QuantParams(float(torch.empty(1).uniform_(0.005, 0.1, generator=generator)),
                          int(torch.randint(-60, 60, (1,), generator=generator))) for _ in range(3)]
        layer = make_concat("cat", qs[:2], qs[2])
        xs = [torch.randint(-128, 128, (1, 8, 4, 4), generator=generator, dtype=torch.int8) for _ in range(2)]
        ours = run_layer(layer, *xs).to(torch.int64)
        # PyTorch's cat takes quint8: the same reals at codes and zero points 128 higher.
        qx = [torch._make_per_tensor_quantized_tensor((x.to(torch.int16) + 128).to(torch.uint8), q.scale,
                                                      q.zero_point + 128) for x, q in zip(xs, qs)]
        theirs = torch.ops.quantized.cat(qx, 1, qs[2].scale, qs[2].zero_point + 128).int_repr().to(torch.int64) - 128
        assert torch.equal(ours, theirs)


def test_an_input_at_the_output_scale_passes_unchanged():
    q = QuantParams(0.05, 3)
    layer = make_concat("cat", [q, QuantParams(0.1, 0)], q)
    codes = torch.arange(-128, 128, dtype=torch.int8).view(1, 256, 1, 1)
    assert torch.equal(run_layer(layer, codes, codes)[:, :256], codes)


def test_inputs_read_by_the_concatenation_alone_share_its_scale():
    quantized = quantized_inception()
    layers = {layer.name: layer for layer in quantized.layers}
    cat, cat_1 = layers["cat"], layers["cat_1"]
    assert isinstance(cat, ConcatLayer) and quantized.inputs[4] == (2, 3, 4)
    assert layers["a.Conv2d"].output_quant == layers["b.Conv2d"].output_quant == cat.output_quant
    assert cat.input_quants[2] == layers["stem.Conv2d"].output_quant != cat.output_quant    # the pool's
    assert layers["d.Conv2d"].output_quant == cat_1.output_quant != layers["c.Conv2d"].output_quant


@pytest.mark.parametrize("rows, cols, copies", [(8, 8, ["cat.2", "cat_1.0"]), (4, 4, ["cat.2", "cat_1.0"])])
def test_producers_write_in_place_and_the_rest_is_copied(rows, cols, copies):
    model = quantized_inception()
    program = lower(model, AcceleratorConfig(rows=rows, cols=cols))
    names = [op.name for op in program.ops]
    assert [name for name in names if name.startswith("cat")] == copies
    ops = {op.name: op for op in program.ops}
    # a and b write the first two words of each pixel of the joined tensor, the copy the third.
    assert ops["b.Conv2d"].dest.base == ops["a.Conv2d"].dest.base + 8 // program.config.bank_width
    assert ops[copies[0]].dest.base == ops["a.Conv2d"].dest.base + 16 // program.config.bank_width
    assert all(isinstance(ops[name], GemmOp) for name in copies)
    assert [ops[name].diagonal for name in copies] == [cols < 8] * 2         # 8 channels: two tiles on 4x4
    layers = {layer.name: layer for layer in model.layers}
    assert [op_kind(ops[name], layers) for name in copies] == ["concat", "concat"]


def test_unaligned_channels_stop_with_the_reason():
    with pytest.raises(ValueError, match=r"^cat: joins tensors of 8, 8, 8 channels; on a 3x5 array every input but "
                                         r"the last needs a multiple of 15 channels"):
        lower(quantized_inception(), AcceleratorConfig(rows=3, cols=5))


class _BadCat(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim, self.conv = dim, nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return torch.cat([self.conv(x), x], dim=self.dim)


@pytest.mark.parametrize("dim, message", [
    (2, r"function 'cat' \(torch.cat\): only a concatenation along channels \(dim 1\) is supported, not dim 2"),
    (-3, None)])
def test_front_end_accepts_channels_only(dim, message):
    if message is None:
        assert quantize_model(_BadCat(dim).eval(), torch.randn(8, 3, 4, 4)).output_shape == (6, 4, 4)
        return
    with pytest.raises(ValueError, match=message):
        quantize_model(_BadCat(dim).eval(), torch.randn(8, 3, 4, 4))


# (Verilator 8x8, 36 s: make test-all.)
@pytest.mark.parametrize("simulator, rows, cols", [pytest.param("verilator", 8, 8, marks=pytest.mark.slow),
                                                   ("icarus", 4, 8), ("ghdl", 4, 4)])
def test_concatenations_match_reference(simulator, rows, cols, simulate_case):
    inferences = 1 if simulator == "icarus" else 2          # Icarus: a few hundred cycles a second
    case = make_case(quantized_inception(), AcceleratorConfig(rows=rows, cols=cols),
                     torch.randn(inferences, 3, 8, 8, generator=torch.Generator().manual_seed(rows * cols)))
    report = simulate_case(case, simulator, seed=rows)
    check_phase_cycles(case, report)
