"""Collision-free memories (hdl.gateware.collisions): the promise, and what the estimate
does with it.

The activation memory's banks and the accumulator memory promise that no data their
readers use comes from a read of an address written in the same cycle; :func:`estimate_ecp5` then gives Yosys their
collisions as undefined. The promise is checked by simulating whole inferences with
every such read *poisoned* (its word inverted, :class:`PoisonedMemory`): the outputs must
still equal the integer reference's, bit for bit.
"""
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
from amaranth import Elaboratable, Module, Mux, Signal, Value
from amaranth.back import rtlil
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hdl.config import AcceleratorConfig
from hdl.gateware import activation_memory, collisions, gemm_engine
from hdl.gateware.top import NeuralNetworkAccelerator
from hdl.host import pack_input, unpack_output
from hdl.tools.fpga_estimate import _undefined_collisions, estimate_ecp5
from sim.cases import random_case
from tests.amaranth_sim import run_testbench


class PoisonedMemory(Elaboratable):
    """A stand-in for :func:`collisions.collision_free_memory` that models its collisions
    as the worst case: a read of an address written at the same edge returns the word
    inverted. ``hits`` holds one signal a read port, high while its data is poisoned."""

    def __init__(self, **kwargs):
        self.memory = memory.Memory(**kwargs)
        self._writes, self._reads, self.hits = [], [], []

    def write_port(self, **kwargs):
        port = self.memory.write_port(**kwargs)
        self._writes.append(port)
        return port

    def read_port(self, **kwargs):
        inner = self.memory.read_port(**kwargs)
        outer = SimpleNamespace(addr=inner.addr, en=inner.en, data=Signal.like(inner.data))
        self._reads.append((inner, outer))
        return outer

    def elaborate(self, platform):
        m = Module()
        m.submodules.memory = self.memory
        for inner, outer in self._reads:
            hit = Signal(name="poisoned")
            m.d.sync += hit.eq(inner.en & sum(w.en.any() & (w.addr == inner.addr) for w in self._writes).bool())
            word = Value.cast(inner.data)               # (a view of a layout, or a value)
            m.d.comb += outer.data.eq(Mux(hit, ~word, word))
            self.hits.append(hit)
        return m


