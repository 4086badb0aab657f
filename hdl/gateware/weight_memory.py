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
from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out


def _pack_lanes(lanes: np.ndarray, bits: int) -> list[int]:
    """``[words, lanes]`` signed values to words, lane 0 in the least significant bits."""
    if bits == 8:                      # the common case, as bytes: fast on big ROMs
        raw = lanes.astype(np.int8).view(np.uint8)
        return [int.from_bytes(row.tobytes(), "little") for row in raw]
    mask = (1 << bits) - 1
    return [sum((int(v) & mask) << (i * bits) for i, v in enumerate(row)) for row in lanes]


def diagonal_members(rows: int, cols: int, d: int) -> list[tuple[int, int]]:
    return [(r, d - r) for r in range(rows) if 0 <= d - r < cols]


class WeightMemory(wiring.Component):
    """ROM of weight tiles ``[tiles, rows, cols]`` delivered in diagonal skew.

    Each PE's weight is re-registered after the ROM's read port, so the long route from
    a block RAM to PEs spread over the array gets a cycle of its own.

    Members
    -------
    addr: In, a tile address.
    weights: Out, ``rows x cols``; PE ``(r, c)``'s weight is that of the tile given at
    ``addr`` ``r + c + LATENCY`` cycles before.
    """

    #: ROM read plus the per-PE register.
    LATENCY = 2

    def __init__(self, tiles: np.ndarray, addr_bits: int, data_bits: int = 8):
        self._tiles = np.asarray(tiles)
        if self._tiles.ndim != 3 or len(self._tiles) == 0:
            raise ValueError(f"tiles must be a non-empty [tiles, rows, cols] array, not shape {self._tiles.shape}")
        _, self._rows, self._cols = self._tiles.shape
        self._data_bits = data_bits
        super().__init__({
            "addr": In(unsigned(addr_bits)),
            "weights": Out(data.ArrayLayout(data.ArrayLayout(signed(data_bits), self._cols), self._rows)),
        })

    def elaborate(self, platform):
        m = Module()
        rows, cols, bits = self._rows, self._cols, self._data_bits
        addr = self.addr
        for d in range(rows + cols - 1):
            members = diagonal_members(rows, cols, d)
            init = _pack_lanes(self._tiles[:, [r for r, _ in members], [c for _, c in members]], bits)
            # Raw words (lanes packed little-endian) initialise much faster than views.
            bank = memory.Memory(shape=unsigned(bits * len(members)), depth=len(self._tiles), init=init)
            m.submodules[f"bank{d}"] = bank
            read = bank.read_port()
            m.d.comb += read.addr.eq(addr)
            for index, (r, c) in enumerate(members):
                m.d.sync += self.weights[r][c].eq(read.data[index * bits:(index + 1) * bits].as_signed())
            next_addr = Signal.like(addr, name=f"addr_diag{d + 1}")
            m.d.sync += next_addr.eq(addr)
            addr = next_addr
        return m
