"""Size classes (issue #26): one node function over a varying dim that dispatches at run time on the dim's extent to
one of a few bodies, each lowered for its own sub-range of the symbol (its own capacity, tile and unroll decisions);
a class of one size is lowered as static code at that size. Tensors keep their capacity strides in every class.

`SizeClassRule`s are the measured thresholds per kernel family (docs/DYNAMIC.md, "Size classes"); `lower_in_classes`
emits the dispatch and the bodies. In a function that may run as parallel tiles only the last class (the widest
sizes) may open a parallel region; the others run whole on tile 0."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from llvmlite import ir

from ..symbolic import Sym, SymRange, bounds, evaluate, free_symbols, is_static
from .extents import dim_value


@dataclass(frozen=True)
class SizeClass:
    """One body for the sizes `spans` ((lo, hi) sub-ranges of `symbol`), lowered over lo..hi, their hull; a dim that
    takes one value over the hull is static code in the body."""

    symbol: str
    lo: int
    hi: int
    spans: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SizeClassRule:
    """A kernel family's classes over the extent of the dim it keys on: each extent in `exact` as static code,
    sub-ranges split before each extent of `splits`; the sizes between shared by one run-time body per sub-range."""

    exact: tuple[int, ...] = ()
    splits: tuple[int, ...] = ()

    def key(self, extent: int) -> tuple[int, int]:
        return (0, extent) if extent in self.exact else (1, sum(extent >= s for s in self.splits))

    def classes(self, r: SymRange, dim) -> list[SizeClass]:
        """The bodies for symbol values r.lo..r.hi, ordered by their largest size: `dim` (an expression of r's symbol
        alone) keeps one key over each body's spans."""
        spans: dict[tuple[int, int], list[list[int]]] = {}
        last = None
        for v in range(r.lo, r.hi + 1):
            key = self.key(evaluate(dim, {r.name: v}))
            if key == last:
                spans[key][-1][1] = v
            else:
                spans.setdefault(key, []).append([v, v])
            last = key
        out = [SizeClass(r.name, s[0][0], s[-1][1], tuple((lo, hi) for lo, hi in s)) for s in spans.values()]
        return sorted(out, key=lambda c: c.hi)


SIZE_CLASSES: dict[str, SizeClassRule] = {
    "softmax": SizeClassRule(exact=(1, 2, 3, 4, 5, 6, 7, 8, 16)),
}
"""Kernel family -> its classes over the symbol of the dim they key on (docs/DYNAMIC.md "Size classes": the
dynamic/static ratios that justify each)."""


CLASS_SCAN_LIMIT = 1 << 16
"""Ranges of more symbol values than this are not cut into classes."""


def _narrowed(op, ranges):
    """Operand `op` over a class's ranges: a dim with one value over them static, the capacity of each varying dim at
    the ranges' maximum (the strides stay the full capacity's)."""
    if op is None or op.dyn is None:
        return op
    spans = [(d, d) if is_static(d) else bounds(d, ranges) for d in op.dyn]
    dyn = tuple(lo if lo == hi else d for d, (lo, hi) in zip(op.dyn, spans))
    return dataclasses.replace(op, shape=tuple(min(int(hi), cap) for (_, hi), cap in zip(spans, op.shape)),
                               dyn=None if all(is_static(d) for d in dyn) else dyn)


def _memo(constant_data: Callable[[np.ndarray], ir.Value]) -> Callable[[np.ndarray], ir.Value]:
    """constant_data that stores an array the classes pack alike once."""
    seen: dict[bytes, ir.Value] = {}

    def data(value: np.ndarray) -> ir.Value:
        value = np.ascontiguousarray(value)
        key = hashlib.sha256(str((value.dtype, value.shape)).encode() + value.tobytes()).digest()
        if key not in seen:
            seen[key] = constant_data(value)
        return seen[key]
    return data


def _lower_class(k, size: SizeClass, lower: Callable, inputs, outputs, graph) -> None:
    ranges = dict(graph.symbols)
    r = ranges[size.symbol]
    ranges[size.symbol] = SymRange(size.symbol, size.lo, size.hi, min(max(r.opt, size.lo), size.hi))
    view = copy.copy(graph)
    view.symbols = ranges
    k.graph = view
    k.inputs = [_narrowed(op, ranges) for op in inputs]
    k.outputs = [_narrowed(op, ranges) for op in outputs]
    lower(k)


def lower_in_classes(k, classes: Sequence[SizeClass], lower: Callable) -> None:
    """`lower(k)` once per class, behind a run-time dispatch on the class symbol's value to the class whose spans hold
    it (the classes cover the range; the last holds its largest sizes). `lower` reads the class's operands, graph and
    ranges from k; k is restored afterwards."""
    if len(classes) < 2:
        lower(k)
        return
    inputs, outputs, graph, tile_range, data = k.inputs, k.outputs, k.graph, k.tile_range, k.constant_data
    b, fn = k.b, k.fn
    value = dim_value(k, Sym(classes[0].symbol))
    entries = {c: fn.append_basic_block(f"class.{c.lo}") for c in classes}
    spans = sorted((span, c) for c in classes for span in c.spans)
    for (_, hi), c in spans[:-1]:
        rest = fn.append_basic_block("class.next")
        b.cbranch(b.icmp_signed("<=", value, k.index(hi)), entries[c], rest)
        b.position_at_end(rest)
    b.branch(entries[spans[-1][1]])
    done = fn.append_basic_block("classes.done")
    guards, side_blocks = [], set()
    k.constant_data = _memo(data)
    try:
        for size in classes:
            b.position_at_end(entries[size])
            first = len(fn.blocks)
            side = size is not classes[-1]
            if side and tile_range is not None:  # run whole on tile 0 only
                run = fn.append_basic_block(f"class.{size.lo}.run")
                guards.append(b.icmp_unsigned("==", tile_range[0], k.index(0)))
                b.cbranch(guards[-1], run, done)
                b.position_at_end(run)
            k.tile_range = None if side else tile_range
            _lower_class(k, size, lower, inputs, outputs, graph)
            k.tile_range = tile_range
            b.branch(done)
            if side:
                side_blocks |= {entries[size], *fn.blocks[first:]}
    finally:
        k.inputs, k.outputs, k.graph, k.tile_range, k.constant_data = inputs, outputs, graph, tile_range, data
    b.position_at_end(done)
    if k.tiles:
        k.region_blocks = set(k.region_blocks) | side_blocks
    else:  # no parallel region: the emitter drops (begin, end); every class runs whole
        for guard in guards:
            guard.replace_usage(tile_range[0], k.index(0))


def lower_by_size(k, family: str, dim, lower: Callable) -> None:
    """`lower(k)` in the classes of `family`'s rule when `dim` (the dim the rule keys on) varies with one symbol
    whose range the rule cuts, else once as it is."""
    rule = SIZE_CLASSES.get(family)
    names = free_symbols([dim]) if dim is not None and not is_static(dim) else frozenset()
    r = k.graph.symbols.get(next(iter(names))) if len(names) == 1 else None
    if rule is None or r is None or r.hi - r.lo >= CLASS_SCAN_LIMIT:
        lower(k)
        return
    lower_in_classes(k, rule.classes(r, dim), lower)
