"""The address generator of GEMM ops: one step (activation vector x weight tile) a cycle.

It walks the loop nest of :mod:`hdl.compiler.program` with counters only, then computes the
addresses in a short feed-forward pipeline. There is no back-pressure: once started it
issues one step every cycle until the op is done, which is what keeps the array busy.
Convolution windows are read straight from the activation memory (no im2col copy);
taps outside the input are flagged as padding and read as the input zero point.
"""
from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.widths import Widths, bits_for


def gemm_params_layout(w: Widths) -> data.StructLayout:
    """Per-op constants that the sequencer hands the step generator."""
    coord = unsigned(w.coord)
    return data.StructLayout({
        "in_base": unsigned(w.act_addr), "in_h": coord, "in_w": coord, "in_cw": coord,
        "kh": coord, "kw": coord, "sh": coord, "sw": coord, "ph": coord, "pw": coord,
        "ct_count": unsigned(w.tile), "k_tiles": unsigned(w.tile), "nt_count": unsigned(w.tile),
        "block": unsigned(w.tile), "pixels": unsigned(w.pixel), "in_pixels": unsigned(w.pixel),
        "out_h": coord, "out_w": coord, "out_cw": coord, "out_base": unsigned(w.act_addr),
        "w_base": unsigned(w.weight_addr), "p_base": unsigned(w.param_addr),
    })


def step_layout(w: Widths, in_groups: int, out_groups: int) -> data.StructLayout:
    return data.StructLayout({
        "valid": 1,
        "act_addr": unsigned(w.act_addr), "act_group": unsigned(bits_for(in_groups - 1)), "pad": 1,
        "w_addr": unsigned(w.weight_addr),
        "first": 1, "last": 1,
        "acc_addr": unsigned(w.acc_addr),
        "p_addr": unsigned(w.param_addr),
        "out_addr": unsigned(w.act_addr), "out_group": unsigned(bits_for(out_groups - 1)),
    })


