"""Per-phase cycle and busy counters, readable one slot at a time through a select port."""
from amaranth import Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class PerfCounters(wiring.Component):
    """``slots`` pairs of counters: cycles spent in a slot and busy cycles within them.

    Members
    -------
    clear: In, restart every counter from this cycle (which is counted if enabled).
    enable: In, count this cycle in slot ``slot``; busy: In, also count it as busy.
    select: In, the slot shown on ``cycles`` / ``busy_cycles`` (combinational read).
    """

    def __init__(self, slots: int, bits: int = 32):
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, not {slots!r}")
        self._slots, self._bits = slots, bits
        super().__init__({
            "clear": In(1), "enable": In(1), "busy": In(1), "slot": In(range(max(2, slots))),
            "select": In(range(max(2, slots))),
            "cycles": Out(unsigned(bits)), "busy_cycles": Out(unsigned(bits)),
        })

    def elaborate(self, platform):
        m = Module()
        for index in range(self._slots):
            cycles = Signal(self._bits, name=f"cycles_{index}")
            busy = Signal(self._bits, name=f"busy_{index}")
            counted = self.enable & (self.slot == index)
            with m.If(self.clear):
                m.d.sync += [cycles.eq(counted), busy.eq(counted & self.busy)]
            with m.Elif(counted):
                m.d.sync += cycles.eq(cycles + 1)
                with m.If(self.busy):
                    m.d.sync += busy.eq(busy + 1)
            with m.If(self.select == index):
                m.d.comb += [self.cycles.eq(cycles), self.busy_cycles.eq(busy)]
        return m
