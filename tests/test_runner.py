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


def test_copy_blocks_are_kept_and_also_run_at_start():
    """A copy of a register that keeps its initial value for good stayed X on Icarus in the
    whole design (a GEMM op's output lane, always 0 on 8x8: every write was lost), though
    not in a small one: the order of Icarus's time-zero events decides. The cocotb runs
    of the conv stem and the mixed-width CNN on Icarus fail without this."""
    text = "  always @*\n    o[2:0] = a_d3;\n"
    assert icarus_time_zero_fix(text) == text + "  initial #1 o[2:0] = a_d3;\n"
