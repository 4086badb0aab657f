"""The accelerator through the VHDL back end: every cell it uses is differentially
tested, and GHDL analyses the output with no warnings."""
import shutil
import subprocess

import pytest

from hdl.config import AcceleratorConfig
from hdl.writers import TOP_NAME, to_vhdl
from hdl.gateware.top import NeuralNetworkAccelerator
from hdl.writers.vhdl import netlist_cell_types
from sim.cases import random_case
from tests.test_vhdl_backend import CELL_GROUPS

# $mem_v2 is covered by the Amaranth-level memory tests of test_vhdl_backend.
DIFFERENTIALLY_TESTED = {kind for kinds in CELL_GROUPS.values() for kind in kinds} | {"$mem_v2"}


@pytest.mark.parametrize("model, rows, cols", [("mlp", 4, 4), ("stem", 4, 8)])
def test_every_cell_of_the_accelerator_has_a_differential_test(model, rows, cols):
    case = random_case(model, AcceleratorConfig(rows=rows, cols=cols), count=1)
    cells = netlist_cell_types(NeuralNetworkAccelerator(case.program), name=TOP_NAME)
    assert cells, "the netlist must contain cells"
    untested = cells - DIFFERENTIALLY_TESTED
    assert not untested, f"cell types without a differential test: {sorted(untested)}"


def test_accelerator_vhdl_analyses_and_elaborates_without_warnings(tmp_path):
    ghdl = shutil.which("ghdl")
    assert ghdl, "ghdl must be installed (make setup installs it)"
    case = random_case("mlp", AcceleratorConfig(rows=4, cols=4), count=1)
    source = tmp_path / f"{TOP_NAME}.vhd"
    text = to_vhdl(NeuralNetworkAccelerator(case.program))
    source.write_text(text)
    assert f"entity {TOP_NAME} is" in text
    for port in ("clk", "reset", "input_data", "input_valid", "input_ready", "output_data",
                 "output_values", "output_valid", "output_ready", "output_last"):
        assert f"{port} :" in text or f"{port}:" in text, port
    for step in (["-a", "--std=08", str(source)], ["-e", "--std=08", TOP_NAME]):
        result = subprocess.run([ghdl, *step], cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stderr == "" and result.stdout == "", result.stderr + result.stdout
