"""The generated accelerator in cocotb, on Verilator and Icarus: exact match with the
integer reference under random valid gaps and back-pressure."""
import pytest

from hdl.config import AcceleratorConfig
from sim.cases import random_case
from sim.runner import simulate

SHAPES = [(8, 8), (4, 4), (4, 8)]


def check_report(case, report):
    assert len(report.results) == len(case.inputs)
    failures = [r for r in report.results if not r["match"]]
    assert not failures, f"{report.simulator}: {len(failures)} inputs differ, first: {failures[0]}"


@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
@pytest.mark.parametrize("rows, cols", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
@pytest.mark.parametrize("model", ["linear", "mlp"])
def test_dense_models_match_reference(model, rows, cols, simulator, tmp_path):
    case = random_case(model, AcceleratorConfig(rows=rows, cols=cols), count=4, seed=rows * 10 + cols)
    report = simulate(case.program, case.inputs, case.expected, simulator=simulator,
                      build_dir=tmp_path, seed=rows + cols)
    check_report(case, report)


# Cycles are deterministic in simulation (the handshakes' random stalls excepted, which
# add at most a few cycles); these bounds catch a change that slows the schedule.
CYCLE_BOUNDS = {("linear", 8, 8): 430, ("mlp", 8, 8): 125}


@pytest.mark.parametrize("model, rows, cols", list(CYCLE_BOUNDS))
def test_cycles_per_inference_stay_within_bound(model, rows, cols, tmp_path):
    case = random_case(model, AcceleratorConfig(rows=rows, cols=cols), count=3)
    report = simulate(case.program, case.inputs, case.expected, simulator="verilator", build_dir=tmp_path,
                      gap_probability=0.0, stall_probability=0.0)
    check_report(case, report)
    cycles = [r["cycles"] for r in report.results]
    assert max(cycles) <= CYCLE_BOUNDS[model, rows, cols], cycles
    assert len(set(cycles)) == 1, f"cycle counts must be deterministic without stalls: {cycles}"
    steps = sum(op.steps for op in case.program.gemm_ops)
    assert all(r["busy_steps"] == steps for r in report.results)
