"""Graph passes run after import, in `order`; one module per pass, registered with @graph_pass."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from ..ir import Graph

PassFn = Callable[[Graph], None]
_PASSES: list[tuple[int, str, PassFn]] = []


def graph_pass(order: int) -> Callable[[PassFn], PassFn]:
    def wrap(fn: PassFn) -> PassFn:
        _PASSES.append((order, fn.__name__, fn))
        return fn
    return wrap


def registered_passes() -> list[PassFn]:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return [fn for _, _, fn in sorted(_PASSES, key=lambda p: (p[0], p[1]))]


def run_passes(graph: Graph) -> None:
    for run in registered_passes():
        run(graph)
