"""Longest-sequence segmentation (docs/DESIGN.md 1.2).

The graph is a DAG of nodes 0..n-1 in topological order joined by tensors. The main sequence is the
longest path weighted by each node's kernel cost; the nodes off it split into weakly connected
components, each segmented the same way, until every node is in exactly one chain. Operands that
join a chain from outside are stand-in inputs of that chain (free in its DP, settled by voting).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class Segment:
    nodes: list[int]
    """Node indices in chain order (each one feeds the next)."""
    chain: list[str]
    """chain[i] is the tensor from nodes[i] to nodes[i + 1]."""
    cost: float = 0.0
    """Sum of the nodes' weights (row-major kernel cost)."""
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.nodes)


Edge = tuple[int, int, str]
"""(producer node, consumer node, tensor)."""


def segment_graph(n_nodes: int, edges: Sequence[Edge], weight: Sequence[float]) -> list[Segment]:
    """Chains covering every node once, longest (cost-weighted) first.

    `edges` must go from a lower to a higher node index (the nodes are in topological order).
    """
    preds: list[list[tuple[int, str]]] = [[] for _ in range(n_nodes)]
    adj: list[list[int]] = [[] for _ in range(n_nodes)]
    for p, c, t in edges:
        if not p < c:
            raise ValueError(f"edge {p}->{c} ({t}) is not in topological order")
        preds[c].append((p, t))
        adj[p].append(c)
        adj[c].append(p)
    segments: list[Segment] = []
    work = [list(range(n_nodes))] if n_nodes else []
    inside = [False] * n_nodes
    while work:
        group = work.pop()
        for v in group:
            inside[v] = True
        best: dict[int, float] = {}
        back: dict[int, tuple[int, str] | None] = {}
        for v in group:  # ascending = topological
            d, arg = 0.0, None
            for p, t in preds[v]:
                if inside[p] and (arg is None or best[p] > d):
                    d, arg = best[p], (p, t)
            best[v] = d + float(weight[v])
            back[v] = arg
        end = max(group, key=lambda v: (best[v], -v))
        path, chain = [end], []
        while back[path[-1]] is not None:
            p, t = back[path[-1]]
            path.append(p)
            chain.append(t)
        path.reverse()
        chain.reverse()
        segments.append(Segment(path, chain, best[end]))
        for v in path:
            inside[v] = False
        rest = [v for v in group if inside[v]]
        # weakly connected components of the rest (within the group)
        seen: set[int] = set()
        comps = []
        for v in rest:
            if v in seen:
                continue
            comp, stack = [], [v]
            seen.add(v)
            while stack:
                u = stack.pop()
                comp.append(u)
                for w in adj[u]:
                    if inside[w] and w not in seen:
                        seen.add(w)
                        stack.append(w)
            comps.append(sorted(comp))
        for v in rest:
            inside[v] = False
        work.extend(reversed(comps))
    segments.sort(key=lambda s: (-s.cost, s.nodes[0]))
    return segments
