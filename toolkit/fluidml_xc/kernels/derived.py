"""Build-time arrays that a kernel computes from its constant inputs, with the function that computes them (issue
#27): units whose views differ only in such inputs' values share one emission (emit/units.Sharing), the others'
constants computed again by the function.

A kernel opts in with `values_derived(k)`: it then reads its large constant inputs' values only through `derived`
(or their `ptr`) and through whether they are all finite, so its IR does not depend on them otherwise."""
from __future__ import annotations

from functools import partial
from typing import Callable

import numpy as np

from .operand import Operand


class Derived(np.ndarray):
    """An array with `origin` = (fn, names): fn(*the values of the constant tensors named) gives it again."""

    origin: tuple | None = None


def derived(k, fn: Callable[..., np.ndarray], *operands: Operand) -> Derived:
    """fn(*their values) for kernel k's constant_array, carrying how it was computed (fn: a pure function of the
    values); k keeps its origin, so a unit can tell that each one reached its constants (ConstantArgs.recipes)."""
    array = _with_origin(fn(*(op.value for op in operands)), fn, tuple(op.name for op in operands))
    if not hasattr(k, "derived_origins"):
        k.derived_origins = []
    k.derived_origins.append(array.origin)
    return array


def stored(layout, value: np.ndarray) -> np.ndarray:
    """A constant tensor's value permuted into its layout (None: as it is)."""
    return np.transpose(value, layout) if layout else value


def as_stored(name: str, value: np.ndarray, layout) -> Derived:
    """The constant tensor `name` as the emitter stores it (in its layout)."""
    return _with_origin(stored(layout, value), partial(stored, layout), (name,))


def _with_origin(value, fn, names: tuple[str, ...]) -> Derived:
    array = np.asarray(value).view(Derived)
    array.origin = (fn, names)
    return array


def origin_of(value) -> tuple | None:
    return getattr(value, "origin", None)


def values_derived(k) -> None:
    """Kernel `k` reads its constant inputs' values only through `derived`, their pointers and their finiteness."""
    k.values_derived = True


def reads_values_only_derived(k) -> bool:
    return getattr(k, "values_derived", False)


def derived_origins(k) -> list[tuple]:
    """The origins of the arrays `derived` computed for kernel k."""
    return getattr(k, "derived_origins", [])
