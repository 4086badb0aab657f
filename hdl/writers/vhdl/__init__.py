"""VHDL-2008 back end for Amaranth designs.

Amaranth 0.5 writes RTLIL, Verilog and CXXRTL but no VHDL, and no Yosys build has a VHDL
writer. This package is one:

1. :func:`amaranth.back.rtlil.convert` gives the same RTLIL that Amaranth's Verilog comes from;
2. the Yosys that Amaranth bundles runs ``proc; flatten; memory_collect; opt_clean`` over it
   and writes a JSON netlist of Yosys internal cells (:mod:`.netlist`);
3. each cell becomes a concurrent assignment, a variable of the process of its expression
   tree (:mod:`.trees`), part of its clock's flip-flop process, or a memory's process
   (:mod:`.comb`, :mod:`.regs`, :mod:`.memory`), in one flat entity (:mod:`.emit`) of
   ``bit``/``bit_vector`` values and ``ieee.numeric_bit``, with ``std_logic`` ports
   (:mod:`.sigspec` says why).

The shape is for simulation speed as much as for reading. On the accelerator (the conv
blocks on a 4x8 array, three runs each) GHDL's mcode back end ran 262 cycles/s with one
``std_logic`` signal and process per cell and runs 1,043-1,159 now; the LLVM back end
runs 1,462-1,870 at ``-O0`` and about 2,400 optimised, where Icarus runs 1,580-1,682 on the
same design (:func:`sim.runner.ghdl_build_options` chooses). It stays synthesizable
VHDL-2008: ``bit_vector``, ``numeric_bit``, ``process (all)``.

Each cell's lines follow a comment with its type, name and Amaranth source location; the
paths there are relative to the project or to the installed package
(:func:`hdl.writers.srcloc.portable_src`), so the text depends only on the design.

Why a netlist rather than Amaranth's own IR: Yosys's cell library is small, documented and
the exact input of Amaranth's Verilog writer, so the VHDL can be tested cell by cell against
that Verilog in simulation. Why no optimisation passes: the cells stay those the Verilog is
written from. Cells outside :data:`SUPPORTED_CELLS`, and the cell options listed in the
submodules, raise :class:`UnsupportedCellError` rather than produce VHDL that could differ.

Where Yosys leaves a value undefined (``x``: division by zero, ``$shiftx`` bits outside its
input, several active ``$pmux`` selects, constants ``x``, undriven nets, words of a memory
without initial contents) the VHDL gives a fixed value: 0, and the lowest active select.
"""

from hdl.writers.vhdl.emit import SUPPORTED_CELLS, emit_vhdl
from hdl.writers.vhdl.errors import UnsupportedCellError
from hdl.writers.vhdl.netlist import from_elaboratable

__all__ = ["convert", "netlist_cell_types", "to_vhdl", "SUPPORTED_CELLS", "UnsupportedCellError"]


def convert(elaboratable, *, name="top", ports=None):
    """VHDL-2008 text for ``elaboratable``, an entity called ``name``.

    Same calling convention as :func:`amaranth.back.verilog.convert`: a
    :class:`~amaranth.lib.wiring.Component` takes its ports from its signature, any other
    elaboratable needs ``ports``. Top-level ports keep the names and widths of Amaranth's
    Verilog; 1-bit ports are ``std_logic``, wider ones ``std_logic_vector(N - 1 downto 0)``.

    Raises
    ------
    UnsupportedCellError
        If the design needs a cell (or cell option) the back end does not translate.
    ValueError
        If a port name is not a legal VHDL identifier (e.g. ``a__b``) or ``name`` is not.
    """
    return emit_vhdl(from_elaboratable(elaboratable, name=name, ports=ports), name)


def netlist_cell_types(elaboratable, *, name="top", ports=None):
    """The set of Yosys cell types in the netlist :func:`convert` translates."""
    netlist = from_elaboratable(elaboratable, name=name, ports=ports)
    return {cell.type for cell in netlist.cells}


def to_vhdl(top, name: str = "neural_network_accelerator") -> str:
    """The accelerator's top level as VHDL-2008 (the entity name matches the Verilog's)."""
    return convert(top, name=name)
