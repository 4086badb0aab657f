"""Verilog through Amaranth's back end (Yosys), without source-location attributes, so
the text depends only on the design."""
from amaranth.back import verilog

from hdl.writers import fast_rom

fast_rom.install()

#: Name of the generated top-level module / entity (the original sketch's).
TOP_NAME = "neural_network_accelerator"


def to_verilog(top, name: str = TOP_NAME) -> str:
    return verilog.convert(top, name=name, emit_src=False)
