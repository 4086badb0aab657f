"""Combinational cells grouped into trees, each written as one process of variables.

A combinational cell whose output has no name in the design (Yosys's ``$`` wires) and is
read by exactly one other combinational cell, and by nothing else (no register, memory or
port), need not be a signal: it becomes a variable of its reader's process, computed just
before it. The cells that remain signals are the roots; each root's tree is written as

    process (all)
      variable ... : bit_vector(...);   -- one per inner cell
    begin
      -- $cell ... (source)
      inner := ...;                     -- in dependency order
      root <= ...;
    end process;

An event-driven simulator pays for every signal update and every process it wakes: GHDL
runs the accelerator about twice as fast this way. Every wire the design names stays a
signal, so waveforms and the text keep the design's names.
"""

from hdl.writers.vhdl.comb import COMB_CELLS

__all__ = ["expression_trees"]


def _output_keys(cell):
    if cell.type == "$mem_v2":
        return {"RD_DATA"}
    if cell.type in COMB_CELLS:
        return {"Y"}
    return {"Q"}


def expression_trees(netlist, named):
    """``(roots, inner)``: ``roots`` maps each root combinational cell's name to the names of
    its tree's cells in dependency order (itself last); ``inner`` is the set of cells that
    are variables. ``named(cell)`` says whether the cell's output is a wire of the design."""
    readers = {}                     # net bit -> names of the cells (or "port") reading it
    for cell in netlist.cells:
        outputs = _output_keys(cell)
        for port, bits in cell.connections.items():
            if port in outputs:
                continue
            for bit in bits:
                if isinstance(bit, int):
                    readers.setdefault(bit, set()).add(cell.name)
    for port in netlist.ports:
        if port.direction == "output":
            for bit in port.bits:
                if isinstance(bit, int):
                    readers.setdefault(bit, set()).add("port")

    cells = {cell.name: cell for cell in netlist.cells}
    parent = {}                      # inner cell -> the one cell reading it
    for cell in netlist.cells:
        if cell.type not in COMB_CELLS or named(cell):
            continue
        reading = set()
        for bit in cell.connections["Y"]:
            reading |= readers.get(bit, set())
        if len(reading) == 1:
            (reader,) = reading
            if reader != "port" and reader != cell.name and cells[reader].type in COMB_CELLS:
                parent[cell.name] = reader

    children = {}
    for child, reader in parent.items():
        children.setdefault(reader, []).append(child)

    roots = {}
    for cell in netlist.cells:
        if cell.type in COMB_CELLS and cell.name not in parent:
            order, stack = [], [(cell.name, False)]
            while stack:                 # post-order: a cell after everything it reads
                name, expanded = stack.pop()
                if expanded:
                    order.append(name)
                    continue
                stack.append((name, True))
                stack.extend((child, False) for child in reversed(children.get(name, [])))
            roots[cell.name] = order
    # A cycle of unnamed single-reader cells (a combinational loop) has no root: keep its
    # cells as signals, as they were.
    reached = {name for order in roots.values() for name in order}
    for name in set(parent) - reached:
        roots[name] = [name]
        del parent[name]
    for name, order in roots.items():
        roots[name] = [n for n in order if n == name or n in parent]
    return roots, set(parent)
