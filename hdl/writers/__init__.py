"""Writers: the accelerator as Verilog (Amaranth's back end) or VHDL (our own, from Yosys's
netlist), and the atomic file write both use."""
from hdl.writers.files import write_atomically
from hdl.writers.verilog import TOP_NAME, to_verilog
from hdl.writers.vhdl import to_vhdl

__all__ = ["TOP_NAME", "to_verilog", "to_vhdl", "write_atomically"]
