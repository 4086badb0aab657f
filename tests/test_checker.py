"""The checker's failure path: a wrong output comes back as a reported mismatch."""
import json

import numpy as np
import pytest

from hdl.config import AcceleratorConfig
from sim.cases import random_case
from sim.runner import simulate
from sim.testbench import first_mismatch


def test_first_mismatch_is_plain_json():
    """``np.unravel_index`` gives np.int64, which ``json.dump`` cannot write: the results
    file was left truncated and ``simulate`` raised JSONDecodeError instead of reporting."""
    expected = np.zeros((2, 3, 4), dtype=np.int8)
    actual = expected.copy()
    actual[1, 2, 0], actual[1, 2, 3] = 5, -1
    mismatch = first_mismatch(expected, actual)
    assert mismatch == {"element": 20, "index": [1, 2, 0], "expected": 0, "actual": 5, "mismatches": 2}
    assert json.loads(json.dumps(mismatch)) == mismatch
    assert first_mismatch(expected, expected.copy()) is None


def test_wrong_expected_output_is_reported_not_raised(tmp_path):
    case = random_case("mlp", AcceleratorConfig(rows=4, cols=4), count=2, seed=3)
    wrong = [e.copy() for e in case.expected]
    flat = wrong[1].reshape(-1)
    flat[7] = flat[7] + 1 if flat[7] < 127 else flat[7] - 1
    report = simulate(case.program, case.inputs, wrong, simulator="verilator", build_dir=tmp_path, seed=1)
    assert not report.all_match
    good, bad = report.results
    assert good["match"] and good["mismatch"] is None
    assert not bad["match"] and bad["input"] == 1
    assert bad["mismatch"]["element"] == 7 and bad["mismatch"]["index"] == list(np.unravel_index(7, wrong[1].shape))
    assert bad["mismatch"]["expected"] == int(flat[7]) and bad["mismatch"]["actual"] == int(case.expected[1].reshape(-1)[7])
    assert bad["mismatch"]["mismatches"] == 1


def test_amaranth_testbench_deadline_fails_a_hung_testbench():
    """The component tests' runner stops a testbench that never ends, with a failure."""
    from amaranth import Elaboratable, Module, Signal
    from tests.amaranth_sim import run_testbench

    class Toggle(Elaboratable):
        def __init__(self):
            self.x = Signal()

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.x.eq(~self.x)
            return m

    async def hung(ctx):
        while True:
            await ctx.tick()

    with pytest.raises(AssertionError, match="did not finish within 50 cycles"):
        run_testbench(Toggle(), hung, deadline_cycles=50)
