"""Run an async Amaranth testbench until it returns (the clock stops with it).

:func:`tests.amaranth_sim.run_testbench` runs to a fixed deadline, which keeps the clock
ticking long after a short testbench ends; component tests here stop with their
testbench instead, and bound their own loops.
"""
from amaranth.sim import Simulator


def run_bench(dut, testbench, *, clock: bool = True):
    """``clock=False`` for purely combinational components (no ``sync`` domain)."""
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
