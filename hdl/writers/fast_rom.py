"""Fast RTLIL for memory initial contents (Amaranth 0.5's back end is slow on big ROMs).

Amaranth 0.5.10 emits a memory's ``$meminit_v2`` data by building one netlist constant
per bit and joining them: about 13 us a bit, so the 32 Mbit of weights of a
``Linear(4096, 1024)`` took minutes before Yosys saw them. :func:`install` replaces that
one method by one that formats the same constant directly from the integers. The text is
identical (``tests/test_fast_rom.py`` compares both on real designs), and the patch
refuses any Amaranth version it was not checked against.
"""
from __future__ import annotations

import amaranth
from amaranth.back import rtlil

CHECKED_VERSIONS = ("0.5.10",)
_original_emit_memory = rtlil.ModuleEmitter.emit_memory


def _emit_memory(self, cell_idx, cell):
    memory_info = self.memories[cell_idx]
    width, mask = cell.width, (1 << cell.width) - 1
    # Bit 0 of row 0 is the constant's least significant bit; RTLIL writes MSB first.
    bits = "".join(format(row & mask, f"0{width}b") for row in reversed(cell.init))
    self.builder.cell("$meminit_v2", ports={
        "ADDR": self.sigspec(),
        "DATA": f"{len(bits)}'{bits}",
        "EN": self.sigspec(rtlil._nir.Value.ones(cell.width)),
    }, parameters={
        "MEMID": memory_info.memid,
        "ABITS": 0,
        "WIDTH": cell.width,
        "WORDS": cell.depth,
        "PRIORITY": 0,
    }, src_loc=cell.src_loc)


def install():
    """Use :func:`_emit_memory` (idempotent); a no-op on an unchecked Amaranth version."""
    if amaranth.__version__ in CHECKED_VERSIONS:
        rtlil.ModuleEmitter.emit_memory = _emit_memory


def uninstall():
    rtlil.ModuleEmitter.emit_memory = _original_emit_memory
