"""Max-pooling as its own pass over the activation memory.

For each output pixel and each word of its channels, the window's taps are read one a
cycle and a running lane-wise maximum is kept; taps outside the input read as -128 (so
they never win, as PyTorch's -infinity padding). One read a cycle, no stalls.
"""
from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.widths import Widths

PAD_VALUE = -128


def pool_params_layout(w: Widths) -> data.StructLayout:
    coord = unsigned(w.coord)
    return data.StructLayout({
        "in_base": unsigned(w.act_addr), "in_h": coord, "in_w": coord, "cw": coord,
        "kh": coord, "kw": coord, "sh": coord, "sw": coord, "ph": coord, "pw": coord,
        "out_h": coord, "out_w": coord, "out_base": unsigned(w.act_addr),
        "in_pixels": unsigned(w.pixel), "pixels": unsigned(w.pixel),
    })


class PoolEngine(wiring.Component):
    """Members
    -------
    params: In, held while busy; start: In (pulse); busy: Out.
    act_raddr: Out; act_rdata: In (one cycle after the address).
    wr_en, wr_addr, wr_data: Out, whole-word writes.
    """

    def __init__(self, widths: Widths, bank_width: int):
        self._w, self._bank = widths, bank_width
        super().__init__({
            "params": In(pool_params_layout(widths)),
            "start": In(1),
            "busy": Out(1),
            "act_raddr": Out(unsigned(widths.act_addr)),
            "act_rdata": In(data.ArrayLayout(signed(8), bank_width)),
            "wr_en": Out(1),
            "wr_addr": Out(unsigned(widths.act_addr)),
            "wr_data": Out(data.ArrayLayout(signed(8), bank_width)),
        })

    def elaborate(self, platform):
        m = Module()
        w, p = self._w, self.params
        coord_s = signed(w.coord + 1)
        running = Signal()
        oy, ox, q, i, j = (Signal(w.coord, name=n) for n in ("oy", "ox", "q", "i", "j"))
        out_addr = Signal(w.act_addr)
        ibase, pix = Signal(w.pixel), Signal(w.pixel)   # image's first input pixel; output pixel
        last_tap = (i == p.kh - 1) & (j == p.kw - 1)
        last_word = q == p.cw - 1
        last_pixel = pix == p.pixels - 1

        # Stage 0: counters.
        s0 = Signal(data.StructLayout({"valid": 1, "first": 1, "last": 1, "oy": w.coord, "ox": w.coord,
                                       "q": w.coord, "i": w.coord, "j": w.coord,
                                       "out_addr": w.act_addr, "ibase": w.pixel}))
        m.d.sync += [s0.valid.eq(running), s0.first.eq((i == 0) & (j == 0)), s0.last.eq(last_tap),
                     s0.oy.eq(oy), s0.ox.eq(ox), s0.q.eq(q), s0.i.eq(i), s0.j.eq(j),
                     s0.out_addr.eq(out_addr), s0.ibase.eq(ibase)]
        with m.If(~running & self.start):
            m.d.sync += [running.eq(1), oy.eq(0), ox.eq(0), q.eq(0), i.eq(0), j.eq(0),
                         out_addr.eq(p.out_base), ibase.eq(0), pix.eq(0)]
        with m.Elif(running):
            with m.If(~(j == p.kw - 1)):
                m.d.sync += j.eq(j + 1)
            with m.Elif(~(i == p.kh - 1)):
                m.d.sync += [j.eq(0), i.eq(i + 1)]
            with m.Else():
                m.d.sync += [i.eq(0), j.eq(0), out_addr.eq(out_addr + 1)]
                with m.If(~last_word):
                    m.d.sync += q.eq(q + 1)
                with m.Else():
                    m.d.sync += [q.eq(0), pix.eq(pix + 1)]
                    with m.If(ox != p.out_w - 1):
                        m.d.sync += ox.eq(ox + 1)
                    with m.Else():
                        m.d.sync += ox.eq(0)
                        with m.If(oy != p.out_h - 1):
                            m.d.sync += oy.eq(oy + 1)
                        with m.Else():
                            m.d.sync += [oy.eq(0), ibase.eq(ibase + p.in_pixels)]
                    with m.If(last_pixel):
                        m.d.sync += running.eq(0)

        # Stage 1: input coordinates, padding.
        s1 = Signal.like(s0)
        pad1 = Signal()
        iy, ix = Signal(coord_s), Signal(coord_s)
        s1_iy, s1_ix = Signal(coord_s), Signal(coord_s)
        m.d.comb += [iy.eq(s0.oy * p.sh + s0.i - p.ph), ix.eq(s0.ox * p.sw + s0.j - p.pw)]
        m.d.sync += [s1.eq(s0), s1_iy.eq(iy), s1_ix.eq(ix),
                     pad1.eq((iy < 0) | (iy >= p.in_h) | (ix < 0) | (ix >= p.in_w))]

        # Stage 2a: input pixel index; 2: read address.
        s2a, pad2a, pixel = Signal.like(s0), Signal(), Signal(w.pixel)
        m.d.sync += [s2a.eq(s1), pad2a.eq(pad1), pixel.eq(s1.ibase + s1_iy * p.in_w + s1_ix)]
        s2, pad2 = Signal.like(s0), Signal()
        raddr = Signal(w.act_addr)
        m.d.sync += [s2.eq(s2a), pad2.eq(pad2a), raddr.eq(p.in_base + pixel * p.cw + s2a.q)]
        with m.If(pad2a):
            m.d.sync += raddr.eq(0)
        m.d.comb += self.act_raddr.eq(raddr)

        # Stage 3: data arrives; running maximum.
        s3, pad3 = Signal.like(s0), Signal()
        m.d.sync += [s3.eq(s2), pad3.eq(pad2)]
        best = Signal(data.ArrayLayout(signed(8), self._bank))
        for lane in range(self._bank):
            value = Signal(signed(8), name=f"tap{lane}")
            m.d.comb += value.eq(self.act_rdata[lane])
            with m.If(pad3):
                m.d.comb += value.eq(PAD_VALUE)
            with m.If(s3.first | (value > best[lane])):
                m.d.sync += best[lane].eq(value)
        done, done_addr = Signal(), Signal(w.act_addr)
        m.d.sync += [done.eq(s3.valid & s3.last), done_addr.eq(s3.out_addr)]
        m.d.comb += [self.wr_en.eq(done), self.wr_addr.eq(done_addr), self.wr_data.eq(best)]
        m.d.comb += self.busy.eq(running | s0.valid | s1.valid | s2a.valid | s2.valid | s3.valid | done)
        return m
