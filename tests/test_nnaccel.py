"""``nnaccel``: compile a user's model (a factory, a torch.export file, a TorchScript file)
to a folder, simulate its vectors exactly, lint its FuseSoC core with FuseSoC itself; and
its errors, which are one line with exit status 2 and leave nothing half-written."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from pytorch_ref.frontends.saved_models import load_exported, load_torchscript
from sim.nnaccel import main

MODEL_SOURCE = '''
import torch
from torch import nn


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


def not_a_model():
    return 3
'''


def _small_cnn():
    namespace = {}
    exec(MODEL_SOURCE, namespace)
    model = namespace["small_cnn"]().eval()
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    return model


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder with the model's module, its calibration data and its saved forms."""
    root = tmp_path_factory.mktemp("nnaccel")
    (root / "user_cnn.py").write_text(MODEL_SOURCE)
    np.save(root / "cal.npy", np.random.default_rng(0).standard_normal((32, 1, 12, 12)).astype(np.float32))
    model = _small_cnn()
    torch.export.save(torch.export.export(model, (torch.randn(1, 1, 12, 12),)), root / "cnn.pt2")
    torch.jit.script(model).save(root / "cnn.pt")
    torch.jit.trace(model, torch.randn(1, 1, 12, 12)).save(root / "traced.pt")
    return root


@pytest.fixture(scope="module")
def compiled(workspace):
    """``nnaccel compile user_cnn:small_cnn`` on a 4x4 array, run from the workspace."""
    cwd = os.getcwd()
    os.chdir(workspace)
    try:
        assert main(["compile", "user_cnn:small_cnn", "--calibration", "cal.npy", "-o", "out", "--rows", "4",
                     "--cols", "4", "--tdata-bits", "64", "--vectors", "4"]) == 0
    finally:
        os.chdir(cwd)
        sys.modules.pop("user_cnn", None)
    return workspace / "out"


def test_compile_writes_every_file(compiled):
    names = sorted(p.name for p in compiled.iterdir())
    assert names == sorted(["design.json", "model.npz", "neural_network_accelerator.v", "neural_network_accelerator.vhd",
                            "neural_network_accelerator_axi.v", "neural_network_accelerator_axi.vhd",
                            "nnaccel_registers.h", "nnaccel_registers.py", "report.json", "small_cnn.core",
                            "vectors.npz"])
    report = json.loads((compiled / "report.json").read_text())
    assert [layer["kind"] for layer in report["layers"]] == ["gemm", "maxpool", "gemm"]
    assert report["macs"] == 4 * 9 * 144 + 144 * 10
    assert all(layer["cycles_min"] < layer["cycles_max"] for layer in report["layers"])
    assert report["tdata_bits"] == {"input": 64, "output": 64}
    with np.load(compiled / "vectors.npz") as vectors:
        assert vectors["inputs"].shape == (4, 1, 12, 12) and vectors["inputs"].dtype == np.int8
        assert vectors["expected"].shape == (4, 10)
    assert "module neural_network_accelerator_axi(" in (compiled / "neural_network_accelerator_axi.v").read_text()


def test_sim_checks_the_vectors_exactly(compiled, capsys):
    assert main(["sim", str(compiled)]) == 0
    out = capsys.readouterr().out
    assert "4/4 vectors match the integer reference exactly" in out


def test_sim_fails_on_a_wrong_reference(compiled, tmp_path, capsys):
    """The checker's failure path: one reference value off by one."""
    folder = tmp_path / "wrong"
    shutil.copytree(compiled, folder, ignore=shutil.ignore_patterns("sim"))
    with np.load(folder / "vectors.npz") as vectors:
        inputs, expected = vectors["inputs"], vectors["expected"].copy()
    expected[2, 3] += 1
    np.savez(folder / "vectors.npz", inputs=inputs, expected=expected)
    assert main(["sim", str(folder)]) == 1
    assert "vector 2: MISMATCH" in capsys.readouterr().out


def _fusesoc_lint(folder: Path, build: Path, name: str):
    return subprocess.run([sys.executable, "-m", "fusesoc.main", "--cores-root", str(folder), "run", "--build-root",
                           str(build), "--target", "lint", f"nnaccel:generated:{name}"],
                          capture_output=True, text=True)


def test_fusesoc_lints_the_core(compiled, tmp_path):
    result = _fusesoc_lint(compiled, tmp_path / "build", "small_cnn")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "lint-verilator" in result.stdout + result.stderr


