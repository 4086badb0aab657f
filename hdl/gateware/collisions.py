"""Memories whose users never use a read of an address written in the same cycle.

Amaranth asks for defined read-during-write behaviour on every memory (a non-transparent
read returns the old word), and Yosys builds it around a block RAM that has none between
its ports: the write is delayed a cycle and a bypass multiplexer, fed by the write data,
sits between the block RAM's output and the register after it. That multiplexer pulls
the register away from the block RAM (the read's 5.8 ns clock-to-output then crosses the
chip) and costs a register and a LUT a bit.

A memory built by :func:`collision_free_memory` is marked with :data:`ATTRIBUTE`; its
users promise that no data they use comes from a read of an address written in the same
cycle (the activation memory: an op writes only its own output, never a word it reads,
and lanes read past a tensor are dropped; the accumulators: the writes a read misses are
forwarded). The RTL keeps Amaranth's semantics (the
simulators return the old word); :func:`hdl.tools.fpga_estimate.estimate_ecp5` gives
Yosys the marked memories' collisions as undefined, so it maps them like a vendor tool's
simple dual-port block RAM: the read data straight into the register after it.
"""
from amaranth.lib import memory

#: The RTLIL attribute on a marked memory (its value :data:`UNDEFINED`).
ATTRIBUTE = "nnaccel_collisions"
UNDEFINED = "undefined"


def collision_free_memory(**kwargs) -> memory.Memory:
    """``memory.Memory(**kwargs)``, marked: reads that collide with a write are never used."""
    attrs = dict(kwargs.pop("attrs", None) or {})
    attrs[ATTRIBUTE] = UNDEFINED
    return memory.Memory(attrs=attrs, **kwargs)
