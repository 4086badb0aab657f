"""Flip-flop cells: one clocked process per clock edge (or per register with an asynchronous reset).

``$dff``, ``$dffe``, ``$adff``, ``$adffe``, ``$sdff``, ``$sdffe`` and ``$sdffce``, with
any clock, enable and reset polarity. The output signal starts at the ``init`` attribute of
its wires (Amaranth's reset values); bits without one start at 0.
"""

from hdl.writers.vhdl.errors import UnsupportedCellError

__all__ = ["REG_CELLS", "clock_key", "emit_register", "emit_registers", "register_update"]


REG_CELLS = frozenset({"$dff", "$dffe", "$adff", "$adffe", "$sdff", "$sdffe", "$sdffce"})


def _literal(cell, name):
    return '"' + "".join("1" if c == "1" else "0" for c in reversed(cell.param_bits(name))) + '"'


def _active(cell, ctx, port, polarity):
    """The condition that a control input is active. A port is compared as the ``std_logic``
    it is, not through ``to_bit``: an input still ``'U'`` (at time 0) is then neither level,
    as an ``x`` is in the Verilog, instead of ``'0'``, which would fire an active-low reset."""
    level = "1" if cell.flag(polarity) else "0"
    bit = cell.connections[port][0]
    ref = ctx.signal(bit) if isinstance(bit, int) and ctx.drivers.is_driven(bit) else ctx.bit(bit)
    return f"{ref} = '{level}'"


def clock_key(cell):
    """``(clock bit, rising)`` of a register without an asynchronous reset, else None:
    the registers of one key share one process (:func:`emit_registers`)."""
    if cell.type.startswith("$adff"):
        return None
    return cell.connections["CLK"][0], cell.flag("CLK_POLARITY")


def register_update(cell, ctx):
    """The lines that update one flip-flop on its clock edge (enable and synchronous reset
    included), as a list of lines."""
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
    return update


def emit_registers(key, bodies, ctx, cell):
    """One process for every flip-flop of one clock edge: ``bodies`` are their
    :func:`register_update` lines (each after its cell comment). One process, not one per
    register, because an event-driven simulator pays per process woken."""
    clock, rising = key
    edge = ctx.edge(clock, rising, cell)
    return [f"process ({ctx.signal(clock)}) begin", f"  if {edge} then",
            *_indent([line for body in bodies for line in body], 2), "  end if;", "end process;"]


def emit_register(cell, ctx):
    """The process of one flip-flop with an asynchronous reset, as a list of lines."""
    clock = ctx.clock(cell, "CLK", "CLK_POLARITY")
    q = ctx.output(cell, "Q")
    if not isinstance(cell.connections["ARST"][0], int):
        raise UnsupportedCellError(cell, "asynchronous reset must be a signal, not a constant")
    sensitivity = [ctx.signal(cell.connections["CLK"][0]), ctx.signal(cell.connections["ARST"][0])]
    body = [f"if {_active(cell, ctx, 'ARST', 'ARST_POLARITY')} then",
            f"  {q} <= {_literal(cell, 'ARST_VALUE')};",
            f"elsif {clock} then", *_indent(register_update(cell, ctx)), "end if;"]
    return [f"process ({', '.join(sensitivity)}) begin", *_indent(body), "end process;"]


def _indent(lines, levels=1):
    return ["  " * levels + line for line in lines]
