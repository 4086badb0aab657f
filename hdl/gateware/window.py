"""Window addressing, shared by convolution steps and pooling.

An output position ``(oy, ox)`` and a kernel tap ``(i, j)`` read the input pixel::

    iy = oy * stride_h + i - pad_h        ix = ox * stride_w + j - pad_w

which is padding when it lies outside the input. This module holds that arithmetic once,
as a three-stage pipeline that ends in an activation-memory address.
"""
from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import TensorPlacement
from hdl.compiler.widths import Widths


def window_layout(w: Widths) -> data.StructLayout:
    """The geometry of a windowed pass over one input tensor (an op's constants)."""
    coord = unsigned(w.coord)
    return data.StructLayout({
        "in_base": unsigned(w.act_addr), "in_h": coord, "in_w": coord, "in_cw": coord,
        "in_pixels": unsigned(w.pixel),
        "kh": coord, "kw": coord, "sh": coord, "sw": coord, "ph": coord, "pw": coord,
        "out_h": coord, "out_w": coord,
    })


def window_params(source: TensorPlacement, dest: TensorPlacement, kernel, stride, padding) -> dict:
    """:func:`window_layout`'s values for one op of the program."""
    return {"in_base": source.base, "in_h": source.height, "in_w": source.width,
            "in_cw": source.pixel_stride, "in_pixels": source.height * source.width,
            "kh": kernel[0], "kw": kernel[1], "sh": stride[0], "sw": stride[1],
            "ph": padding[0], "pw": padding[1], "out_h": dest.height, "out_w": dest.width}


def tap_layout(w: Widths) -> data.StructLayout:
    """One read of a window: output position, kernel tap, the image's first input pixel
    (batches put images one after another) and the word within the pixel's channels."""
    coord = unsigned(w.coord)
    return data.StructLayout({"oy": coord, "ox": coord, "i": coord, "j": coord,
                              "image_base": unsigned(w.pixel), "word": coord})


