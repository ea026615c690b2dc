"""Static memory plan (docs/DESIGN.md 1.7): one arena, offsets known at compile time.

Arena buffers are the tensors nodes produce that are neither constants (rodata) nor graph inputs or
outputs (caller buffers). A view (Reshape, Flatten, ...) shares its input's storage, and an in-place
elementwise op may write over its input 0 when that input dies there: a root and its aliases form
one storage buffer, live from the root's producing step to the last read of any member, inclusive,
in the chosen execution order. Buffers whose intervals intersect get disjoint byte ranges.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from ..ir import Graph, Node
from ..kernels.rows_runtime import same_storage
from .. import opspec
from ..opspec import OpSpec
from .orders import ORDERS, OrderFacts, min_peak_order
from .strategies import SEARCHES, STRATEGIES, Buffers

SpecLookup = Callable[[str, int, str], "OpSpec | None"]
Layouts = Mapping[str, tuple[int, ...]]
"""Tensor name -> dimension permutation of its storage; absent means row-major."""

MAX_REORDER_CANDIDATES = 2
"""Heuristic orders (those with the lowest live peak) planned beside the original order."""
REORDER_PAIR_BUDGET = 400_000
"""Beyond the first, plan another heuristic order only while their conflict pairs stay within this."""


class PlanError(AssertionError):
    """A memory plan that is unsafe to run: overlapping live buffers, bad offsets or bad aliases."""


@dataclass(frozen=True)
class PlanOptions:
    alignment: int = 64
    reuse: bool = True
    """False = plain mode: every buffer its own slot, original order, no in-place (views still alias)."""
    inplace: bool = True
    reorder: bool = True
    """Also try memory-aware execution orders; keep the one with the smallest arena."""
    strategies: tuple[str, ...] | None = None
    """Placement strategies to run (names in planning.strategies.STRATEGIES); None = all."""


@dataclass
class MemoryPlan:
    order: list[int]
    """Execution order as indices into graph.nodes."""
    offsets: dict[str, int]
    """Arena offset of every arena tensor; an alias has its root's offset."""
    alias_of: dict[str, str]
    """Alias -> the root tensor whose storage it shares (views and in-place outputs)."""
    arena_bytes: int
    live_peak_bytes: int
    """Max over steps of the live bytes in `order` (each buffer rounded up to the alignment)."""
    lower_bound_bytes: int
    """Order-independent: max over ops of the arena bytes an op reads and writes (a view's output is
    its input's storage; an op that may run in place counts its input 0 and output 0 once)."""
    naive_bytes: int
    """Sum of all arena buffers, no reuse."""
    strategy: str
    strategies: dict[str, int]
    """Arena bytes of each strategy that ran (on the chosen order)."""
    intervals: dict[str, tuple[int, int]]
    """Root buffer -> (first step, last step) inclusive, steps index into `order`."""
    alignment: int = 64
    order_bound_bytes: int = 0
    """The least live peak over all execution orders (same views and in-place rules), proven by the
    exact order search; 0 when the search ran out of budget or did not run. No arena can be smaller,
    so max(lower_bound_bytes, order_bound_bytes) is the tight bound for this graph and these kernels."""

    def manifest_facts(self) -> dict:
        """The plan's figures as manifest.json's `memory` object records them."""
        tight = max(self.lower_bound_bytes, self.order_bound_bytes)
        return {
            "arena_bytes": self.arena_bytes, "lower_bound_bytes": self.lower_bound_bytes,
            "live_peak_bytes": self.live_peak_bytes, "order_bound_bytes": self.order_bound_bytes,
            "arena_over_lower_bound": round(self.arena_bytes / self.lower_bound_bytes, 4) if self.lower_bound_bytes else None,
            "arena_over_live_peak": round(self.arena_bytes / self.live_peak_bytes, 4) if self.live_peak_bytes else None,
            "arena_over_order_bound": round(self.arena_bytes / tight, 4) if self.order_bound_bytes and tight else None,
            "naive_bytes": self.naive_bytes, "strategy": self.strategy, "strategies": self.strategies,
            "alignment": self.alignment,
        }


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def is_alias_view(graph: Graph, node: Node, spec_lookup: SpecLookup = opspec.lookup) -> bool:
    """True when `node` is a view whose output 0 shares input 0's arena storage.

    Not when the input is a graph input or constant, or either side is a graph output: the view then
    has a caller buffer or rodata on one side, and codegen copies instead.
    """
    spec = spec_lookup(node.op_type, graph.opset, node.domain)
    return _is_alias_view(graph, node, spec, set(graph.inputs) | set(graph.outputs))


