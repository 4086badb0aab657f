"""Shared set-up of the test suite.

* PyTorch runs single-threaded: pytest-xdist already runs one worker per core, and
  threads inside each worker would only compete for them.
* ``simulate_case``: simulate a case on an HDL simulator and check it exactly against
  the integer reference, in the test's own build folder.
* GHDL builds at ``-O0``: every test builds its own small design and runs it for a few
  thousand cycles, where LLVM's optimisation costs more than it saves (see
  ``sim.runner.ghdl_build_options``, whose choice has its own tests).
"""
import os

import pytest
import torch

from sim.runner import simulate

torch.set_num_threads(1)
os.environ.setdefault("NNACCEL_GHDL_OPTIMIZE", "-O0")


def check_report(case, report):
    """Every input was simulated and every output equals the reference exactly."""
    assert len(report.results) == len(case.inputs)
    failures = [r for r in report.results if not r["match"]]
    assert not failures, f"{report.simulator}: {len(failures)} inputs differ, first: {failures[0]}"


@pytest.fixture
def simulate_case(tmp_path):
    def run(case, simulator: str = "verilator", seed: int = 0, **options):
        report = simulate(case.program, case.inputs, case.expected, simulator=simulator,
                          build_dir=tmp_path / simulator, seed=seed, **options)
        check_report(case, report)
        return report
    return run
