"""What a compiled design is, before any simulation: its layers, MACs, memory bits, and the
cycles each op takes, predicted from the schedule.

Each op runs its steps back to back (one a cycle) and then drains once, so its cycles lie
between ``op.steps`` and ``op.steps`` plus a fixed overhead: the op's set-up and start,
the address pipeline, the activation memory's read latency, the array's fill and the
write drain. The tests hold the simulated counters to these bounds.
"""
from __future__ import annotations

from hdl.compiler.program import GemmOp, Program
from hdl.gateware.activation_memory import ActivationMemory
from hdl.gateware.gemm_engine import GemmEngine
from hdl.gateware.pe import ProcessingElement
from hdl.gateware.requantizer import Requantizer
from hdl.gateware.window import WindowAddress

#: Cycles of an op's start and drain beyond the array's rows and columns (the 7 includes the
#: step generator's start register).
OP_FIXED_OVERHEAD = (7 + ActivationMemory.READ_LATENCY + WindowAddress.LATENCY + Requantizer.LATENCY
                     + ProcessingElement.LATENCY)


def op_overhead(program: Program) -> int:
    """The most cycles an op of ``program`` takes beyond its steps (one more with split
    ops: the stage that adds their columns)."""
    config = program.config
    return config.rows + config.cols + OP_FIXED_OVERHEAD + GemmEngine.split_latency_for(program)


def op_cycle_bounds(op, program: Program) -> tuple[int, int]:
    """The fewest and the most cycles ``op`` of ``program`` takes."""
    return op.steps, op.steps + op_overhead(program)


def design_report(program: Program) -> dict:
    """A JSON-ready description of ``program``: per layer its kind, MACs, weight bits and
    predicted cycles, and in total the MACs, the predicted cycles of the ops (input load and
    output not included: they follow the host's stream), the memory bits and the beats."""
    cfg = program.config
    layers = []
    for op in program.ops:
        low, high = op_cycle_bounds(op, program)
        gemm = isinstance(op, GemmOp)
        layers.append({"name": op.name, "kind": "gemm" if gemm else "maxpool",
                       "macs": op.macs if gemm else 0, "weight_bits": op.weight_bits if gemm else None,
                       "kernel": list(op.kernel), "stride": list(op.stride), "padding": list(op.padding),
                       "output_channels": op.dest.channels, "output_size": [op.dest.height, op.dest.width],
                       "cycles_min": low, "cycles_max": high})
    macs = sum(layer["macs"] for layer in layers)
    low = sum(layer["cycles_min"] for layer in layers)
    high = sum(layer["cycles_max"] for layer in layers)
    return {
        "model": program.model_name, "rows": cfg.rows, "cols": cfg.cols,
        "input_shape": list(program.input_shape), "output_shape": list(program.output_shape),
        "layers": layers, "macs": macs,
        "ops_cycles_min": low, "ops_cycles_max": high,
        "utilization_max": macs / (cfg.pes * low) if low else 0.0,
        "input_beats": program.input_beats, "output_beats": program.output_beats,
        "memory_bits": program.memory_bits, "weight_padding": program.weight_padding,
        "model_hash": f"{program.fingerprint():08x}",
    }
