"""Weight memory: one ROM per anti-diagonal of the array, read in the array's skew.

PE ``(r, c)`` uses a vector ``r + c`` cycles after it entered the array, so it needs that
vector's weight ``r + c`` cycles later than PE ``(0, 0)``. All PEs with the same
``d = r + c`` need their weights in the same cycle: their weights of one tile form one
word of bank ``d``, and bank ``d`` reads the tile address that bank ``d - 1`` read one
cycle earlier. A whole tile thus reaches the array in one cycle (diagonal by diagonal),
so the array can change tiles on every step: weights arrive at the rate the array
consumes them, with no loading phase. The address chain is ``rows + cols - 1`` registers.
"""
import operator
from functools import reduce

import numpy as np
from amaranth import Cat, Module, Mux, Signal, signed, unsigned
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
    5.6 ns on ECP5), twice more while the bank's piece of that depth is selected, and
    each PE's weight once more, so that the long routes from a bank's block RAMs to PEs
    spread over the array get three cycles.

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
    LATENCY = 5

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

    def _fields(self, m, slot, bits, name: str):
        """The lane fields a word's weights can be in, ``(width, slot)`` for each format
        and slot, and a register, one bit a field, marking the one of the word read a cycle
        after ``slot`` and ``bits`` (the last format is the default). Decoded a stage
        ahead, the choice is one AND-OR level of the PEs' weight registers, not the format
        and slot switches in series (from one register's wide fanout, the default
        design's critical path)."""
        fields = [(b, k) for b in self._formats for k in range(tiles_per_word(b))]
        chosen = Signal(len(fields), name=name, reset_less=True)
        for index, (b, k) in enumerate(fields):
            is_format = (bits == b) if b != self._formats[-1] else ~Cat(*(bits == o for o in self._formats[:-1])).any()
            at_slot = slot[:word_shift(b)] == k if word_shift(b) else 1
            m.d.sync += chosen[index].eq(is_format & at_slot)
        return fields, chosen

    @staticmethod
    def _unpack(m, lane, fields, chosen, weight):
        """``weight`` <= the chosen field of ``lane``, sign-extended."""
        terms = [Mux(chosen[index], lane[k * b:(k + 1) * b].as_signed(), 0) for index, (b, k) in enumerate(fields)]
        m.d.sync += weight.eq(reduce(operator.or_, terms))

    def _bank(self, m, d: int, init: list[int], word, members):
        """Bank ``d``'s ROM, read at ``word``; returns its data four cycles later.

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
        # The depth's piece, selected over two registered stages: first within groups of
        # about sqrt(pieces) (placed by their block RAMs), then among the groups. A bank's
        # pieces are spread over the chip's block RAM columns: one selection from a block
        # RAM to the PEs' weight registers was the weight memory's critical path alone
        # (6.5 ns of routing), one from the block RAMs to a register still 5.1 ns. The
        # weights' address is registered anyway ahead of the memory
        # (GemmEngine.INPUT_LATENCY), so ops take no more cycles.
        selected = Signal(width, name=f"bank{d}_data", reset_less=True)
        if len(chunks) == 1:
            m.d.sync += selected.eq(delayed(m, chunks[0], 1, f"bank{d}_group0"))
            return selected
        chunk = delayed(m, word >> low, 2, f"bank{d}_chunk")
        group_bits = ((len(chunks) - 1).bit_length() + 1) // 2
        groups = []
        for g in range(0, len(chunks), 1 << group_bits):
            group = Signal(width, name=f"bank{d}_group{g >> group_bits}", reset_less=True)
            with m.Switch(chunk[:group_bits]):
                for k, data_reg in enumerate(chunks[g:g + (1 << group_bits)]):
                    with m.Case(k):
                        m.d.sync += group.eq(data_reg)
            groups.append(group)
        if len(groups) == 1:
            m.d.sync += selected.eq(groups[0])
            return selected
        with m.Switch(delayed(m, chunk >> group_bits, 1, f"bank{d}_group")):
            for g, group in enumerate(groups):
                with m.Case(g):
                    m.d.sync += selected.eq(group)
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
            if self.packed:
                fields, chosen = self._fields(m, delayed(m, slot, 3, f"read_slot{d}"),
                                              delayed(m, bits, 3, f"read_bits{d}"), f"read_field{d}")
            for index, (r, c) in enumerate(members):
                lane = read_data[index * LANE_BITS:(index + 1) * LANE_BITS]
                if not self.packed:
                    m.d.sync += self.weights[r][c].eq(lane.as_signed())
                    continue
                self._unpack(m, lane, fields, chosen, self.weights[r][c])
            next_word, next_slot, next_bits = (Signal.like(v, name=f"{n}_diag{d + 1}")
                                               for v, n in ((word, "word"), (slot, "slot"), (bits, "bits")))
            m.d.sync += [next_word.eq(word), next_slot.eq(slot), next_bits.eq(bits)]
            word, slot, bits = next_word, next_slot, next_bits
        return m
