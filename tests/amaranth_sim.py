"""A small helper to run an async Amaranth testbench on a component."""
from amaranth.sim import Simulator


def run_testbench(dut, testbench, *, deadline_cycles: int = 100_000):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run_until(deadline_cycles * 1e-6)
