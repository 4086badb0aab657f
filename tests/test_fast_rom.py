"""The fast ``$meminit_v2`` emission gives the same RTLIL as Amaranth's own."""
import numpy as np
import pytest
from amaranth import Module
from amaranth.back import rtlil
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hdl.build import build_top
from hdl.config import AcceleratorConfig
from hdl.writers import fast_rom
from tests.test_lowering import dense_model


class _Rom(wiring.Component):
    def __init__(self, width, init):
        self._width, self._init = width, init
        super().__init__({"addr": In(8), "data": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.rom = rom = memory.Memory(shape=self._width, depth=len(self._init), init=self._init)
        port = rom.read_port()
        m.d.comb += [port.addr.eq(self.addr), self.data.eq(port.data)]
        return m


def _both(make):
    fast_rom.uninstall()
    try:
        slow = rtlil.convert(make(), name="top")
    finally:
        fast_rom.install()
    assert rtlil.ModuleEmitter.emit_memory is fast_rom._emit_memory, "the fast path must be in use"
    return slow, rtlil.convert(make(), name="top")


@pytest.mark.parametrize("width, depth", [(1, 3), (7, 5), (64, 17), (130, 2)])
def test_rom_rtlil_is_identical(width, depth):
    rng = np.random.default_rng(width)
    init = [int(v) for v in rng.integers(0, 2 ** min(width, 62), depth)]
    init[0] = (1 << width) - 1
    slow, fast = _both(lambda: _Rom(width, init))
    assert "$meminit_v2" in fast and fast == slow


def test_accelerator_rtlil_is_identical():
    rng = np.random.default_rng(0)
    model = dense_model(rng.integers(-127, 128, (12, 20)), rng.integers(-1000, 1000, 12), input_zero_point=-3)
    slow, fast = _both(lambda: build_top(model, AcceleratorConfig(rows=4, cols=4)))
    assert fast.count("$meminit_v2") >= 5 and fast == slow
