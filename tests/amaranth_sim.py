"""A small helper to run an async Amaranth testbench on a component."""
from amaranth.sim import Simulator


def run_testbench(dut, testbench, *, deadline_cycles: int = 100_000, clock: bool = True):
    """Runs ``testbench`` to its end; fails if it has not ended after ``deadline_cycles``.
    ``clock=False`` for purely combinational components (no ``sync`` domain)."""
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    sim.add_testbench(testbench)

    async def deadline(ctx):
        await ctx.delay(deadline_cycles * 1e-6)
        raise AssertionError(f"the testbench did not finish within {deadline_cycles} cycles")

    sim.add_testbench(deadline, background=True)
    sim.run()
