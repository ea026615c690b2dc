"""Op registry keyed by ONNX op type and opset version.

Shape/type inference comes from ONNX's own per-node inference and the numpy reference (used by
constant folding and tests) from onnx.reference; an op here contributes its LLVM lowering and the
facts the planner needs. Register with the decorator, one module per op family.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

LowerFn = Callable[..., None]


@dataclass(frozen=True)
class OpSpec:
    op_type: str
    lower: LowerFn
    since: int = 1
    domain: str = ""
    view: bool = False
    """Output 0 holds exactly input 0's bytes (Reshape, Flatten, ...): it aliases input 0."""
    inplace: bool = False
    """Elementwise: output 0 may be written over input 0 when input 0 dies at this node."""
    dtypes: frozenset[str] | None = None
    """numpy dtype names the lowering accepts for input 0; None means any."""
    notes: str = ""


_REGISTRY: dict[tuple[str, str], list[OpSpec]] = {}
_LOADED = False


def register(op_types: str | tuple[str, ...], since: int = 1, domain: str = "", view: bool = False,
             inplace: bool = False, dtypes: tuple[str, ...] | None = None, notes: str = "") -> Callable[[LowerFn], LowerFn]:
    names = (op_types,) if isinstance(op_types, str) else op_types

    def wrap(fn: LowerFn) -> LowerFn:
        for name in names:
            spec = OpSpec(name, fn, since, domain, view, inplace, frozenset(dtypes) if dtypes else None, notes)
            versions = _REGISTRY.setdefault((domain, name), [])
            versions.append(spec)
            versions.sort(key=lambda s: s.since)
        return fn

    return wrap


def _load_all() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        from . import load_families
        load_families()


def lookup(op_type: str, opset: int, domain: str = "") -> OpSpec | None:
    """The newest registered lowering whose `since` is at most the model's opset."""
    _load_all()
    domain = "" if domain == "ai.onnx" else domain
    best = None
    for spec in _REGISTRY.get((domain, op_type), []):
        if spec.since <= opset:
            best = spec
    return best


def all_specs() -> dict[tuple[str, str], list[OpSpec]]:
    _load_all()
    return dict(_REGISTRY)
