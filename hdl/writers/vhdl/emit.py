"""Write a :class:`~.netlist.Netlist` as one VHDL-2008 entity and architecture.

Two passes: the first gives every cell output a signal (named after the design's wire when
one covers exactly those bits) so that every net bit has a driver; the second writes one
statement or process per cell and one assignment per output port.
"""

from hdl.writers.srcloc import portable_src
from hdl.writers.vhdl.comb import COMB_CELLS
from hdl.writers.vhdl.errors import UnsupportedCellError
from hdl.writers.vhdl.helpers import HELPERS
from hdl.writers.vhdl.memory import emit_memory, memory_outputs
from hdl.writers.vhdl.names import Namer
from hdl.writers.vhdl.regs import REG_CELLS, emit_register
from hdl.writers.vhdl.sigspec import Drivers, extend

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

    def bit_of(self, cell, port, index):
        return self.drivers.bit(cell.connections[port][index])

    def edge(self, bit, rising, cell):
        if not isinstance(bit, int):
            raise UnsupportedCellError(cell, "clock must be a signal, not a constant")
        return f"{'rising' if rising else 'falling'}_edge({self.bit(bit)})"

    def clock(self, cell, port, polarity):
        return self.edge(cell.connections[port][0], cell.flag(polarity), cell)

    # Outputs and text.
    def output(self, cell, key):
        return self._outputs[cell.name, key]

    def declare_output(self, cell, key, name, bits, init):
        self._outputs[cell.name, key] = name
        self.drivers.add(name, bits)
        value = ""
        if init is not None:
            value = " := \"" + "".join("1" if c == "1" else "0" for c in reversed(init)) + '"'
        self.declare(f"signal {name} : std_logic_vector({len(bits) - 1} downto 0){value};")

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
            drivers.add(port.name, port.bits, scalar=scalar)

    ctx = Context(namer, drivers)
    wire_names = _wire_names(netlist, {port.name for port in netlist.ports})
    inits = netlist.bit_inits()
    for cell in netlist.cells:
        for key, bits, init in _outputs(cell, inits):
            hint = wire_names.get(tuple(bits)) or _fallback_name(cell, key)
            ctx.declare_output(cell, key, namer.fresh(hint), bits, init)

    for cell in netlist.cells:
        # The cell's source location, with paths that do not depend on the checkout's or
        # the Python installation's directory (see hdl.writers.srcloc).
        src = portable_src(cell.src) if cell.src else ""
        where = f"  -- {cell.type} {cell.name}" + (f" ({src})" if src else "")
        ctx.statement([where.replace("\n", " ")])
        if cell.type == "$mem_v2":
            emit_memory(cell, ctx)
        elif cell.type in REG_CELLS:
            ctx.statement(emit_register(cell, ctx))
        else:
            expression = COMB_CELLS[cell.type](cell, ctx)
            ctx.statement([f"{ctx.output(cell, 'Y')} <= {expression};"])

    for port in netlist.ports:
        if port.direction == "output":
            if "z" in port.bits:
                raise ValueError(f"Port {port.name!r} must not be driven by 'z'")
            value = drivers.bit(port.bits[0]) if len(port.bits) == 1 else drivers.vec(port.bits)
            ctx.statement([f"{port.name} <= {value};"])

    return _layout(name, ports, ctx)


def _layout(name, ports, ctx):
    lines = [
        "-- Generated by hdl.writers.vhdl from an Amaranth design; do not edit.",
        "library ieee;",
        "use ieee.std_logic_1164.all;",
        "use ieee.numeric_std.all;",
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
