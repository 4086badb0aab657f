"""The hardware requantizer against ``requantize_half_up``, exactly."""
import re

import numpy as np
import pytest
import torch

from amaranth.lib import data

from hdl.config import REQUANTIZER_MULTIPLIERS
from hdl.gateware.requantizer import Requantizer
from pytorch_ref.ir import integer_semantics as sem
from tests.amaranth_sim import run_testbench

# (acc, multiplier, shift, zero_point, clamp_min, clamp_max): ties, negatives, saturation.
VECTORS = [
    (5, 2 ** 30, 31, 0, -128, 127),            # 2.5 -> 3 (tie up)
    (-5, 2 ** 30, 31, 0, -128, 127),           # -2.5 -> -2 (tie up)
    (-7, 2 ** 30, 31, 0, -128, 127),           # -3.5 -> -3
    (7, 2 ** 30, 31, 0, -128, 127),            # 3.5 -> 4
    (1000, 2 ** 30, 1, 3, -128, 127),          # huge -> saturates at 127
    (-1000, 2 ** 30, 1, 3, -128, 127),         # -> saturates at -128
    (-50, 2 ** 30, 30, 10, 10, 127),           # fused ReLU: clamp at the zero point
    (2 ** 31 - 1, 2 ** 31 - 1, 62, -128, -128, 127),
    (-(2 ** 31), 2 ** 31 - 1, 62, 127, -128, 127),
    (123456, 1518500250, 40, -7, -128, 127),
]


@pytest.mark.parametrize("multipliers", REQUANTIZER_MULTIPLIERS)
def test_requantizer_matches_semantics(multipliers):
    lanes = 2
    rng = np.random.default_rng(7)
    vectors = list(VECTORS)
    for _ in range(60):
        vectors.append((int(rng.integers(-2 ** 31, 2 ** 31)), int(rng.integers(2 ** 30, 2 ** 31)),
                        int(rng.integers(1, 63)), int(rng.integers(-128, 128)), -128, 127))
    for _ in range(30):
        zp = int(rng.integers(-128, 128))
        vectors.append((int(rng.integers(-2 ** 20, 2 ** 20)), int(rng.integers(2 ** 30, 2 ** 31)),
                        int(rng.integers(20, 40)), zp, max(-128, zp), 127))
    _check_requantizer(vectors, 32, multipliers)


@pytest.mark.parametrize("multipliers", REQUANTIZER_MULTIPLIERS)
@pytest.mark.parametrize("acc_bits", [17, 18, 19, 21, 24, 40])
def test_requantizer_at_other_accumulator_widths(acc_bits, multipliers):
    """Accumulators that fit the DSP multiplier (17, 18 bits) and that do not (19 on: their
    top bits times the multiplier in logic), with their extreme values (int32's beyond 32 bits, the semantics' limit), and the
    largest shifts: a 17-bit accumulator's product is narrower than 2**(62-1), the
    rounding constant, which the hardware once truncated to 0."""
    rng = np.random.default_rng(acc_bits)
    low, high = -(2 ** (min(acc_bits, 32) - 1)), 2 ** (min(acc_bits, 32) - 1) - 1
    vectors = [(a, m, s, 0, -128, 127) for a in (low, high, -1, 0, 1) for m, s in ((2 ** 31 - 1, 62), (2 ** 30, 30))]
    for _ in range(60):
        vectors.append((int(rng.integers(low, high + 1)), int(rng.integers(2 ** 30, 2 ** 31)),
                        int(rng.integers(1, 63)), int(rng.integers(-128, 128)), -128, 127))
    _check_requantizer(vectors, acc_bits, multipliers)


