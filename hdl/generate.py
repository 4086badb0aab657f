"""Build the accelerator for a model and write it as Verilog (or VHDL)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from amaranth.back import verilog

from .config import AcceleratorConfig
from .program import Program, lower
from .top import NeuralNetworkAccelerator

TOP_NAME = "neural_network_accelerator"


def build_top(model, config: AcceleratorConfig) -> NeuralNetworkAccelerator:
    return NeuralNetworkAccelerator(lower(model, config))


def to_verilog(top: NeuralNetworkAccelerator) -> str:
    return verilog.convert(top, name=TOP_NAME, emit_src=False)


def to_vhdl(top: NeuralNetworkAccelerator) -> str:
    from .vhdl import convert
    return convert(top, name=TOP_NAME)


def write_atomically(path: str | os.PathLike, text: str):
    """Write ``text`` to ``path`` via a temporary file, so a failure leaves nothing half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
