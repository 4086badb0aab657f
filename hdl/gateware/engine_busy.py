"""An engine's ``busy`` output as a register."""
from amaranth import Signal


def registered_busy(m, activity, start, name: str = "busy_r"):
    """``busy`` for an engine whose ``activity`` (its running flag and its pipeline's valid
    bits, ORed) may be wide: high the cycle after a taken ``start`` and the cycle after every
    cycle of activity, so it falls a cycle after the last activity.

    Being a register, it can gate the engine's own ``start`` and reach a controller across the
    chip without the OR of the pipeline's valid bits on either path (the OR ends at this
    register), and the controller needs no register of its own: it sees the engine idle in
    the same cycle as it would have through one.
    """
    busy = Signal(name=name)
    m.d.sync += busy.eq(activity | start)
    return busy


def registered_start(m, start, busy, name: str = "started"):
    """``start``, taken only while the engine is not ``busy``, registered where it arrives:
    the controller's start register, the route across the chip, the gate and the loops'
    resets are then two cycles, not one. The engine's op begins a cycle later for it."""
    started = Signal(name=name)
    m.d.sync += started.eq(~busy & start)
    return started