def test_fusesoc_lint_fails_on_broken_verilog(compiled, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(compiled, folder, ignore=shutil.ignore_patterns("sim"))
    with open(folder / "neural_network_accelerator_axi.v", "a") as f:
        f.write("module broken(; endmodule\n")
    result = _fusesoc_lint(folder, tmp_path / "build", "small_cnn")
    assert result.returncode != 0


def test_saved_forms_rebuild_the_model(workspace):
    model = _small_cnn()
    x = torch.randn(5, 1, 12, 12)
    for loaded in (load_exported(workspace / "cnn.pt2"), load_torchscript(workspace / "cnn.pt")):
        assert [type(m) for m in loaded] == [type(m) for m in model]
        assert torch.equal(loaded(x), model(x))


def test_saved_forms_compile_to_the_same_model(workspace, tmp_path):
    """A .pt2 and a TorchScript file of the same model give the same quantized model file."""
    for source in ("cnn.pt2", "cnn.pt"):
        assert main(["compile", str(workspace / source), "--calibration", str(workspace / "cal.npy"), "-o",
                     str(tmp_path / source), "--rows", "2", "--cols", "2", "--vectors", "1"]) == 0
    assert (tmp_path / "cnn.pt2" / "model.npz").read_bytes() == (tmp_path / "cnn.pt" / "model.npz").read_bytes()


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("model, calibration, message", [
    ("missing.pt2", "cal.npy", "model file 'missing.pt2' does not exist"),
    ("traced.pt", "cal.npy", "keeps no hyperparameters: the file holds a traced module"),
    ("user_cnn:nothing", "cal.npy", "'user_cnn' has no function 'nothing'"),
    ("user_cnn:not_a_model", "cal.npy", "user_cnn:not_a_model returned int, not a torch.nn.Module"),
    ("no_such_module:f", "cal.npy", "cannot import 'no_such_module'"),
    ("model.onnx", "cal.npy", "model must be a .pt2 file, a TorchScript file (.pt, .ts, .jit) or package.module:factory"),
    ("cnn.pt2", "missing.npy", "calibration file 'missing.npy' does not exist"),
    ("cnn.pt2", "ints.npy", "calibration data must be a float array [samples, *input_shape], not int64"),
    ("cnn.pt2", "rgb.npy", "expects 1 input channels, not 3"),
])
def test_compile_errors(model, calibration, message, workspace, capsys, monkeypatch):
    monkeypatch.chdir(workspace)
    np.save(workspace / "ints.npy", np.zeros((4, 1, 12, 12), np.int64))
    np.save(workspace / "rgb.npy", np.zeros((4, 3, 12, 12), np.float32))
    try:
        assert message in _error(capsys, ["compile", model, "--calibration", calibration, "-o", "failed"])
    finally:
        sys.modules.pop("user_cnn", None)
    assert not (workspace / "failed").exists()
    assert not [p for p in workspace.iterdir() if p.name.startswith(".failed")]


def test_unsupported_exported_node_is_named(tmp_path, capsys):
    model = nn.Sequential(nn.Linear(8, 8), nn.Sigmoid()).eval()
    torch.export.save(torch.export.export(model, (torch.randn(1, 8),)), tmp_path / "sig.pt2")
    np.save(tmp_path / "cal.npy", np.zeros((4, 8), np.float32))
    err = _error(capsys, ["compile", str(tmp_path / "sig.pt2"), "--calibration", str(tmp_path / "cal.npy"),
                          "-o", str(tmp_path / "out")])
    assert "node sigmoid (aten.sigmoid.default) is not supported; supported: conv1d, conv2d, linear, relu, " in err


def test_existing_folder_needs_force(compiled, capsys):
    err = _error(capsys, ["compile", "user_cnn:small_cnn", "--calibration", "cal.npy", "-o", str(compiled)])
    assert f"{compiled} exists; choose another folder or pass --force to replace it" in err


def test_sim_and_estimate_need_a_compiled_folder(tmp_path, capsys):
    for command in ("sim", "estimate"):
        assert f"'{tmp_path}' is not a folder written by nnaccel compile (no design.json)" in _error(
            capsys, [command, str(tmp_path)])


def test_estimate_what_if_is_one_of_the_experiments(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["estimate", str(tmp_path), "--what-if", "faster"])
    assert "invalid choice: 'faster' (choose from 'bram-output-registers')" in capsys.readouterr().err


def test_console_script_is_declared():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'nnaccel = "sim.nnaccel:main"' in text
    assert shutil.which("nnaccel") or Path(sys.executable).with_name("nnaccel").exists()


RETRAINED_SOURCE = MODEL_SOURCE + '''

def retrained_cnn():
    model = small_cnn()
    torch.manual_seed(1)
    for p in model.parameters():
        p.data.add_(0.1 * torch.randn_like(p))
    return model


def wider_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 12 * 12, 10))
'''


def test_weights_image_of_a_retrained_model(tmp_path, capsys, monkeypatch):
    """compile --runtime-weights, then `nnaccel weights` with a retrained model: the image is
    that model's (hdl.compiler.weight_image); a model of other shapes is refused."""
    from hdl.compiler.program import lower
    from hdl.compiler.weight_image import image_beats
    from pytorch_ref.frontends.float_model import quantize_model
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user_cnn2.py").write_text(RETRAINED_SOURCE)
    calibration = np.random.default_rng(0).standard_normal((16, 1, 12, 12)).astype(np.float32)
    np.save(tmp_path / "cal.npy", calibration)
    try:
        assert main(["compile", "user_cnn2:small_cnn", "--calibration", "cal.npy", "-o", "rt", "--rows", "2",
                     "--cols", "2", "--vectors", "1", "--runtime-weights"]) == 0
        assert json.loads((tmp_path / "rt" / "design.json").read_text())["runtime_weights"] is True
        assert main(["weights", "rt", "user_cnn2:retrained_cnn", "--calibration", "cal.npy", "-o", "new.bin"]) == 0
        import user_cnn2
        quantized = quantize_model(user_cnn2.retrained_cnn().eval(), torch.from_numpy(calibration), name="small_cnn")
        from hdl.config import AcceleratorConfig
        expected = image_beats(lower(quantized, AcceleratorConfig(rows=2, cols=2, runtime_weights=True)))
        assert np.fromfile(tmp_path / "new.bin", dtype="<u4").tolist() == expected
        assert "quantize the new model's inputs with scale" in capsys.readouterr().out
        err = _error(capsys, ["weights", "rt", "user_cnn2:wider_cnn", "--calibration", "cal.npy", "-o", "bad.bin"])
        assert "differs" in err or "ops" in err
        assert not (tmp_path / "bad.bin").exists()
    finally:
        sys.modules.pop("user_cnn2", None)


def test_exported_clamps_and_no_ops(tmp_path):
    """Conv1d, ReLU6 and Hardtanh (aten.hardtanh) and Dropout (aten.dropout): all rebuilt."""
    model = nn.Sequential(nn.Conv1d(2, 3, 3, padding=1), nn.ReLU6(), nn.Dropout(0.5), nn.Flatten(),
                          nn.Linear(18, 3), nn.Hardtanh(-0.2, 0.3)).eval()
    torch.export.save(torch.export.export(model, (torch.randn(1, 2, 6),)), tmp_path / "m.pt2")
    torch.jit.script(model).save(tmp_path / "m.pt")
    x = torch.randn(8, 2, 6) * 4
    for loaded in (load_exported(tmp_path / "m.pt2"), load_torchscript(tmp_path / "m.pt")):
        assert torch.equal(loaded(x), model(x))


class _MeanHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.pool, self.fc = nn.Conv2d(2, 4, 3, padding=1), nn.AvgPool2d(2), nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.pool(self.conv(x))).mean((2, 3)))


