"""Differential fuzzing of the whole pipeline (see :mod:`sim.fuzz`): random models and
configurations, quantized, run on the integer reference and on Verilator, compared
exactly. A failing case reruns alone with ``python -m sim.fuzz --seed N``."""
import pytest

from sim.fuzz import fuzz_case

# make test: ten of the first twenty seeds, the quickest that still cover every feature the
# test below asks for (five accumulator depths, eight buses, 1xN and Nx1 arrays, a 17-bit
# accumulator, pooling, grouped convolutions, batches); make test-all: the other 210.
QUICK_SEEDS = (2, 3, 4, 5, 8, 11, 14, 16, 17, 18)
SLOW_SEEDS = tuple(seed for seed in range(220) if seed not in QUICK_SEEDS)


def _run(seed, simulate_case):
    fuzz = fuzz_case(seed)
    print(fuzz.description)
    report = simulate_case(fuzz.case, seed=seed)
    assert all(r["busy_steps"] == sum(op.compute_steps for op in fuzz.case.program.gemm_ops) for r in report.results)


@pytest.mark.parametrize("seed", QUICK_SEEDS)
def test_fuzz(seed, simulate_case):
    _run(seed, simulate_case)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_fuzz_long(seed, simulate_case):
    _run(seed, simulate_case)


def test_fuzz_cases_are_reproducible_and_varied():
    """A seed alone makes the case; the quick seeds cover odd arrays, depths, buses,
    batches and narrow accumulators."""
    first, again = fuzz_case(7), fuzz_case(7)
    assert first.description == again.description
    assert all((a == b).all() for a, b in zip(first.case.inputs, again.case.inputs))
    configs = [fuzz_case(seed).case.program.config for seed in QUICK_SEEDS]
    assert any(c.rows % 2 and c.cols % 2 and c.rows != c.cols for c in configs)
    assert len({c.accumulator_depth for c in configs}) >= 4
    assert len({c.input_bus_bits for c in configs}) >= 8
    assert min(c.accumulator_bits for c in configs) < 20
