"""Multiplication in logic: shifted copies of one operand, summed in a balanced adder tree.

Yosys maps every ``$mul`` cell of two or more bits to a DSP multiplier on ECP5 (there is no
per-cell way to keep one in logic), and an ECP5-85F has 156 of them. The systolic array
needs one per PE; the address generators' small products (7x7 to 12x16 bits) would take
12 more, and the requantizer's 32x31-bit ones 4 a column. Written as the sum of ``a << k``
for the set bits ``k`` of ``b``, they become adders, and no ``$mul`` is left for Yosys
(the requantizer keeps one 17x17 product a column on a DSP, :mod:`.requantizer`).

``b`` is unsigned: a signal, or a constant (then only its set bits make rows). ``a`` may be
signed: it is then taken in offset binary, ``a = (a + 2**(n-1)) - 2**(n-1)``, so that every
row is unsigned and no row is sign-extended, and ``-b * 2**(n-1)`` is one more row. Each
addition spans only the bits where its two terms overlap (a term's low bits, below the
other's shift, pass through), so a row costs about ``len(a)`` adder bits, not ``width``.
The result is the exact product, truncated to ``width`` bits.
"""
from amaranth import Cat, Const, Mux, Signal, Value, signed, unsigned


def _rows(a, b, width: int) -> list[tuple[Value, int]]:
    """The terms ``(value, shift)``, unsigned, whose sum is ``a * b`` modulo ``2**width``."""
    a = Value.cast(a)
    if isinstance(b, int):
        if b < 0:
            raise ValueError(f"a shift-add multiplier must be unsigned, not {b}")
        bits = [(k, None) for k in range(b.bit_length()) if (b >> k) & 1]
    else:
        b = Value.cast(b)
        if b.shape().signed:
            raise TypeError("a shift-add multiplier must be unsigned; slice or cast it first")
        bits = [(k, b[k]) for k in range(len(b))]
    n = len(a)
    offset_a = Cat(a[:-1], ~a[-1]) if a.shape().signed else a      # a + 2**(n-1) when signed
    terms = [(offset_a if bit is None else Mux(bit, offset_a, 0), k) for k, bit in bits if k < width]
    if a.shape().signed and n - 1 < width:
        # The offset's correction, -b * 2**(n-1), modulo 2**width.
        high = width - (n - 1)
        correction = Const((-b) % (1 << high), high) if isinstance(b, int) else (Const(0, high) - b)[:high]
        terms.append((correction, n - 1))
    return [(value[:width - shift], shift) for value, shift in terms]


def _add(x, y, width: int):
    """``x + y`` of two ``(value, shift)`` terms, as one whose adder spans their overlap."""
    (xv, xs), (yv, ys) = sorted([x, y], key=lambda term: term[1])
    gap = ys - xs
    if len(xv) <= gap:
        total = Cat(xv, Const(0, gap - len(xv)), yv)
    else:
        total = Cat(xv[:gap], xv[gap:] + yv)
    return total[:width - xs], xs


def _add_level(terms: list, width: int) -> list:
    """One level of the tree: neighbours summed, an odd one carried down."""
    return [_add(terms[n], terms[n + 1], width) if n + 1 < len(terms) else terms[n]
            for n in range(0, len(terms), 2)]


def _result(term, width: int, is_signed: bool):
    value, shift = term
    total = Cat(Const(0, shift), value)[:width] if shift else value[:width]
    if len(total) < width:
        total = Cat(total, Const(0, width - len(total)))
    return total.as_signed() if is_signed else total.as_unsigned()


def shift_add_product(a, b, width: int):
    """``a * b`` in ``width`` bits, combinationally (a few adder levels deep: for products
    that have a pipeline stage to themselves, such as the address generators')."""
    terms = _rows(a, b, width) or [(Const(0, 1), 0)]
    while len(terms) > 1:
        terms = _add_level(terms, width)
    return _result(terms[0], width, Value.cast(a).shape().signed)


def pipelined_shift_add_product(m, a, b, width: int, stages: int, name: str):
    """``a * b`` in ``width`` bits, registered: the adder tree cut into ``stages`` registered
    parts of about equal depth. Returns the last register, which holds the product
    ``stages`` cycles after ``a`` and ``b``."""
    if stages < 1:
        raise ValueError(f"a pipelined product needs at least one stage, not {stages}")
    terms = _rows(a, b, width) or [(Const(0, 1), 0)]
    levels, done = (len(terms) - 1).bit_length(), 0
    for stage in range(stages):
        while done < -(-levels * (stage + 1) // stages):
            terms, done = _add_level(terms, width), done + 1
        registered = []
        for n, (value, shift) in enumerate(terms):
            reg = Signal(len(value), name=f"{name}_s{stage + 1}_{n}")
            m.d.sync += reg.eq(value)
            registered.append((reg, shift))
        terms = registered
    result = Signal(signed(width) if Value.cast(a).shape().signed else unsigned(width), name=name)
    m.d.comb += result.eq(_result(terms[0], width, Value.cast(a).shape().signed))
    return result
