"""Op families; each module registers its lowerings and their traits with opspec.register (loaded by opspec.lookup)."""
from __future__ import annotations

import importlib
import pkgutil


def load_families() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
