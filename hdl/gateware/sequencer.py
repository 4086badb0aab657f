"""The sequencer: load the input, run each op to completion in order, send the output."""
from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.gateware.activation_memory import Reader


class Sequencer(wiring.Component):
    """One inference at a time. An op is done when its engine is idle and, for a GEMM op,
    ``gemm_drain`` more cycles have passed (its last writes are still in the pipeline; a
    pooling op's ``busy`` already covers its last write). Each op starts a cycle after
    ``op_index`` names it, when the op table's registers (``is_pool`` and ``is_last`` too)
    have followed. The engines' ``busy`` outputs are registers
    (:func:`~hdl.gateware.engine_busy.registered_busy`: they fall a cycle after the engine's
    last activity and rise a cycle after its start), so the sequencer waits a cycle after a
    start before it looks.

    Members
    -------
    loaded: In, the input's last word is written.
    op_index: Out, the op that runs; is_pool, is_last: In, about that op.
    gemm_start, pool_start: Out, pulses that start the op; engine_busy: In.
    reader: Out, who owns the activation memory's read port.
    output_start: Out, a pulse: the output tensor is complete; output_done: In.
    rearm: Out, a pulse: take the next input.
    phase: Out, the counters' phase: op ``k`` for ``k < ops``, ``ops`` for the input
    load, ``ops + 1`` for the output.
    """

    def __init__(self, ops: int, gemm_drain: int):
        self._ops, self._drain = ops, gemm_drain
        super().__init__({
            "loaded": In(1),
            "op_index": Out(range(max(2, ops))), "is_pool": In(1), "is_last": In(1),
            "gemm_start": Out(1), "pool_start": Out(1), "engine_busy": In(1),
            "reader": Out(Reader),
            "output_start": Out(1), "output_done": In(1), "rearm": Out(1),
            "phase": Out(range(ops + 2)),
        })

    def elaborate(self, platform):
        m = Module()
        drain = Signal(range(self._drain + 2))
        m.d.comb += self.phase.eq(self.op_index)
        with m.FSM(name="sequencer"):
            with m.State("LOAD"):
                m.d.comb += self.phase.eq(self._ops)
                with m.If(self.loaded):
                    m.d.sync += self.op_index.eq(0)
                    m.next = "SETUP"
            with m.State("SETUP"):                      # the op table's registers follow op_index
                m.next = "START"
            with m.State("START"):
                m.d.comb += [self.gemm_start.eq(~self.is_pool), self.pool_start.eq(self.is_pool)]
                m.d.sync += self.reader.eq(Mux(self.is_pool, Reader.POOL, Reader.GEMM))
                m.next = "WAIT"
            with m.State("WAIT"):                       # the engine's busy register follows its start
                m.next = "RUN"
            with m.State("RUN"):
                with m.If(~self.engine_busy):
                    m.d.sync += drain.eq(Mux(self.is_pool, 0, self._drain))
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += drain.eq(drain - 1)
                with m.If((drain == 0) & self.is_last):
                    m.d.comb += self.output_start.eq(1)
                    m.d.sync += self.reader.eq(Reader.OUTPUT)
                    m.next = "OUTPUT"
                with m.Elif(drain == 0):
                    m.d.sync += self.op_index.eq(self.op_index + 1)
                    m.next = "SETUP"
            with m.State("OUTPUT"):
                m.d.comb += self.phase.eq(self._ops + 1)
                with m.If(self.output_done):
                    m.d.comb += self.rearm.eq(1)
                    m.d.sync += self.reader.eq(Reader.GEMM)
                    m.next = "LOAD"
        return m
