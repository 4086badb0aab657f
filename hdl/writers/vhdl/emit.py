"""Write a :class:`~.netlist.Netlist` as one VHDL-2008 entity and architecture.

Two passes: the first gives every cell output a signal (named after the design's wire when
one covers exactly those bits) so that every net bit has a driver; the second writes one
statement per combinational cell, a process per memory, one process per clock edge for
the flip-flops, and one assignment per output port.
"""

from hdl.writers.srcloc import portable_src
from hdl.writers.vhdl.comb import COMB_CELLS, sequential_assignment
from hdl.writers.vhdl.errors import UnsupportedCellError
from hdl.writers.vhdl.helpers import HELPERS
from hdl.writers.vhdl.memory import emit_memory, memory_outputs
from hdl.writers.vhdl.names import Namer
from hdl.writers.vhdl.regs import REG_CELLS, clock_key, emit_register, emit_registers, register_update
from hdl.writers.vhdl.sigspec import Drivers, extend
from hdl.writers.vhdl.trees import expression_trees

__all__ = ["SUPPORTED_CELLS", "check_supported", "emit_vhdl"]


SUPPORTED_CELLS = frozenset(COMB_CELLS) | REG_CELLS | {"$mem_v2"}


def check_supported(netlist):
    for cell in netlist.cells:
        if cell.type not in SUPPORTED_CELLS:
            raise UnsupportedCellError(cell, "no VHDL translation for this cell type")
        for port, bits in cell.connections.items():
            if "z" in bits:
                raise UnsupportedCellError(cell, f"port {port} must not be driven by 'z'")


def _outputs(cell, inits):
    """(key, bits, init LSB first or None) of each output signal of a cell."""
    if cell.type == "$mem_v2":
        return memory_outputs(cell)
    if cell.type in REG_CELLS:
        bits = cell.connections["Q"]
        return [("Q", bits, "".join(inits.get(bit, "0") for bit in bits))]
    return [("Y", cell.connections["Y"], None)]


class Context:
    """What a cell emitter sees: operands as VHDL expressions, its output signals, and the
    lists of declarations and statements it adds to."""

    def __init__(self, namer, drivers):
        self.namer, self.drivers = namer, drivers
        self.declarations, self.statements = [], []
        self.variables = {}          # inner cell of an expression tree -> its declaration
        self._outputs = {}

    # Operands.
    def bits(self, cell, port):
        return cell.connections[port]

    def operand(self, cell, port, width=None, signed=False):
        """Port bits as a vector, extended to ``width``; a zero-width operand is 0."""
        bits = cell.connections[port] or ["0"]
        if width is not None:
            bits = extend(bits, width, signed)
        return self.drivers.vec(bits)

    def vec(self, bits):
        return self.drivers.vec(bits)

    def bit(self, bit):
        return self.drivers.bit(bit)

    def signal(self, bit):
        """The signal that holds ``bit``, unconverted (an input port stays ``std_logic``): for
        clock edges and sensitivity lists."""
        return self.drivers.signal(bit)

    def bit_of(self, cell, port, index):
        return self.drivers.bit(cell.connections[port][index])

    def edge(self, bit, rising, cell):
        if not isinstance(bit, int):
            raise UnsupportedCellError(cell, "clock must be a signal, not a constant")
        return f"{'rising' if rising else 'falling'}_edge({self.signal(bit)})"

    def clock(self, cell, port, polarity):
        return self.edge(cell.connections[port][0], cell.flag(polarity), cell)

    # Outputs and text.
    def output(self, cell, key):
        return self._outputs[cell.name, key]

    def declare_output(self, cell, key, name, bits, init, variable=False):
        """A signal for the output (or, with ``variable``, a variable declared in the
        process of the cell's expression tree: :mod:`.trees`)."""
        self._outputs[cell.name, key] = name
        self.drivers.add(name, bits)
        value = ""
        if init is not None:
            value = " := \"" + "".join("1" if c == "1" else "0" for c in reversed(init)) + '"'
        line = f"{'variable' if variable else 'signal'} {name} : bit_vector({len(bits) - 1} downto 0){value};"
        if variable:
            self.variables[cell.name] = line
        else:
            self.declare(line)

    def declare(self, line):
        self.declarations.append(line)

    def statement(self, lines):
        self.statements.append(lines)


def _wire_names(netlist, port_names):
    """Map bit tuple -> the design's (public) name for exactly those bits."""
    names = {}
    for name, (bits, hidden, _attributes) in sorted(
            netlist.netnames.items(), key=lambda item: (len(item[0]), item[0])):
        if not hidden and name not in port_names:
            names.setdefault(tuple(bits), name)
    return names


def _fallback_name(cell, key):
    if cell.type == "$mem_v2":
        return f"{cell.parameters.get('MEMID', cell.name)}_{key}"
    return f"{cell.type}_{cell.name}" if key == "Y" else f"{cell.name}_{key}"


