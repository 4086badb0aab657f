"""Combinational cells: one concurrent signal assignment each.

Semantics follow Yosys's cell library and its Verilog writer (the reference the tests
compare against): binary arithmetic, bitwise and comparison cells treat their operands as
signed only when *both* ``A_SIGNED`` and ``B_SIGNED`` are set; operands are extended to the
width of the operation (``Y_WIDTH`` for arithmetic, ``max(A_WIDTH, B_WIDTH)`` for
comparisons, ``max(A_WIDTH, B_WIDTH, Y_WIDTH)`` for division) before it, and results are
truncated or zero-extended to ``Y_WIDTH``. Shift amounts are unsigned except in ``$shift``
and ``$shiftx`` with ``B_SIGNED``, where a negative amount shifts left; amounts of any width
are clamped, never converted to a VHDL integer that could overflow. Undefined results
(division by zero, ``$shiftx`` bits outside ``A``) are 0.
"""

from hdl.writers.vhdl.sigspec import extend

__all__ = ["COMB_CELLS", "sequential_assignment"]


def _signed2(cell):
    return cell.flag("A_SIGNED") and cell.flag("B_SIGNED")


def _zero(bits):
    return all(bit in ("0", "x") for bit in bits)


def _arith(op):
    def emit(cell, ctx):
        width, signed = cell.param_int("Y_WIDTH"), _signed2(cell)
        a = ctx.operand(cell, "A", width, signed)
        b = ctx.operand(cell, "B", width, signed)
        if op == "*":
            small = _integer_product(cell, ctx, width, signed)
            return small or f"bit_vector(resize(unsigned({a}) * unsigned({b}), {width}))"
        # Amaranth writes `0 + x` and `x + 0` (the adder of a PE's first step, an offset of 0):
        # the sum is the other operand.
        if op == "+" and _zero(ctx.bits(cell, "A")):
            return b
        if _zero(ctx.bits(cell, "B")):
            return a
        if width <= 30:
            # Narrow sums in integer arithmetic (exact: both operands are below 2 ** 30).
            total = f"to_integer(unsigned({a})) {op} to_integer(unsigned({b}))"
            return f"bit_vector(to_unsigned(({total}) mod 2 ** {width}, {width}))"
        return f"bit_vector(unsigned({a}) {op} unsigned({b}))"
    return emit


def _integer_product(cell, ctx, width, signed):
    """A product of narrow operands in ``integer`` arithmetic (one multiplication instead of
    a loop of additions), when it is exact: the product of the operands as they are fits in
    31 bits, and its low ``width`` bits equal those of the extended operands' product."""
    a_width, b_width = len(ctx.bits(cell, "A")), len(ctx.bits(cell, "B"))
    if not (1 <= a_width and 1 <= b_width and a_width + b_width <= 31 and width <= 30):
        return None
    kind = "signed" if signed else "unsigned"
    a, b = ctx.operand(cell, "A"), ctx.operand(cell, "B")
    product = f"to_integer({kind}({a})) * to_integer({kind}({b}))"
    return f"bit_vector(to_unsigned(({product}) mod 2 ** {width}, {width}))"


def _bitwise(op):
    def emit(cell, ctx):
        width, signed = cell.param_int("Y_WIDTH"), _signed2(cell)
        return f"{ctx.operand(cell, 'A', width, signed)} {op} {ctx.operand(cell, 'B', width, signed)}"
    return emit


def _division(function, floored):
    def emit(cell, ctx):
        width, signed = cell.param_int("Y_WIDTH"), _signed2(cell)
        common = max(cell.param_int("A_WIDTH"), cell.param_int("B_WIDTH"), width)
        a = ctx.operand(cell, "A", common, signed)
        b = ctx.operand(cell, "B", common, signed)
        return f"{function}({a}, {b}, {_bool(signed)}, {_bool(floored)}, {width})"
    return emit


def _compare(op):
    def emit(cell, ctx):
        signed = _signed2(cell)
        common = max(cell.param_int("A_WIDTH"), cell.param_int("B_WIDTH"), 1)
        a = ctx.operand(cell, "A", common, signed)
        b = ctx.operand(cell, "B", common, signed)
        if op not in ("=", "/="):
            kind = "signed" if signed else "unsigned"
            a, b = f"{kind}({a})", f"{kind}({b})"
        return f"vh_bool({a} {op} {b}, {cell.param_int('Y_WIDTH')})"
    return emit


def _unary(template):
    def emit(cell, ctx):
        a = ctx.operand(cell, "A", cell.param_int("Y_WIDTH"), cell.flag("A_SIGNED"))
        return template.format(a=a)
    return emit


def _reduce(template, binary=False):
    def emit(cell, ctx):
        operands = {"a": ctx.operand(cell, "A")}
        if binary:
            operands["b"] = ctx.operand(cell, "B")
        return f"vh_bit({template.format(**operands)}, {cell.param_int('Y_WIDTH')})"
    return emit


def _bool(value):
    return "true" if value else "false"


