"""The per-op constants of a program, selected by the op counter."""
from amaranth import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import GemmOp, Program
from hdl.compiler.widths import Widths, bits_for
from hdl.gateware.load_port import load_port
from hdl.gateware.pool_engine import pool_params, pool_params_layout
from hdl.gateware.step_generator import gemm_params, gemm_params_layout


class OpTable(wiring.Component):
    """A ROM of every op's constants.

    Everything follows ``op_index`` a cycle later, from registers, so that the engines'
    arithmetic and the sequencer's decisions start at a flip-flop rather than at the end of
    a decoder over every op (the sequencer waits that cycle).

    Members
    -------
    op_index: In, the op that runs.
    gemm, zero_point: Out, a GEMM op's constants and input zero point (registered).
    pool: Out, a pooling op's constants (registered).
    load_zero_points: In (with ``runtime_weights``), writes GEMM op ``addr``'s input zero
    point (GEMM ops counted in program order): the zero points are registers, not constants.
    """
    #: Cycles from ``op_index`` to every output.
    LATENCY = 1

    def __init__(self, program: Program, widths: Widths):
        self._program = program
        members = {
            "op_index": In(range(max(2, len(program.ops)))),
            "gemm": Out(gemm_params_layout(widths, program.config)),
            "zero_point": Out(signed(program.config.data_bits)),
            "pool": Out(pool_params_layout(widths, program.config.bank_width)),
        }
        if program.config.runtime_weights:
            members["load_zero_points"] = In(load_port(bits_for(len(program.gemm_ops)), program.config.data_bits))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        ops = self._program.ops
        gemm_layout, pool_layout = self.gemm.shape(), self.pool.shape()
        bank = self._program.config.bank_width
        gemm_ops = [op for op in ops if isinstance(op, GemmOp)]
        if self._program.config.runtime_weights:
            # Reset-less, like the memories beside them: a reset keeps the loaded model.
            zero_points = [Signal(signed(self.zero_point.shape().width), init=op.input_zero_point, reset_less=True,
                                  name=f"zero_point_{index}") for index, op in enumerate(gemm_ops)]
            for index, register in enumerate(zero_points):
                with m.If(self.load_zero_points.en & (self.load_zero_points.addr == index)):
                    m.d.sync += register.eq(self.load_zero_points.data)
        else:
            zero_points = [op.input_zero_point for op in gemm_ops]
        gemm_ordinal = {index: n for n, index in enumerate(i for i, op in enumerate(ops) if isinstance(op, GemmOp))}
        with m.Switch(self.op_index):
            for index, op in enumerate(ops):
                with m.Case(index):
                    if isinstance(op, GemmOp):
                        m.d.sync += [self.gemm.eq(gemm_layout.const(gemm_params(op, self._program.config))),
                                     self.zero_point.eq(zero_points[gemm_ordinal[index]])]
                    else:
                        m.d.sync += self.pool.eq(pool_layout.const(pool_params(op, bank)))
        return m
