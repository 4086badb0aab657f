"""Place and route each unit of a design alone: where the clock is lost, in minutes.

A whole design takes 20 to 35 minutes of Yosys and nextpnr on two cores, and reports one
critical path. Each unit alone (the top's components, and the GEMM engine's weight
memory, array and requantizer) takes seconds to a few minutes, and reports its own. A
unit's Fmax alone bounds what it reaches in the whole design, where its signals cross
the chip: a unit below the target alone is certain to fail it there.

Each unit is wrapped so that every member of its signature is a top-level port (constant
members, which a component may tie off, are left out), then estimated with
:func:`hdl.tools.fpga_estimate.estimate_ecp5`, out of context, each into its own folder.
"""
from __future__ import annotations

from pathlib import Path

from amaranth import Const, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.tools.fpga_estimate import estimate_ecp5

__all__ = ["UnitPorts", "design_units", "estimate_units", "format_unit_table"]

#: The GEMM engine's own components are named ``gemm.<name>``; the engine itself is left
#: out (it holds the weight memory, most of the design's block RAM: as long as the whole).
SKIPPED = ("gemm",)


class UnitPorts(wiring.Component):
    """``unit`` with each non-constant member of its signature as a port of its own."""

    def __init__(self, unit: wiring.Component):
        self._unit, self._members = unit, []
        members = {}
        for path, member, value in unit.signature.flatten(unit):
            if isinstance(value, Const):
                continue
            name = "__".join(str(part) for part in path)
            members[name] = (In if member.flow == wiring.In else Out)(member.shape)
            self._members.append((name, member.flow, value))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = self._unit
        for name, flow, value in self._members:
            port = getattr(self, name)
            m.d.comb += value.eq(port) if flow == wiring.In else port.eq(value)
        return m


def design_units(top) -> dict:
    """The units of ``top`` (a :class:`hdl.gateware.top.NeuralNetworkAccelerator`) by name."""
    units = {}
    for name, unit in top.units().items():
        if name == "gemm":
            units.update({f"gemm.{sub}": part for sub, part in unit.units().items()})
        if name in SKIPPED:
            _silence(unit)
        else:
            units[name] = unit
    return units


def _silence(elaboratable):
    """Tell Amaranth that ``elaboratable`` is not elaborated on purpose (no warning)."""
    elaboratable._MustUse__silence = True


def estimate_units(top, work_dir, names: list[str] | None = None, seed: int = 1,
                   timeout_s: float | None = None, progress=print) -> list[dict]:
    """Estimate ``names`` (default: every unit) of ``top`` one by one; each result of
    :func:`estimate_ecp5` gets ``unit``. Raises ``ValueError`` naming an unknown unit."""
    units = design_units(top)
    for unused in (top, *units.values()):       # the top and the units not named stay unused
        _silence(unused)
    names = list(units) if names is None else names
    unknown = [name for name in names if name not in units]
    if unknown:
        raise ValueError(f"no unit named {', '.join(map(repr, unknown))}; the units are {', '.join(units)}")
    results = []
    for number, name in enumerate(names, 1):
        progress(f"[unit {number}/{len(names)}] {name}")
        result = estimate_ecp5(UnitPorts(units[name]), name=name.replace(".", "_"), work_dir=Path(work_dir),
                               seed=seed, timeout_s=timeout_s, progress=progress)
        results.append({"unit": name, **result})
    return results


def format_unit_table(results: list[dict]) -> str:
    """One line a unit, slowest first: Fmax, resources, its critical path's length (routing
    in brackets), ends and the design source lines with the most delay on it."""
    lines = [f"{'unit':<17} {'Fmax MHz':>8} {'LUT4':>6} {'FF':>6} {'DSP':>4} {'BRAM':>4}  critical path"]
    for r in sorted(results, key=lambda r: r["fmax_mhz"] or float("inf")):
        fmax = f"{r['fmax_mhz']:.1f}" if r["fmax_mhz"] else "-"
        path = ""
        if r.get("critical_paths"):
            cp = r["critical_paths"][0]
            sources = sorted(cp["by_source"].items(), key=lambda item: -item[1])[:2]
            where = ", ".join(f"{Path(src.split(':')[0]).name}:{src.split(':')[1].split('.')[0]}"
                              for src, _ in sources if ":" in src)
            path = (f"{cp['total_ns']:.1f} ns ({cp['routing_ns']:.1f} routing) "
                    f"{cp['start']} -> {cp['end']}" + (f"; {where}" if where else ""))
        lines.append(f"{r['unit']:<17} {fmax:>8} {r['lut4']:>6} {r['ff']:>6} {r['dsp']:>4} {r['bram']:>4}  {path}")
    return "\n".join(lines)
