"""The steps of a taps-on-rows depthwise op (see :mod:`hdl.compiler.program`).

It walks, with counters and additions only, the output columns (``for nt, image, ox``)
top to bottom. A column is a run of *slots*: slot 0 pushes the ``kh`` rows of the
first output pixel, one a cycle, and computes its tap tile 0 with the last push; each
further slot (``T = max(sy, tap_tiles)`` cycles) computes the previous pixel's tap tiles
1, 2, ... in its first cycles, pushes this pixel's ``sy`` new rows in its last ``sy``
cycles and computes this pixel's tile 0 with the last one; a tail slot computes the last
pixel's remaining tiles. A pixel's tiles are thus consecutive cycles, the pixels ``T``
cycles apart, and a column takes ``kh + (out_h - 1) * T + tap_tiles - 1`` cycles. A
tile computed after pushes for the next pixel carries how many (``depth``): its window
sits that many rows higher in the engine's buffer.

A push reads the ``kw`` consecutive words of input row ``iy`` (one more each push, from
``-py`` at a column's top) from column ``ox * sx - px`` on; words outside the input read
the zero point. All tap tiles of an output pixel accumulate into accumulator 0. The steps
leave one cycle after the counters, registered.
"""
from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import READ_WORDS, GemmOp
from hdl.compiler.widths import Widths
from hdl.config import AcceleratorConfig
from hdl.gateware.engine_busy import registered_busy
from hdl.gateware.step import step_stream


def taps_on_rows_layout(w: Widths) -> data.StructLayout:
    """A taps-on-rows op's constants beyond the window's and the GEMM op's: word strides
    of the planar input (between channel words, between images) and of the output
    (between its columns, rows, images and channel words), the first row's offset, the
    batch, and the cycles of a slot (``T``, see the module docstring)."""
    addr = unsigned(w.act_addr)
    return data.StructLayout({
        "in_plane": addr, "in_image": addr, "row_start": signed(w.act_addr + w.coord + 2),
        "out_col": addr, "out_row": addr, "out_image": addr, "out_nt": addr,
        "images": unsigned(w.pixel), "period": unsigned(w.coord + 1),
    })


def taps_on_rows_params(op: GemmOp, config: AcceleratorConfig) -> dict:
    """:func:`taps_on_rows_layout`'s values for ``op`` (zeros for other ops)."""
    if not op.tap_tiles:
        return {}
    source, dest = op.source, op.dest
    if dest.planar:                         # word nt * pixels + p
        pixel, out_nt = 1, dest.pixels
    else:                                   # word p * words_per_pixel + nt
        pixel, out_nt = dest.words_per_pixel, 1
    return {"in_plane": source.pixels, "in_image": source.height * source.width,
            "row_start": -op.padding[0] * source.width,
            "out_col": pixel, "out_row": dest.width * pixel, "out_image": dest.height * dest.width * pixel,
            "out_nt": out_nt, "images": dest.images, "period": op.slot_cycles}


