"""The simulator runner: its Verilog fix-ups for Icarus, and waveforms."""
import pytest

from hdl.config import AcceleratorConfig
from sim.cases import random_case
from sim.runner import SIMULATORS, WAVE_FORMATS, icarus_time_zero_fix, simulate, waves_path

CONSTANT_DRIVER = """module m(o);
  output [9:0] o;
  reg [9:0] o;
  always @*
    o[9:0] = 10'h000;
endmodule
"""


def test_constant_always_block_becomes_initial():
    """Icarus never runs an ``always @*`` that reads nothing: the output stayed X (a
    non-classifier's ``output_data`` on Icarus)."""
    fixed = icarus_time_zero_fix(CONSTANT_DRIVER)
    assert "  initial o[9:0] = 10'h000;" in fixed and "always" not in fixed


def test_copy_blocks_are_kept_and_also_run_at_start():
    """A copy of a register that keeps its initial value for good stayed X on Icarus in the
    whole design (a GEMM op's output lane, always 0 on 8x8: every write was lost), though
    not in a small one: the order of Icarus's time-zero events decides. The cocotb runs
    of the conv stem and the mixed-width CNN on Icarus fail without this."""
    text = "  always @*\n    o[2:0] = a_d3;\n"
    assert icarus_time_zero_fix(text) == text + "  initial #1 o[2:0] = a_d3;\n"


WAVE_HEADERS = {"verilator": b"\x00", "icarus": b"$date", "ghdl": b"GHDLwave"}   # FST header block, VCD, GHW


# Verilator's traced build takes a minute: make test-all.
@pytest.mark.parametrize("simulator", [pytest.param(s, marks=pytest.mark.slow) if s == "verilator" else s
                                       for s in SIMULATORS])
def test_waves_are_written_in_each_simulators_format(simulator, tmp_path):
    """``make sim WAVES=1``: FST on Verilator, VCD on Icarus, GHW on GHDL, where waves_path says."""
    case = random_case("mlp", AcceleratorConfig(rows=4, cols=4), count=1, seed=2)
    report = simulate(case.program, case.inputs, case.expected, simulator=simulator, build_dir=tmp_path, waves=True)
    assert report.all_match
    path = waves_path(simulator, tmp_path)
    assert path.suffix == "." + WAVE_FORMATS[simulator]
    assert path.read_bytes().startswith(WAVE_HEADERS[simulator]) and path.stat().st_size > 10_000


def test_no_waves_by_default(tmp_path):
    case = random_case("mlp", AcceleratorConfig(rows=4, cols=4), count=1, seed=2)
    assert simulate(case.program, case.inputs, case.expected, simulator="icarus", build_dir=tmp_path).all_match
    assert not waves_path("icarus", tmp_path).exists()


def test_ghdl_optimises_small_designs_only(monkeypatch):
    from sim.runner import GHDL_OPTIMIZE_MAX_BYTES, ghdl_build_options
    monkeypatch.delenv("NNACCEL_GHDL_OPTIMIZE", raising=False)
    assert ghdl_build_options(GHDL_OPTIMIZE_MAX_BYTES) == ["--std=08"]
    assert ghdl_build_options(GHDL_OPTIMIZE_MAX_BYTES + 1) == ["--std=08", "-O0"]
    monkeypatch.setenv("NNACCEL_GHDL_OPTIMIZE", "-O2")
    assert ghdl_build_options(10 ** 9) == ["--std=08", "-O2"]
    monkeypatch.setenv("NNACCEL_GHDL_OPTIMIZE", "fast")
    with pytest.raises(ValueError, match="NNACCEL_GHDL_OPTIMIZE must be -O0, -O1, -O2 or -O3, not 'fast'"):
        ghdl_build_options(1)


def test_ghdl_build_is_reused_only_for_the_same_text_and_options(tmp_path, monkeypatch):
    from sim.runner import _ghdl_build_key, _write_vhdl_for_ghdl
    monkeypatch.setenv("GHDL_BACKEND", "llvm")
    monkeypatch.delenv("NNACCEL_GHDL_OPTIMIZE", raising=False)
    source = tmp_path / "top.vhd"
    assert _write_vhdl_for_ghdl(source, "entity top is end;") is False
    # What a finished build leaves: the executable, the work library and the stamp.
    source.with_suffix("").write_text("exe")
    (tmp_path / "top-obj08.cf").write_text("library")
    source.with_suffix(".build").write_text(_ghdl_build_key(len("entity top is end;")))
    mtime = source.stat().st_mtime_ns
    assert _write_vhdl_for_ghdl(source, "entity top is end;") is True
    assert source.stat().st_mtime_ns == mtime
    monkeypatch.setenv("NNACCEL_GHDL_OPTIMIZE", "-O3")               # other options: build again
    assert _write_vhdl_for_ghdl(source, "entity top is end;") is False
    assert not (tmp_path / "top-obj08.cf").exists() and not source.with_suffix(".build").exists()
    monkeypatch.delenv("NNACCEL_GHDL_OPTIMIZE")
    source.with_suffix(".build").write_text(_ghdl_build_key(len("entity top is end;")))
    assert _write_vhdl_for_ghdl(source, "entity top is end; -- changed") is False
    assert source.read_text() == "entity top is end; -- changed"
