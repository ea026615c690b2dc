"""Locate the data directories (targets/, boards/, runtime_c/, templates/) in a checkout or a wheel."""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    for base in (_PACKAGE / "_data", _PACKAGE.parent.parent):
        candidate = base / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"fluidml-xc data directory {name!r} is missing from the installation")


@cache
def package_digest() -> str:
    """sha256 of this package's .py sources (path and bytes), once per process: new code, new cache keys."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(_PACKAGE.parent).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
