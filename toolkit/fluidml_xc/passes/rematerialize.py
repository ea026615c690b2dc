"""Recompute cheap input-derived tensors for their far consumers instead of keeping them live.

A tensor computed only from graph inputs and constants by a few cheap ops (an attention mask, a
token embedding and its LayerNorm) is often read at the start of a model and again much later (the
second layer's mask, the first residual Add). Kept in the arena, it is live across everything in
between, often across the step with the most live bytes, so the arena exceeds the bytes any single
op touches. Graph inputs live in caller buffers for the whole run, so the tensor's producing cone
can run again right before the later consumers: its bytes are then live only around each use.

For each such tensor, its consumers (in node order) are split into clusters wherever
`REMAT_MIN_GAP` or more other nodes run between two of them; every cluster after the first gets a
private copy of the cone (nodes and tensors renamed `<name>#remat<k>`), inserted just before the
cluster's first consumer. The memory planner's order search then schedules each copy where it
costs least. Cones are bounded (`REMAT_MAX_NODES` nodes, `REMAT_MAX_WORK` times the tensor's bytes
written in all) and use only registered ops not marked `heavy` (OpSpec: Conv, MatMul, Gemm, pooling,
recurrent, ... are), so nothing random, and the recomputation is cheap and bit-identical.
"""
from __future__ import annotations

import copy

from ..ir import Graph, Node
from ..opspec import lookup
from . import graph_pass

REMAT_MIN_GAP = 3
"""Nodes that must run between two consumers before the later one gets its own copy."""
REMAT_MAX_NODES = 16
REMAT_MAX_WORK = 8
"""Bytes the cone writes, at most this many times the rematerialized tensor's bytes."""
REMAT_MIN_BYTES = 1024
"""Smaller tensors are not worth a copy."""

def _cheap(graph: Graph, node: Node) -> bool:
    spec = lookup(node.op_type, graph.opset, node.domain)
    return spec is not None and not spec.heavy


def _cone(graph: Graph, name: str, producers: dict[str, Node], sources: set[str]) -> list[Node] | None:
    """The nodes computing `name` from graph inputs and constants (topological), or None if not cheap."""
    nodes: dict[int, Node] = {}
    stack = [name]
    while stack:
        t = stack.pop()
        if t in sources or graph.tensors[t].is_const:
            continue
        node = producers.get(t)
        if node is None or not _cheap(graph, node):
            return None
        if id(node) in nodes:
            continue
        nodes[id(node)] = node
        if len(nodes) > REMAT_MAX_NODES:
            return None
        stack.extend(x for x in node.inputs if x)
    position = {id(node): k for k, node in enumerate(graph.nodes)}
    return sorted(nodes.values(), key=lambda node: position[id(node)])


@graph_pass(order=60)
def rematerialize_input_cones(graph: Graph) -> None:
    sources = set(graph.inputs)
    outputs = set(graph.outputs)
    copies = 0
    producers = graph.producers()
    candidates = [out for node in graph.nodes for out in node.outputs
                  if out and out not in outputs and not graph.tensors[out].is_const
                  and graph.tensors[out].nbytes >= REMAT_MIN_BYTES]
    for name in reversed(candidates):
        cone = _cone(graph, name, producers, sources)
        if not cone:
            continue
        if sum(graph.tensors[o].nbytes for node in cone for o in node.outputs if o) > REMAT_MAX_WORK * graph.tensors[name].nbytes:
            continue
        position = {id(node): k for k, node in enumerate(graph.nodes)}
        users = sorted({id(u): u for u in graph.consumers().get(name, [])}.values(), key=lambda u: position[id(u)])
        clusters: list[list[Node]] = []
        for user in users:
            if clusters and position[id(user)] - position[id(clusters[-1][-1])] <= REMAT_MIN_GAP:
                clusters[-1].append(user)
            else:
                clusters.append([user])
        for cluster in clusters[1:]:
            copies += 1
            rename = {}
            clones = []
            for node in cone:
                clone = Node(node.op_type, f"{node.name}#remat{copies}", [rename.get(x, x) for x in node.inputs], [],
                             copy.deepcopy(node.attrs), node.domain)
                for out in node.outputs:
                    if out:
                        rename[out] = f"{out}#remat{copies}"
                        graph.tensors[rename[out]] = copy.copy(graph.tensors[out])
                        graph.tensors[rename[out]].name = rename[out]
                clone.outputs = [rename.get(o, o) for o in node.outputs]
                clones.append(clone)
            for user in cluster:
                user.inputs = [rename[name] if x == name else x for x in user.inputs]
            at = next(k for k, node in enumerate(graph.nodes) if node is cluster[0])
            graph.nodes[at:at] = clones
            for clone in clones:
                for out in clone.outputs:
                    if out:
                        producers[out] = clone
