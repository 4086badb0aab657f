"""pytorch_ref.ir.serialize: exact round trips, clear errors, atomic writes, and the
torch-free path from a saved model to Verilog (``python -m hdl verilog --model-file``)."""
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from pytorch_ref.frontends.float_model import quantize_model
from pytorch_ref.ir import serialize
from pytorch_ref.ir.quantized_model import (AddLayer, ConcatLayer, Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer,
                                            QuantizedModel)
from pytorch_ref.ir.serialize import load_model, save_model
from pytorch_ref.reference import run_integer_reference

ROOT = Path(__file__).resolve().parents[1]


def tiny_dense() -> QuantizedModel:
    torch.manual_seed(0)
    return quantize_model(nn.Sequential(nn.Linear(8, 4)), torch.randn(32, 8), name="tiny")


def small_cnn() -> QuantizedModel:
    """Every layer type, with non-default stride, padding, groups and a fused ReLU."""
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, stride=2, padding=1), nn.ReLU(),     # 2x8x8 -> 4x4x4
        nn.MaxPool2d(2, stride=1, padding=1),                   # -> 4x5x5
        nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.ReLU(),     # depthwise -> 4x5x5
        nn.Flatten(),
        nn.Linear(100, 3),
    ).eval()
    return quantize_model(model, torch.randn(32, 2, 8, 8), name="small_cnn")


def assert_identical(a, b, where="model"):
    """Equal values of equal types; arrays of equal dtype, shape and contents."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_identical(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def residual() -> QuantizedModel:
    """A graph: a residual block (two convolutions, an add of the block's input, ReLU)."""
    from pytorch_ref.zoo.models import ResidualBlock
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), ResidualBlock(4, 4), nn.Flatten(), nn.Linear(64, 3))
    return quantize_model(model.eval(), torch.randn(32, 2, 4, 4), name="residual")


def joined() -> QuantizedModel:
    """A graph with a concatenation of two convolutions."""
    from test_concat import quantized_inception
    return quantized_inception()


@pytest.mark.parametrize("make", [tiny_dense, small_cnn, residual, joined])
def test_round_trip_is_exact(make, tmp_path):
    model = make()
    path = tmp_path / "model.npz"
    save_model(model, path)
    loaded = load_model(path)
    assert_identical(model, loaded)
    x = torch.randint(-128, 128, (4,) + model.input_shape, dtype=torch.int8)
    assert torch.equal(run_integer_reference(model, x, device="cpu"),
                       run_integer_reference(loaded, x, device="cpu"))


def test_round_trip_covers_every_layer_type():
    types = {type(layer) for layer in small_cnn().layers + residual().layers + joined().layers}
    assert types == {Conv2dLayer, MaxPool2dLayer, FlattenLayer, DenseLayer, AddLayer, ConcatLayer}
    assert residual().inputs is not None


