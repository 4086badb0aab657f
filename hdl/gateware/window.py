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
            "in_cw": source.words_per_pixel, "in_pixels": source.height * source.width,
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
