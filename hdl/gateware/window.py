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

    Every multiplication (a shift-add tree: :mod:`hdl.gateware.shift_add`) has two stages
    of its own, its adder tree cut in two (in one stage, a product of two registers was the
    window's critical path), with a registered result (the products' low bits are all that
    the sums keep, so truncating them to the sums' widths changes nothing):

    1-2. ``oy * sh``, ``ox * sw``; 3. the input coordinates and the padding test;
    4-5. ``iy * in_w``; 6. the pixel index; 7-8. ``pixel * in_cw``; 9. the memory address
    (0 for padding; the reader replaces that data); 10-12. registers only, so that
    :class:`FoldedWindowAddress` (whose word and lane take a division by the bank
    width over stages 10 and 11) has the same latency.

    Members
    -------
    window: In, the op's geometry, held while taps flow.
    tap: In, one tap a cycle.
    addr, pad: Out, registered, for the tap of ``LATENCY`` cycles ago.
    """
    LATENCY = 12

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

        s2 = _window_products(m, w, g, tap)
        s2_base, s2_word = (delayed(m, v, 2, n) for v, n in ((tap.image_base, "s2_base"), (tap.word, "s2_word")))
        rows = _kernel_offset(m, w, tap.i, g.ph, g.in_h, "y")
        cols = _kernel_offset(m, w, tap.j, g.pw, g.in_w, "x")

        # Stage 3: the input row and column, and the four padding tests, each one adder or
        # comparison against stage 2's registers; stage 4: whether the tap is padding.
        # (The tests and their OR in one stage were the step generator's critical path
        # alone, 139 MHz.)
        s3_iy, s3_ix = Signal(coord_s), Signal(coord_s)
        m.d.sync += [s3_iy.eq(s2.oy_sh - rows.below), s3_ix.eq(s2.ox_sw - cols.below)]
        outside = [delayed(m, test, 1, f"s3_outside{n}") for n, test in enumerate((
            s2.oy_sh < rows.below, s2.oy_sh >= rows.beyond, s2.ox_sw < cols.below, s2.ox_sw >= cols.beyond))]
        s4_pad = delayed(m, outside[0] | outside[1] | outside[2] | outside[3], 1, "s4_pad")

        s5_row = pipelined_shift_add_product(m, s3_iy, g.in_w, w.pixel + 1, stages=2, name="s5_row")
        s5_ix, s5_base = delayed(m, s3_ix, 2, "s5_ix"), delayed(m, s2_base, 3, "s5_base")

        s6_pixel = Signal(w.pixel)
        m.d.sync += s6_pixel.eq(s5_base + s5_row + s5_ix)

        s8_offset = pipelined_shift_add_product(m, s6_pixel, g.in_cw, w.act_addr, stages=2, name="s8_offset")
        word = delayed(m, s2_word, 6, "s8_word")
        pad = delayed(m, s4_pad, 4, "s8_pad")

        s9_addr, s9_pad = Signal(w.act_addr), Signal()
        m.d.sync += [s9_addr.eq(Mux(pad, 0, g.in_base + s8_offset + word)), s9_pad.eq(pad)]
        m.d.comb += [self.addr.eq(delayed(m, s9_addr, self.LATENCY - 9, "addr")),
                     self.pad.eq(delayed(m, s9_pad, self.LATENCY - 9, "pad"))]
        return m


def _kernel_offset(m: Module, w: Widths, index, padding, size, axis: str):
    """Stage 2's registers for a tap's input coordinate ``o * stride + index - padding`` along
    one axis, from the kernel ``index`` a stage ahead: ``below = padding - index`` (the
    coordinate is ``o * stride - below``, negative when ``o * stride < below``) and
    ``beyond = size + padding - index`` (past the input when ``o * stride >= beyond``).
    Stage 3 is then one adder or comparison each, not an adder and a comparison in series."""
    shape = signed(w.coord + 3)
    s1_index = delayed(m, index, 1, f"s1_{axis}_index")
    size_padding = Signal(shape, name=f"{axis}_size_padding")     # the op's parameters hold still
    below, beyond = Signal(shape, name=f"s2_{axis}_below"), Signal(shape, name=f"s2_{axis}_beyond")
    m.d.sync += [size_padding.eq(size + padding), below.eq(padding - s1_index), beyond.eq(size_padding - s1_index)]
    return SimpleNamespace(below=below, beyond=beyond)


def _window_products(m: Module, w: Widths, g, tap):
    """Stages 1 and 2 of both window pipelines: ``oy * sh`` and ``ox * sw``, registered."""
    width = w.coord + 1
    return SimpleNamespace(
        oy_sh=pipelined_shift_add_product(m, tap.oy, g.sh, width, stages=2, name="oy_sh").as_signed(),
        ox_sw=pipelined_shift_add_product(m, tap.ox, g.sw, width, stages=2, name="ox_sw").as_signed())


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
        # The stages follow WindowAddress's: a multiplication two stages, its result registered.

        # Stages 1-2: oy * sh, ox * sw; the tile's offset in the kernel row.
        s2 = _window_products(m, w, g, tap)
        s1_off = Signal(elem_s)
        m.d.sync += s1_off.eq(shift_add_product(tap.j, rows, len(s1_off)))
        s2_base = delayed(m, tap.image_base, 2, "s2_base")
        rows_at = _kernel_offset(m, w, tap.i, g.ph, g.in_h, "y")
        # The kernel row's taps inside the input are [left, right): with ix0 = ox * sw - pw,
        # left = -ix0 where ix0 < 0 (ox * sw < pw), right = in_w - ix0 where that is below
        # kw (ox * sw > in_w + pw - kw). The sums of parameters are registers (they hold
        # still while an op runs).
        width_padding = delayed(m, g.in_w + g.pw, 1, "width_padding")
        right_limit = delayed(m, g.in_w + g.pw - g.kw, 1, "right_limit")

        # Stage 3: the kernel row's input row and first column, and the padding around it,
        # each one adder or comparison and a selection.
        ox_sw = s2.ox_sw
        s3_iy, s3_ix0 = Signal(coord_s), Signal(coord_s)
        s3_left, s3_right = Signal(coord_s), Signal(coord_s)         # taps [left, right) are inside
        outside = [delayed(m, test, 1, f"s3_outside{n}") for n, test in enumerate((
            s2.oy_sh < rows_at.below, s2.oy_sh >= rows_at.beyond))]
        s4_pad = delayed(m, outside[0] | outside[1], 1, "s4_pad")   # (as WindowAddress's)
        m.d.sync += [s3_iy.eq(s2.oy_sh - rows_at.below), s3_ix0.eq(ox_sw - g.pw),
                     s3_left.eq(Mux(ox_sw < g.pw, g.pw - ox_sw, 0)),
                     s3_right.eq(Mux(ox_sw > right_limit, width_padding - ox_sw, g.kw))]
        s3_base, s3_off = delayed(m, s2_base, 1, "s3_base"), delayed(m, s1_off, 2, "s3_off")

        # Stages 4-5: iy * in_w, and the inside taps' extent in elements.
        s5_row = pipelined_shift_add_product(m, s3_iy, g.in_w, w.pixel + 1, stages=2, name="s5_row")
        s5_left, s5_right = (pipelined_shift_add_product(m, v, g.in_cw, elem_s.width, stages=2, name=n)
                             for v, n in ((s3_left, "s5_left"), (s3_right, "s5_right")))
        s5_ix0, s5_base, s5_off = (delayed(m, v, 2, n) for v, n in (
            (s3_ix0, "s5_ix0"), (s3_base, "s5_base"), (s3_off, "s5_off")))

        # Stage 6: the row's first pixel, and the inside taps as tile rows.
        s6_pixel, s6_lo, s6_hi = Signal(signed(w.pixel + 1)), Signal(elem_s), Signal(elem_s)
        m.d.sync += [s6_pixel.eq(s5_base + s5_row + s5_ix0), s6_lo.eq(s5_left - s5_off),
                     s6_hi.eq(s5_right - s5_off)]
        s6_off = delayed(m, s5_off, 1, "s6_off")

        # Stages 7-8: pixel * in_cw; the tensor's first element plus the tile's offset.
        s8_elements = pipelined_shift_add_product(m, s6_pixel, g.in_cw, elem_s.width, stages=2, name="s8_elements")
        s7_start = Signal(elem_s)
        m.d.sync += s7_start.eq(shift_add_product(g.in_base, bank, len(s7_start)) + s6_off)
        s8_start = delayed(m, s7_start, 1, "s8_start")

        # Stage 9: the element. (The guard words before a packed tensor keep the element of
        # an inside kernel row positive.)
        s9_element = Signal(elem_s)
        m.d.sync += s9_element.eq(s8_elements + s8_start)

        # Stages 10-11: the element as word and lane (a division by the bank width);
        # stage 12: registered, the bounds clamped to the rows.
        split = self.LATENCY - 10
        word, lane = divmod_by_constant(m, s9_element.as_unsigned()[:len(s9_element) - 1], bank, stages=split)
        pad = delayed(m, s4_pad, self.LATENCY - 5, "pad")
        m.d.sync += [self.addr.eq(Mux(pad, 0, word)), self.lane.eq(lane), self.pad.eq(pad)]
        # (The clamp's comparisons a stage ahead of its selection: in one stage they were
        # the step generator's critical path alone, 150 MHz.)
        for bound, value, name in ((self.row_lo, s6_lo, "lo"), (self.row_hi, s6_hi, "hi")):
            value = delayed(m, value, self.LATENCY - 8, name)
            negative, beyond, held = (delayed(m, v, 1, f"{name}_{what}") for v, what in (
                (value < 0, "negative"), (value > rows, "beyond"), (value, "held")))
            m.d.sync += bound.eq(Mux(negative, 0, Mux(beyond, rows, held)))
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
