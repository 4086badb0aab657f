"""Writing files so that a failure leaves nothing half-written.

Used by everything that writes a result file (saved models, generated Verilog and VHDL).
"""
from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path


def check_output_path(path: str | os.PathLike) -> Path:
    """``path`` as a :class:`Path` if it can name an output file; raises ``ValueError``
    for an empty name or a folder (checked before long work, and again when writing)."""
    text = os.fspath(path)
    path = Path(text)
    if not text or path.name in ("", ".", ".."):
        raise ValueError(f"output path must name a file, not {text!r}")
    if path.is_dir():
        raise ValueError(f"output path {text!r} is a folder; name a file in it")
    return path


@contextmanager
def atomic_output(path: str | os.PathLike, binary: bool = False):
    """An open file that becomes ``path`` only when the ``with`` block ends without error.

    It is written in ``path``'s folder (created if needed) under a temporary name, flushed
    to disk, then renamed over ``path``; on any error it is removed. Its mode follows the
    umask, as a plain ``open`` would (``mkstemp`` would make it 0600).
    """
    path = check_output_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_atomically(path: str | os.PathLike, text: str):
    """Write ``text`` to ``path`` through :func:`atomic_output`."""
    with atomic_output(path) as f:
        f.write(text)
