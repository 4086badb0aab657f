"""Human-readable reports of a simulation: per input, per layer and summary figures."""
from __future__ import annotations

import numpy as np

from hdl.compiler.program import GemmOp
from pytorch_ref.ir.quantized_model import AddLayer, ConcatLayer, DenseLayer

from sim.cases import Case
from sim.runner import SimulationReport


def tiling_bound(op) -> int:
    """Cycles of a GEMM op if every array tile were busy every cycle (padding waste
    included: a tile sticking out of the layer counts whole)."""
    return op.compute_steps if isinstance(op, GemmOp) else 0


def op_kind(op, layers: dict) -> str:
    """What a phase of the inference runs: ``"conv"``, ``"depthwise"`` (a convolution of one
    input channel a group; average pooling is lowered to one, under its own layer name),
    ``"grouped"``, ``"dense"``, ``"add"``, ``"concat"`` (a concatenation's copy of an
    input), ``"maxpool"``, or ``"io"`` (input load and output) for ``op`` None. ``layers`` maps the model's layer names to its layers."""
    if op is None:
        return "io"
    if not isinstance(op, GemmOp):
        return "maxpool"
    layer = layers.get(op.name) or layers[op.name.rsplit(".", 1)[0]]     # a concatenation's copy: "cat.1"
    if isinstance(layer, AddLayer):
        return "add"
    if isinstance(layer, ConcatLayer):
        return "concat"
    if isinstance(layer, DenseLayer):
        return "dense"
    if layer.groups == 1:
        return "conv"
    return "depthwise" if layer.weight.shape[1] == 1 else "grouped"


def layer_table(case: Case, report: SimulationReport) -> list[dict]:
    """Per phase of the inference: its kind (:func:`op_kind`), MACs, measured cycles (mean
    over inputs), utilization, tiling bound and schedule efficiency."""
    program = case.program
    pes = program.config.pes
    phases = np.array([r["phases"] for r in report.results], dtype=float).mean(axis=0)
    layers = {layer.name: layer for layer in case.model.layers}
    rows = []
    names = [op.name for op in program.ops] + ["(input load)", "(output)"]
    ops = list(program.ops) + [None, None]
    for name, op, (cycles, busy) in zip(names, ops, phases):
        macs = op.macs if isinstance(op, GemmOp) else 0
        bound = tiling_bound(op)
        rows.append({"layer": name, "kind": op_kind(op, layers), "macs": macs,
                     "weight_bits": op.weight_bits if isinstance(op, GemmOp) else None,
                     "cycles": cycles, "busy": busy, "utilization": macs / (pes * cycles) if cycles else 0.0,
                     "tiling_bound": bound, "efficiency": bound / cycles if bound and cycles else None})
    return rows


def print_layer_table(rows: list[dict], pes: int):
    print(f"\n{'layer':<16} {'w bits':>6} {'MACs':>9} {'cycles':>9} {'utilization':>11} {'tiling bound':>12} "
          f"{'efficiency':>10}")
    for r in rows:
        eff = f"{r['efficiency']:.3f}" if r["efficiency"] is not None else "-"
        bound = str(r["tiling_bound"]) if r["tiling_bound"] else "-"
        wbits = str(r["weight_bits"]) if r.get("weight_bits") else "-"
        print(f"{r['layer']:<16} {wbits:>6} {r['macs']:>9} {r['cycles']:>9.0f} {r['utilization']:>10.1%} {bound:>12} "
              f"{eff:>10}")
    macs = sum(r["macs"] for r in rows)
    cycles = sum(r["cycles"] for r in rows)
    bound = sum(r["tiling_bound"] for r in rows)
    print(f"{'total':<16} {'':>6} {macs:>9} {cycles:>9.0f} {macs / (pes * cycles):>10.1%} {bound:>12} {bound / cycles:>10.3f}")


def print_report(case: Case, report: SimulationReport):
    cfg = case.program.config
    pes = cfg.pes
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
    print_layer_table(layer_table(case, report), pes)
    cycles = [r["cycles"] for r in report.results]
    mean = sum(cycles) / len(cycles)
    matched = sum(r["match"] for r in report.results)
    print(f"\n{matched}/{len(report.results)} inputs match the integer reference exactly")
    print(f"cycles per inference: {min(cycles)}..{max(cycles)} (mean {mean:.1f}; input load and "
          f"output included)")
    print(f"utilization = useful MACs / (rows x cols x cycles): {macs / (pes * mean):.1%}")
    print(f"tiling bound = cycles if every array tile were busy every cycle: {bound}; "
          f"schedule efficiency = bound / cycles: {bound / mean:.2f}")
    print(f"simulated {report.sim_cycles:.0f} cycles in {report.wall_seconds:.2f} s: "
          f"{report.cycles_per_second:,.0f} cycles/s on {report.simulator} "
          f"(HDL generation and build: {report.build_seconds:.1f} s)")
    program = case.program
    print(f"weight memory: {program.memory_bits['weights']:,} bits for {program.weight_payload_bits:,} bits of "
          f"weights ({program.weight_padding:.1%} padding), widths {', '.join(map(str, program.weight_formats))}")
    labels = getattr(case, "labels", None)
    accuracy = getattr(case, "accuracy", None)
    if accuracy and "float_accuracy" in accuracy:
        n = accuracy["samples"]
        print(f"\naccuracy on the {n} held-out samples: float {accuracy['float_accuracy']:.2%}, "
              f"integer reference {accuracy['int8_accuracy']:.2%}")
    if labels is not None and case.program.is_classifier:
        hw = [int(np.argmax(r["output"])) for r in report.results]
        ref = [int(np.argmax(e)) for e in case.expected]
        n = len(labels)
        print(f"on the {n} simulated held-out samples: hardware {np.mean(np.equal(hw, labels)):.2%}, "
              f"integer reference {np.mean(np.equal(ref, labels)):.2%}")
