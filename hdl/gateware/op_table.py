"""The per-op constants of a program, selected by the op counter."""
from amaranth import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import GemmOp, Program
from hdl.compiler.widths import Widths
from hdl.gateware.pool_engine import pool_params, pool_params_layout
from hdl.gateware.step_generator import gemm_params, gemm_params_layout


class OpTable(wiring.Component):
    """A combinational ROM of every op's constants.

    Members
    -------
    op_index: In, the op that runs.
    is_pool: Out, whether it is a pooling op; is_last: Out, whether it is the program's last.
    gemm, zero_point: Out, a GEMM op's constants and input zero point.
    pool: Out, a pooling op's constants.
    """

    def __init__(self, program: Program, widths: Widths):
        self._program = program
        super().__init__({
            "op_index": In(range(max(2, len(program.ops)))),
            "is_pool": Out(1), "is_last": Out(1),
            "gemm": Out(gemm_params_layout(widths)),
            "zero_point": Out(signed(program.config.data_bits)),
            "pool": Out(pool_params_layout(widths, program.config.bank_width)),
        })

    def elaborate(self, platform):
        m = Module()
        ops = self._program.ops
        gemm_layout, pool_layout = self.gemm.shape(), self.pool.shape()
        m.d.comb += self.is_last.eq(self.op_index == len(ops) - 1)
        with m.Switch(self.op_index):
            for index, op in enumerate(ops):
                with m.Case(index):
                    if isinstance(op, GemmOp):
                        m.d.comb += [self.gemm.eq(gemm_layout.const(gemm_params(op))),
                                     self.zero_point.eq(op.input_zero_point)]
                    else:
                        m.d.comb += [self.pool.eq(pool_layout.const(pool_params(op, self._program.config.bank_width))), self.is_pool.eq(1)]
        return m
