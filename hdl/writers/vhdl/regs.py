"""Flip-flop cells: one clocked process each.

``$dff``, ``$dffe``, ``$adff``, ``$adffe``, ``$sdff``, ``$sdffe`` and ``$sdffce``, with
any clock, enable and reset polarity. The output signal starts at the ``init`` attribute of
its wires (Amaranth's reset values); bits without one start at 0.
"""

from hdl.writers.vhdl.errors import UnsupportedCellError

__all__ = ["REG_CELLS", "emit_register"]


REG_CELLS = frozenset({"$dff", "$dffe", "$adff", "$adffe", "$sdff", "$sdffe", "$sdffce"})


def _literal(cell, name):
    return '"' + "".join("1" if c == "1" else "0" for c in reversed(cell.param_bits(name))) + '"'


def _active(cell, ctx, port, polarity):
    level = "1" if cell.flag(polarity) else "0"
    return f"{ctx.bit_of(cell, port, 0)} = '{level}'"


def emit_register(cell, ctx):
    """The process for one flip-flop cell, as a list of lines."""
    clock = ctx.clock(cell, "CLK", "CLK_POLARITY")
    q, d = ctx.output(cell, "Q"), ctx.operand(cell, "D")
    has_en = cell.type in ("$dffe", "$adffe", "$sdffe", "$sdffce")
    update = [f"{q} <= {d};"]
    if has_en:
        update = [f"if {_active(cell, ctx, 'EN', 'EN_POLARITY')} then", *_indent(update), "end if;"]
    if cell.type.startswith("$sdff"):
        reset = [f"{q} <= {_literal(cell, 'SRST_VALUE')};"]
        srst = _active(cell, ctx, "SRST", "SRST_POLARITY")
        if cell.type == "$sdffce":
            # Reset only when enabled.
            update = [f"if {_active(cell, ctx, 'EN', 'EN_POLARITY')} then",
                      f"  if {srst} then", *_indent(reset, 2), "  else",
                      f"    {q} <= {d};", "  end if;", "end if;"]
        else:
            update = [f"if {srst} then", *_indent(reset), "else", *_indent(update), "end if;"]
    sensitivity = [ctx.bit_of(cell, "CLK", 0)]
    body = [f"if {clock} then", *_indent(update), "end if;"]
    if cell.type.startswith("$adff"):
        if not isinstance(cell.connections["ARST"][0], int):
            raise UnsupportedCellError(cell, "asynchronous reset must be a signal, not a constant")
        sensitivity.append(ctx.bit_of(cell, "ARST", 0))
        body = [f"if {_active(cell, ctx, 'ARST', 'ARST_POLARITY')} then",
                f"  {q} <= {_literal(cell, 'ARST_VALUE')};",
                f"els{body[0]}", *body[1:]]
    return [f"process ({', '.join(sensitivity)}) begin", *_indent(body), "end process;"]


def _indent(lines, levels=1):
    return ["  " * levels + line for line in lines]
