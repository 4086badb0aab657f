"""The generated Verilog and VHDL depend only on the model and the configuration: not on where
the checkout lives, nor on Python's hash seed.

The project's packages are copied into two directories with paths of different lengths, and
each copy writes the same tiny accelerator in a fresh interpreter with its own
``PYTHONHASHSEED``; the files must be byte-identical and free of either directory's path.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
# What building an accelerator imports (sim/ and tests/ are not needed).
PACKAGES = ("hdl", "pytorch_ref")

SCRIPT = r"""
import sys
from pathlib import Path

import torch
from torch import nn

import hdl
from hdl.build import build_top
from hdl.config import AcceleratorConfig
from hdl.writers import to_verilog, to_vhdl
from pytorch_ref.frontends.float_model import quantize_model

# The copy, not the checkout (nor an installed nnaccel), must be the one imported.
here = Path.cwd().resolve()
assert Path(hdl.__file__).resolve().is_relative_to(here), (hdl.__file__, here)

torch.manual_seed(0)
model = quantize_model(nn.Sequential(nn.Linear(8, 4)).eval(), torch.randn(32, 8), name="tiny")
config = AcceleratorConfig(rows=2, cols=2)
out = Path(sys.argv[1])
out.joinpath("top.v").write_text(to_verilog(build_top(model, config)))
out.joinpath("top.vhd").write_text(to_vhdl(build_top(model, config), "tiny_top"))
"""


def _copy_project(source: Path, destination: Path):
    destination.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", ".venv", "*.egg-info")
    for package in PACKAGES:
        shutil.copytree(source / package, destination / package, ignore=ignore)


def _generate(copy: Path, out: Path, hash_seed: str):
    out.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONHASHSEED=hash_seed,
               AMARANTH_USE_YOSYS=os.environ.get("AMARANTH_USE_YOSYS", "builtin"))
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], cwd=copy, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return (out / "top.v").read_bytes(), (out / "top.vhd").read_bytes()


def test_output_does_not_depend_on_checkout_path_or_hash_seed(tmp_path):
    copies = [tmp_path / "a", tmp_path / "some" / "much" / "longer" / "path" / "checkout"]
    # The second copy is made from the first, so both hold the same files even if the
    # checkout changes meanwhile.
    _copy_project(ROOT, copies[0])
    _copy_project(copies[0], copies[1])
    outputs = [_generate(copy, tmp_path / f"out{index}", seed)
               for index, (copy, seed) in enumerate(zip(copies, ("1", "4242")))]
    (verilog_a, vhdl_a), (verilog_b, vhdl_b) = outputs

    assert verilog_a and vhdl_a
    assert verilog_a == verilog_b, "Verilog differs between the two checkouts"
    assert vhdl_a == vhdl_b, "VHDL differs between the two checkouts"
    for text in (verilog_a, vhdl_a):
        for path in (tmp_path, tmp_path.resolve(), ROOT, Path(sys.prefix), Path(sys.base_prefix)):
            assert str(path).encode() not in text, f"output contains {path}"
        assert b"site-packages" not in text
    # The VHDL still says where each cell comes from, relative to the project.
    assert b"(hdl/gateware/top.py:" in vhdl_a


def test_portable_src_rewrites_each_location():
    import amaranth

    from hdl.writers.srcloc import portable_src

    amaranth_dir = Path(amaranth.__file__).parent
    assert portable_src(f"{ROOT}/hdl/gateware/top.py:12|{amaranth_dir}/lib/wiring.py:45") == \
        "hdl/gateware/top.py:12|amaranth/lib/wiring.py:45"
    assert portable_src(f"{os.__file__}:7.1-9.3") == "os.py:7.1-9.3"  # the standard library
    assert portable_src("/nowhere/known/design.py:3") == "design.py:3"
    assert portable_src("design.py:12") == "design.py:12"
    assert portable_src("<string>:1") == "<string>:1"
