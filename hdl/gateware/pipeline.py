"""Delay lines: a value and its registered copies."""
from amaranth import Signal


def delay_line(m, value, cycles: int, name: str) -> list:
    """``[value, value delayed 1 cycle, ..., delayed cycles]`` (index = delay)."""
    stages = [value]
    for n in range(cycles):
        reg = Signal.like(value, name=f"{name}_d{n + 1}")
        m.d.sync += reg.eq(stages[-1])
        stages.append(reg)
    return stages


def delayed(m, value, cycles: int, name: str):
    """``value`` delayed by ``cycles`` registers."""
    return delay_line(m, value, cycles, name)[-1]
