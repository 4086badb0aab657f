"""The write port through which run-time weights reach a memory (see
:mod:`hdl.compiler.weight_image` and :class:`~hdl.gateware.weight_loader.WeightLoader`)."""
from amaranth import unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import Out


def load_port(addr_bits: int, data_bits: int) -> wiring.Signature:
    """One word write: ``en`` for a cycle with ``addr`` and ``data`` (the writer's view)."""
    return wiring.Signature({"en": Out(1), "addr": Out(unsigned(max(1, addr_bits))), "data": Out(unsigned(data_bits))})
