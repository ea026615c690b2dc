"""Optional dependencies: import one or fail with one line naming the extra that installs it."""
from __future__ import annotations

import importlib
from types import ModuleType

from .errors import InputError

EXTRAS = {"report": ("matplotlib",), "fleet": ("ansible",)}
"""Extra name -> the top-level modules it provides (pyproject.toml's optional-dependencies)."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import `module` (from the optional extra `extra`), or raise InputError telling how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or module).split(".")[0]
        raise InputError(f"{what} needs {missing}, which is not installed: pip install 'fluidml-xc[{extra}]' "
                         f"(from a checkout: pip install -c constraints.txt '.[{extra}]')") from None
