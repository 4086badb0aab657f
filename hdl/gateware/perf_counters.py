"""Cycle and busy counters of an inference, in total and per phase."""
from amaranth import Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.gateware.pipeline import delayed


class PerfCounters(wiring.Component):
    """Counts an inference from ``start`` to ``stop`` (both cycles included), in total and
    in ``slots`` phases: cycles spent in a phase and busy cycles (array steps) within them.

    The inputs are registered first (``LATENCY`` cycles), so that the control logic that
    drives them does not also drive the counters' many clock enables: every count is the
    same, and the totals latch a cycle after ``stop``.

    Members
    -------
    start: In, the inference's first cycle: restart every counter, counting this cycle.
    stop: In, its last cycle (counted): latch the totals into ``last_*`` and stop.
    busy: In, count this cycle as busy; slot: In, the phase this cycle belongs to.
    last_cycles, last_busy: Out, the totals of the last finished inference (registered),
        valid ``LATENCY + 1`` cycles after its ``stop`` cycle.
    select: In, the phase shown on ``cycles`` / ``busy_cycles`` (combinational read).
    """

    LATENCY = 1

    def __init__(self, slots: int, bits: int = 32):
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, not {slots!r}")
        self._slots, self._bits = slots, bits
        super().__init__({
            "start": In(1), "stop": In(1), "busy": In(1), "slot": In(range(max(2, slots))),
            "last_cycles": Out(unsigned(bits)), "last_busy": Out(unsigned(bits)),
            "select": In(range(max(2, slots))),
            "cycles": Out(unsigned(bits)), "busy_cycles": Out(unsigned(bits)),
        })

    def elaborate(self, platform):
        m = Module()
        start, stop, busy, slot = (delayed(m, port, self.LATENCY, name) for port, name in
                                   ((self.start, "start"), (self.stop, "stop"), (self.busy, "busy"), (self.slot, "slot")))

        counting = Signal()
        enable = counting | start
        total_cycles, total_busy = Signal(self._bits), Signal(self._bits)
        with m.If(start):
            m.d.sync += [counting.eq(1), total_cycles.eq(1), total_busy.eq(busy)]
        with m.Elif(counting):
            m.d.sync += [total_cycles.eq(total_cycles + 1), total_busy.eq(total_busy + busy)]
        with m.If(stop):
            m.d.sync += [counting.eq(0), self.last_cycles.eq(total_cycles + 1),
                         self.last_busy.eq(total_busy + busy)]

        for index in range(self._slots):
            cycles = Signal(self._bits, name=f"cycles_{index}")
            slot_busy = Signal(self._bits, name=f"busy_{index}")
            counted = enable & (slot == index)
            with m.If(start):
                m.d.sync += [cycles.eq(counted), slot_busy.eq(counted & busy)]
            with m.Elif(counted):
                m.d.sync += cycles.eq(cycles + 1)
                with m.If(busy):
                    m.d.sync += slot_busy.eq(slot_busy + 1)
            with m.If(self.select == index):
                m.d.comb += [self.cycles.eq(cycles), self.busy_cycles.eq(slot_busy)]
        return m
