"""Helpers of the component tests: the testbench runner, memory read-back, random shapes."""
from collections import deque

import numpy as np

from hdl.gateware.activation_memory import ActivationMemory
from tests.amaranth_sim import run_testbench as run_bench  # noqa: F401 (the tests' name for it)


class ReadLatency:
    """The activation memory's read latency in a test's memory model: call it once a cycle,
    after the edge, with the words read at that edge; it returns what the read port shows
    now, the words read ``ActivationMemory.READ_LATENCY - 1`` edges earlier (``idle`` before)."""

    def __init__(self, idle):
        self._pending = deque([idle] * (ActivationMemory.READ_LATENCY - 1))

    def __call__(self, words):
        self._pending.append(words)
        return self._pending.popleft()


def read_tensor(mem, placement, bank: int):
    """``[images, C, H, W]`` from a memory model of channels-last words of ``bank`` lanes
    (packed or not)."""
    p = placement
    out = np.zeros((p.images, p.channels, p.height, p.width), np.int64)
    for img in range(p.images):
        for y in range(p.height):
            for x in range(p.width):
                pixel = (img * p.height + y) * p.width + x
                for c in range(p.channels):
                    if p.packed_lanes:
                        word, lane = divmod(pixel * p.channels + c, bank)
                    else:
                        word, lane = pixel * p.words_per_pixel + c // bank, c % bank
                    out[img, c, y, x] = mem[p.base + word][lane]
    return out


def random_array(rng, folded: bool) -> tuple[int, int]:
    """Rows and cols of a random program's array: odd shapes (3 rows with 4 cols makes
    12-lane words), or, for a folded layer, rows worth folding into."""
    if folded:
        return int(rng.choice([2, 3, 4, 8])), int(rng.choice([1, 2, 4]))
    rows, cols = (int(v) for v in rng.choice([1, 2, 3, 4], size=2))
    return rows, cols