class StepGenerator(wiring.Component):
    """Issues the steps of one GEMM op.

    Parameters
    ----------
    widths: the program's :class:`Widths`.
    in_groups: ``bank_width // rows``, groups of ``rows`` lanes in an activation word.
    out_groups: ``bank_width // cols``.

    Members
    -------
    params: In, the op's constants, held stable while ``busy``.
    start: In, a one-cycle pulse that starts the op (ignored while busy).
    busy: Out, high from ``start`` until the last step has left ``step``.
    step: Out, the step of this cycle (``step.valid`` marks real steps); registered.
    """

    LATENCY = 4   # cycles from a counter state to its step at ``step``

    def __init__(self, widths: Widths, in_groups: int, out_groups: int):
        self._w, self._in_groups, self._out_groups = widths, in_groups, out_groups
        super().__init__({
            "params": In(gemm_params_layout(widths)),
            "start": In(1),
            "busy": Out(1),
            "step": Out(step_layout(widths, in_groups, out_groups)),
        })

    def elaborate(self, platform):
        m = Module()
        w, p = self._w, self.params
        coord_s = signed(w.coord + 1)

        # Stage 0: loop counters -------------------------------------------------------
        running = Signal()
        nt, ct, kt = (Signal(w.tile, name=n) for n in ("nt", "ct", "kt"))
        i, j = Signal(w.coord), Signal(w.coord)
        ct_word, ct_group = Signal(w.coord), Signal(bits_for(self._in_groups - 1))
        nt_word, nt_group = Signal(w.coord), Signal(bits_for(self._out_groups - 1))
        m0, cnt = Signal(w.pixel), Signal(w.tile)
        oy0, ox0, oy, ox = (Signal(w.coord, name=n) for n in ("oy0", "ox0", "oy", "ox"))
        # First input pixel of the current image (batches: images follow each other).
        ibase0, ibase = Signal(w.pixel, name="ibase0"), Signal(w.pixel, name="ibase")
        w_nt_base = Signal(w.weight_addr)

        remaining = Signal(w.pixel)
        block_len = Signal(w.tile)
        m.d.comb += [
            remaining.eq(p.pixels - m0),
            block_len.eq(p.block),
        ]
        with m.If(remaining < p.block):
            m.d.comb += block_len.eq(remaining)

        end_of_block = cnt == block_len - 1
        end_of_ct = ct == p.ct_count - 1
        end_of_j = j == p.kw - 1
        end_of_i = i == p.kh - 1
        end_of_k = end_of_ct & end_of_j & end_of_i
        end_of_m = (m0 + block_len) == p.pixels
        end_of_nt = nt == p.nt_count - 1

        # Next raster position after (oy, ox), into the next image after the last row.
        next_oy, next_ox = Signal(w.coord), Signal(w.coord)
        next_ibase = Signal(w.pixel)
        m.d.comb += [next_oy.eq(oy), next_ox.eq(ox + 1), next_ibase.eq(ibase)]
        with m.If(ox == p.out_w - 1):
            m.d.comb += [next_oy.eq(oy + 1), next_ox.eq(0)]
            with m.If(oy == p.out_h - 1):
                m.d.comb += [next_oy.eq(0), next_ibase.eq(ibase + p.in_pixels)]

        s0 = Signal(step_layout(w, self._in_groups, self._out_groups))
        s0_oy, s0_ox, s0_i, s0_j = (Signal(w.coord, name=n) for n in ("s0_oy", "s0_ox", "s0_i", "s0_j"))
        s0_ct_word, s0_nt_word = Signal(w.coord), Signal(w.coord)
        s0_pixel, s0_ibase = Signal(w.pixel), Signal(w.pixel)
        m.d.sync += [
            s0.valid.eq(running),
            s0.act_group.eq(ct_group),
            s0.w_addr.eq(w_nt_base + kt),
            s0.first.eq(kt == 0),
            s0.last.eq(end_of_k),
            s0.acc_addr.eq(cnt),
            s0.p_addr.eq(p.p_base + nt),
            s0.out_group.eq(nt_group),
            s0_oy.eq(oy), s0_ox.eq(ox), s0_i.eq(i), s0_j.eq(j),
            s0_ct_word.eq(ct_word), s0_nt_word.eq(nt_word),
            s0_pixel.eq(m0 + cnt), s0_ibase.eq(ibase),
        ]

        with m.If(~running & self.start):
            m.d.sync += [
                running.eq(1), nt.eq(0), ct.eq(0), kt.eq(0), i.eq(0), j.eq(0),
                ct_word.eq(0), ct_group.eq(0), nt_word.eq(0), nt_group.eq(0),
                m0.eq(0), cnt.eq(0), oy0.eq(0), ox0.eq(0), oy.eq(0), ox.eq(0),
                ibase0.eq(0), ibase.eq(0), w_nt_base.eq(p.w_base),
            ]
        with m.Elif(running):
            with m.If(~end_of_block):
                m.d.sync += [cnt.eq(cnt + 1), oy.eq(next_oy), ox.eq(next_ox), ibase.eq(next_ibase)]
            with m.Else():
                m.d.sync += cnt.eq(0)
                with m.If(~end_of_k):
                    # Next weight tile, same pixel block.
                    m.d.sync += [kt.eq(kt + 1), oy.eq(oy0), ox.eq(ox0), ibase.eq(ibase0)]
                    with m.If(~end_of_ct):
                        m.d.sync += ct.eq(ct + 1)
                        with m.If(ct_group == self._in_groups - 1):
                            m.d.sync += [ct_group.eq(0), ct_word.eq(ct_word + 1)]
                        with m.Else():
                            m.d.sync += ct_group.eq(ct_group + 1)
                    with m.Else():
                        m.d.sync += [ct.eq(0), ct_group.eq(0), ct_word.eq(0)]
                        with m.If(~end_of_j):
                            m.d.sync += j.eq(j + 1)
                        with m.Else():
                            m.d.sync += [j.eq(0), i.eq(i + 1)]
                with m.Else():
                    m.d.sync += [kt.eq(0), ct.eq(0), ct_group.eq(0), ct_word.eq(0), i.eq(0), j.eq(0)]
                    with m.If(~end_of_m):
                        # Next block of pixels.
                        m.d.sync += [m0.eq(m0 + block_len), oy0.eq(next_oy), ox0.eq(next_ox),
                                     oy.eq(next_oy), ox.eq(next_ox),
                                     ibase0.eq(next_ibase), ibase.eq(next_ibase)]
                    with m.Else():
                        m.d.sync += [m0.eq(0), oy0.eq(0), ox0.eq(0), oy.eq(0), ox.eq(0),
                                     ibase0.eq(0), ibase.eq(0),
                                     nt.eq(nt + 1), w_nt_base.eq(w_nt_base + p.k_tiles)]
                        with m.If(nt_group == self._out_groups - 1):
                            m.d.sync += [nt_group.eq(0), nt_word.eq(nt_word + 1)]
                        with m.Else():
                            m.d.sync += nt_group.eq(nt_group + 1)
                        with m.If(end_of_nt):
                            m.d.sync += running.eq(0)

        # Stage 1: input coordinates and padding ----------------------------------------
        s1 = Signal.like(s0)
        iy, ix = Signal(coord_s), Signal(coord_s)
        s1_iy, s1_ix = Signal(coord_s), Signal(coord_s)
        s1_ct_word, s1_out_pixel_words = Signal(w.coord), Signal(w.act_addr)
        s1_ibase = Signal(w.pixel)
        m.d.comb += [
            iy.eq(s0_oy * p.sh + s0_i - p.ph),
            ix.eq(s0_ox * p.sw + s0_j - p.pw),
        ]
        m.d.sync += [
            s1.eq(s0),
            s1.pad.eq((iy < 0) | (iy >= p.in_h) | (ix < 0) | (ix >= p.in_w)),
            s1_iy.eq(iy), s1_ix.eq(ix), s1_ct_word.eq(s0_ct_word), s1_ibase.eq(s0_ibase),
            s1_out_pixel_words.eq(p.out_base + s0_pixel * p.out_cw + s0_nt_word),
        ]

        # Stage 2: input pixel index.
        s2, s2_pixel = Signal.like(s0), Signal(w.pixel)
        s2_ct_word, s2_out = Signal(w.coord), Signal(w.act_addr)
        m.d.sync += [s2.eq(s1), s2_pixel.eq(s1_ibase + s1_iy * p.in_w + s1_ix),
                     s2_ct_word.eq(s1_ct_word), s2_out.eq(s1_out_pixel_words)]

        # Stage 3: memory addresses (padding reads address 0; its data is replaced).
        m.d.sync += [
            self.step.eq(s2),
            self.step.act_addr.eq(Mux(s2.pad, 0, p.in_base + s2_pixel * p.in_cw + s2_ct_word)),
            self.step.out_addr.eq(s2_out),
        ]

        m.d.comb += self.busy.eq(running | s0.valid | s1.valid | s2.valid | self.step.valid)
        return m