def _is_alias_view(graph: Graph, node: Node, spec: OpSpec | None, boundary: set[str]) -> bool:
    if spec is None or not spec.view or not node.inputs or not node.outputs:
        return False
    src, dst = node.inputs[0], node.outputs[0]
    if not src or not dst or src in boundary or dst in boundary:
        return False
    s, d = graph.tensors[src], graph.tensors[dst]
    # capacity strides: a reshape of varying dims may move elements; a Transpose its layouts made a byte copy
    # (fluid's view, "_transpose_perm") maps each element to the same place at every size
    if ((s.dyn is not None or d.dyn is not None) and "_transpose_perm" not in node.attrs
            and not same_storage(s.dyn or s.shape, s.shape, d.dyn or d.shape, d.shape)):
        return False
    return not s.is_const and not d.is_const and s.nbytes == d.nbytes


def _arena_tensors(graph: Graph) -> tuple[list[str], dict[str, int]]:
    """Arena tensors in production order, and each one's producing node."""
    boundary = set(graph.inputs) | set(graph.outputs)
    names: list[str] = []
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for out in node.outputs:
            if out and out not in boundary and out not in producer and not graph.tensors[out].is_const:
                producer[out] = i
                names.append(out)
    return names, producer


class _Facts:
    """Order-independent facts, with arena tensors as integer ids (production order)."""

    def __init__(self, graph: Graph, options: PlanOptions, lookup: SpecLookup, layouts: Layouts) -> None:
        nodes = graph.nodes
        boundary = set(graph.inputs) | set(graph.outputs)
        self.names, producer = _arena_tensors(graph)
        index = {name: t for t, name in enumerate(self.names)}
        self.producer = [producer[name] for name in self.names]
        self.size = [_round_up(graph.tensors[name].nbytes, options.alignment) for name in self.names]
        specs = [lookup(node.op_type, graph.opset, node.domain) for node in nodes]

        view_src: dict[int, int] = {}
        for i, node in enumerate(nodes):
            if _is_alias_view(graph, node, specs[i], boundary) and node.inputs[0] in index:
                view_src[index[node.outputs[0]]] = index[node.inputs[0]]
        self.group = list(range(len(self.names)))
        """View-group root of each tensor."""
        for t in range(len(self.names)):
            root, seen = t, 0
            while root in view_src and seen <= len(view_src):
                root, seen = view_src[root], seen + 1
            self.group[t] = root

        self.reads: list[tuple[int, ...]] = []
        self.creates: list[tuple[int, ...]] = []
        self.deps: list[tuple[int, ...]] = []
        self.inplace_pair: list[tuple[int, int] | None] = []
        all_producers = {out: i for i, node in enumerate(nodes) for out in node.outputs if out}
        for i, node in enumerate(nodes):
            reads = {self.group[index[x]] for x in node.inputs if x in index}
            self.reads.append(tuple(sorted(reads)))
            self.creates.append(tuple(index[o] for o in node.outputs if o in index and self.group[index[o]] == index[o]))
            self.deps.append(tuple(sorted({all_producers[x] for x in node.inputs if x in all_producers and all_producers[x] != i})))
            pair = None
            spec = specs[i]
            if spec is not None and spec.inplace and options.inplace and options.reuse and node.inputs and node.outputs:
                src, dst = node.inputs[0], node.outputs[0]
                if src in index and dst in index and self.group[index[dst]] == index[dst] and \
                        _same_storage_shape(graph, layouts, src, dst):
                    g_in = self.group[index[src]]
                    shared = any(x != src and x in index and self.group[index[x]] == g_in for x in node.inputs)
                    if not shared and g_in != index[dst]:
                        pair = (g_in, index[dst])
            self.inplace_pair.append(pair)

        roots = [t for t in range(len(self.names)) if self.group[t] == t]
        self.naive = sum(self.size[t] for t in roots)
        self.lower_bound = 0
        for i, node in enumerate(nodes):
            touched = set(self.reads[i]) | {self.group[index[o]] for o in node.outputs if o in index}
            total = sum(self.size[g] for g in touched)
            if self.inplace_pair[i] is not None:
                total -= self.size[self.inplace_pair[i][1]]
            self.lower_bound = max(self.lower_bound, total)