def test_file_mode_follows_umask_and_replaces(tmp_path):
    path = tmp_path / "model.npz"
    path.write_bytes(b"old")
    old = os.umask(0o027)
    try:
        save_model(tiny_dense(), path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["model.npz"]
    load_model(path)


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    path = tmp_path / "model.npz"
    path.write_bytes(b"previous contents")

    def fail(file, **arrays):
        file.write(b"PK half an archive")
        raise RuntimeError("disk full")

    monkeypatch.setattr(serialize.np, "savez_compressed", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        save_model(tiny_dense(), path)
    assert os.listdir(tmp_path) == ["model.npz"]
    assert path.read_bytes() == b"previous contents"


def _write_npz(path, header=None, **arrays):
    if header is not None:
        arrays["header"] = np.array(header if isinstance(header, str) else json.dumps(header))
    np.savez(path, **arrays)


def _good_header(tmp_path) -> dict:
    path = tmp_path / "good.npz"
    save_model(tiny_dense(), path)
    with np.load(path) as archive:
        return json.loads(str(archive["header"][()]))


@pytest.mark.parametrize("case, message", [
    ("text", r"not a saved quantized model \(not a NumPy \.npz file\)"),
    ("empty", r"not a saved quantized model \(not a NumPy \.npz file\)"),
    ("npy", r"not a saved quantized model \(a single \.npy array"),
    ("no header", r"not a saved quantized model \(no 'nnaccel-quantized-model' header\)"),
    ("other format", r"not a saved quantized model \(no 'nnaccel-quantized-model' header\)"),
    ("bad json", r"not a saved quantized model \(unreadable header\)"),
    ("pickled header", r"not a saved quantized model \(unreadable header\)"),
    ("version 2", r"nnaccel-quantized-model version 2 is not supported \(this program reads version 1\)"),
    ("no version", r"nnaccel-quantized-model version None is not supported"),
    ("missing array", r"damaged nnaccel-quantized-model file: .*layers\.0\.weight"),
    ("bad layer type", r"damaged nnaccel-quantized-model file: unknown layer type 'lstm'"),
])
def test_bad_files_raise_value_error_naming_the_file(case, message, tmp_path):
    path = tmp_path / "bad.npz"
    header = _good_header(tmp_path)
    if case == "text":
        path.write_text("not a model\n")
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros(3))
    elif case == "no header":
        _write_npz(path, weights=np.zeros(3))
    elif case == "other format":
        _write_npz(path, dict(header, format="something-else"))
    elif case == "bad json":
        _write_npz(path, "{not json")
    elif case == "pickled header":
        np.savez(path, header=np.array([{"format": serialize.FORMAT}], dtype=object))
    elif case == "version 2":
        _write_npz(path, dict(header, version=2))
    elif case == "no version":
        _write_npz(path, {k: v for k, v in header.items() if k != "version"})
    elif case == "missing array":
        _write_npz(path, header)
    elif case == "bad layer type":
        header["layers"][0]["type"] = "lstm"
        _write_npz(path, header)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: {message}"):
        load_model(path)


def _run(args, **kwargs):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


TORCH_FREE = """
import sys
from hdl.build import build_top
from hdl.config import AcceleratorConfig
from hdl.writers import to_verilog
from pytorch_ref.ir.serialize import load_model
model = load_model(sys.argv[1])
text = to_verilog(build_top(model, AcceleratorConfig(rows=2, cols=2)))
assert "module" in text
assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.split(".")[0] == "torch")
print("torch-free", model.name)
"""


def test_saved_model_to_verilog_without_torch(tmp_path):
    path = tmp_path / "tiny.npz"
    save_model(tiny_dense(), path)
    assert "torch-free tiny" in _run(["-c", TORCH_FREE, str(path)]).stdout


def test_cli_model_file(tmp_path):
    model_path, output = tmp_path / "tiny.npz", tmp_path / "out" / "tiny.v"
    save_model(tiny_dense(), model_path)
    result = _run(["-m", "hdl", "verilog", "--model-file", str(model_path), "--rows", "2", "--cols", "2",
                   "-o", str(output)])
    assert f"wrote {output}: tiny on a 2x2 array" in result.stdout
    assert "module" in output.read_text()


def test_cli_model_file_errors(tmp_path, capsys):
    from hdl.__main__ import main
    path = tmp_path / "bad.npz"
    path.write_text("nope")
    with pytest.raises(SystemExit) as exit_info:
        main(["verilog", "--model-file", str(path), "-o", str(tmp_path / "x.v")])
    assert exit_info.value.code == 2
    assert f"error: {path}: not a saved quantized model" in capsys.readouterr().err
    assert not (tmp_path / "x.v").exists()
    with pytest.raises(SystemExit):
        main(["verilog", "--model", "mlp", "--model-file", str(path), "-o", str(tmp_path / "x.v")])
    assert "not allowed with argument" in capsys.readouterr().err


def test_cli_save_model(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from hdl.__main__ import main
    from pytorch_ref.zoo import train
    model = tiny_dense()
    monkeypatch.setattr(train, "quantize_trained", lambda name, weight_bits=None: SimpleNamespace(quantized=model))
    path = tmp_path / "mlp.npz"
    assert main(["save-model", "--model", "mlp", "-o", str(path)]) == 0
    assert_identical(model, load_model(path))
    with pytest.raises(SystemExit):
        main(["save-model", "--model", "nonesuch", "-o", str(path)])