class WindowAddress(wiring.Component):
    """The input address of a tap, :attr:`LATENCY` cycles after the tap.

    Stage 1 computes the input coordinates and the padding test, stage 2 the pixel index,
    stage 3 the memory address (0 for padding; the reader replaces that data).

    Members
    -------
    window: In, the op's geometry, held while taps flow.
    tap: In, one tap a cycle.
    addr, pad: Out, registered, for the tap of ``LATENCY`` cycles ago.
    """
    LATENCY = 3

    def __init__(self, widths: Widths):
        self._w = widths
        super().__init__({
            "window": In(window_layout(widths)),
            "tap": In(tap_layout(widths)),
            "addr": Out(unsigned(widths.act_addr)),
            "pad": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        w, g, tap = self._w, self.window, self.tap
        coord_s = signed(w.coord + 1)

        iy, ix = Signal(coord_s), Signal(coord_s)
        m.d.comb += [iy.eq(tap.oy * g.sh + tap.i - g.ph), ix.eq(tap.ox * g.sw + tap.j - g.pw)]
        s1_iy, s1_ix, s1_pad = Signal(coord_s), Signal(coord_s), Signal()
        s1_base, s1_word = Signal(w.pixel), Signal(w.coord)
        m.d.sync += [s1_iy.eq(iy), s1_ix.eq(ix), s1_base.eq(tap.image_base), s1_word.eq(tap.word),
                     s1_pad.eq((iy < 0) | (iy >= g.in_h) | (ix < 0) | (ix >= g.in_w))]

        s2_pixel, s2_word, s2_pad = Signal(w.pixel), Signal(w.coord), Signal()
        m.d.sync += [s2_pixel.eq(s1_base + s1_iy * g.in_w + s1_ix), s2_word.eq(s1_word), s2_pad.eq(s1_pad)]

        m.d.sync += [self.addr.eq(Mux(s2_pad, 0, g.in_base + s2_pixel * g.in_cw + s2_word)),
                     self.pad.eq(s2_pad)]
        return m


class FoldedWindowAddress(wiring.Component):
    """The read of a folded convolution's tile, :attr:`LATENCY` cycles after the tap.

    The tap's ``j`` is the tile ``t`` within kernel row ``i``; the source is packed with
    ``in_cw`` channels a pixel. The tile is the ``rows`` elements from element
    ``(in_base * B) + (image_base + iy * in_w + ix0) * in_cw + t * rows``, ``ix0 = ox * sw - pw``:
    word ``addr`` from lane ``lane`` on (it may run into word ``addr + 1``). Rows
    ``row_lo <= r < row_hi`` hold taps inside the input; the others read the zero point.
    ``pad`` marks a kernel row outside the input (``addr`` is then 0).
    """
    LATENCY = WindowAddress.LATENCY

    def __init__(self, widths: Widths, rows: int, bank_width: int):
        self._w, self._rows, self._bank = widths, rows, bank_width
        super().__init__({
            "window": In(window_layout(widths)),
            "tap": In(tap_layout(widths)),
            "addr": Out(unsigned(widths.act_addr)),
            "lane": Out(range(bank_width)),
            "row_lo": Out(range(rows + 1)), "row_hi": Out(range(rows + 1)),
            "pad": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        w, g, tap, rows, bank = self._w, self.window, self.tap, self._rows, self._bank
        lane_bits = (bank - 1).bit_length()
        coord_s = signed(w.coord + 1)
        elem_s = signed(w.act_addr + lane_bits + 2)

        # Stage 1: the kernel row's input row and first column, and the padding around it.
        iy, ix0 = Signal(coord_s), Signal(coord_s)
        m.d.comb += [iy.eq(tap.oy * g.sh + tap.i - g.ph), ix0.eq(tap.ox * g.sw - g.pw)]
        s1_iy, s1_ix0, s1_pad = Signal(coord_s), Signal(coord_s), Signal()
        s1_left, s1_right = Signal(coord_s), Signal(coord_s)         # taps [left, right) are inside
        s1_base, s1_off = Signal(w.pixel), Signal(elem_s)
        m.d.sync += [s1_iy.eq(iy), s1_ix0.eq(ix0), s1_base.eq(tap.image_base), s1_off.eq(tap.j * rows),
                     s1_pad.eq((iy < 0) | (iy >= g.in_h)),
                     s1_left.eq(Mux(ix0 < 0, -ix0, 0)),
                     s1_right.eq(Mux(g.in_w - ix0 < g.kw, g.in_w - ix0, g.kw))]

        # Stage 2: the row's first pixel, and the inside taps as tile rows.
        s2_pixel, s2_off, s2_pad = Signal(signed(w.pixel + 1)), Signal(elem_s), Signal()
        s2_lo, s2_hi = Signal(elem_s), Signal(elem_s)
        m.d.sync += [s2_pixel.eq(s1_base + s1_iy * g.in_w + s1_ix0), s2_off.eq(s1_off), s2_pad.eq(s1_pad),
                     s2_lo.eq(s1_left * g.in_cw - s1_off), s2_hi.eq(s1_right * g.in_cw - s1_off)]

        # Stage 3: the element address as word and lane; the bounds clamped to the rows.
        # (The guard words before a packed tensor keep the element of an inside kernel row
        # positive.)
        element = Signal(elem_s)
        m.d.comb += element.eq(g.in_base * bank + s2_pixel * g.in_cw + s2_off)
        word, lane = divmod_by_constant(m, element.as_unsigned()[:len(element) - 1], bank)
        m.d.sync += [self.addr.eq(Mux(s2_pad, 0, word)), self.lane.eq(lane), self.pad.eq(s2_pad)]
        for bound, value in ((self.row_lo, s2_lo), (self.row_hi, s2_hi)):
            m.d.sync += bound.eq(Mux(value < 0, 0, Mux(value > rows, rows, value)))
        return m


def divmod_by_constant(m: Module, value, divisor: int):
    """``(value // divisor, value % divisor)`` of an unsigned value, combinationally: a shift
    for the power-of-two part, and for the odd part ``o`` a multiplication by
    ``ceil(2**k / o)`` and a shift by ``k = N + bits(o)``, exact for every N-bit value."""
    n = len(value)
    twos = (divisor & -divisor).bit_length() - 1
    odd = divisor >> twos
    high = value[twos:]
    if odd == 1:
        quotient = high
    else:
        k = len(high) + odd.bit_length()
        quotient = Signal(len(high), name="quotient")
        m.d.comb += quotient.eq((high * -(-(1 << k) // odd)) >> k)
    remainder = Signal(range(divisor), name="remainder")
    m.d.comb += remainder.eq(value - quotient * divisor)
    return quotient, remainder
