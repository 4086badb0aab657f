"""Flat Yosys netlist: what the VHDL emitter reads.

Amaranth writes RTLIL; the Yosys that Amaranth bundles lowers it with the passes in
:data:`YOSYS_PASSES` and writes JSON, which :func:`parse_json` reads into :class:`Netlist`.
A *bit* is an ``int`` (a net id shared by everything connected to it) or one of the
constant characters ``"0"``, ``"1"``, ``"x"``, ``"z"``. Bit lists are LSB first.
"""

import json
from dataclasses import dataclass, field

from amaranth._toolchain.yosys import find_yosys
from amaranth.back import rtlil

__all__ = ["Port", "Cell", "Netlist", "YOSYS_PASSES", "rtlil_to_json", "parse_json",
           "from_rtlil", "from_elaboratable"]


# `proc` without -nomux turns Amaranth's processes into $mux/$pmux/$dff cells; -norom keeps
# switch statements as muxes, as Amaranth's own Verilog does. `memory_collect` merges
# $memrd_v2/$memwr_v2/$meminit_v2 into one $mem_v2 per memory. No optimisation passes run:
# the cells stay those of Amaranth's Verilog, so differential tests against it stay meaningful.
YOSYS_PASSES = (
    "proc -norom",
    "flatten -noscopeinfo",
    "memory_collect",
    "opt_clean",
)


@dataclass
class Port:
    name: str
    direction: str  # "input", "output" or "inout"
    bits: list


@dataclass
class Cell:
    name: str
    type: str
    parameters: dict
    attributes: dict
    connections: dict

    @property
    def src(self):
        return self.attributes.get("src", "")

    def param_int(self, name):
        """An integer parameter (Yosys writes them as binary strings, MSB first)."""
        value = self.parameters[name]
        if isinstance(value, int):
            return value
        return int(value, 2)

    def param_bits(self, name):
        """A bit-vector parameter as a string of ``0 1 x z``, LSB first."""
        value = self.parameters[name]
        if isinstance(value, int):
            value = format(value, "032b")
        return value[::-1]

    def flag(self, name):
        return name in self.parameters and self.param_int(name) != 0


@dataclass
class Netlist:
    name: str
    ports: list = field(default_factory=list)
    cells: list = field(default_factory=list)
    # name -> (bits, hidden, attributes); hidden names are Yosys-generated (`$...`).
    netnames: dict = field(default_factory=dict)

    def bit_inits(self):
        """Map net bit -> initial value character, from the wires' ``init`` attributes."""
        inits = {}
        for bits, _hidden, attributes in self.netnames.values():
            init = attributes.get("init")
            if init is None:
                continue
            for bit, value in zip(bits, init[::-1]):
                if isinstance(bit, int) and value in "01":
                    inits[bit] = value
        return inits


def rtlil_to_json(rtlil_text):
    """Run the bundled Yosys over RTLIL text and return its JSON netlist text."""
    yosys = find_yosys(lambda version: version >= (0, 40))
    script = [f"read_rtlil <<rtlil\n{rtlil_text}\nrtlil", *YOSYS_PASSES, "write_json"]
    return yosys.run(["-q", "-"], "\n".join(script))


def parse_json(json_text, top=None):
    """Read Yosys JSON text into a :class:`Netlist` of its top module (there is one after
    flattening; ``top`` picks one by name otherwise)."""
    modules = json.loads(json_text)["modules"]
    if top is None:
        tops = [name for name, module in modules.items()
                if int(str(module.get("attributes", {}).get("top", "0")), 2)]
        if len(tops) != 1:
            raise ValueError(f"Netlist must have exactly one top module, not {tops!r}")
        top = tops[0]
    module = modules[top]
    netlist = Netlist(top)
    for name, port in module["ports"].items():
        netlist.ports.append(Port(name, port["direction"], list(port["bits"])))
    for name, cell in module["cells"].items():
        netlist.cells.append(Cell(name, cell["type"], cell.get("parameters", {}),
                                  cell.get("attributes", {}),
                                  {k: list(v) for k, v in cell["connections"].items()}))
    for name, net in module["netnames"].items():
        netlist.netnames[name] = (list(net["bits"]), bool(net.get("hide_name", 0)),
                                  net.get("attributes", {}))
    return netlist


def from_rtlil(rtlil_text, top=None):
    return parse_json(rtlil_to_json(rtlil_text), top)


def from_elaboratable(elaboratable, *, name="top", ports=None):
    """Lower an Amaranth design the way :func:`amaranth.back.verilog.convert` does."""
    return from_rtlil(rtlil.convert(elaboratable, name=name, ports=ports), name)
