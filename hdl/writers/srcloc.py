"""Source locations (``src`` attributes) that do not depend on where things are installed.

Amaranth records where each signal and statement was made as ``/abs/path/file.py:123``, and
Yosys joins the locations of a flattened cell's instances with ``|``. Written into generated
files as they are, these would make the output differ between checkouts and Python
installations. :func:`portable_src` rewrites each path:

* inside an installation directory (the standard library, ``site-packages``): relative to
  it, e.g. ``amaranth/lib/wiring.py:45`` or ``contextlib.py:137``;
* inside this project: relative to the project root, e.g. ``hdl/gateware/top.py:123``;
* inside another directory on ``sys.path``: relative to it;
* anywhere else: the file name alone.

Relative paths and pseudo-files (``<string>``) are kept as they are.
"""
from __future__ import annotations

import functools
import os
import re
import site
import sys
import sysconfig
from pathlib import Path, PurePosixPath

__all__ = ["PROJECT_ROOT", "portable_path", "portable_src"]

#: The directory that holds the ``hdl`` package (the checkout's root).
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# "path:line", "path:line.col" or "path:line.col-line.col" (Yosys's form).
_LOCATION = re.compile(r"(?P<path>.+?):(?P<position>\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?)")


def _variants(path):
    """``path`` as given and with symbolic links resolved (both may appear in ``src``)."""
    absolute = os.path.abspath(path)
    return {absolute, os.path.realpath(absolute)}


def _is_usable_root(path):
    return bool(path) and os.path.isabs(path) and os.path.dirname(path) != path


@functools.lru_cache(maxsize=None)
def _roots(sys_path):
    """The three ranks of base directories, each a list of absolute paths."""
    installed = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        installed.add(sysconfig.get_paths().get(key, ""))
    try:
        installed.update(site.getsitepackages())
    except AttributeError:  # some virtualenv builds lack it
        pass
    installed.add(site.getusersitepackages())
    installed.update(entry for entry in sys_path
                     if os.path.basename(entry) in ("site-packages", "dist-packages"))
    ranks = (installed, {PROJECT_ROOT}, {entry for entry in sys_path if entry})
    return tuple(sorted({variant for root in rank if root for variant in _variants(root)
                         if _is_usable_root(variant)}, key=len, reverse=True)
                 for rank in ranks)


def _relative_to(path, root):
    try:
        relative = os.path.relpath(path, root)
    except ValueError:  # another drive
        return None
    if relative == os.pardir or relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
        return None
    return PurePosixPath(*Path(relative).parts).as_posix()


@functools.lru_cache(maxsize=None)
def _portable_path(path, sys_path):
    if not os.path.isabs(path):
        return path
    candidates = _variants(path)
    for rank in _roots(sys_path):
        for root in rank:  # longest first: the most specific root wins within a rank
            for candidate in candidates:
                relative = _relative_to(candidate, root)
                if relative is not None:
                    return relative
    return os.path.basename(path)


def portable_path(path: str) -> str:
    """``path`` (a source file) without the part that depends on where it is installed."""
    return _portable_path(path, tuple(sys.path))


def portable_src(src: str) -> str:
    """A ``src`` attribute (``path:line`` locations joined by ``|``) with portable paths."""
    locations = []
    for location in src.split("|"):
        match = _LOCATION.fullmatch(location)
        if match is None:
            locations.append(portable_path(location) if os.path.isabs(location) else location)
        else:
            locations.append(f"{portable_path(match['path'])}:{match['position']}")
    return "|".join(locations)
