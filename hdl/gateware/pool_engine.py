"""Max-pooling as its own pass over the activation memory.

For each output pixel and each word of its channels, the window's taps are read one a
cycle and a running lane-wise maximum is kept; taps outside the input read as
``MAXPOOL_PAD_VALUE`` (the smallest code, so they never win, as PyTorch's -infinity
padding). One read a cycle, no stalls.
"""
from amaranth import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import PoolOp
from hdl.compiler.widths import Widths
from hdl.gateware.activation_memory import read_port, write_port
from hdl.gateware.pipeline import delay_line, delayed
from hdl.gateware.window import WindowAddress, window_layout, window_params
from pytorch_ref.ir import integer_semantics as sem


def pool_params_layout(w: Widths) -> data.StructLayout:
    return data.StructLayout({"window": window_layout(w), "out_base": unsigned(w.act_addr),
                              "pixels": unsigned(w.pixel)})


def pool_params(op: PoolOp) -> dict:
    """:func:`pool_params_layout`'s values for ``op``."""
    return {"window": window_params(op.source, op.dest, op.kernel, op.stride, op.padding),
            "out_base": op.dest.base, "pixels": op.dest.pixels}


class PoolEngine(wiring.Component):
    """Members
    -------
    params: In, held while busy; start: In (pulse, ignored while busy); busy: Out.
    read: the activation memory's read port (data one cycle after the address).
    write: whole-word writes of finished output words.
    """

    def __init__(self, widths: Widths, bank_width: int, data_bits: int):
        self._w, self._bank, self._data_bits = widths, bank_width, data_bits
        super().__init__({
            "params": In(pool_params_layout(widths)),
            "start": In(1),
            "busy": Out(1),
            "read": Out(read_port(widths.act_addr, bank_width, data_bits)),
            "write": Out(write_port(widths.act_addr, bank_width, data_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        w, p = self._w, self.params
        g = p.window
        running = Signal()
        oy, ox, q, i, j = (Signal(w.coord, name=n) for n in ("oy", "ox", "q", "i", "j"))
        out_addr = Signal(w.act_addr)
        ibase, pix = Signal(w.pixel), Signal(w.pixel)   # image's first input pixel; output pixel
        last_j = j == g.kw - 1
        last_tap = last_j & (i == g.kh - 1)
        last_word = q == g.in_cw - 1

        # Counters, innermost first: tap (i, j), word q of the pixel's channels, pixel.
        next_word = running & last_tap
        next_pixel = next_word & last_word
        with m.If(~self.busy & self.start):                 # ignored until the last write

            m.d.sync += [running.eq(1), oy.eq(0), ox.eq(0), q.eq(0), i.eq(0), j.eq(0),
                         out_addr.eq(p.out_base), ibase.eq(0), pix.eq(0)]
        with m.If(running):
            m.d.sync += j.eq(j + 1)
            with m.If(last_j):
                m.d.sync += [j.eq(0), i.eq(i + 1)]
            with m.If(last_tap):
                m.d.sync += [i.eq(0), out_addr.eq(out_addr + 1), q.eq(q + 1)]
        with m.If(next_pixel):
            m.d.sync += [q.eq(0), pix.eq(pix + 1), ox.eq(ox + 1)]
            with m.If(ox == g.out_w - 1):
                m.d.sync += [ox.eq(0), oy.eq(oy + 1)]
                with m.If(oy == g.out_h - 1):
                    m.d.sync += [oy.eq(0), ibase.eq(ibase + g.in_pixels)]
            with m.If(pix == p.pixels - 1):
                m.d.sync += running.eq(0)

        # Stage 0: the tap, registered; stages 1-3: its address (window pipeline).
        m.submodules.window = window = WindowAddress(w)
        tag = Signal(data.StructLayout({"valid": 1, "first": 1, "last": 1, "out_addr": w.act_addr}))
        m.d.sync += [tag.valid.eq(running), tag.first.eq((i == 0) & (j == 0)), tag.last.eq(last_tap),
                     tag.out_addr.eq(out_addr),
                     window.tap.oy.eq(oy), window.tap.ox.eq(ox), window.tap.i.eq(i), window.tap.j.eq(j),
                     window.tap.image_base.eq(ibase), window.tap.word.eq(q)]
        m.d.comb += [window.window.eq(g), self.read.addr.eq(window.addr)]
        tags = delay_line(m, tag, WindowAddress.LATENCY + 1, "tag")

        # Data arrives a cycle after the address: running maximum.
        at_data, pad = tags[-1], delayed(m, window.pad, 1, "pad")
        best = Signal(data.ArrayLayout(signed(self._data_bits), self._bank))
        for lane in range(self._bank):
            value = Signal(signed(self._data_bits), name=f"tap{lane}")
            m.d.comb += value.eq(self.read.data[lane])
            with m.If(pad):
                m.d.comb += value.eq(sem.MAXPOOL_PAD_VALUE)
            with m.If(at_data.first | (value > best[lane])):
                m.d.sync += best[lane].eq(value)
        done = Signal()
        m.d.sync += [done.eq(at_data.valid & at_data.last), self.write.payload.addr.eq(at_data.out_addr)]
        m.d.comb += [self.write.valid.eq(done), self.write.payload.data.eq(best),
                     self.write.payload.lanes.eq(~0)]
        m.d.comb += self.busy.eq(running | Cat(*(t.valid for t in tags)).any() | done)
        return m
