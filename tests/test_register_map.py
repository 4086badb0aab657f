"""The register map: validation, and the C header, Python module and README table made from it."""
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hdl.gateware.axi.registers import ID_VALUE, REGISTERS, Field, Register
from hdl.writers.register_map import c_header, markdown_table, python_module

REPO = Path(__file__).resolve().parents[1]


def test_python_module_matches_the_map(tmp_path):
    path = tmp_path / "nnaccel_registers.py"
    path.write_text(python_module())
    spec = importlib.util.spec_from_file_location("nnaccel_registers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.ID_VALUE == ID_VALUE
    assert module.REGISTERS == {r.name: r.offset for r in REGISTERS}
    for r in REGISTERS:
        for f in r.fields:
            assert getattr(module, f"{r.name}_{f.name.upper()}_SHIFT") == f.lsb
            assert getattr(module, f"{r.name}_{f.name.upper()}_MASK") == f.mask


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_header_compiles_and_matches_the_map(tmp_path):
    (tmp_path / "nnaccel_registers.h").write_text(c_header())
    lines = [f'printf("{r.name} %u {f.name} %u %u\\n", NNACCEL_{r.name}, NNACCEL_{r.name}_{f.name.upper()}_SHIFT, '
             f'NNACCEL_{r.name}_{f.name.upper()}_MASK);' for r in REGISTERS for f in r.fields]
    (tmp_path / "main.c").write_text('#include <stdio.h>\n#include "nnaccel_registers.h"\n'
                                     'int main(void) {\n' + "\n".join(lines) + "\nreturn 0;\n}\n")
    subprocess.run(["gcc", "-Wall", "-Werror", "-o", tmp_path / "main", tmp_path / "main.c"], check=True)
    out = subprocess.run([tmp_path / "main"], check=True, capture_output=True, text=True).stdout.splitlines()
    assert out == [f"{r.name} {r.offset} {f.name} {f.lsb} {f.mask}" for r in REGISTERS for f in r.fields]


def test_readme_table_is_the_generated_one():
    readme = (REPO / "README.md").read_text()
    assert markdown_table() in readme, "README's register table differs: paste hdl.writers.register_map.markdown_table()"


def test_offsets_are_unique_and_aligned():
    offsets = [r.offset for r in REGISTERS]
    assert len(set(offsets)) == len(offsets) and all(o % 4 == 0 for o in offsets)


@pytest.mark.parametrize("make,message", [
    (lambda: Field("x", 0, 1, "rx", ""), r"^field access must be one of ro, rw, w1c, w1p, not 'rx'$"),
    (lambda: Field("x", 30, 4, "ro", ""), r"^field x must lie within 32 bits, not \[30\+:4\]$"),
    (lambda: Register("R", 0x6, "", ()), r"^register R offset must be word-aligned, not 0x6$"),
    (lambda: Register("R", 0, "", (Field("a", 0, 4, "ro", ""), Field("b", 3, 1, "ro", ""))),
     r"^register R: field b overlaps another$"),
])
def test_bad_registers_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_header_names_are_c_identifiers():
    for name in re.findall(r"#define (\S+)", c_header()):
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", name), name