@pytest.mark.parametrize("multipliers", REQUANTIZER_MULTIPLIERS)
def test_requantizer_clamps_at_the_edges_of_its_narrow_sum(multipliers):
    """The zero point and clamp work on the rounded value's low 9 bits when it fits them
    (its sign alone picks the clamp when not): values on either side of those edges, and of
    the clamps, with the extreme zero points. (Multiplier 2**30 and shift 30: the rounded
    value is the accumulator itself.)"""
    values = [-2 ** 20, -513, -512, -257, -256, -255, -129, -128, -1, 0, 127, 128, 254, 255, 256, 257, 511, 512, 2 ** 20]
    vectors = [(a, 2 ** 30, 30, z, lo, hi) for a in values for z in (-128, -1, 0, 127)
               for lo, hi in ((-128, 127), (-3, 5), (127, 127), (-128, -128))]
    _check_requantizer(vectors, 32, multipliers)


def _check_requantizer(vectors, acc_bits, multipliers):
    lanes = 2

    def lane_input(a):                   # lane 1 sees the negation (which int32 cannot hold for its minimum)
        return [a, -a if a > -(2 ** (min(acc_bits, 32) - 1)) else a]

    expected = [[int(sem.requantize_half_up(np.array([x]), np.array([m]), np.array([s]), z, lo, hi)[0])
                 for x in lane_input(a)] for a, m, s, z, lo, hi in vectors]
    dut = Requantizer(lanes, acc_bits, 8, data.StructLayout({"id": 8}), multipliers)

    async def bench(ctx):
        got = []
        for t in range(len(vectors) + Requantizer.LATENCY):
            if t < len(vectors):
                a, m, s, z, lo, hi = vectors[t]
                ctx.set(dut.i_valid, 1)
                ctx.set(dut.i_acc, lane_input(a))
                ctx.set(dut.i_params, {"multiplier": [m, m], "shift": [s, s], "zero_point": z,
                                       "clamp_min": lo, "clamp_max": hi})
                ctx.set(dut.i_tag, {"id": t % 256})
            else:
                ctx.set(dut.i_valid, 0)
            await ctx.tick()
            if ctx.get(dut.o_valid):
                got.append(([ctx.get(dut.o_data[lane]) for lane in range(lanes)], ctx.get(dut.o_tag.id)))
        assert [g[1] for g in got] == [t % 256 for t in range(len(vectors))]
        assert len(got) == len(expected)
        for index, ((values, _), want) in enumerate(zip(got, expected)):
            assert values == want, f"vector {index} {vectors[index]}: expected {want} (lanes 0, 1), got {values}"

    run_testbench(dut, bench)


def test_semantics_hand_checked_vectors():
    """The reference half of the pair above: hand-computed results."""
    results = [int(sem.requantize_half_up(torch.tensor([a]), torch.tensor([m]), torch.tensor([s]), z, lo, hi)[0])
               for a, m, s, z, lo, hi in VECTORS[:7]]
    assert results == [3, -2, -3, 4, 127, -128, 10]


@pytest.mark.parametrize("multipliers, extra_per_column", [("logic", 0), ("dsp", 1)])
def test_only_the_array_and_requantizer_multiply(multipliers, extra_per_column):
    """The DSP budget: Yosys maps each ``$mul`` cell to DSP blocks. There is one a PE, the
    requantizer's one a column unless it is in logic, and none elsewhere (window, output
    address and divide-by-constant products are adder trees). Each fits one 18x18
    multiplier: no operand is wider than 18 bits signed (17 unsigned)."""
    from amaranth.back import rtlil

    from hdl.config import AcceleratorConfig
    from hdl.gateware.top import NeuralNetworkAccelerator
    from sim.cases import random_case

    config = AcceleratorConfig(rows=3, cols=4, requantizer_multipliers=multipliers)   # 12-lane words: / 3
    case = random_case("lenet", config, count=1)
    text = rtlil.convert(NeuralNetworkAccelerator(case.program), name="top")
    assert text.count("cell $mul ") == config.pes + extra_per_column * config.cols
    for cell in text.split("cell $mul ")[1:]:
        params = dict(re.findall(r"parameter \\(A_SIGNED|B_SIGNED|A_WIDTH|B_WIDTH) (\d+)", cell.split("end")[0]))
        for side in "AB":
            bits = int(params[f"{side}_WIDTH"]) + (0 if int(params[f"{side}_SIGNED"]) else 1)
            assert bits <= 18, f"a multiplication of {params} does not fit one 18x18 DSP multiplier"
