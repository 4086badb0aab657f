"""The simulator runner's Verilog fix-ups for Icarus."""
from sim.runner import icarus_time_zero_fix

CONSTANT_DRIVER = """module m(o);
  output [9:0] o;
  reg [9:0] o;
  always @*
    o[9:0] = 10'h000;
endmodule
"""


def test_constant_always_block_becomes_initial():
    """Icarus never runs an ``always @*`` that reads nothing: the output stayed X (a
    non-classifier's ``output_data`` on Icarus)."""
    fixed = icarus_time_zero_fix(CONSTANT_DRIVER)
    assert "  initial o[9:0] = 10'h000;" in fixed and "always" not in fixed


def test_blocks_that_read_signals_are_kept():
    text = "  always @*\n    o = a;\n"
    assert icarus_time_zero_fix(text) == text
