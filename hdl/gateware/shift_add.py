"""Multiplication in logic: shifted copies of one operand, summed in a balanced adder tree.

Yosys maps every ``$mul`` cell of two or more bits to a DSP multiplier on ECP5 (there is no
per-cell way to keep one in logic), and an ECP5-85F has 156 of them. The systolic array
needs one per PE; the address generators' small products (7x7 to 12x16 bits) and the
requantizer's 32x31 product would take another 12 + 4 per column. Written as the sum of
``a << k`` for the set bits ``k`` of ``b``, they become adders, and no ``$mul`` is left for
Yosys to map.

``b`` is unsigned: a signal, or a constant (then only its set bits make rows). ``a`` may be
signed. The result is the exact product, truncated to ``width`` bits (its low bits do not
depend on the high ones, so a truncated sum of truncated rows is the truncated product).
"""
from amaranth import Cat, Const, Mux, Signal, Value, signed, unsigned


def _extended(value, width: int):
    """``value``'s low ``width`` bits, sign-extended when it is signed and narrower."""
    value = Value.cast(value)
    if len(value) >= width or not value.shape().signed:
        return value[:width]
    return Cat(value, value[-1].replicate(width - len(value)))


def _rows(a, b, width: int) -> list:
    a = Value.cast(a)
    if isinstance(b, int):
        if b < 0:
            raise ValueError(f"a shift-add multiplier must be unsigned, not {b}")
        return [_extended(a << k, width) for k in range(b.bit_length()) if (b >> k) & 1]
    b = Value.cast(b)
    if b.shape().signed:
        raise TypeError("a shift-add multiplier must be unsigned; slice or cast it first")
    return [_extended(Mux(b[k], a << k, 0), width) for k in range(len(b))]


def _add_level(terms: list, width: int) -> list:
    """One level of the tree: neighbours summed, an odd one carried down."""
    return [(terms[n] + terms[n + 1])[:width] if n + 1 < len(terms) else terms[n]
            for n in range(0, len(terms), 2)]


def _typed(value, is_signed: bool):
    return value.as_signed() if is_signed else value.as_unsigned()


def shift_add_product(a, b, width: int):
    """``a * b`` in ``width`` bits, combinationally (a few adder levels deep: for products
    that have a pipeline stage to themselves, such as the address generators')."""
    terms = _rows(a, b, width) or [Const(0, width)]
    while len(terms) > 1:
        terms = _add_level(terms, width)
    return _typed(terms[0][:width], Value.cast(a).shape().signed)


def pipelined_shift_add_product(m, a, b, width: int, stages: int, name: str):
    """``a * b`` in ``width`` bits, registered: the adder tree cut into ``stages`` registered
    parts of about equal depth. Returns the last register, which holds the product
    ``stages`` cycles after ``a`` and ``b``."""
    if stages < 1:
        raise ValueError(f"a pipelined product needs at least one stage, not {stages}")
    is_signed = Value.cast(a).shape().signed
    terms = _rows(a, b, width) or [Const(0, width)]
    levels, done = (len(terms) - 1).bit_length(), 0
    for stage in range(stages):
        while done < -(-levels * (stage + 1) // stages):
            terms, done = _add_level(terms, width), done + 1
        regs = [Signal(signed(width) if is_signed else unsigned(width), name=f"{name}_s{stage + 1}_{n}")
                for n in range(len(terms))]
        m.d.sync += [reg.eq(_typed(term, is_signed)) for reg, term in zip(regs, terms)]
        terms = regs
    return terms[0]
