"""A loop counter's end as a register of its own.

A loop nest whose counters compare themselves with their last index in the cycle they
update (``counter == last``, then the carries into the outer loops, then the counters'
resets and enables) puts every comparison and carry of the nest in series: the step
generator's and pool engine's critical paths. :func:`end_flag` keeps the comparison's
result in a register instead, computed with the counter's own update, so that the
carries start from registers.
"""


def end_flag(m, flag, counter, before_last, single, *, reset, advance):
    """Keep register ``flag`` equal to ``counter == last`` for a counter that goes to 0 on
    ``reset``, else to ``counter + 1`` on ``advance``, else holds: the next value is
    ``single`` (``last == 0``) after a reset, ``counter == before_last`` (``last - 1``)
    after an advance. ``single`` must be valid with ``reset``, ``before_last`` with
    ``advance``."""
    with m.If(reset):
        m.d.sync += flag.eq(single)
    with m.Elif(advance):
        m.d.sync += flag.eq(counter == before_last)
