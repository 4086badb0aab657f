"""Processing element and systolic array on Amaranth's simulator, against NumPy."""
import numpy as np
import pytest

from hdl.gateware.pe import ProcessingElement
from hdl.gateware.systolic_array import SystolicArray
from tests.amaranth_sim import run_testbench


def test_pe_multiplies_and_accumulates_extremes():
    pe = ProcessingElement(8, 32)
    # (x, weight, the partial sum its product meets): both ends of int32.
    cases = [(-128, -128, 2 ** 31 - 1 - 16384), (127, -128, -(2 ** 31) + 16256), (-1, 1, 123), (0, 77, 5), (-128, 127, 0)]
    ahead = ProcessingElement.LATENCY - 1     # the product of cycle t meets the partial sum of t + ahead

    async def bench(ctx):
        for t in range(len(cases) + ahead):
            x, w, _ = cases[t] if t < len(cases) else (0, 0, 0)
            ctx.set(pe.x_in, x)
            ctx.set(pe.weight, w)
            met = cases[t - ahead] if t >= ahead else None
            ctx.set(pe.psum_in, met[2] if met else 0)
            await ctx.tick()
            assert ctx.get(pe.x_out) == x
            if met:
                assert ctx.get(pe.psum_out) == met[2] + met[0] * met[1]

    run_testbench(pe, bench)


@pytest.mark.parametrize("rows, cols", [(1, 1), (4, 4), (3, 5), (8, 8)])
def test_array_computes_skewed_matrix_products(rows, cols):
    """Vectors enter every cycle with a weight tile that changes every cycle (the
    batch-1 dense case); each output vector must equal x @ W of its own tile."""
    rng = np.random.default_rng(rows * 100 + cols)
    count = 12
    xs = rng.integers(-128, 128, size=(count, rows))
    ws = rng.integers(-127, 128, size=(count, rows, cols))
    array = SystolicArray(rows, cols)
    latency = array.latency

    async def bench(ctx):
        outputs = []
        for t in range(count + latency + rows + cols):
            if t < count:
                ctx.set(array.x, [int(v) for v in xs[t]])
            # PE (r, c) works on the vector that entered r + c cycles ago.
            weights = [[int(ws[t - r - c][r, c]) if 0 <= t - r - c < count else 0 for c in range(cols)]
                       for r in range(rows)]
            ctx.set(array.weights, weights)
            if t >= latency and t - latency < count:
                outputs.append([ctx.get(array.y[c]) for c in range(cols)])
            await ctx.tick()
        for t, out in enumerate(outputs):
            expected = (xs[t][:, None] * ws[t]).sum(axis=0)
            assert out == expected.tolist(), f"vector {t}"

    run_testbench(array, bench)
