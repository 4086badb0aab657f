"""How one inference's core beats map onto AXI4-Stream beats of another width.

A frame is the core's beats in order, each cut into ``beat_bits / tdata_bits`` pieces,
least significant first; the last core beat is cut after the piece that holds its last
used byte, so a frame has no wholly empty beat at its end. The last piece carries TLAST.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

#: The TDATA widths the AXI wrapper takes.
TDATA_BITS = (32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class FrameShape:
    """``core_beats`` beats of ``beat_bits``, the last holding ``last_beat_bytes`` used bytes,
    sent as pieces of ``tdata_bits``."""
    beat_bits: int
    tdata_bits: int
    core_beats: int
    last_beat_bytes: int

    def __post_init__(self):
        if self.tdata_bits not in TDATA_BITS or self.tdata_bits > self.beat_bits:
            allowed = ", ".join(str(b) for b in TDATA_BITS if b <= self.beat_bits)
            raise ValueError(f"TDATA width must be one of {allowed}, not {self.tdata_bits!r}")
        if self.core_beats < 1:
            raise ValueError(f"a frame must have at least one beat, not {self.core_beats!r}")
        if not 1 <= self.last_beat_bytes <= self.beat_bits // 8:
            raise ValueError(f"the last beat holds 1 to {self.beat_bits // 8} bytes, not {self.last_beat_bytes!r}")

    @classmethod
    def of(cls, placement_words: int, words_per_beat: int, bank_bytes: int, beat_bits: int,
           tdata_bits: int) -> "FrameShape":
        """The frame of a tensor of ``placement_words`` activation words."""
        core_beats = math.ceil(placement_words / words_per_beat)
        last_words = placement_words - (core_beats - 1) * words_per_beat
        return cls(beat_bits, tdata_bits, core_beats, last_words * bank_bytes)

    @property
    def pieces_per_beat(self) -> int:
        return self.beat_bits // self.tdata_bits

    @property
    def last_pieces(self) -> int:
        """Pieces of the last core beat."""
        return math.ceil(self.last_beat_bytes * 8 / self.tdata_bits)

    @property
    def tdata_beats(self) -> int:
        """AXI4-Stream beats of one frame."""
        return (self.core_beats - 1) * self.pieces_per_beat + self.last_pieces

    def split(self, core_beats: list[int]) -> list[int]:
        """Core beat values to the frame's TDATA values."""
        if len(core_beats) != self.core_beats:
            raise ValueError(f"expected {self.core_beats} core beats, not {len(core_beats)}")
        mask = (1 << self.tdata_bits) - 1
        out = []
        for index, beat in enumerate(core_beats):
            pieces = self.last_pieces if index == self.core_beats - 1 else self.pieces_per_beat
            out.extend((beat >> (p * self.tdata_bits)) & mask for p in range(pieces))
        return out

    def join(self, pieces: list[int]) -> list[int]:
        """The frame's TDATA values back to core beat values (missing pieces are zero)."""
        if len(pieces) != self.tdata_beats:
            raise ValueError(f"expected {self.tdata_beats} stream beats, not {len(pieces)}")
        per = self.pieces_per_beat
        return [sum(p << (i * self.tdata_bits) for i, p in enumerate(pieces[b:b + per]))
                for b in range(0, len(pieces), per)]
