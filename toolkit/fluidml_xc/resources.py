"""Locate the data directories (targets/, boards/, runtime_c/, templates/) in a checkout or a wheel."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    for base in (_PACKAGE / "_data", _PACKAGE.parent.parent):
        candidate = base / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"fluidml-xc data directory {name!r} is missing from the installation")
