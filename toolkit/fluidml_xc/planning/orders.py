"""Memory-aware execution orders (topological orders of the node DAG).

The planner scores each candidate order by the arena it plans and keeps the best, the original
order always among them. Inputs are per-node integer facts so this module knows nothing of ONNX:
`deps[i]` nodes that must run before node i, `reads[i]` storage groups node i reads, `creates[i]`
storage groups node i allocates, `sizes[g]` bytes of group g.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class OrderFacts:
    deps: list[tuple[int, ...]]
    reads: list[tuple[int, ...]]
    creates: list[tuple[int, ...]]
    sizes: list[int]


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


ORDERS = {
    "min_live": min_live_order,
    "min_live_lifo": lambda facts: min_live_order(facts, lifo=True),
    "depth_first": depth_first_order,
}