def _shift(kind):
    def emit(cell, ctx):
        width = cell.param_int("Y_WIDTH")
        a_signed = cell.flag("A_SIGNED")
        common = max(cell.param_int("A_WIDTH"), width)
        b = ctx.operand(cell, "B")
        if kind == "shiftx":
            # Yosys: Y = A[B +: Y_WIDTH], no extension of A; bits outside A are `x`.
            a = ctx.operand(cell, "A")
            limit = common + 1
            return f"vh_shift({a}, vh_amount({b}, {_bool(cell.flag('B_SIGNED'))}, {limit}), {width})"
        a = ctx.operand(cell, "A", common, a_signed)
        if kind == "shift":
            amount = f"vh_amount({b}, {_bool(cell.flag('B_SIGNED'))}, {common})"
            return f"vh_shift({a}, {amount}, {width})"
        amount = f"vh_amount({b}, false, {common})"
        if kind == "sshr" and a_signed:
            shifted = f"unsigned(shift_right(signed({a}), {amount}))"
        else:
            function = "shift_left" if kind == "shl" else "shift_right"
            shifted = f"{function}(unsigned({a}), {amount})"
        return f"bit_vector(resize({shifted}, {width}))"
    return emit


def _mux(cell, ctx):
    return f"{ctx.operand(cell, 'B')} when {ctx.bit_of(cell, 'S', 0)} = '1' else {ctx.operand(cell, 'A')}"


def _pmux_choices(cell, ctx):
    """(select bit, value) of each case, lowest select bit first, as the `casez` of Yosys's
    Verilog writer does; Yosys leaves the result of several active select bits undefined."""
    width = cell.param_int("WIDTH")
    b_bits = ctx.bits(cell, "B")
    return [(ctx.bit_of(cell, "S", index), ctx.vec(b_bits[index * width:(index + 1) * width]))
            for index in range(cell.param_int("S_WIDTH"))]


def _pmux(cell, ctx):
    choices = [f"{value} when {select} = '1' else" for select, value in _pmux_choices(cell, ctx)]
    choices.append(ctx.operand(cell, "A"))
    return "\n      ".join(choices)


def _bmux(cell, ctx):
    # Y = A[S * WIDTH +: WIDTH]
    width, s_width = cell.param_int("WIDTH"), cell.param_int("S_WIDTH")
    amount = f"vh_amount({ctx.operand(cell, 'S')}, false, {2 ** s_width})"
    return f"vh_shift({ctx.operand(cell, 'A')}, {width} * {amount}, {width})"


def _demux(cell, ctx):
    # Chunk i of Y is A when S = i, else 0.
    width, s_width = cell.param_int("WIDTH"), cell.param_int("S_WIDTH")
    a, s = ctx.operand(cell, "A"), ctx.operand(cell, "S")
    if s_width == 0:
        return a
    chunks = []
    for index in reversed(range(2 ** s_width)):
        literal = format(index, f"0{s_width}b")
        chunks.append(f"vh_mask({a}, {s} = \"{literal}\")")
    return f"bit_vector'({' & '.join(chunks)})"


COMB_CELLS = {
    "$add": _arith("+"),
    "$sub": _arith("-"),
    "$mul": _arith("*"),
    "$and": _bitwise("and"),
    "$or": _bitwise("or"),
    "$xor": _bitwise("xor"),
    "$xnor": _bitwise("xnor"),
    "$div": _division("vh_div", False),
    "$divfloor": _division("vh_div", True),
    "$mod": _division("vh_mod", False),
    "$modfloor": _division("vh_mod", True),
    "$eq": _compare("="),
    "$eqx": _compare("="),
    "$ne": _compare("/="),
    "$nex": _compare("/="),
    "$lt": _compare("<"),
    "$le": _compare("<="),
    "$gt": _compare(">"),
    "$ge": _compare(">="),
    "$not": _unary("not {a}"),
    "$pos": _unary("{a}"),
    "$neg": _unary("bit_vector(-signed({a}))"),
    "$reduce_and": _reduce("and {a}"),
    "$reduce_or": _reduce("or {a}"),
    "$reduce_xor": _reduce("xor {a}"),
    "$reduce_xnor": _reduce("xnor {a}"),
    "$reduce_bool": _reduce("or {a}"),
    "$logic_not": _reduce("not (or {a})"),
    "$logic_and": _reduce("(or {a}) and (or {b})", binary=True),
    "$logic_or": _reduce("(or {a}) or (or {b})", binary=True),
    "$shl": _shift("shl"),
    "$sshl": _shift("shl"),
    "$shr": _shift("shr"),
    "$sshr": _shift("sshr"),
    "$shift": _shift("shift"),
    "$shiftx": _shift("shiftx"),
    "$mux": _mux,
    "$pmux": _pmux,
    "$bmux": _bmux,
    "$demux": _demux,
}


def sequential_assignment(cell, ctx, target, assign):
    """The lines that set ``target`` (with ``assign``: ``:=`` or ``<=``) to the cell's output
    inside a process. Multiplexers become ``if`` statements: GHDL 2.0 cannot elaborate a
    conditional assignment in a ``process (all)``."""
    if cell.type == "$mux":
        return [f"if {ctx.bit_of(cell, 'S', 0)} = '1' then", f"  {target} {assign} {ctx.operand(cell, 'B')};",
                "else", f"  {target} {assign} {ctx.operand(cell, 'A')};", "end if;"]
    if cell.type == "$pmux":
        lines = []
        for index, (select, value) in enumerate(_pmux_choices(cell, ctx)):
            lines += [f"{'if' if index == 0 else 'elsif'} {select} = '1' then", f"  {target} {assign} {value};"]
        value = f"{target} {assign} {ctx.operand(cell, 'A')};"
        return lines + ["else", f"  {value}", "end if;"] if lines else [value]
    return [f"{target} {assign} {COMB_CELLS[cell.type](cell, ctx)};"]
