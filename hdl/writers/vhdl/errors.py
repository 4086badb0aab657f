"""The one error the VHDL back end raises for netlists it cannot translate."""

__all__ = ["UnsupportedCellError"]


class UnsupportedCellError(Exception):
    """A netlist cell (or a use of one) that the VHDL back end does not translate.

    The message names the Yosys cell type, the cell's name and its ``src`` attribute, so that
    the construct can be found in the Amaranth source. The back end raises this instead of
    writing VHDL that could behave differently from Amaranth's Verilog.
    """

    def __init__(self, cell, reason):
        self.cell_type = cell.type
        self.cell_name = cell.name
        self.src = cell.src
        where = f" at {cell.src}" if cell.src else ""
        super().__init__(
            f"VHDL back end does not support cell {cell.type} ({cell.name}){where}: {reason}")
