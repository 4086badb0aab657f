"""Block RAM of the weight memory on an ECP5, counted from its geometry (no synthesis).

Each diagonal bank of :class:`~hdl.gateware.weight_memory.WeightMemory` is a ROM of
``8 x members`` bits by the program's word count. A DP16KD holds 18 kbit as
16384x1 ... 1024x18 or 512x36; a bank takes the cheapest tiling of those shapes. Yosys's
mapper picks among the same shapes, so this is the figure it reaches when it maps every
bank to DP16KD (the bench's nextpnr runs give the measured one).
"""
from __future__ import annotations

import math

from hdl.compiler.program import Program
from hdl.compiler.weight_packing import LANE_BITS
from hdl.gateware.weight_memory import diagonal_members

#: DP16KD shapes (depth, width) in ROM use.
DP16KD_SHAPES = ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))


def dp16kd_shape(width: int, depth: int) -> tuple[int, int]:
    """The DP16KD shape ``(depth, width)`` that holds a ``width`` x ``depth`` ROM in the
    fewest blocks (the deepest among equals)."""
    if width < 1 or depth < 1:
        raise ValueError(f"a ROM needs a positive width and depth, not {width} x {depth}")
    return min(DP16KD_SHAPES, key=lambda shape: (math.ceil(width / shape[1]) * math.ceil(depth / shape[0]),
                                                 -shape[0]))


def dp16kd_blocks(width: int, depth: int) -> int:
    """The fewest DP16KD that hold a ``width`` x ``depth`` ROM."""
    d, w = dp16kd_shape(width, depth)
    return math.ceil(width / w) * math.ceil(depth / d)


def weight_memory_dp16kd(program: Program) -> int:
    """DP16KD blocks of ``program``'s weight memory, bank by bank."""
    rows, cols = program.config.rows, program.config.cols
    words = len(program.weight_words)
    return sum(dp16kd_blocks(LANE_BITS * len(diagonal_members(rows, cols, d)), words)
               for d in range(rows + cols - 1))
