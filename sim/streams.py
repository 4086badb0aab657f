"""Valid/ready stream driver and monitor for cocotb, with seeded random stalls.

Both wait on edges of the handshake signals instead of every clock while nothing can
happen, so a long computation costs no Python per cycle.
"""
from __future__ import annotations

import random

from cocotb.triggers import ReadOnly, RisingEdge


class StreamDriver:
    """Drives ``<prefix>_data``/``<prefix>_valid``, honouring ``<prefix>_ready``.

    Before each beat it idles for a random number of cycles (0 with probability
    ``1 - gap_probability``, else 1-3), so the design sees valid gaps.
    """

    def __init__(self, clk, data, valid, ready, rng: random.Random, gap_probability: float = 0.3):
        self.clk, self.data, self.valid, self.ready = clk, data, valid, ready
        self.rng, self.gap_probability = rng, gap_probability
        self.valid.value = 0

    async def send(self, beats):
        for beat in beats:
            if self.rng.random() < self.gap_probability:
                self.valid.value = 0
                for _ in range(self.rng.randint(1, 3)):
                    await RisingEdge(self.clk)
            self.data.value = beat
            self.valid.value = 1
            while True:
                await ReadOnly()
                if self.ready.value:
                    await RisingEdge(self.clk)      # the beat moves on this edge
                    break
                await RisingEdge(self.ready)
        self.valid.value = 0


class StreamMonitor:
    """Receives beats of ``<prefix>_valid``/``_ready`` streams up to ``last``.

    ``ready`` is low in a random fraction ``stall_probability`` of the cycles in which
    ``valid`` is high (back-pressure). ``fields`` are the signals sampled with each beat.
    """

    def __init__(self, clk, valid, ready, last, fields: dict, rng: random.Random,
                 stall_probability: float = 0.3):
        self.clk, self.valid, self.ready, self.last = clk, valid, ready, last
        self.fields, self.rng, self.stall_probability = fields, rng, stall_probability
        self.ready.value = 0

    async def receive(self, first_stall: int = 0) -> list[dict]:
        """One transaction: the beats up to and including the one with ``last``.

        ``first_stall``: hold ``ready`` low for that many cycles once the first beat is
        valid (long back-pressure). Must be awaited from a phase in which signals may be
        written (not ReadOnly).
        """
        beats = []
        if first_stall:
            self.ready.value = 0
            await ReadOnly()
            if not self.valid.value:
                await RisingEdge(self.valid)
            for _ in range(first_stall):
                await RisingEdge(self.clk)
        while True:
            self.ready.value = int(self.rng.random() >= self.stall_probability)
            await ReadOnly()
            if not self.valid.value:
                await RisingEdge(self.valid)
                continue
            taken = bool(self.ready.value)
            if taken:
                beats.append({name: int(signal.value) for name, signal in self.fields.items()})
                last = bool(self.last.value)
            await RisingEdge(self.clk)
            if taken and last:
                self.ready.value = 0
                return beats