class _Ram(wiring.Component):
    """A 512 x 36 RAM, its read data through one register, made by ``make``."""

    def __init__(self, make):
        self._make = make
        super().__init__({"waddr": In(9), "wdata": In(36), "we": In(1), "raddr": In(9), "data": Out(36)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ram = ram = self._make(shape=36, depth=512, init=[])
        write, read = ram.write_port(), ram.read_port()
        m.d.comb += [write.addr.eq(self.waddr), write.data.eq(self.wdata), write.en.eq(self.we),
                     read.addr.eq(self.raddr)]
        m.d.sync += self.data.eq(read.data)
        return m


def test_the_poison_inverts_exactly_the_reads_that_collide():
    """The checker's own failure path: a read of the address written at that edge comes
    back inverted, any other read as written."""
    dut = _Ram(PoisonedMemory)

    async def bench(ctx):
        for addr, value in ((3, 0x123456789), (4, 0xFEDCBA987)):
            ctx.set(dut.waddr, addr), ctx.set(dut.wdata, value), ctx.set(dut.we, 1)
            await ctx.tick()
        ctx.set(dut.we, 0)
        ctx.set(dut.raddr, 3)
        await ctx.tick().repeat(2)
        assert ctx.get(dut.data) == 0x123456789
        # Read 4 while 4 is written: poisoned (the old word inverted, as the RTL reads old).
        ctx.set(dut.waddr, 4), ctx.set(dut.wdata, 5), ctx.set(dut.we, 1), ctx.set(dut.raddr, 4)
        await ctx.tick()
        ctx.set(dut.we, 0)
        await ctx.tick()
        assert ctx.get(dut.data) == ~0xFEDCBA987 & (2 ** 36 - 1)
        await ctx.tick().repeat(2)
        assert ctx.get(dut.data) == 5

    run_testbench(dut, bench, deadline_cycles=100)


def _run_poisoned(name: str, rows: int, cols: int):
    """One inference of the zoo model ``name`` with every collision-free memory poisoned:
    (outputs equal the reference's, poisoned reads, those of the accumulators, cycles)."""
    case = random_case(name, AcceleratorConfig(rows=rows, cols=cols), count=1)
    program = case.program
    made = []

    def poisoned(**kwargs):
        made.append(PoisonedMemory(**kwargs))
        return made[-1]

    with mock.patch.object(activation_memory, "collision_free_memory", poisoned), \
            mock.patch.object(gemm_engine, "collision_free_memory", poisoned):
        dut = NeuralNetworkAccelerator(program)
        sim = Simulator(dut)                    # elaborates: the memories are made here
    # The activation memory's banks (of one chunk or more) and the accumulators.
    accumulators = [mem for mem in made if isinstance(mem.memory.shape, data.ArrayLayout)]
    assert len(accumulators) == 1 and len(made) - 1 >= activation_memory.BANKS
    hits = [hit for mem in made for hit in mem.hits]
    beats, outputs, counts = pack_input(program, case.inputs[0]), [], {"cycles": 0}
    poisoned = [0] * len(hits)

    async def clock(ctx):
        while True:
            ctx.set(dut.clk, 0)
            await ctx.delay(0.5e-6)
            ctx.set(dut.clk, 1)
            await ctx.delay(0.5e-6)

    async def drive(ctx):
        for beat in beats:
            ctx.set(dut.input_data, beat)
            ctx.set(dut.input_valid, 1)
            await ctx.tick().until(dut.input_ready)
        ctx.set(dut.input_valid, 0)

    async def count(ctx):
        while True:
            await ctx.tick()
            for k, hit in enumerate(hits):
                poisoned[k] += ctx.get(hit)

    async def collect(ctx):
        ctx.set(dut.output_ready, 1)
        while counts["cycles"] < 200_000:
            await ctx.tick()
            counts["cycles"] += 1
            if ctx.get(dut.output_valid):
                outputs.append(ctx.get(dut.output_values))
                if ctx.get(dut.output_last):
                    return
        raise AssertionError(f"{name}: no last output beat in {counts['cycles']} cycles")

    sim.add_process(clock)
    sim.add_testbench(drive)
    sim.add_testbench(count, background=True)
    sim.add_testbench(collect)
    sim.run()
    exact = np.array_equal(unpack_output(program, outputs), case.expected[0])
    at_accumulators = sum(n for n, hit in zip(poisoned, hits) if any(hit is h for h in accumulators[0].hits))
    return exact, sum(poisoned), at_accumulators, counts["cycles"]


@pytest.mark.parametrize("name, rows, cols, accumulator_collisions", [
    ("mlp", 4, 4, True),            # dense layers, packed input
    ("linear", 8, 8, True),         # a split reduction
    ("dwsep", 8, 8, True),          # folded and depthwise (taps-on-rows) convolutions, a pool
    pytest.param("stem", 8, 8, False, marks=pytest.mark.slow),
    pytest.param("lenet", 16, 16, True, marks=pytest.mark.slow),
    pytest.param("resnet8", 16, 16, True, marks=pytest.mark.slow),   # residual adds
])
def test_no_used_read_collides_with_a_write(name, rows, cols, accumulator_collisions):
    exact, poisoned, accumulators, cycles = _run_poisoned(name, rows, cols)
    # No read whose data is used collides ...
    assert exact, f"{name} on {rows}x{cols}: {poisoned} poisoned reads changed the output ({cycles} cycles)"
    # ... though reads do (an idle activation read port reads word 0 while the loader
    # writes it; where steps accumulate in place, the accumulators are read where the
    # previous steps write).
    assert poisoned > accumulators
    assert (accumulators > 0) == accumulator_collisions, accumulators


def test_only_marked_memories_have_their_collisions_undefined():
    """The RTLIL rewrite: every read port of a marked memory gets an all-ones
    ``COLLISION_X_MASK``; an unmarked memory of the same name in another module keeps
    Amaranth's zeros."""

    class Pair(wiring.Component):
        def __init__(self, make):
            self._make = make
            super().__init__({"a": In(6), "d": In(8), "o": Out(16)})

        def elaborate(self, platform):
            m = Module()
            m.submodules.mem = mem = self._make(shape=8, depth=64, init=[])
            write, first, second = mem.write_port(), mem.read_port(), mem.read_port()
            m.d.comb += [write.addr.eq(self.a), write.data.eq(self.d), write.en.eq(1),
                         first.addr.eq(self.a + 1), second.addr.eq(self.a + 2)]
            m.d.sync += self.o.eq(first.data + second.data)
            return m

    class Top(wiring.Component):
        def __init__(self):
            super().__init__({"a": In(6), "d": In(8), "o": Out(16), "p": Out(16)})

        def elaborate(self, platform):
            m = Module()
            m.submodules.marked = marked = Pair(collisions.collision_free_memory)
            m.submodules.plain = plain = Pair(memory.Memory)
            for pair in (marked, plain):
                m.d.comb += [pair.a.eq(self.a), pair.d.eq(self.d)]
            m.d.comb += [self.o.eq(marked.o), self.p.eq(plain.o)]
            return m

    text = rtlil.convert(Top(), name="top")
    assert text.count("parameter \\COLLISION_X_MASK 1'0") == 4
    rewritten, changed = _undefined_collisions(text)
    assert changed == 2
    assert rewritten.count("parameter \\COLLISION_X_MASK 1'1") == 2
    assert rewritten.count("parameter \\COLLISION_X_MASK 1'0") == 2
    marked = rewritten.split("module \\top.marked\n")[1].split("\nend\n")[0]
    assert marked.count("COLLISION_X_MASK 1'1") == 2
    assert _undefined_collisions(rtlil.convert(_Ram(memory.Memory), name="top")) [1] == 0


def test_a_marked_ram_reads_straight_into_its_register(tmp_path):
    """Yosys's read-during-write logic: an unmarked RAM gets a delayed write and a bypass
    multiplexer (LUTs and more flip-flops than its 36 data bits); a marked one none, and
    places faster (one seed: 133 against 145 MHz)."""
    quiet = lambda line: None
    plain = estimate_ecp5(_Ram(memory.Memory), name="ram", work_dir=tmp_path / "plain", progress=quiet)
    marked = estimate_ecp5(_Ram(collisions.collision_free_memory), name="ram", work_dir=tmp_path / "marked",
                           progress=quiet)
    assert plain["undefined_collision_read_ports"] == 0 and marked["undefined_collision_read_ports"] == 1
    assert plain["bram"] == marked["bram"] == 1
    assert marked["yosys_cells"] == {"DP16KD": 1, "TRELLIS_FF": 36}
    assert plain["yosys_cells"].get("LUT4", 0) > 36 and plain["ff"] > 36
    assert marked["fmax_mhz"] > plain["fmax_mhz"]
