"""How weight tiles of ``b``-bit layers share the weight memory's words.

A weight-memory word holds one byte per PE (a *lane*). A layer of ``b``-bit weights puts
``p = tiles_per_word(b)`` consecutive tiles of its own in each word: slot ``s`` of a word
holds, in every lane, its PE's weight of tile ``word * p + s`` (relative to the layer's
first word) at bits ``[s*b, (s+1)*b)``. ``p`` is 1 for 5 to 8 bits, 2 for 3 and 4, and 4
for 2 bits: always a power of two, so that the address split is a shift and a mask.

The step generator counts tiles, not words: an op's *tile address* starts at
``word_base * p`` (see :func:`tile_address`), so that word ``address >> log2(p)`` and slot
``address mod p`` follow from the address alone, given the op's width. Layers of
different widths do not share words, so each layer's first tile starts a word.
"""
from __future__ import annotations

import numpy as np

from pytorch_ref.ir import integer_semantics as sem

#: Bits of a weight-memory lane: one PE's weights of one word.
LANE_BITS = sem.WEIGHT_BITS_MAX


def tiles_per_word(bits: int) -> int:
    """Tiles of ``bits``-bit weights that one word holds: the largest power of two that fits."""
    sem.check_weight_bits(bits, "weights")
    return 1 << ((LANE_BITS // bits).bit_length() - 1)


def word_shift(bits: int) -> int:
    """``log2(tiles_per_word(bits))``: the tile address's shift to its word."""
    return tiles_per_word(bits).bit_length() - 1


def tile_address(word_base: int, bits: int) -> int:
    """The tile address of the first tile of a layer whose words start at ``word_base``."""
    return word_base << word_shift(bits)


def pack_tiles(tiles: np.ndarray, bits: int) -> np.ndarray:
    """``[tiles, rows, cols]`` codes of ``bits``-bit weights to ``[words, rows, cols]`` lane
    bytes (as ``int8``); the last word's unused slots are zero."""
    tiles = np.asarray(tiles, dtype=np.int64)
    low, high = sem.weight_range(bits)
    if tiles.size and not low <= tiles.min() <= tiles.max() <= high:
        raise ValueError(f"{bits}-bit weights must be in [{low}, {high}], not [{tiles.min()}, {tiles.max()}]")
    p = tiles_per_word(bits)
    words = -(-len(tiles) // p)
    slots = np.zeros((words * p,) + tiles.shape[1:], dtype=np.int64)
    slots[:len(tiles)] = tiles & ((1 << bits) - 1)
    slots = slots.reshape((words, p) + tiles.shape[1:])
    lanes = sum(slots[:, s] << (s * bits) for s in range(p))
    return lanes.astype(np.uint8).view(np.int8)


def unpack_tile(words: np.ndarray, address: int, bits: int) -> np.ndarray:
    """The ``[rows, cols]`` codes of the tile at ``address`` (see the module docstring)."""
    lanes = np.asarray(words[address >> word_shift(bits)]).view(np.uint8).astype(np.int64)
    field = (lanes >> ((address % tiles_per_word(bits)) * bits)) & ((1 << bits) - 1)
    return np.where(field >= 1 << (bits - 1), field - (1 << bits), field)
