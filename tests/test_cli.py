"""The command lines stop with a message, not a traceback, on bad input (issue 13)."""
import os
import stat

import pytest

from hdl.__main__ import main as hdl_main
from hdl.writers import write_atomically
from pytorch_ref.ir.serialize import save_model
from sim.__main__ import main as sim_main
from tests.test_serialize import tiny_dense


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "tiny.npz"
    save_model(tiny_dense(), path)
    return path


def _error(capsys, main, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("extra, message", [
    (["--rows", "3", "--cols", "64"], "error: the activation word (lcm of rows and cols = 192 values) must fit one "
                                      "input beat (128 values of 8 bits)"),
    (["--rows", "0"], "error: array rows must be a positive integer, not 0"),
])
def test_configuration_errors(extra, message, model_file, tmp_path, capsys):
    out = tmp_path / "x.v"
    assert message in _error(capsys, hdl_main, ["verilog", "--model-file", str(model_file), *extra, "-o", str(out)])
    assert not out.exists()


def test_output_path_errors(model_file, tmp_path, capsys):
    args = ["verilog", "--model-file", str(model_file), "--rows", "2", "--cols", "2", "-o"]
    assert f"error: output path '{tmp_path}' is a folder; name a file in it" in _error(
        capsys, hdl_main, [*args, str(tmp_path)])
    assert "error: output path must name a file, not ''" in _error(capsys, hdl_main, [*args, ""])
    assert "error: cannot write '/dev/null/x.v'" in _error(capsys, hdl_main, [*args, "/dev/null/x.v"])
    assert sorted(os.listdir(tmp_path)) == ["tiny.npz"]


def test_sim_build_dir_that_cannot_exist(capsys):
    err = _error(capsys, sim_main, ["--model", "mlp", "--rows", "4", "--cols", "4", "--build-dir", "/dev/null/x"])
    assert "error: cannot use --build-dir '/dev/null/x': [Errno 20] Not a directory" in err


def test_generated_files_follow_the_umask(tmp_path):
    """mkstemp made every generated file 0600; a plain file is 0666 less the umask."""
    old = os.umask(0o022)
    try:
        write_atomically(tmp_path / "a.v", "module a; endmodule\n")
        os.umask(0o077)
        write_atomically(tmp_path / "b.v", "module b; endmodule\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.v").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "b.v").st_mode) == 0o600


def test_size_guard_stops_before_generating(tmp_path, capsys):
    """Linear(16384, 1024) spent 623 s and 2.7 GB on 136 MB of Verilog with no warning."""
    import numpy as np

    from hdl.build import MEMORY_LIMIT_BITS, check_size
    from hdl.compiler.program import lower
    from hdl.config import AcceleratorConfig
    from tests.test_lowering import dense_model
    big = dense_model(np.ones((1024, 4096), dtype=np.int8), np.zeros(1024, dtype=np.int32))
    program = lower(big, AcceleratorConfig())
    assert sum(program.memory_bits.values()) > MEMORY_LIMIT_BITS
    with pytest.raises(ValueError, match=r"^m: the design needs 32\.\d Mbit of on-chip memory \(weights 32\.0, .*"
                                         r"over the 32 Mbit limit; its Verilog would be about \d+ MB\. Allow it"):
        check_size(program)
    check_size(program, allow_large=True)
    path = tmp_path / "big.npz"
    save_model(big, path)
    out = tmp_path / "big.v"
    err = _error(capsys, hdl_main, ["verilog", "--model-file", str(path), "-o", str(out)])
    assert "over the 32 Mbit limit" in err and "--allow-large" in err and not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["verilog", "--model", "mlp", "--weight-bits", "9"],
     "error: all layers: weight bits must be an integer in [2, 8], not 9"),
    (["vhdl", "--model", "mlp", "--weight-bits", "0.Linear=1"],
     "error: 0.Linear: weight bits must be an integer in [2, 8], not 1"),
    (["save-model", "--model", "mlp", "--weight-bits", "fc9=4"],
     "error: weight bits name 'fc9', which is not a weighted layer of the model; its weighted layers are "
     "0.Linear, 2.Linear"),
])
def test_weight_bits_errors_name_the_layer(argv, message, tmp_path, capsys):
    out = tmp_path / "x.out"
    assert message in _error(capsys, hdl_main, [*argv, "-o", str(out)])
    assert not out.exists()


def test_weight_bits_do_not_apply_to_a_model_file(model_file, tmp_path, capsys):
    out = tmp_path / "x.v"
    err = _error(capsys, hdl_main, ["verilog", "--model-file", str(model_file), "--weight-bits", "4", "-o", str(out)])
    assert "error: --weight-bits applies to --model; a --model-file keeps the widths it was saved with" in err
    assert not out.exists()


def test_sim_weight_bits_error(tmp_path, capsys):
    err = _error(capsys, sim_main, ["--model", "mlp", "--weight-bits", "dense=9", "--build-dir", str(tmp_path)])
    assert "error: dense: weight bits must be an integer in [2, 8], not 9" in err


@pytest.mark.parametrize("extra, message", [
    (["--axi", "--tdata-bits", "48"], "error: TDATA width must be one of 32, 64, 128, 256, 512, 1024, not 48"),
    (["--tdata-bits", "64"], "error: --tdata-bits and --output-tdata-bits apply to --axi"),
])
def test_axi_option_errors(extra, message, model_file, tmp_path, capsys):
    out = tmp_path / "x.v"
    args = ["verilog", "--model-file", str(model_file), "--rows", "2", "--cols", "2", *extra, "-o", str(out)]
    assert message in _error(capsys, hdl_main, args)
    assert not out.exists()


def test_axi_wrapper_and_register_files(model_file, tmp_path, capsys):
    out = tmp_path / "axi.v"
    assert hdl_main(["verilog", "--model-file", str(model_file), "--rows", "2", "--cols", "2", "--axi",
                     "--tdata-bits", "64", "-o", str(out)]) == 0
    text = out.read_text()
    assert "module neural_network_accelerator_axi(" in text and "input [63:0] s_axis_tdata;" in text
    for language, marker in (("c", "#define NNACCEL_STATUS 0x18u"), ("python", "STATUS = 0x18")):
        path = tmp_path / f"regs.{language}"
        assert hdl_main(["registers", "--language", language, "-o", str(path)]) == 0
        assert marker in path.read_text()
