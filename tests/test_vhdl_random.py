"""Randomised differential test of the VHDL back end: random Amaranth designs (expression
trees over signed and unsigned signals of random widths, registers with enables, a memory,
a switch) from a seed, simulated as VHDL and as Verilog over random inputs, compared cycle by
cycle."""

import random

import pytest
from amaranth import (Cat, Const, Elaboratable, Module, Mux, ResetSignal, Signal, signed,
                      unsigned)
from amaranth.lib import memory

from tests.vhdl_harness import check_design

# Results wider than this are truncated, so that products and shifts stay small.
MAX_WIDTH = 20


class RandomDesign(Elaboratable):
    """A random design; the same seed gives the same design."""

    def __init__(self, seed):
        self.seed = seed
        rng = random.Random(seed)
        self.inputs = [Signal(self._shape(rng), name=f"i{n}") for n in range(rng.randint(3, 5))]
        self.outputs = [Signal(self._shape(rng), name=f"o{n}") for n in range(rng.randint(3, 6))]
        self.ports = [*self.inputs, *self.outputs]

    @staticmethod
    def _shape(rng, low=1, high=10):
        width = rng.randint(low, high)
        return signed(width) if rng.random() < 0.5 else unsigned(width)

    def _leaf(self, rng, leaves):
        if rng.random() < 0.15:
            shape = self._shape(rng)
            return Const(rng.getrandbits(shape.width), unsigned(shape.width)).as_signed() \
                if shape.signed else Const(rng.getrandbits(shape.width), shape.width)
        return rng.choice(leaves)

    def _expr(self, rng, leaves, depth):
        if depth == 0 or rng.random() < 0.2:
            return self._leaf(rng, leaves)
        a = self._expr(rng, leaves, depth - 1)
        b = self._expr(rng, leaves, depth - 1)
        amount = b.as_unsigned()[:rng.randint(1, 4)]
        ops = [
            lambda: a + b, lambda: a - b, lambda: a * b, lambda: a & b, lambda: a | b,
            lambda: a ^ b, lambda: ~a, lambda: -a, lambda: a < b, lambda: a >= b,
            lambda: a == b, lambda: a != b, lambda: a << amount, lambda: a >> amount,
            lambda: a.bit_select(amount, rng.randint(1, 3)), lambda: a // b, lambda: a % b,
            lambda: Mux(b.any(), a, b), lambda: Cat(a, b), lambda: a.as_signed(),
            lambda: a.as_unsigned(), lambda: Cat(a.all(), b.xor(), a.bool()),
            lambda: a[rng.randint(0, len(a) - 1):], lambda: a.shift_left(rng.randint(0, 3)),
            lambda: a.shift_right(rng.randint(0, 3)), lambda: a.rotate_left(rng.randint(0, 5)),
        ]
        try:
            result = rng.choice(ops)()
        except ValueError:    # e.g. a 0-bit value made signed
            return a
        if len(result) == 0:
            return a
        if len(result) > MAX_WIDTH:
            result = result[:MAX_WIDTH]
        return result

    def elaborate(self, platform):
        rng = random.Random(self.seed)
        m = Module()
        leaves = list(self.inputs)

        registers = []
        for n in range(rng.randint(1, 3)):
            shape = self._shape(rng)
            low, high = (-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) \
                if shape.signed else (0, (1 << shape.width) - 1)
            registers.append(Signal(shape, name=f"r{n}", init=rng.randint(low, high)))
        leaves += registers

        # Every word initialised and every address in range: Verilog reads `x` otherwise,
        # which would match anything and so test nothing.
        width, depth = rng.randint(1, 12), 2 ** rng.randint(1, 4)
        mem = memory.Memory(shape=width, depth=depth,
                            init=[rng.getrandbits(width) for _ in range(depth)])
        m.submodules.mem = mem
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=[wp] if rng.random() < 0.5 else ())
        ap = mem.read_port(domain="comb")
        # The sync read port's data is `x` in Verilog until its first read, and Verilog's
        # `if` turns `x` into a definite but arbitrary branch: read during reset (cycle 0),
        # from addresses that are never `x`, and never write during reset.
        defined = [*self.inputs, *registers]
        m.d.comb += [ap.addr.eq(self._expr(rng, defined, 1)),
                     rp.addr.eq(self._expr(rng, defined, 1)),
                     rp.en.eq(rng.choice(self.inputs)[0] | ResetSignal()),
                     wp.addr.eq(self._expr(rng, self.inputs, 1)),
                     wp.en.eq(self._expr(rng, self.inputs, 1).any() & ~ResetSignal())]
        leaves += [rp.data, ap.data]
        m.d.comb += wp.data.eq(self._expr(rng, leaves, 2))

        for register in registers:
            with m.If(self._expr(rng, leaves, 1).any()):
                m.d.sync += register.eq(self._expr(rng, leaves, 3))
        for output in self.outputs[1:]:
            m.d.comb += output.eq(self._expr(rng, leaves, 3))
        selector = Cat(rng.choice(self.inputs), Const(0, 3))[:3]
        with m.Switch(selector):
            for value in rng.sample(range(8), 3):
                with m.Case(value):
                    m.d.comb += self.outputs[0].eq(self._expr(rng, leaves, 2))
            with m.Case("1-0"):
                m.d.comb += self.outputs[0].eq(self._expr(rng, leaves, 2))
            with m.Default():
                m.d.comb += self.outputs[0].eq(self._expr(rng, leaves, 2))
        return m


def _check(seed, tmp_path):
    design = RandomDesign(seed)
    # Cycle 0 is not compared: the read port's data is still `x` in Verilog (see above).
    check_design(design, tmp_path, ports=design.ports, cycles=200, seed=seed, skip_cycles=1)


@pytest.mark.parametrize("seed", range(4))
def test_random_design(seed, tmp_path):
    _check(seed, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 64))
def test_random_design_sweep(seed, tmp_path):
    _check(seed, tmp_path)
