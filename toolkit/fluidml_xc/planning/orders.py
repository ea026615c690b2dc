"""Memory-aware execution orders (topological orders of the node DAG).

The planner scores each candidate order by the arena it plans and keeps the best, the original
order always among them. Inputs are per-node integer facts so this module knows nothing of ONNX:
`deps[i]` nodes that must run before node i, `reads[i]` storage groups node i reads, `creates[i]`
storage groups node i allocates, `sizes[g]` bytes of group g, `inplace[i]` the (input group, output
group) node i may share when the input dies there.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

EXACT_ORDER_STATE_BUDGET = 60_000
"""Partial orders (sets of executed nodes) the exact order search may expand before giving up."""


@dataclass(frozen=True)
class OrderFacts:
    deps: list[tuple[int, ...]]
    reads: list[tuple[int, ...]]
    creates: list[tuple[int, ...]]
    sizes: list[int]
    inplace: list[tuple[int, int] | None] = field(default_factory=list)
    """Per node: (input group, output group) it writes over when the input dies there; may be empty."""


def _succs(facts: OrderFacts) -> tuple[list[list[int]], list[int]]:
    succs: list[list[int]] = [[] for _ in facts.deps]
    for i, deps in enumerate(facts.deps):
        for d in deps:
            succs[d].append(i)
    return succs, [len(d) for d in facts.deps]


def min_live_order(facts: OrderFacts, lifo: bool = False) -> list[int]:
    """Greedy list scheduling: run the ready node that leaves the fewest bytes live.

    A node's score is the bytes it allocates (for groups someone reads later) minus the bytes of the
    groups it is the last reader of. Ties go to the lowest node index, or with `lifo` to the node that
    became ready last (finish a branch before opening another).
    """
    n = len(facts.deps)
    succs, indeg = _succs(facts)
    readers: list[list[int]] = [[] for _ in facts.sizes]
    for i, groups in enumerate(facts.reads):
        for g in groups:
            readers[g].append(i)
    remaining = [len(r) for r in readers]
    sizes = facts.sizes
    alloc = [sum(sizes[g] for g in groups if remaining[g]) for groups in facts.creates]
    done = [False] * n
    ready = [False] * n
    tie = [0] * n
    clock = 0

    def score(i: int) -> int:
        return alloc[i] - sum(sizes[g] for g in facts.reads[i] if remaining[g] == 1)

    heap: list[tuple[int, int, int]] = []

    def push(i: int) -> None:
        heapq.heappush(heap, (score(i), tie[i], i))

    def make_ready(i: int) -> None:
        nonlocal clock
        ready[i] = True
        clock += 1
        tie[i] = -clock if lifo else i
        push(i)

    for i in range(n):
        if indeg[i] == 0:
            make_ready(i)
    order: list[int] = []
    while heap:
        key, _, i = heapq.heappop(heap)
        if done[i]:
            continue
        if key != score(i):
            push(i)
            continue
        done[i] = True
        order.append(i)
        for g in facts.reads[i]:
            remaining[g] -= 1
            if remaining[g] == 1:
                for u in readers[g]:
                    if ready[u] and not done[u]:
                        push(u)
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                make_ready(s)
    if len(order) != n:
        raise ValueError("the graph has a cycle")
    return order


def depth_first_order(facts: OrderFacts) -> list[int]:
    """Depth-first topological order: after a node, run its newly ready consumers first."""
    succs, indeg = _succs(facts)
    stack = [i for i in reversed(range(len(facts.deps))) if indeg[i] == 0]
    order: list[int] = []
    while stack:
        i = stack.pop()
        order.append(i)
        for s in reversed(succs[i]):
            indeg[s] -= 1
            if indeg[s] == 0:
                stack.append(s)
    if len(order) != len(facts.deps):
        raise ValueError("the graph has a cycle")
    return order


@dataclass
class ExactOrder:
    order: list[int] | None
    """An order whose live peak is `peak`, or None when no order beats the incumbent."""
    peak: int
    """The least live peak over all topological orders (when `optimal`), else the best one found."""
    optimal: bool
    states: int


def min_peak_order(facts: OrderFacts, incumbent: int | None = None,
                   state_budget: int = EXACT_ORDER_STATE_BUDGET) -> ExactOrder:
    """The topological order with the least live peak, by a bottleneck shortest path over downsets.

    A state is the set D of nodes already run (a bitmask); the bytes live after D are the groups made
    in D that a node outside D still reads. Running node v next costs live(D) + the groups v creates,
    less its output when it writes in place over an input that dies at v. Dijkstra on the running max
    (deeper states first on ties) finds the least peak; a step that adds no bytes (views, in-place
    ops on a dying input) is taken alone, which loses nothing (moving it earlier only frees bytes
    sooner). Only orders strictly below `incumbent` are searched: when none exists the result has no
    order and `peak == incumbent`, optimal. `optimal` is False when `state_budget` runs out first.
    """
    n = len(facts.deps)
    sizes = facts.sizes
    succs, indeg = _succs(facts)
    dep_mask = [0] * n
    for i, deps in enumerate(facts.deps):
        for d in deps:
            dep_mask[i] |= 1 << d
    readers = [0] * len(sizes)
    for i, groups in enumerate(facts.reads):
        for g in groups:
            readers[g] |= 1 << i
    made = [sum(sizes[g] for g in groups) for groups in facts.creates]
    kept = [sum(sizes[g] for g in groups if readers[g]) for groups in facts.creates]
    inplace = facts.inplace or [None] * n
    bound = incumbent if incumbent is not None else 1 << 62
    full = (1 << n) - 1
    # state -> (peak, live bytes after it, parent state, node run last, ready nodes)
    best: dict[int, tuple[int, int, int, int, tuple[int, ...]]] = {
        0: (0, 0, -1, -1, tuple(i for i in range(n) if indeg[i] == 0))}
    heap: list[tuple[int, int, int]] = [(0, 0, 0)]
    expanded = work = 0
    done: set[int] = set()
    while heap:
        peak, _, state = heapq.heappop(heap)
        if state in done or best[state][0] != peak:
            continue
        if state == full:
            order = []
            while state:
                _, _, parent, node, _ = best[state]
                order.append(node)
                state = parent
            return ExactOrder(order[::-1], peak, True, expanded)
        done.add(state)
        expanded += 1
        _, live, _, _, ready = best[state]
        work += len(ready)
        if expanded > state_budget or work > 8 * state_budget:
            return ExactOrder(None, bound, False, expanded)
        moves = []
        for v in ready:
            after = state | 1 << v
            step = live + made[v]
            pair = inplace[v]
            if pair is not None and not readers[pair[0]] & ~after:
                step -= sizes[pair[1]]
            freed = sum(sizes[g] for g in facts.reads[v] if not readers[g] & ~after)
            moves.append((step, v, after, live + kept[v] - freed))
            if step <= live:
                moves = moves[-1:]
                break
        for step, v, after, live_after in moves:
            new_peak = max(peak, step)
            if new_peak >= bound:
                continue
            old = best.get(after)
            if old is None or new_peak < old[0]:
                if old is None:
                    nxt = tuple(sorted([u for u in ready if u != v] + [s for s in succs[v] if not dep_mask[s] & ~after]))
                else:
                    nxt = old[4]
                best[after] = (new_peak, live_after, state, v, nxt)
                heapq.heappush(heap, (new_peak, -after.bit_count(), after))
    return ExactOrder(None, bound, True, expanded)


ORDERS = {
    "min_live": min_live_order,
    "min_live_lifo": lambda facts: min_live_order(facts, lifo=True),
    "depth_first": depth_first_order,
}
