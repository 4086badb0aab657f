"""AXI4-Stream input frames to the core's input beats, with TLAST checked.

Pieces of ``tdata_bits`` are gathered, least significant first, into a core beat, which
is offered to the core once full (or at the frame's end). The frame must end (TLAST) on
its expected last piece (:class:`~hdl.gateware.axi.frame_shape.FrameShape`):

- **early** (TLAST before it): the beats still owed to the core are sent as zeros, so
  the core finishes an inference and stays in step;
- **late** (no TLAST on it): the core has its whole input; the pieces that follow are
  dropped up to and including the next TLAST.

Either way ``errored`` is raised with the frame's last core beat and held until the next
frame's last core beat, and the next frame starts clean: the accelerator resynchronises
at TLAST without a reset. The core's output for an errored frame is for the caller to
drop.
"""
from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.gateware.axi.frame_shape import FrameShape


def axis_signature(prefix: str, tdata_bits: int, slave: bool) -> dict:
    """AXI4-Stream ports ``<prefix>_tdata/tvalid/tready/tlast``; ``slave``: data flows in."""
    into, back = (In, Out) if slave else (Out, In)
    return {f"{prefix}_tdata": into(tdata_bits), f"{prefix}_tvalid": into(1),
            f"{prefix}_tready": back(1), f"{prefix}_tlast": into(1)}


class InputFramer(wiring.Component):
    """Members
    -------
    s_axis_*: the AXI4-Stream slave (TDATA of ``shape.tdata_bits``).
    beats: Out stream of core beats (``shape.beat_bits``).
    errored: Out, the last frame handed to the core had a framing error.
    early, late: Out, one-cycle pulses when a frame error is found.
    receiving: Out, a frame has begun and its last core beat is not yet taken.
    """

    def __init__(self, shape: FrameShape):
        if not isinstance(shape, FrameShape):
            raise TypeError(f"shape must be a FrameShape, not {shape!r}")
        self._shape = shape
        super().__init__({**axis_signature("s_axis", shape.tdata_bits, slave=True),
                          "beats": Out(stream.Signature(shape.beat_bits)),
                          "errored": Out(1), "early": Out(1), "late": Out(1), "receiving": Out(1)})

    @property
    def shape(self) -> FrameShape:
        return self._shape

    def elaborate(self, platform):
        m = Module()
        s = self._shape
        per, width = s.pieces_per_beat, s.tdata_bits
        beat = Signal(s.beat_bits)
        piece = Signal(range(per))
        core_beat = Signal(range(s.core_beats))       # this frame's core beat being gathered
        full = Signal()                               # ``beat`` waits for the core
        padding = Signal()                            # sending the zero beats an early frame owes
        dropping = Signal()                           # dropping a late frame's extra pieces
        frame_error = Signal()                        # this frame has an error so far

        last_core_beat = core_beat == s.core_beats - 1
        m.d.comb += [self.beats.valid.eq(full), self.beats.payload.eq(beat),
                     self.s_axis_tready.eq(dropping | (~full & ~padding))]

        with m.If(self.beats.valid & self.beats.ready):
            m.d.sync += [full.eq(0), beat.eq(0)]
            with m.If(last_core_beat):
                m.d.sync += [core_beat.eq(0), padding.eq(0), frame_error.eq(0), self.errored.eq(frame_error),
                             self.receiving.eq(0)]
            with m.Else():
                m.d.sync += core_beat.eq(core_beat + 1)
                with m.If(padding):
                    m.d.sync += full.eq(1)

        take = self.s_axis_tvalid & self.s_axis_tready
        with m.If(take & dropping):
            with m.If(self.s_axis_tlast):
                m.d.sync += dropping.eq(0)
        with m.Elif(take):
            m.d.sync += self.receiving.eq(1)
            for p in range(per):
                with m.If(piece == p):
                    m.d.sync += beat[p * width:(p + 1) * width].eq(self.s_axis_tdata)
            last_piece = last_core_beat & (piece == s.last_pieces - 1)
            with m.If(last_piece | (piece == per - 1) | self.s_axis_tlast):
                m.d.sync += [full.eq(1), piece.eq(0)]
            with m.Else():
                m.d.sync += piece.eq(piece + 1)
            with m.If(self.s_axis_tlast & ~last_piece):
                m.d.comb += self.early.eq(1)
                m.d.sync += [frame_error.eq(1), padding.eq(~last_core_beat)]
            with m.If(~self.s_axis_tlast & last_piece):
                m.d.comb += self.late.eq(1)
                m.d.sync += [frame_error.eq(1), dropping.eq(1)]
        return m
