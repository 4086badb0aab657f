"""Window addressing, shared by convolution steps and pooling.

An output position ``(oy, ox)`` and a kernel tap ``(i, j)`` read the input pixel::

    iy = oy * stride_h + i - pad_h        ix = ox * stride_w + j - pad_w

which is padding when it lies outside the input. This module holds that arithmetic once,
as a six-stage pipeline that ends in an activation-memory address.
"""
from types import SimpleNamespace

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import TensorPlacement
from hdl.compiler.widths import Widths
from hdl.gateware.pipeline import delayed
from hdl.gateware.shift_add import pipelined_shift_add_product, shift_add_product


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

    Every multiplication (a shift-add tree: :mod:`hdl.gateware.shift_add`) has a stage of
    its own with a registered result (the products' low bits are all that the sums keep,
    so truncating them to the sums' widths changes nothing):

    1. ``oy * sh``, ``ox * sw``; 2. the input coordinates and the padding test;
    3. ``iy * in_w``; 4. the pixel index; 5. ``pixel * in_cw``; 6. the memory address
    (0 for padding; the reader replaces that data); 7-9. registers only, so that
    :class:`FoldedWindowAddress` (whose word and lane take a division by the bank
    width over stages 7 to 9) has the same latency.

    Members
    -------
    window: In, the op's geometry, held while taps flow.
    tap: In, one tap a cycle.
    addr, pad: Out, registered, for the tap of ``LATENCY`` cycles ago.
    """
    LATENCY = 9

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

        s1 = _window_products(m, w, g, tap)
        s1_i, s1_j, s1_base, s1_word = (delayed(m, v, 1, n) for v, n in (
            (tap.i, "s1_i"), (tap.j, "s1_j"), (tap.image_base, "s1_base"), (tap.word, "s1_word")))

        iy, ix = Signal(coord_s), Signal(coord_s)
        m.d.comb += [iy.eq(s1.oy_sh + s1_i - g.ph), ix.eq(s1.ox_sw + s1_j - g.pw)]
        s2_iy, s2_ix, s2_pad = Signal(coord_s), Signal(coord_s), Signal()
        m.d.sync += [s2_iy.eq(iy), s2_ix.eq(ix),
                     s2_pad.eq((iy < 0) | (iy >= g.in_h) | (ix < 0) | (ix >= g.in_w))]
        s2_base, s2_word = delayed(m, s1_base, 1, "s2_base"), delayed(m, s1_word, 1, "s2_word")

        s3_row = Signal(signed(w.pixel + 1))
        m.d.sync += s3_row.eq(shift_add_product(s2_iy, g.in_w, len(s3_row)))
        s3_ix, s3_base = delayed(m, s2_ix, 1, "s3_ix"), delayed(m, s2_base, 1, "s3_base")

        s4_pixel = Signal(w.pixel)
        m.d.sync += s4_pixel.eq(s3_base + s3_row + s3_ix)

        s5_offset = Signal(w.act_addr)
        m.d.sync += s5_offset.eq(shift_add_product(s4_pixel, g.in_cw, len(s5_offset)))
        word = delayed(m, s2_word, 3, "s5_word")
        pad = delayed(m, s2_pad, 3, "s5_pad")

        s6_addr, s6_pad = Signal(w.act_addr), Signal()
        m.d.sync += [s6_addr.eq(Mux(pad, 0, g.in_base + s5_offset + word)), s6_pad.eq(pad)]
        m.d.comb += [self.addr.eq(delayed(m, s6_addr, self.LATENCY - 6, "addr")),
                     self.pad.eq(delayed(m, s6_pad, self.LATENCY - 6, "pad"))]
        return m


def _window_products(m: Module, w: Widths, g, tap):
    """Stage 1 of both window pipelines: ``oy * sh`` and ``ox * sw``, registered."""
    coord_s = signed(w.coord + 1)
    oy_sh, ox_sw = Signal(coord_s, name="oy_sh"), Signal(coord_s, name="ox_sw")
    m.d.sync += [oy_sh.eq(shift_add_product(tap.oy, g.sh, len(oy_sh))),
                 ox_sw.eq(shift_add_product(tap.ox, g.sw, len(ox_sw)))]
    return SimpleNamespace(oy_sh=oy_sh, ox_sw=ox_sw)


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
        # The stages follow WindowAddress's: a multiplication a stage, its result registered.

        # Stage 1: oy * sh, ox * sw; the tile's offset in the kernel row.
        s1 = _window_products(m, w, g, tap)
        s1_off = Signal(elem_s)
        m.d.sync += s1_off.eq(shift_add_product(tap.j, rows, len(s1_off)))
        s1_i, s1_base = delayed(m, tap.i, 1, "s1_i"), delayed(m, tap.image_base, 1, "s1_base")

        # Stage 2: the kernel row's input row and first column, and the padding around it.
        iy, ix0 = Signal(coord_s), Signal(coord_s)
        m.d.comb += [iy.eq(s1.oy_sh + s1_i - g.ph), ix0.eq(s1.ox_sw - g.pw)]
        s2_iy, s2_ix0, s2_pad = Signal(coord_s), Signal(coord_s), Signal()
        s2_left, s2_right = Signal(coord_s), Signal(coord_s)         # taps [left, right) are inside
        m.d.sync += [s2_iy.eq(iy), s2_ix0.eq(ix0), s2_pad.eq((iy < 0) | (iy >= g.in_h)),
                     s2_left.eq(Mux(ix0 < 0, -ix0, 0)),
                     s2_right.eq(Mux(g.in_w - ix0 < g.kw, g.in_w - ix0, g.kw))]
        s2_base, s2_off = delayed(m, s1_base, 1, "s2_base"), delayed(m, s1_off, 1, "s2_off")

        # Stage 3: iy * in_w, and the inside taps' extent in elements.
        s3_row = Signal(signed(w.pixel + 1))
        s3_left, s3_right = Signal(elem_s), Signal(elem_s)
        m.d.sync += [s3_row.eq(shift_add_product(s2_iy, g.in_w, len(s3_row))),
                     s3_left.eq(shift_add_product(s2_left, g.in_cw, len(s3_left))),
                     s3_right.eq(shift_add_product(s2_right, g.in_cw, len(s3_right)))]
        s3_ix0, s3_base, s3_off = (delayed(m, v, 1, n) for v, n in (
            (s2_ix0, "s3_ix0"), (s2_base, "s3_base"), (s2_off, "s3_off")))

        # Stage 4: the row's first pixel, and the inside taps as tile rows.
        s4_pixel, s4_lo, s4_hi = Signal(signed(w.pixel + 1)), Signal(elem_s), Signal(elem_s)
        m.d.sync += [s4_pixel.eq(s3_base + s3_row + s3_ix0), s4_lo.eq(s3_left - s3_off),
                     s4_hi.eq(s3_right - s3_off)]
        s4_off = delayed(m, s3_off, 1, "s4_off")

        # Stage 5: pixel * in_cw; the tensor's first element plus the tile's offset.
        s5_elements, s5_start = Signal(elem_s), Signal(elem_s)
        m.d.sync += [s5_elements.eq(shift_add_product(s4_pixel, g.in_cw, len(s5_elements))),
                     s5_start.eq(shift_add_product(g.in_base, bank, len(s5_start)) + s4_off)]

        # Stage 6: the element. (The guard words before a packed tensor keep the element of
        # an inside kernel row positive.)
        s6_element = Signal(elem_s)
        m.d.sync += s6_element.eq(s5_elements + s5_start)

        # Stages 7-8: the element as word and lane (a division by the bank width);
        # stage 9: registered, the bounds clamped to the rows.
        split = self.LATENCY - 7
        word, lane = divmod_by_constant(m, s6_element.as_unsigned()[:len(s6_element) - 1], bank, stages=split)
        pad = delayed(m, s2_pad, self.LATENCY - 3, "pad")
        lo, hi = (delayed(m, v, self.LATENCY - 5, n) for v, n in ((s4_lo, "lo"), (s4_hi, "hi")))
        m.d.sync += [self.addr.eq(Mux(pad, 0, word)), self.lane.eq(lane), self.pad.eq(pad)]
        for bound, value in ((self.row_lo, lo), (self.row_hi, hi)):
            m.d.sync += bound.eq(Mux(value < 0, 0, Mux(value > rows, rows, value)))
        return m


def divmod_by_constant(m: Module, value, divisor: int, stages: int = 0):
    """``(value // divisor, value % divisor)`` of an unsigned value: a shift for the
    power-of-two part, and for the odd part ``o`` a multiplication by ``ceil(2**k / o)``
    and a shift by ``k = N + bits(o)``, exact for every N-bit value. Combinational with
    ``stages=0``; else both follow ``value`` ``stages`` cycles later, the multiplication
    cut into that many registered parts (the remainder is a few bits' subtraction after)."""
    if stages < 0:
        raise ValueError(f"a division's stages must be 0 or more, not {stages}")
    twos = (divisor & -divisor).bit_length() - 1
    odd = divisor >> twos
    high = value[twos:]
    if odd == 1:
        quotient = delayed(m, high, stages, "quotient")
    else:
        k = len(high) + odd.bit_length()
        reciprocal = -(-(1 << k) // odd)
        if stages:
            product = pipelined_shift_add_product(m, high, reciprocal, k + len(high), stages, "quotient_product")
        else:
            product = shift_add_product(high, reciprocal, k + len(high))
        quotient = Signal(len(high), name="quotient")
        m.d.comb += quotient.eq(product[k:])
    # The remainder is below the divisor, so its bits of the difference are all it needs.
    remainder = Signal(range(divisor), name="remainder")
    width = len(remainder)
    low = delayed(m, value[:width], stages, "dividend_low")
    m.d.comb += remainder.eq(low - shift_add_product(quotient[:width], divisor, width))
    return quotient, remainder
