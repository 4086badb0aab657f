"""Weight memory: one ROM per anti-diagonal of the array, read in the array's skew.

PE ``(r, c)`` uses a vector ``r + c`` cycles after it entered the array, so it needs that
vector's weight ``r + c`` cycles later than PE ``(0, 0)``. All PEs with the same
``d = r + c`` need their weights in the same cycle: their weights of one tile form one
word of bank ``d``, and bank ``d`` reads the tile address that bank ``d - 1`` read one
cycle earlier. A whole tile thus reaches the array in one cycle (diagonal by diagonal),
so the array can change tiles on every step: weights arrive at the rate the array
consumes them, with no loading phase. The address chain is ``rows + cols - 1`` registers.
"""
import numpy as np
from amaranth import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.weight_packing import LANE_BITS, tiles_per_word, word_shift
from hdl.compiler.widths import bits_for
from hdl.gateware.pipeline import delayed
from hdl.gateware.load_port import load_port


def _pack_lanes(lanes: np.ndarray) -> list[int]:
    """``[words, lanes]`` lane bytes to words, lane 0 in the least significant byte."""
    raw = lanes.astype(np.int8).view(np.uint8)
    return [int.from_bytes(row.tobytes(), "little") for row in raw]


def diagonal_members(rows: int, cols: int, d: int) -> list[tuple[int, int]]:
    return [(r, d - r) for r in range(rows) if 0 <= d - r < cols]


#: Shape of a weight width (2 to 8) carried with addresses.
WEIGHT_BITS_SHAPE = unsigned(4)


