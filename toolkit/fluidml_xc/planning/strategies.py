"""Offset assignment for buffers with fixed lifetimes (dynamic storage allocation).

A problem is a list of buffers, each with a size (already rounded to the alignment) and an inclusive
interval of execution steps; two buffers conflict iff their intervals intersect and then must not
overlap in the arena. Strategies are registered by name and return one offset per buffer, or None
when they do not apply (the exact solver on big problems).
"""
from __future__ import annotations

import bisect
import itertools
import math
import operator
import random
from dataclasses import dataclass, field
from typing import Callable

EXACT_MAX_BUFFERS = 12
EXACT_NODE_BUDGET = 30_000
"""Candidate placements the exact solver may try (bounds its time to well under a second)."""
ANNEAL_WORK_BUDGET = 400_000
"""Neighbour visits the improver may spend per problem (deterministic, independent of the clock)."""
ANNEAL_MAX_MOVES = 4000
ANNEAL_SEED = 0x5EED


@dataclass
class Buffers:
    """Sizes and inclusive [start, end] step intervals; `neighbors[i]` lists the buffers i conflicts with."""

    sizes: list[int]
    starts: list[int]
    ends: list[int]
    neighbors: list[list[int]] = field(init=False)
    """Conflicting buffers (zero-sized buffers conflict with nothing)."""
    live_peak: int = field(init=False)
    """Max over steps of the bytes live at that step: no placement can beat it."""
    pairs: int = field(init=False)
    greedy_cache: dict[str, tuple[list[int], list[int]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.sizes)
        ends = self.ends
        self.neighbors = [[] for _ in range(n)]
        sweep = sorted((k for k in range(n) if self.sizes[k]), key=lambda k: (self.starts[k], k))
        sweep_starts = [self.starts[k] for k in sweep]
        active: list[int] = []  # earlier in the sweep and still live
        for r, i in enumerate(sweep):
            start = self.starts[i]
            active = [j for j in active if ends[j] >= start]
            # later in the sweep: exactly those starting by our end, a contiguous run
            self.neighbors[i] = active + sweep[r + 1:bisect.bisect_right(sweep_starts, ends[i], r + 1)]
            active.append(i)
        steps = max(self.ends, default=-1) + 2
        live = [0] * steps
        for size, start, end in zip(self.sizes, self.starts, self.ends):
            live[start] += size
            live[end + 1] -= size
        self.live_peak = max(itertools.accumulate(live), default=0)
        self.pairs = sum(map(len, self.neighbors)) // 2
        self.greedy_cache = {}

    def __len__(self) -> int:
        return len(self.sizes)

    def top(self, offsets: list[int]) -> int:
        """Arena bytes a placement needs."""
        return max(map(operator.add, offsets, self.sizes), default=0)


StrategyFn = Callable[[Buffers], "list[int] | None"]
STRATEGIES: dict[str, StrategyFn] = {}
SEARCHES: set[str] = set()
"""Strategies that search (improver, exact): the planner runs them only on its finalist orders."""


def strategy(name: str, search: bool = False) -> Callable[[StrategyFn], StrategyFn]:
    """Register a placement strategy under `name`."""

    def wrap(fn: StrategyFn) -> StrategyFn:
        STRATEGIES[name] = fn
        if search:
            SEARCHES.add(name)
        return fn

    return wrap


def place(bufs: Buffers, perm: list[int], best_fit: bool = True) -> list[int]:
    """Place buffers one by one in `perm` order against the already placed conflicting ones."""
    pos = [0] * len(perm)
    for p, i in enumerate(perm):
        pos[i] = p
    offsets = [0] * len(perm)
    _place_from(bufs, perm, pos, offsets, 0, best_fit)
    return offsets


def _place_from(bufs: Buffers, perm: list[int], pos: list[int], offsets: list[int], first: int, best_fit: bool) -> None:
    """(Re)place perm[first:]; earlier positions keep their offsets.

    Best fit takes the smallest gap between placed conflicting buffers that holds the buffer, the
    gap below the lowest one included, lowest offset on ties; without one it goes on top of them.
    """
    sizes, neighbors = bufs.sizes, bufs.neighbors
    by_offset = offsets.__getitem__
    for p in range(first, len(perm)):
        i = perm[p]
        size = sizes[i]
        placed = [j for j in neighbors[i] if pos[j] < p]
        placed.sort(key=by_offset)
        best, best_gap, prev = -1, 0, 0
        for j in placed:
            lo = offsets[j]
            gap = lo - prev
            if gap >= size and (best < 0 or gap < best_gap):
                best, best_gap = prev, gap
                if gap == size or not best_fit:
                    break
            hi = lo + sizes[j]
            if hi > prev:
                prev = hi
        offsets[i] = prev if best < 0 else best


# Greedy orders: each is a priority key; placement is best fit.

def _key_size(bufs: Buffers) -> Callable[[int], tuple]:
    return lambda i: (-bufs.sizes[i], bufs.starts[i] - bufs.ends[i], bufs.starts[i], i)


def _key_lifetime(bufs: Buffers) -> Callable[[int], tuple]:
    return lambda i: (bufs.starts[i] - bufs.ends[i], -bufs.sizes[i], bufs.starts[i], i)


def _key_conflicts(bufs: Buffers) -> Callable[[int], tuple]:
    weight = [sum(map(bufs.sizes.__getitem__, nbrs)) for nbrs in bufs.neighbors]
    return lambda i: (-weight[i] - bufs.sizes[i], -bufs.sizes[i], bufs.starts[i], i)


def _key_breadth(bufs: Buffers) -> Callable[[int], tuple]:
    """Buffers that are live at the busiest steps first (TFLite's greedy by breadth, per buffer)."""
    steps = max(bufs.ends, default=-1) + 1
    live = [0] * (steps + 1)
    for size, start, end in zip(bufs.sizes, bufs.starts, bufs.ends):
        live[start] += size
        live[end + 1] -= size
    for s in range(1, steps):
        live[s] += live[s - 1]
    table = [live[:steps]]  # sparse table for range maxima
    width = 1
    while 2 * width <= steps:
        prev = table[-1]
        table.append([max(prev[s], prev[s + width]) for s in range(steps - 2 * width + 1)])
        width *= 2

    def breadth(i: int) -> int:
        lo, hi = bufs.starts[i], bufs.ends[i]
        k = (hi - lo + 1).bit_length() - 1
        return max(table[k][lo], table[k][hi - (1 << k) + 1])

    width_of = [breadth(i) for i in range(len(bufs))]
    return lambda i: (-width_of[i], -bufs.sizes[i], bufs.starts[i], i)


GREEDY_KEYS: dict[str, Callable[[Buffers], Callable[[int], tuple]]] = {
    "greedy_by_size": _key_size,
    "greedy_by_conflicts": _key_conflicts,
    "greedy_by_breadth": _key_breadth,
    "greedy_by_lifetime": _key_lifetime,
}


def greedy(bufs: Buffers, name: str) -> tuple[list[int], list[int]]:
    """(order, offsets) of the greedy strategy `name`, cached on `bufs`."""
    if name not in bufs.greedy_cache:
        perm = sorted(range(len(bufs)), key=GREEDY_KEYS[name](bufs))
        bufs.greedy_cache[name] = (perm, place(bufs, perm))
    return bufs.greedy_cache[name]


def _register_greedy(name: str) -> None:
    strategy(name)(lambda bufs: greedy(bufs, name)[1][:])


for _name in GREEDY_KEYS:
    _register_greedy(_name)


@strategy("anneal", search=True)
def anneal(bufs: Buffers, work_budget: int = ANNEAL_WORK_BUDGET, seed: int = ANNEAL_SEED) -> list[int] | None:
    """Simulated annealing over the placement order, starting from the best greedy order.

    A move takes a buffer (often one that reaches the arena top) to an earlier position; only the
    suffix from that position is placed again. Deterministic: fixed seed, and a budget counted in
    neighbour visits rather than time. None when the problem is too big for even a few moves.
    """
    n = len(bufs)
    degree = 1 + 2 * bufs.pairs / max(n, 1)
    if n < 2 or work_budget < 4 * n * degree:
        return None
    rng = random.Random(seed)
    perm, offsets = min((greedy(bufs, name) for name in GREEDY_KEYS), key=lambda po: bufs.top(po[1]))
    perm, offsets = perm[:], offsets[:]
    top = bufs.top(offsets)
    best, best_top = offsets[:], top
    pos = [0] * n
    for p, i in enumerate(perm):
        pos[i] = p
    temp0 = max(1.0, 0.02 * top)
    spent, moves = 0.0, 0
    while spent < work_budget and moves < ANNEAL_MAX_MOVES and best_top > bufs.live_peak:
        moves += 1
        critical = [i for i in range(n) if offsets[i] + bufs.sizes[i] == top and pos[i] > 0]
        i = rng.choice(critical) if critical and rng.random() < 0.6 else perm[rng.randrange(1, n)]
        src = pos[i]
        dst = rng.randrange(0, src)
        new_perm = perm[:dst] + [i] + perm[dst:src] + perm[src + 1:]
        new_pos = pos[:]
        for p in range(dst, src + 1):
            new_pos[new_perm[p]] = p
        new_offsets = offsets[:]
        _place_from(bufs, new_perm, new_pos, new_offsets, dst, True)
        spent += n + (n - dst) * degree
        new_top = bufs.top(new_offsets)
        temp = temp0 * max(0.0, 1.0 - spent / work_budget)
        if new_top <= top or (temp > 0 and rng.random() < math.exp((top - new_top) / temp)):
            perm, pos, offsets, top = new_perm, new_pos, new_offsets, new_top
            if top < best_top:
                best, best_top = offsets[:], top
    return best


@strategy("exact", search=True)
def exact(bufs: Buffers, max_buffers: int = EXACT_MAX_BUFFERS, node_budget: int = EXACT_NODE_BUDGET) -> list[int] | None:
    """Branch and bound for small problems (None above `max_buffers`).

    Any packing can be pushed down until each buffer rests on 0 or on a conflicting buffer; taking
    its buffers by increasing offset and putting each at the lowest free offset not below the
    previous one reproduces it or better. So the search branches on the next buffer, at the lowest
    feasible offset >= the previous one (the floor). Prunes: the best greedy packing as incumbent;
    at every step, floor + bytes still to place + placed bytes above the floor; identical buffers in
    index order; and two non-conflicting buffers at the same offset in index order. Optimal unless
    `node_budget` runs out (then the best packing found).
    """
    n = len(bufs)
    if n > max_buffers:
        return None
    sizes = bufs.sizes
    best = min((greedy(bufs, name)[1] for name in GREEDY_KEYS), key=bufs.top)[:]
    best_top = bufs.top(best)
    if best_top <= bufs.live_peak:
        return best
    conflict = [[False] * n for _ in range(n)]
    for i, nbrs in enumerate(bufs.neighbors):
        for j in nbrs:
            conflict[i][j] = True
    cliques = {frozenset(j for j in range(n) if bufs.starts[j] <= bufs.starts[k] <= bufs.ends[j] and sizes[j]) for k in range(n)}
    cliques = [tuple(c) for c in cliques if c and not any(c < other for other in cliques)]
    twin_before = [next((j for j in range(i) if (sizes[j], bufs.starts[j], bufs.ends[j]) == (sizes[i], bufs.starts[i], bufs.ends[i])), -1)
                   for i in range(n)]
    offsets = [0 if size == 0 else -1 for size in sizes]
    visits = 0

    def lowest(i: int, floor: int) -> int:
        size = sizes[i]
        placed = [(offsets[j], offsets[j] + sizes[j]) for j in bufs.neighbors[i] if offsets[j] >= 0]
        for cand in sorted({floor} | {hi for _, hi in placed if hi > floor}):
            if all(hi <= cand or lo >= cand + size for lo, hi in placed):
                return cand
        raise AssertionError("unreachable: the top of the placed buffers is always free")

    def bound(floor: int) -> int:
        worst = 0
        for clique in cliques:
            need = floor
            for j in clique:
                off = offsets[j]
                if off < 0:
                    need += sizes[j]
                elif off + sizes[j] > floor:
                    need += off + sizes[j] - max(off, floor)
            worst = max(worst, need)
        return worst

    def search(floor: int, top: int, last: int, left: int) -> None:
        nonlocal best, best_top, visits
        if left == 0:
            best, best_top = offsets[:], top
            return
        for i in range(n):
            if offsets[i] >= 0 or (twin_before[i] >= 0 and offsets[twin_before[i]] < 0):
                continue
            visits += 1
            if visits > node_budget:
                return
            off = lowest(i, floor)
            if off == floor and 0 <= i < last and not conflict[i][last] and offsets[last] == floor:
                continue  # placing i before `last` reaches the same packing or a lower one
            new_top = max(top, off + sizes[i])
            if new_top >= best_top:
                continue
            offsets[i] = off
            if bound(off) < best_top:
                search(off, new_top, i, left - 1)
            offsets[i] = -1
            if best_top <= bufs.live_peak:
                return

    search(0, 0, -1, sum(1 for size in sizes if size))
    return best
