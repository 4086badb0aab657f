"""Human-readable reports of a simulation: per input, per layer and summary figures."""
from __future__ import annotations

from hdl.program import GemmOp

from .cases import Case
from .runner import SimulationReport


def tiling_bound(op: GemmOp) -> int:
    """Cycles if every array tile were busy every cycle (padding waste included)."""
    return op.steps


def print_report(case: Case, report: SimulationReport):
    cfg = case.program.config
    pes = cfg.rows * cfg.cols
    macs = sum(op.macs for op in case.program.gemm_ops)
    bound = sum(tiling_bound(op) for op in case.program.gemm_ops)
    print(f"\nmodel {case.name}: {macs} MACs per inference on a {cfg.rows}x{cfg.cols} array "
          f"({pes} PEs), simulator {report.simulator}")
    print(f"{'input':>5}  {'result':<8} {'cycles':>8} {'utilization':>11}")
    for r in report.results:
        result = "match" if r["match"] else "MISMATCH"
        print(f"{r['input']:>5}  {result:<8} {r['cycles']:>8} {macs / (pes * r['cycles']):>10.1%}")
        if not r["match"]:
            m = r["mismatch"]
            detail = (f"element {m['index']}: expected {m['expected']}, got {m['actual']} "
                      f"({m['mismatches']} elements differ)" if m
                      else f"output_data {r['onehot']:#x}, expected {r['expected_onehot']:#x}")
            print(f"       {detail}")
    cycles = [r["cycles"] for r in report.results]
    mean = sum(cycles) / len(cycles)
    matched = sum(r["match"] for r in report.results)
    print(f"\n{matched}/{len(report.results)} inputs match the integer reference exactly")
    print(f"cycles per inference: {min(cycles)}..{max(cycles)} (mean {mean:.1f}; input load and "
          f"output included)")
    print(f"utilization = useful MACs / (rows x cols x cycles): {macs / (pes * mean):.1%}")
    print(f"array tiling bound {bound} cycles; schedule efficiency (bound / cycles) {bound / mean:.2f}")
    print(f"simulated {report.sim_cycles:.0f} cycles in {report.wall_seconds:.2f} s: "
          f"{report.cycles_per_second:,.0f} cycles/s on {report.simulator} "
          f"(HDL generation and build: {report.build_seconds:.1f} s)")