class WeightMemory(wiring.Component):
    """ROM of weight words ``[words, rows, cols]`` delivered in diagonal skew.

    A word holds one byte per PE; a layer of ``b``-bit weights packs
    ``tiles_per_word(b)`` tiles in it (:mod:`hdl.compiler.weight_packing`). The tile
    address ``addr`` and its width ``bits`` become the word (a shift, before the read)
    and the slot (a field of each lane, sign-extended after it). A ROM of 8-bit weights
    only has none of that logic.

    A bank's read data is registered beside its block RAMs (their clock-to-output time is
    5.6 ns on ECP5), and each PE's weight again, so that the long route from a bank to
    PEs spread over the array gets a cycle of its own.

    With ``writable``, each bank also has a write port, and ``load`` writes a whole word
    (every bank's part of it) at once: run-time weights (:mod:`hdl.compiler.weight_image`).

    Members
    -------
    addr: In, a tile address; bits: In, its weights' width (one of ``formats``).
    weights: Out, ``rows x cols``; PE ``(r, c)``'s weight is that of the tile given at
    ``addr`` ``r + c + LATENCY`` cycles before.
    load: In (with ``writable``), a word write: lane ``r * cols + c`` of ``data`` is PE
    ``(r, c)``'s byte.
    """

    #: ROM read, the register of its data, the per-PE register.
    LATENCY = 3

    def __init__(self, words: np.ndarray, addr_bits: int, formats: tuple[int, ...] = (8,), writable: bool = False):
        self._words = np.asarray(words)
        if self._words.ndim != 3 or len(self._words) == 0:
            raise ValueError(f"words must be a non-empty [words, rows, cols] array, not shape {self._words.shape}")
        if not formats or any(not 2 <= b <= LANE_BITS for b in formats):
            raise ValueError(f"formats must be weight widths in [2, {LANE_BITS}], not {formats!r}")
        _, self._rows, self._cols = self._words.shape
        self._formats = tuple(sorted(set(formats)))
        self._writable = writable
        members = {
            "addr": In(unsigned(addr_bits)),
            "bits": In(WEIGHT_BITS_SHAPE),
            "weights": Out(data.ArrayLayout(data.ArrayLayout(signed(LANE_BITS), self._cols), self._rows)),
        }
        if writable:
            members["load"] = In(load_port(bits_for(len(self._words)), self._rows * self._cols * LANE_BITS))
        super().__init__(members)

    @property
    def packed(self) -> bool:
        """Whether any layer's weights share words (are narrower than a lane)."""
        return self._formats != (LANE_BITS,)

    def _by_format(self, m, bits, body):
        """``body(width)`` under the case of each format of ``bits``. The last format is the
        default, so that every cycle assigns (no enable on the weight registers), and a
        single format switches on nothing."""
        if len(self._formats) == 1:
            body(self._formats[0])
            return
        with m.Switch(bits):
            for b in self._formats[:-1]:
                with m.Case(b):
                    body(b)
            with m.Default():
                body(self._formats[-1])

    @staticmethod
    def _unpack(m, lane, slot, bits: int, weight):
        """``weight`` <= the ``bits``-bit field of ``lane`` at ``slot``, sign-extended."""
        fields = [lane[s * bits:(s + 1) * bits].as_signed() for s in range(tiles_per_word(bits))]
        if len(fields) == 1:
            m.d.sync += weight.eq(fields[0])
            return
        with m.Switch(slot[:word_shift(bits)]):
            for s, value in enumerate(fields):
                with m.Case(s):
                    m.d.sync += weight.eq(value)

    def _bank(self, m, d: int, init: list[int], word, members):
        """Bank ``d``'s ROM, read at ``word``; returns its data two cycles later.

        The ROM is cut by width and by depth into pieces of one DP16KD each, in the shape
        that takes the fewest (:func:`~hdl.tools.bram_estimate.dp16kd_shape`); each piece's
        data is registered beside its block RAM, and the registered pieces of a depth are
        selected after. The block RAMs' 5.6 ns clock-to-output then drives one short wire,
        not a mux of block RAMs spread over the chip (Yosys, left to choose, cuts some
        banks by depth and muxes their outputs). The data registers have no reset (what
        they hold before the first read is never used), so the estimate moves each into its
        block RAM's output register (:func:`hdl.tools.fpga_estimate.pack_bram_output_registers`)."""
        from hdl.tools.bram_estimate import dp16kd_shape
        cols, words = self._cols, len(self._words)
        width = LANE_BITS * len(members)
        depth, piece_bits = dp16kd_shape(width, words)
        depth = min(depth, 1 << bits_for(words - 1))
        low = depth.bit_length() - 1
        data_in = Cat(*(self.load.data[(r * cols + c) * LANE_BITS:(r * cols + c + 1) * LANE_BITS]
                        for r, c in members)) if self._writable else None
        chunks = []                                        # by depth: the registered data
        for k, first in enumerate(range(0, words, depth)):
            data_reg = Signal(width, name=f"bank{d}_{k}_data", reset_less=True)
            for at in range(0, width, piece_bits):
                bits = min(piece_bits, width - at)
                mask = (1 << bits) - 1
                rom = memory.Memory(shape=unsigned(bits), depth=max(2, min(depth, words - first)),
                                    init=[(v >> at) & mask for v in init[first:first + depth]])
                m.submodules[f"bank{d}_{k}_{at}"] = rom
                read = rom.read_port()
                m.d.comb += read.addr.eq(word[:low])
                if self._writable:
                    write = rom.write_port()
                    m.d.comb += [write.en.eq(self.load.en & ((self.load.addr >> low) == k)),
                                 write.addr.eq(self.load.addr[:low]), write.data.eq(data_in[at:at + bits])]
                m.d.sync += data_reg[at:at + bits].eq(read.data)
            chunks.append(data_reg)
        if len(chunks) == 1:
            return chunks[0]
        selected = Signal(width, name=f"bank{d}_data")
        with m.Switch(delayed(m, word >> low, 2, f"bank{d}_chunk")):
            for k, data_reg in enumerate(chunks):
                with m.Case(k):
                    m.d.comb += selected.eq(data_reg)
        return selected

    def elaborate(self, platform):
        m = Module()
        rows, cols = self._rows, self._cols
        word = Signal(range(len(self._words)), name="word_diag0")
        slot = Signal(2, name="slot_diag0")                 # at most 4 tiles a word
        bits = Signal.like(self.bits, name="bits_diag0")
        if self.packed:
            m.d.comb += bits.eq(self.bits)
            def split(b):
                m.d.comb += [word.eq(self.addr >> word_shift(b)), slot.eq(self.addr & (tiles_per_word(b) - 1))]
            self._by_format(m, self.bits, split)
        else:
            m.d.comb += word.eq(self.addr)
        for d in range(rows + cols - 1):
            members = diagonal_members(rows, cols, d)
            init = _pack_lanes(self._words[:, [r for r, _ in members], [c for _, c in members]])
            # Raw words (lanes packed little-endian) initialise much faster than views.
            read_data = self._bank(m, d, init, word, members)
            # The slot and width of the word read, beside its registered data.
            read_slot = delayed(m, slot, 2, f"read_slot{d}")
            read_bits = delayed(m, bits, 2, f"read_bits{d}")
            for index, (r, c) in enumerate(members):
                lane = read_data[index * LANE_BITS:(index + 1) * LANE_BITS]
                if not self.packed:
                    m.d.sync += self.weights[r][c].eq(lane.as_signed())
                    continue
                self._by_format(m, read_bits, lambda b, lane=lane, weight=self.weights[r][c]:
                                self._unpack(m, lane, read_slot, b, weight))
            next_word, next_slot, next_bits = (Signal.like(v, name=f"{n}_diag{d + 1}")
                                               for v, n in ((word, "word"), (slot, "slot"), (bits, "bits")))
            m.d.sync += [next_word.eq(word), next_slot.eq(slot), next_bits.eq(bits)]
            word, slot, bits = next_word, next_slot, next_bits
        return m
