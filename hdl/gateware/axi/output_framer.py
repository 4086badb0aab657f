"""The core's output beats to AXI4-Stream frames of another width, TLAST on the last.

Each core beat is cut into ``tdata_bits`` pieces, least significant first; the last
core beat of an inference only up to its last used byte
(:class:`~hdl.gateware.axi.frame_shape.FrameShape`). An inference whose input frame had
an error (``drop``, sampled with its first core beat) is taken from the core and not sent.
"""
from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.config import OUTPUT_CLASSES
from hdl.gateware.axi.frame_shape import FrameShape
from hdl.gateware.axi.input_framer import axis_signature
from hdl.gateware.output_unit import output_beat_layout


class OutputFramer(wiring.Component):
    """Members
    -------
    beats: In stream of the core's output beats (values, one-hot classes, last).
    m_axis_*: the AXI4-Stream master (TDATA of ``shape.tdata_bits``).
    drop: In, the inference now starting had a frame error: take its beats, send nothing.
    done: Out, pulses when an inference ends: its last piece sent, or its last beat dropped.
    dropped: Out, with ``done``: the inference was dropped.
    class_index: Out, the predicted class of the last inference (from the one-hot classes).
    """

    def __init__(self, shape: FrameShape):
        if not isinstance(shape, FrameShape):
            raise TypeError(f"shape must be a FrameShape, not {shape!r}")
        self._shape = shape
        super().__init__({"beats": In(stream.Signature(output_beat_layout(shape.beat_bits))),
                          **axis_signature("m_axis", shape.tdata_bits, slave=False),
                          "drop": In(1), "done": Out(1), "dropped": Out(1),
                          "class_index": Out(range(OUTPUT_CLASSES))})

    def elaborate(self, platform):
        m = Module()
        s = self._shape
        per, width = s.pieces_per_beat, s.tdata_bits
        beat = Signal(s.beat_bits)
        full, last_beat = Signal(), Signal()
        first = Signal(init=1)                        # the next core beat starts an inference
        dropping = Signal()
        piece = Signal(range(per))

        m.d.comb += self.beats.ready.eq(~full)
        with m.If(self.beats.valid & self.beats.ready):
            m.d.sync += [beat.eq(self.beats.payload.values), last_beat.eq(self.beats.payload.last),
                         full.eq(1), first.eq(self.beats.payload.last), piece.eq(0)]
            with m.If(first):
                m.d.sync += dropping.eq(self.drop)
            with m.If(self.beats.payload.last):
                for index in range(OUTPUT_CLASSES):
                    with m.If(self.beats.payload.classes[index]):
                        m.d.sync += self.class_index.eq(index)

        end_piece = Signal()
        m.d.comb += end_piece.eq(Mux(last_beat, piece == s.last_pieces - 1, piece == per - 1))
        for p in range(per):
            with m.If(piece == p):
                m.d.comb += self.m_axis_tdata.eq(beat[p * width:(p + 1) * width])
        m.d.comb += [self.m_axis_tvalid.eq(full & ~dropping), self.m_axis_tlast.eq(last_beat & end_piece)]

        with m.If(full & (dropping | self.m_axis_tready)):
            with m.If(dropping | end_piece):
                m.d.sync += full.eq(0)
                with m.If(last_beat):
                    m.d.comb += [self.done.eq(1), self.dropped.eq(dropping)]
            with m.Else():
                m.d.sync += piece.eq(piece + 1)
        return m
