"""The AXI wrapper under cocotb with cocotbext-axi (sim/axi_testbench.py), on Verilator with
the Verilog and on GHDL with the VHDL, at several TDATA widths; its checker's failure
path; and the frame arithmetic."""
import numpy as np
import pytest

from hdl.compiler.weight_image import image_beats
from hdl.config import AcceleratorConfig
from hdl.gateware.axi.frame_shape import FrameShape
from hdl.gateware.axi.top import TOP_NAME, NeuralNetworkAcceleratorAxi, frame_shapes
from sim.cases import random_case
from sim.runner import run_cocotb


def run_axi_case(model, rows, cols, in_bits, out_bits, simulator, build_dir, corrupt=None, pause=0.3,
                 runtime_weights=False):
    config = AcceleratorConfig(rows=rows, cols=cols, runtime_weights=runtime_weights)
    case = random_case(model, config, count=4, seed=rows + 3 * cols)
    expected = [e.copy() for e in case.expected]
    if corrupt is not None:
        expected[corrupt].reshape(-1)[0] += 1
    reload = None
    if runtime_weights:                 # another model of the same shapes, and the way back
        other = random_case(model, config, count=2, seed=99)
        reload = {"image": image_beats(other.program), "inputs": other.inputs, "expected": other.expected,
                  "restore": image_beats(case.program)}
    top = NeuralNetworkAcceleratorAxi(case.program, in_bits, out_bits)
    out, _ = run_cocotb(top, TOP_NAME, "sim.axi_testbench",
                        {"program": case.program, "inputs": case.inputs, "expected": expected,
                         "input_tdata_bits": in_bits, "output_tdata_bits": out_bits, "seed": 7,
                         "pause_probability": pause, "timeout_cycles": 6000, "reload": reload},
                        simulator=simulator, build_dir=build_dir)
    return case, out["checks"]


@pytest.mark.parametrize("model,rows,cols,in_bits,out_bits,runtime", [
    ("linear", 8, 4, 32, 64, False),    # 8 core beats a frame: an early frame is padded
    ("mlp", 4, 8, 256, 1024, True),     # non-square; one core beat a frame; a weight reload
])
def test_axi_wrapper_on_verilator(model, rows, cols, in_bits, out_bits, runtime, tmp_path):
    _, checks = run_axi_case(model, rows, cols, in_bits, out_bits, "verilator", tmp_path, runtime_weights=runtime)
    failed = [c for c in checks if not c["ok"]]
    assert len(checks) > (50 if runtime else 40) and not failed, failed
    assert runtime == any("reloaded model" in c["check"] for c in checks)


def test_axi_wrapper_on_ghdl_with_the_vhdl(tmp_path):
    _, checks = run_axi_case("mlp", 4, 4, 128, 32, "ghdl", tmp_path, pause=0.2, runtime_weights=True)
    failed = [c for c in checks if not c["ok"]]
    assert len(checks) > 50 and not failed, failed


def test_axi_checker_reports_a_wrong_output(tmp_path):
    """A reference off by one in one element of input 0: exactly the checks of input 0's
    outputs fail, the others pass."""
    _, checks = run_axi_case("mlp", 4, 4, 64, 32, "verilator", tmp_path, corrupt=0)
    failed = {c["check"] for c in checks if not c["ok"]}
    assert failed == {"input 0: output equals the reference",
                      "back to back, input 0: output equals the reference"}


def test_frame_shapes_follow_the_program():
    case = random_case("linear800", AcceleratorConfig(rows=4, cols=4), count=1)     # Linear(800, 500)
    p = case.program
    in_frame, out_frame = frame_shapes(p, 32, 64)
    assert (in_frame.core_beats, out_frame.core_beats) == (p.input_beats, p.output_beats) == (7, 4)
    assert in_frame.tdata_beats == 800 * 8 // 32          # 800 int8 values, no padding at 4 lanes
    assert out_frame.tdata_beats == 3 * 16 + 15            # 500 bytes: 3 whole core beats and 116 bytes


def test_frame_split_and_join_round_trip():
    shape = FrameShape(1024, 128, core_beats=3, last_beat_bytes=20)
    assert (shape.pieces_per_beat, shape.last_pieces, shape.tdata_beats) == (8, 2, 18)
    rng = np.random.default_rng(0)
    beats = [int.from_bytes(rng.bytes(128), "little") for _ in range(2)] + [int.from_bytes(rng.bytes(20), "little")]
    assert shape.join(shape.split(beats)) == beats


@pytest.mark.parametrize("kwargs,message", [
    (dict(beat_bits=1024, tdata_bits=48, core_beats=1, last_beat_bytes=1),
     r"^TDATA width must be one of 32, 64, 128, 256, 512, 1024, not 48$"),
    (dict(beat_bits=1024, tdata_bits=32, core_beats=0, last_beat_bytes=1),
     r"^a frame must have at least one beat, not 0$"),
    (dict(beat_bits=1024, tdata_bits=32, core_beats=1, last_beat_bytes=129),
     r"^the last beat holds 1 to 128 bytes, not 129$"),
])
def test_frame_shape_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FrameShape(**kwargs)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_wrapper_takes_a_program():
    with pytest.raises(TypeError, match=r"^program must be a Program, not 3$"):
        NeuralNetworkAcceleratorAxi(3)