def op_lower_bound(graph: Graph, spec_lookup: SpecLookup | None = None) -> int:
    """The largest number of bytes one op reads and writes in the arena (in place where it may): a bound no
    execution order or placement goes below (passes compare a rewrite against it before planning)."""
    return _Facts(graph, PlanOptions(), spec_lookup or opspec.lookup, {}).lower_bound


def _same_storage_shape(graph: Graph, layouts: Layouts, a: str, b: str) -> bool:
    """Element i of `a` and of `b` sit at the same bytes: equal element counts, item sizes and layouts."""
    ta, tb = graph.tensors[a], graph.tensors[b]

    def layout(name: str, rank: int) -> tuple[int, ...]:
        return tuple(layouts.get(name) or range(rank))

    return (ta.size == tb.size and np.dtype(ta.dtype).itemsize == np.dtype(tb.dtype).itemsize
            and ta.shape == tb.shape and layout(a, len(ta.shape)) == layout(b, len(tb.shape)))


@dataclass
class _Schedule:
    """Liveness of one execution order: storage buffers and their intervals."""

    order: list[int]
    roots: list[int]
    """Root tensor id of each buffer."""
    root_of: list[int]
    """Storage root tensor id of each arena tensor."""
    buffers: Buffers


def _schedule(facts: _Facts, order: list[int]) -> _Schedule:
    n_tensors = len(facts.names)
    step = [0] * len(order)
    for s, i in enumerate(order):
        step[i] = s
    first = [step[facts.producer[t]] for t in range(n_tensors)]
    last = first[:]
    for i, groups in enumerate(facts.reads):
        for g in groups:
            if step[i] > last[g]:
                last[g] = step[i]
    parent = list(range(n_tensors))

    def find(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for s, i in enumerate(order):
        pair = facts.inplace_pair[i]
        if pair is None:
            continue
        a, b = find(pair[0]), pair[1]
        if last[a] == s and all(g == pair[0] or find(g) != a for g in facts.reads[i]):
            parent[b] = a
            last[a] = last[b]
    root_of = [find(facts.group[t]) for t in range(n_tensors)]
    roots = sorted({r for r in root_of}, key=lambda r: (first[r], r))
    buffers = Buffers([facts.size[r] for r in roots], [first[r] for r in roots], [last[r] for r in roots])
    return _Schedule(order, roots, root_of, buffers)


def _solve(schedule: _Schedule, names: tuple[str, ...], results: dict[str, tuple[int, list[int]]]) -> None:
    """Run the strategies of `names` not yet in `results` on one order; record (arena bytes, offsets)."""
    for name in names:
        if name not in results:
            offsets = STRATEGIES[name](schedule.buffers)
            if offsets is not None:
                results[name] = (schedule.buffers.top(offsets), offsets)


def _candidate_orders(facts: _Facts, original: list[int]) -> tuple[list[_Schedule], int]:
    """The original order's schedule first, then the best others; and the proven least live peak (or 0)."""
    schedules = [_schedule(facts, original)]
    order_facts = OrderFacts(facts.deps, facts.reads, facts.creates, facts.size, facts.inplace_pair)
    extra: list[_Schedule] = []
    for make in ORDERS.values():
        order = make(order_facts)
        if all(order != schedule.order for schedule in schedules + extra):
            extra.append(_schedule(facts, order))
    incumbent = min(schedule.buffers.live_peak for schedule in schedules + extra)
    exact = min_peak_order(order_facts, incumbent)
    if exact.order is not None:
        extra.append(_schedule(facts, exact.order))
    extra.sort(key=lambda schedule: schedule.buffers.live_peak)
    pairs = 0
    for schedule in extra[:MAX_REORDER_CANDIDATES]:
        pairs += schedule.buffers.pairs
        if len(schedules) > 1 and pairs > REORDER_PAIR_BUDGET:
            break
        schedules.append(schedule)
    return schedules, exact.peak if exact.optimal else 0


def plan_memory(graph: Graph, options: PlanOptions = PlanOptions(), spec_lookup: SpecLookup | None = None,
                layouts: Layouts | None = None) -> MemoryPlan:
    """Plan the arena: execution order, liveness, aliases and offsets.

    `spec_lookup` defaults to the op registry. `layouts` are the chosen storage layouts: an op runs
    in place only when its input 0 and output 0 have the same shape, item size and layout.

    Greedy strategies run on every candidate order; the searching ones (improver, exact) on the
    original order and on the best other candidate, so reordering never loses to the original order.
    """
    if options.alignment <= 0:
        raise ValueError(f"alignment must be positive, got {options.alignment}")
    names = tuple(STRATEGIES) if options.strategies is None else tuple(options.strategies)
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown or not names:
        raise ValueError(f"unknown memory strategies {unknown}: choose from {sorted(STRATEGIES)}")
    facts = _Facts(graph, options, spec_lookup or opspec.lookup, layouts or {})
    original = list(range(len(graph.nodes)))

    if not options.reuse:
        schedule = _schedule(facts, original)
        offsets, top = [], 0
        for size in schedule.buffers.sizes:
            offsets.append(top)
            top += size
        return _plan(facts, schedule, offsets, "plain", {"plain": top}, options.alignment)

    schedules, order_bound = _candidate_orders(facts, original) if options.reorder else ([_schedule(facts, original)], 0)
    quick = tuple(name for name in names if name not in SEARCHES)
    results: list[dict[str, tuple[int, list[int]]]] = [{} for _ in schedules]
    for schedule, found in zip(schedules, results):
        _solve(schedule, quick, found)

    def rank(k: int) -> tuple[int, int, int]:
        arena = min((top for top, _ in results[k].values()), default=1 << 62)
        return arena, schedules[k].buffers.live_peak, k

    finalists = [0] + sorted(range(1, len(schedules)), key=rank)[:1]
    for k in finalists:
        _solve(schedules[k], names, results[k])
    k = min(finalists, key=rank)
    if not results[k]:
        raise ValueError(f"none of the memory strategies {list(names)} applies to graph {graph.name!r}: add a greedy one")
    winner = min(results[k], key=lambda name: (results[k][name][0], names.index(name)))
    return _plan(facts, schedules[k], results[k][winner][1], winner, {name: top for name, (top, _) in results[k].items()},
                 options.alignment, order_bound)


def _plan(facts: _Facts, schedule: _Schedule, offsets: list[int], strategy: str, strategies: dict[str, int],
          alignment: int, order_bound: int = 0) -> MemoryPlan:
    buffer_of = {root: b for b, root in enumerate(schedule.roots)}
    bufs = schedule.buffers
    names = facts.names
    return MemoryPlan(
        order=schedule.order,
        offsets={names[t]: offsets[buffer_of[r]] for t, r in enumerate(schedule.root_of)},
        alias_of={names[t]: names[r] for t, r in enumerate(schedule.root_of) if r != t},
        arena_bytes=bufs.top(offsets),
        live_peak_bytes=bufs.live_peak,
        lower_bound_bytes=facts.lower_bound,
        naive_bytes=facts.naive,
        strategy=strategy,
        strategies=strategies,
        intervals={names[r]: (bufs.starts[b], bufs.ends[b]) for b, r in enumerate(schedule.roots)},
        alignment=alignment,
        order_bound_bytes=order_bound,
    )


def verify_plan(graph: Graph, plan: MemoryPlan, spec_lookup: SpecLookup | None = None) -> None:
    """Check a plan from scratch; raise PlanError on the first problem.

    The order is a topological permutation; every arena tensor (and nothing else) has an aligned
    offset inside the arena; an alias has its root's offset and size, and a view alias comes from a
    view of a member of its group while an in-place alias overwrites only members that are dead by
    then; and no two storage buffers that are live at a common step overlap.
    """
    lookup = spec_lookup or opspec.lookup
    nodes = graph.nodes
    if sorted(plan.order) != list(range(len(nodes))):
        raise PlanError("order is not a permutation of the graph's nodes")
    step = [0] * len(nodes)
    for s, i in enumerate(plan.order):
        step[i] = s
    arena, producer = _arena_tensors(graph)
    made_at = {out: step[i] for i, node in enumerate(nodes) for out in node.outputs if out}
    for s, i in enumerate(plan.order):
        for x in nodes[i].inputs:
            if x in made_at and made_at[x] >= s:
                raise PlanError(f"node {nodes[i].name!r} reads {x!r} before it is produced")
    if set(plan.offsets) != set(arena):
        extra, missing = set(plan.offsets) - set(arena), set(arena) - set(plan.offsets)
        raise PlanError(f"offsets do not cover exactly the arena tensors: extra {sorted(extra)[:5]}, missing {sorted(missing)[:5]}")

    strays = sorted(set(plan.alias_of) - set(arena))
    if strays:
        raise PlanError(f"aliases for tensors outside the arena: {strays[:5]}")
    align = plan.alignment
    size = {t: _round_up(graph.tensors[t].nbytes, align) for t in arena}
    root = {t: plan.alias_of.get(t, t) for t in arena}
    members: dict[str, list[str]] = {}
    for t in arena:
        r = root[t]
        if r not in size or r in plan.alias_of:
            raise PlanError(f"{t!r} aliases {r!r}, which is not a root arena buffer")
        if t != r and (plan.offsets[t] != plan.offsets[r] or size[t] != size[r]):
            raise PlanError(f"alias {t!r} differs from its root {r!r} in offset or size")
        members.setdefault(r, []).append(t)

    last_read = {t: step[producer[t]] for t in arena}
    for i, node in enumerate(nodes):
        for x in node.inputs:
            if x in last_read:
                last_read[x] = max(last_read[x], step[i])
    for t in plan.alias_of:
        node = nodes[producer[t]]
        src = node.inputs[0] if node.inputs else ""
        if node.outputs[0] != t or src not in root or root[src] != root[t]:
            raise PlanError(f"{t!r} aliases {root[t]!r} but is not output 0 of a node reading that storage as input 0")
        if is_alias_view(graph, node, lookup):
            continue
        s = step[producer[t]]
        for m in members[root[t]]:
            if step[producer[m]] < s and last_read[m] > s:
                raise PlanError(f"in-place {t!r} overwrites {m!r}, which is still read at step {last_read[m]}")

    spans = []
    for r, group in members.items():
        start = min(step[producer[m]] for m in group)
        end = max(last_read[m] for m in group)
        off = plan.offsets[r]
        if off < 0 or off % align or off + size[r] > plan.arena_bytes:
            raise PlanError(f"{r!r} at offset {off} (+{size[r]}) is misaligned or outside the {plan.arena_bytes}-byte arena")
        if plan.intervals.get(r) != (start, end):
            raise PlanError(f"interval of {r!r} is {plan.intervals.get(r)}, expected {(start, end)}")
        if size[r]:
            spans.append((start, end, off, off + size[r], r))
    spans.sort()
    active: list[tuple[int, int, int, int, str]] = []
    for span in spans:
        active = [a for a in active if a[1] >= span[0]]
        for a in active:
            if a[2] < span[3] and span[2] < a[3]:
                raise PlanError(f"{a[4]!r} [{a[2]}, {a[3]}) and {span[4]!r} [{span[2]}, {span[3]}) overlap while both live")
        active.append(span)
    if len(plan.intervals) != len(members):
        raise PlanError("intervals name buffers that are not storage roots")
