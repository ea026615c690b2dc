"""Layout candidates and the DP along one chain (docs/DESIGN.md 1.1 and 1.3).

A layout is a permutation of a tensor's dimensions, outermost first; row-major is the identity. The
search works on an abstract `LayoutProblem` (nodes touching tensors, candidates per tensor, a cost
per node under given layouts) so that it can be checked against brute force on random problems.

Within a segment, the chain tensors are the DP state. Every other tensor a node touches (a stand-in
input that joins the chain, a side output) is free at that node: the node's cost is minimized over
its candidates, unless the tensor is pinned. Voting (voting.py) later pins shared tensors.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from .segmentation import Segment

Perm = tuple[int, ...]
MAX_CANDIDATES = 6
"""Layouts kept per tensor (rank 4 has 24 permutations)."""
SIDE_COMBOS = 36
"""Joint layouts of a node's free stand-in tensors enumerated at most; beyond, each stays at its first candidate."""


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def is_identity(perm: Sequence[int]) -> bool:
    return all(p == i for i, p in enumerate(perm))


def candidate_layouts(shape: Sequence[int], cap: int = MAX_CANDIDATES, hints: Sequence[Perm] = ()) -> list[Perm]:
    """Row-major first, then hints, then the swap of the two innermost moving dimensions, then others.

    Dimensions of size 1 never move (their position is irrelevant to the storage). At most `cap`.
    """
    rank = len(shape)
    base = identity(rank)
    movable = [d for d in range(rank) if shape[d] != 1]
    if len(movable) < 2 or cap <= 1:
        return [base]

    def place(order: Sequence[int]) -> Perm:
        it = iter(order)
        return tuple(next(it) if shape[d] != 1 else d for d in range(rank))

    out: list[Perm] = [base]

    def add(perm: Perm) -> None:
        if len(out) < cap and perm not in out and sorted(perm) == list(base):
            # normalise: size-1 dims stay where they are
            moving = [p for p in perm if shape[p] != 1]
            perm = place(moving)
            if perm not in out:
                out.append(perm)

    for h in hints:
        add(tuple(h))
    swapped = movable[:-2] + [movable[-1], movable[-2]]
    add(place(swapped))
    if len(movable) >= 3:  # channel-last style: the first moving dim innermost
        add(place(movable[1:] + movable[:1]))
    for order in itertools.permutations(movable):
        if len(out) >= cap:
            break
        add(place(order))
    return out


def permute_layout(layout: Perm, perm: Sequence[int]) -> Perm:
    """Layout of y = Transpose(x, perm) that stores y's elements in x's storage order (a plain copy)."""
    inverse = [0] * len(perm)
    for j, p in enumerate(perm):
        inverse[p] = j
    return tuple(inverse[d] for d in layout)


@dataclass
class LayoutProblem:
    """Nodes (in topological order) touching layout-variable tensors; cost(node, layouts) -> time."""

    node_tensors: list[list[str]]
    candidates: dict[str, list[Perm]]
    cost_fn: Callable[[int, Mapping[str, Perm]], float]
    _memo: dict = field(default_factory=dict, repr=False)
    evaluations: int = 0

    def cost(self, node: int, layouts: Mapping[str, Perm]) -> float:
        key = (node, tuple(layouts.get(t) for t in self.node_tensors[node]))
        value = self._memo.get(key)
        if value is None:
            self.evaluations += 1
            value = float(self.cost_fn(node, {t: layouts[t] for t in self.node_tensors[node] if t in layouts}))
            self._memo[key] = value
        return value

    def options(self, tensor: str, pins: Mapping[str, Perm]) -> list[Perm]:
        if tensor in pins:
            return [pins[tensor]]
        return self.candidates.get(tensor) or [None]

    def node_best(self, node: int, fixed: Mapping[str, Perm], pins: Mapping[str, Perm]) -> tuple[float, dict[str, Perm]]:
        """Least cost of `node` with `fixed` tensors set and every other touched tensor free (unless pinned)."""
        free = [t for t in self.node_tensors[node] if t not in fixed]
        opts = [self.options(t, pins) for t in free]
        if math.prod(len(o) for o in opts) > SIDE_COMBOS:
            opts = [o[:1] for o in opts]
        best, arg = math.inf, {}
        for combo in itertools.product(*opts):
            layouts = dict(fixed)
            layouts.update(zip(free, combo))
            c = self.cost(node, layouts)
            if c < best:
                best, arg = c, dict(zip(free, combo))
        return best, arg

    def total(self, layouts: Mapping[str, Perm], nodes: Sequence[int] | None = None) -> float:
        nodes = range(len(self.node_tensors)) if nodes is None else nodes
        return sum(self.cost(n, layouts) for n in nodes)


@dataclass
class SegmentSolution:
    cost: float
    chain: dict[str, Perm]
    """The DP's layout for each chain tensor."""
    side: list[dict[str, Perm]]
    """Per node of the segment, the layouts its free (non-chain) tensors took."""

    def proposals(self) -> list[tuple[str, Perm]]:
        """(tensor, layout) for every appearance of a tensor in this solution."""
        out = list(self.chain.items())
        for choice in self.side:
            out.extend(choice.items())
        return out


def solve_segment(problem: LayoutProblem, segment: Segment, pins: Mapping[str, Perm] = {}) -> SegmentSolution:
    """f(e, L) = min over the previous chain layout L' of f(prev, L') + T(node; L', L, free stand-ins)."""
    nodes, chain = segment.nodes, segment.chain
    # f: layout of the chain tensor after node i -> (cost, back pointer layout, side choice)
    prev: dict[Perm | None, float] = {None: 0.0}
    trace: list[dict] = []
    for i, node in enumerate(nodes):
        in_t = chain[i - 1] if i > 0 else None
        out_t = chain[i] if i < len(chain) else None
        outs = problem.options(out_t, pins) if out_t is not None else [None]
        step: dict = {}
        for lo in outs:
            best = (math.inf, None, {})
            for li, f_prev in prev.items():
                fixed = {}
                if in_t is not None and li is not None:
                    fixed[in_t] = li
                if out_t is not None and lo is not None:
                    if out_t in fixed and fixed[out_t] != lo:
                        continue
                    fixed[out_t] = lo
                c, side = problem.node_best(node, fixed, pins)
                if f_prev + c < best[0]:
                    best = (f_prev + c, li, side)
            step[lo] = best
        trace.append(step)
        prev = {lo: v[0] for lo, v in step.items()}
    last = min(prev, key=lambda lo: prev[lo])
    cost = prev[last]
    chain_layouts: dict[str, Perm] = {}
    sides: list[dict[str, Perm]] = [{} for _ in nodes]
    lo = last
    for i in range(len(nodes) - 1, -1, -1):
        _, li, side = trace[i][lo]
        sides[i] = side
        if i < len(chain) and lo is not None:
            chain_layouts[chain[i]] = lo
        lo = li
    return SegmentSolution(cost, chain_layouts, sides)


def brute_force_segment(problem: LayoutProblem, segment: Segment, pins: Mapping[str, Perm] = {}) -> float:
    """The segment's objective minimized by enumerating every chain assignment (tests only)."""
    best = math.inf
    for combo in itertools.product(*(problem.options(t, pins) for t in segment.chain)):
        fixed = dict(zip(segment.chain, combo))
        total = 0.0
        for i, node in enumerate(segment.nodes):
            mine = {t: fixed[t] for t in (segment.chain[i - 1] if i else None, segment.chain[i] if i < len(segment.chain) else None)
                    if t is not None and fixed[t] is not None}
            total += problem.node_best(node, mine, pins)[0]
        best = min(best, total)
    return best
