"""The sequencer: load the input, run each op to completion in order, send the output."""
from collections.abc import Sequence

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.gateware.activation_memory import Reader


class Sequencer(wiring.Component):
    """One inference at a time. An op is done when its engine is idle and, for a GEMM op,
    ``gemm_drain`` more cycles have passed (its last writes are still in the pipeline; a
    pooling op's ``busy`` already covers its last write). Each op starts a cycle after
    ``op_index`` names it, when the op table's registers have followed.

    The start pulses are registers, set in that cycle from ``op_index`` and the op kinds
    (``pooling[k]``: whether op ``k`` is a pooling op), because each fans out across the
    chip into its engine's loop counters: decoded from the state in their own cycle, they
    were the design's critical path (the output's start, likewise a register, is set from
    the drain a cycle ahead). The engines' ``busy`` outputs are registers
    (:func:`~hdl.gateware.engine_busy.registered_busy`: they fall a cycle after the engine's
    last activity and rise a cycle after its start), so the sequencer waits a cycle after a
    start before it looks.

    Members
    -------
    loaded: In, the input's last word is written.
    op_index: Out, the op that runs.
    gemm_start, pool_start: Out, pulses (registers) that start the op; engine_busy: In.
    reader: Out, who owns the activation memory's read port.
    output_start: Out, a pulse: the output tensor is complete; output_done: In.
    rearm: Out, a pulse: take the next input.
    phase: Out, the counters' phase: op ``k`` for ``k < ops``, ``ops`` for the input
    load, ``ops + 1`` for the output.
    """

    def __init__(self, pooling: Sequence[bool], gemm_drain: int):
        if not pooling:
            raise ValueError("a sequencer needs at least one op, not 0")
        self._pooling, self._ops, self._drain = tuple(bool(p) for p in pooling), len(pooling), gemm_drain
        ops = self._ops
        super().__init__({
            "loaded": In(1),
            "op_index": Out(range(max(2, ops))),
            "gemm_start": Out(1), "pool_start": Out(1), "engine_busy": In(1),
            "reader": Out(Reader),
            "output_start": Out(1), "output_done": In(1), "rearm": Out(1),
            "phase": Out(range(ops + 2)),
        })

    def elaborate(self, platform):
        m = Module()
        drain = Signal(range(self._drain + 2))
        # Whether the drain ends in this cycle, a register (``drain == 0`` a cycle early),
        # and the output's start a register set in the cycle before: it fans out across
        # the chip into the output unit, and the drain counter's comparison before that
        # route was the default design's critical path (85.4 MHz).
        drain_over, ends_next = Signal(), Signal()
        m.d.comb += self.phase.eq(self.op_index)
        # The op's kind, decoded from op_index (a register) for the start registers, and
        # registered with the op table's outputs for the other decisions.
        pool_now, is_pool, is_last = Signal(), Signal(), Signal()
        with m.Switch(self.op_index):
            for index, pooling in enumerate(self._pooling):
                with m.Case(index):
                    m.d.comb += pool_now.eq(pooling)
        m.d.sync += [is_pool.eq(pool_now), is_last.eq(self.op_index == self._ops - 1),
                     self.gemm_start.eq(0), self.pool_start.eq(0),
                     drain_over.eq(ends_next), self.output_start.eq(ends_next & is_last)]
        with m.FSM(name="sequencer"):
            with m.State("LOAD"):
                m.d.comb += self.phase.eq(self._ops)
                with m.If(self.loaded):
                    m.d.sync += self.op_index.eq(0)
                    m.next = "SETUP"
            with m.State("SETUP"):                      # the op table's registers follow op_index
                m.d.sync += [self.gemm_start.eq(~pool_now), self.pool_start.eq(pool_now)]
                m.next = "START"
            with m.State("START"):                      # the start registers are high
                m.d.sync += self.reader.eq(Mux(is_pool, Reader.POOL, Reader.GEMM))
                m.next = "WAIT"
            with m.State("WAIT"):                       # the engine's busy register follows its start
                m.next = "RUN"
            with m.State("RUN"):
                with m.If(~self.engine_busy):
                    m.d.sync += drain.eq(Mux(is_pool, 0, self._drain))
                    m.d.comb += ends_next.eq(is_pool | (self._drain == 0))
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += drain.eq(drain - 1)
                m.d.comb += ends_next.eq(drain == 1)
                with m.If(drain_over & is_last):                # (output_start is high)
                    m.d.sync += self.reader.eq(Reader.OUTPUT)
                    m.next = "OUTPUT"
                with m.Elif(drain_over):
                    m.d.sync += self.op_index.eq(self.op_index + 1)
                    m.next = "SETUP"
            with m.State("OUTPUT"):
                # (The reader stays the output's until the next op's start names one: no
                # one reads while the input loads, and the output's last handshake, from
                # the far side of the chip, then decides nothing but the state.)
                m.d.comb += self.phase.eq(self._ops + 1)
                with m.If(self.output_done):
                    m.d.comb += self.rearm.eq(1)
                    m.next = "LOAD"
        return m