class TapsOnRowsSteps(wiring.Component):
    """Issues the steps of one taps-on-rows op.

    Members
    -------
    params: In, the op's GEMM constants (``step_generator.gemm_params_layout``), held
    stable while ``busy``.
    start: In, a one-cycle pulse that starts the op (ignored while busy).
    busy: Out, a register (:func:`~hdl.gateware.engine_busy.registered_busy`): high from the
    cycle after ``start`` to the cycle after the last step has left ``steps``.
    steps: Out stream, registered.
    """

    def __init__(self, widths: Widths, config: AcceleratorConfig, params_layout: data.StructLayout):
        self._w, self._cfg = widths, config
        super().__init__({
            "params": In(params_layout),
            "start": In(1),
            "busy": Out(1),
            "steps": Out(step_stream(widths, config)),
        })

    def elaborate(self, platform):
        m = Module()
        w, cfg, p = self._w, self._cfg, self.params
        g, t = p.window, p.taps
        addr_s = signed(w.act_addr + w.coord + 3)
        coord_s = signed(w.coord + 2)
        count = max(w.coord, w.tile) + 1

        running = Signal()
        nt, image, ox = Signal(w.tile), Signal(w.pixel), Signal(w.coord)
        slot, q = Signal(w.coord + 1), Signal(count)
        iy, ix0 = Signal(coord_s), Signal(coord_s)
        row_off = Signal(addr_s)                       # iy * in_w
        in_nt, in_image = Signal(addr_s), Signal(addr_s)   # plane nt's first word; the image's
        out_nt, out_image, out_col, out_cur, out_prev = (
            Signal(w.act_addr, name=n) for n in ("out_nt_base", "out_image", "out_col", "out_cur", "out_prev"))
        w_nt = Signal(w.weight_addr)

        # The slot's cycle q: see the module docstring.
        tiles, period = p.k_tiles, t.period
        first_slot, tail = slot == 0, (slot == g.out_h) & (tiles > 1)
        slot_len = Signal(count)
        m.d.comb += slot_len.eq(Mux(first_slot, g.kh, Mux(tail, tiles - 1, period)))
        pushing = q >= period - g.sh                  # a middle slot's pushes
        push = first_slot | (~tail & pushing)
        tile_0 = Mux(first_slot, q == g.kh - 1, ~tail & (q == period - 1))
        earlier_tile = ~first_slot & (q + 1 < tiles)
        compute = tile_0 | earlier_tile
        k, depth = Signal(w.tile), Signal(count)       # the tap tile (0 on a push-only step)
        m.d.comb += [k.eq(Mux(tile_0 | ~compute, 0, q + 1)),
                     depth.eq(Mux(tile_0 | tail | ~pushing, 0, q - (period - g.sh) + 1))]
        end_slot = running & (q == slot_len - 1)
        end_column = end_slot & Mux(tiles > 1, slot == g.out_h, slot == g.out_h - 1)
        end_image = end_column & (ox == g.out_w - 1)
        end_tile = end_image & (image == t.images - 1)
        start = ~self.busy & self.start

        with m.If(start):
            m.d.sync += [running.eq(1), nt.eq(0), image.eq(0), ox.eq(0), slot.eq(0), q.eq(0),
                         iy.eq(-g.ph), row_off.eq(t.row_start), ix0.eq(-g.pw),
                         in_nt.eq(g.in_base), in_image.eq(g.in_base),
                         out_nt.eq(p.out_base), out_image.eq(p.out_base), out_col.eq(p.out_base),
                         out_cur.eq(p.out_base), w_nt.eq(p.w_base)]
        with m.Elif(running):
            m.d.sync += q.eq(Mux(end_slot, 0, q + 1))
            with m.If(end_column):
                m.d.sync += [iy.eq(-g.ph), row_off.eq(t.row_start), slot.eq(0)]
            with m.Else():
                with m.If(push):
                    m.d.sync += [iy.eq(iy + 1), row_off.eq(row_off + g.in_w)]
                with m.If(end_slot):
                    m.d.sync += [slot.eq(slot + 1), out_prev.eq(out_cur), out_cur.eq(out_cur + t.out_row)]
            with m.If(end_column & ~end_image):
                m.d.sync += [ox.eq(ox + 1), ix0.eq(ix0 + g.sw), out_col.eq(out_col + t.out_col),
                             out_cur.eq(out_col + t.out_col)]
            with m.If(end_image & ~end_tile):
                m.d.sync += [ox.eq(0), ix0.eq(-g.pw), image.eq(image + 1), in_image.eq(in_image + t.in_image),
                             out_image.eq(out_image + t.out_image), out_col.eq(out_image + t.out_image),
                             out_cur.eq(out_image + t.out_image)]
            with m.If(end_tile):
                m.d.sync += [ox.eq(0), ix0.eq(-g.pw), image.eq(0), nt.eq(nt + 1),
                             in_nt.eq(in_nt + t.in_plane), in_image.eq(in_nt + t.in_plane),
                             out_nt.eq(out_nt + t.out_nt), out_image.eq(out_nt + t.out_nt),
                             out_col.eq(out_nt + t.out_nt), out_cur.eq(out_nt + t.out_nt),
                             w_nt.eq(w_nt + tiles)]
                with m.If(nt == p.nt_count - 1):
                    m.d.sync += running.eq(0)

        # The step, registered.
        s, valid = self.steps.payload, self.steps.valid
        row_pad = (iy < 0) | (iy >= g.in_h)
        read = Signal(addr_s)
        m.d.comb += read.eq(in_image + row_off + ix0)
        m.d.sync += [
            valid.eq(running),
            s.act_addr.eq(read[:w.act_addr]), s.lane.eq(0), s.pad.eq(0), s.row_lo.eq(0), s.row_hi.eq(cfg.rows),
            s.w_addr.eq(w_nt + k), s.w_bits.eq(p.w_bits),
            s.first.eq(k == 0), s.last.eq(k == tiles - 1), s.acc_addr.eq(0),
            s.p_addr.eq(p.p_base + nt),
            s.out_addr.eq(Mux(tile_0, out_cur, out_prev)), s.out_lane.eq(0), s.out_count.eq(cfg.cols),
            s.taps_on_rows.eq(1), s.push.eq(running & push), s.push_only.eq(~compute),
            s.tap_tile.eq(k), s.depth.eq(depth), s.kh.eq(g.kh), s.kw.eq(g.kw),
        ]
        for j in range(READ_WORDS):
            ix = ix0 + j
            m.d.sync += s.pad_words[j].eq(row_pad | (ix < 0) | (ix >= g.in_w))
        m.d.comb += self.busy.eq(registered_busy(m, running | valid, start))
        return m