def _where(cell):
    """The comment before a cell's lines: its type, name and source location, with paths that
    do not depend on the checkout's or the Python installation's directory
    (see :mod:`hdl.writers.srcloc`)."""
    src = portable_src(cell.src) if cell.src else ""
    return (f"  -- {cell.type} {cell.name}" + (f" ({src})" if src else "")).replace("\n", " ")


def _tree_process(tree, ctx):
    """One process for an expression tree (:mod:`.trees`): its inner cells as variables in
    dependency order, then the root's signal."""
    *inner, root = tree
    body = []
    for cell in tree:
        assign = "<=" if cell is root else ":="
        body += [_where(cell).lstrip(" "), *sequential_assignment(cell, ctx, ctx.output(cell, "Y"), assign)]
    return ["process (all)", *["  " + ctx.variables[cell.name] for cell in inner], "begin",
            *["  " + line for line in body], "end process;"]


def emit_vhdl(netlist, name):
    """The VHDL text of ``netlist`` as entity ``name``."""
    check_supported(netlist)
    namer, drivers = Namer(), Drivers()
    namer.reserve(name)
    ports = []
    for port in netlist.ports:
        if port.direction not in ("input", "output"):
            raise ValueError(f"Port {port.name!r} must be an input or an output, "
                             f"not {port.direction!r}")
        namer.reserve(port.name)
        scalar = len(port.bits) == 1
        kind = "std_logic" if scalar else f"std_logic_vector({len(port.bits) - 1} downto 0)"
        ports.append(f"{port.name} : {'in' if port.direction == 'input' else 'out'} {kind}")
        if port.direction == "input":
            drivers.add(port.name, port.bits, scalar=scalar, port=True)

    ctx = Context(namer, drivers)
    wire_names = _wire_names(netlist, {port.name for port in netlist.ports})
    inits = netlist.bit_inits()
    roots, inner = expression_trees(
        netlist, lambda cell: tuple(cell.connections["Y"]) in wire_names)
    for cell in netlist.cells:
        for key, bits, init in _outputs(cell, inits):
            hint = wire_names.get(tuple(bits)) or _fallback_name(cell, key)
            ctx.declare_output(cell, key, namer.fresh(hint), bits, init, variable=cell.name in inner)
    cells = {cell.name: cell for cell in netlist.cells}

    clocked = {}     # (clock bit, rising) -> (first cell, [register updates])
    for cell in netlist.cells:
        if cell.name in inner:
            continue                 # written in its root's process
        where = _where(cell)
        key = clock_key(cell) if cell.type in REG_CELLS else None
        if key is not None:
            first, bodies = clocked.setdefault(key, (cell, []))
            bodies.append([where.lstrip(" "), *register_update(cell, ctx)])
            continue
        ctx.statement([where])
        if cell.type == "$mem_v2":
            emit_memory(cell, ctx)
        elif cell.type in REG_CELLS:
            ctx.statement(emit_register(cell, ctx))
        elif len(roots[cell.name]) == 1:
            expression = COMB_CELLS[cell.type](cell, ctx)
            ctx.statement([f"{ctx.output(cell, 'Y')} <= {expression};"])
        else:
            ctx.statement(_tree_process([cells[name] for name in roots[cell.name]], ctx))
    for key, (first, bodies) in clocked.items():
        ctx.statement([f"  -- the {len(bodies)} flip-flops of {'rising' if key[1] else 'falling'} edges of "
                       f"{ctx.signal(key[0])}"])
        ctx.statement(emit_registers(key, bodies, ctx, first))

    for port in netlist.ports:
        if port.direction == "output":
            if "z" in port.bits:
                raise ValueError(f"Port {port.name!r} must not be driven by 'z'")
            value = (f"to_stdulogic({drivers.bit(port.bits[0])})" if len(port.bits) == 1
                     else f"to_stdlogicvector({drivers.vec(port.bits)})")
            ctx.statement([f"{port.name} <= {value};"])

    return _layout(name, ports, ctx)


def _layout(name, ports, ctx):
    lines = [
        "-- Generated by hdl.writers.vhdl from an Amaranth design; do not edit.",
        "library ieee;",
        "use ieee.std_logic_1164.all;",
        "use ieee.numeric_bit.all;",
        "",
        f"entity {name} is",
    ]
    if ports:
        lines.append("  port (")
        lines += [f"    {port}{';' if i + 1 < len(ports) else ''}" for i, port in enumerate(ports)]
        lines.append("  );")
    lines += [f"end entity {name};", "", f"architecture rtl of {name} is", HELPERS.rstrip("\n")]
    lines += ["  " + line for line in ctx.declarations]
    lines.append("begin")
    for statement in ctx.statements:
        lines += [line if line.startswith("  --") else "  " + line for line in statement]
    lines += [f"end architecture rtl;", ""]
    return "\n".join(lines)