def test_exported_average_pooling(tmp_path):
    """avg_pool2d, adaptive_avg_pool2d and mean over (2, 3) in torch.export and TorchScript files."""
    x = torch.randn(4, 2, 8, 8)
    model = _MeanHead().eval()
    torch.export.save(torch.export.export(model, (x[:1],)), tmp_path / "m.pt2")
    assert torch.allclose(load_exported(tmp_path / "m.pt2")(x), model(x), atol=1e-6)
    scripted = nn.Sequential(nn.Conv2d(2, 4, 3), nn.AvgPool2d(2, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    torch.jit.script(scripted).save(tmp_path / "s.pt")
    assert torch.equal(load_torchscript(tmp_path / "s.pt")(x), scripted(x))


def test_estimate_units_places_each_unit_alone(compiled, capsys):
    """``estimate --units``: the named units, each alone (seconds for these three; the
    loader's signature has a constant member, which is no port), in a table slowest
    first, each with its own result folder; unknown names and options refused."""
    assert main(["estimate", str(compiled), "--units", "sequencer,ops,loader"]) == 0
    out = capsys.readouterr().out
    header, *rows = out.strip().splitlines()[-4:]
    assert header.split()[:3] == ["unit", "Fmax", "MHz"]
    assert sorted(row.split()[0] for row in rows) == ["loader", "ops", "sequencer"]
    assert rows[-1].split()[:2] == ["ops", "-"]                # no path from register to register
    fmax = [float(row.split()[1]) for row in rows[:-1]]
    assert fmax == sorted(fmax)
    for row in rows[:-1]:
        unit = json.loads((compiled / "ecp5-units" / row.split()[0] / "estimate.json").read_text())
        assert f"{unit['fmax_mhz']:.1f}" == row.split()[1] and unit["ff"] > 0
    err = _error(capsys, ["estimate", str(compiled), "--units", "sequencer,nope"])
    assert "no unit named 'nope'; the units are pool, activations, loader, ops, steps, gemm.weights, " in err
    assert "--units places the accelerator's own units: it takes neither --axi nor --what-if" in _error(
        capsys, ["estimate", str(compiled), "--units", "--axi"])


@pytest.mark.slow
def test_estimate_places_and_routes_the_compiled_design(compiled, capsys):
    """``nnaccel estimate`` on the 4x4 design: Yosys and nextpnr for an ECP5-85F (minutes)."""
    assert main(["estimate", str(compiled), "--timeout", "1800"]) == 0
    out = capsys.readouterr().out
    estimate = json.loads((compiled / "ecp5" / "neural_network_accelerator" / "estimate.json").read_text())
    assert estimate["lut4"] > 0 and estimate["fmax_mhz"] > 0 and 0 < estimate["dsp"] <= 156
    assert f"{estimate['fmax_mhz']:.1f} MHz" in out
    assert estimate["functional"] and estimate["what_if"] is None
    # The what-if goes to a folder of its own and says what it is; the real estimate stays.
    assert main(["estimate", str(compiled), "--what-if", "bram-output-registers", "--seed", "2",
                 "--timeout", "1800"]) == 0
    assert "[what-if bram-output-registers: not a functional design]" in capsys.readouterr().out
    what_if = json.loads((compiled / "ecp5-what-if-bram-output-registers" / "neural_network_accelerator"
                          / "estimate.json").read_text())
    assert not what_if["functional"] and what_if["what_if"] == "bram-output-registers"
    assert what_if["bram"] == estimate["bram"] and what_if["fmax_mhz"] > 0
    assert json.loads((compiled / "ecp5" / "neural_network_accelerator" / "estimate.json").read_text()) == estimate


def test_exported_graphs_keep_residual_adds_and_concatenations(tmp_path):
    """A torch.export file of a residual network or of concatenations comes back as a graph
    (``fx.GraphModule``) that computes what the model does and quantizes to the same
    integer graph as the module itself."""
    from pytorch_ref.frontends.float_model import quantize_model
    from test_concat import Inception
    from test_residual import residual_model
    for name, model in (("residual", residual_model()), ("inception", Inception().eval())):
        x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(1))
        torch.export.save(torch.export.export(model, (x[:1],)), tmp_path / f"{name}.pt2")
        loaded = load_exported(tmp_path / f"{name}.pt2")
        assert isinstance(loaded, torch.fx.GraphModule)
        assert torch.allclose(loaded(x), model(x), atol=1e-5)
        direct, exported = quantize_model(model, x, name=name), quantize_model(loaded, x, name=name)
        assert exported.inputs == direct.inputs and exported.inputs is not None
        assert [type(layer) for layer in exported.layers] == [type(layer) for layer in direct.layers]


def _saved_pt2e_graph(tmp_path):
    """A residual net quantized with torchao's pt2e flow, saved with torch.export, and
    calibration inputs: (the converted graph, its inputs, compile's arguments)."""
    from pytorch_ref.frontends.pt2e import pt2e_quantize
    from test_residual import residual_model
    torch.manual_seed(0)
    calibration = torch.randn(64, 3, 8, 8)
    converted = pt2e_quantize(residual_model(), calibration)
    torch.export.save(torch.export.export(converted, (calibration[:1],)), tmp_path / "q.pt2")
    np.save(tmp_path / "cal.npy", calibration[:3].numpy())
    return converted, calibration, ["compile", str(tmp_path / "q.pt2"), "--calibration", str(tmp_path / "cal.npy"),
                                    "--vectors", "2"]


def test_compile_refuses_weight_bits_for_a_pt2e_graph(tmp_path, capsys):
    _, _, common = _saved_pt2e_graph(tmp_path)
    assert "--weight-bits applies to float models; a pt2e model keeps its own weights" in _error(
        capsys, common + ["--weight-bits", "4", "-o", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


# A minute and a half (make test-all); make test runs pt2e graphs on Verilator in test_pt2e.py.
@pytest.mark.slow
def test_compile_takes_a_pt2e_quantized_graph(tmp_path, capsys):
    """A saved pt2e graph: compile imports its own integers (no calibration of ours: the
    reference equals from_pt2e's), and ``nnaccel sim`` checks the hardware exactly."""
    from pytorch_ref.frontends.pt2e import from_pt2e
    from pytorch_ref.ir.serialize import load_model
    converted, calibration, common = _saved_pt2e_graph(tmp_path)
    assert main(common + ["-o", str(tmp_path / "out")]) == 0
    imported = load_model(tmp_path / "out" / "model.npz")
    direct = from_pt2e(converted, calibration[:1], name=imported.name)
    assert imported.inputs == direct.inputs and imported.inputs is not None
    assert [layer.name for layer in imported.layers] == [layer.name for layer in direct.layers]
    assert main(["sim", str(tmp_path / "out")]) == 0
    assert "2/2" in capsys.readouterr().out
