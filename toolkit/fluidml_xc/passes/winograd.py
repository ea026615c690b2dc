"""Which Conv nodes may run as Winograd (kernels/winograd.py), and at which tile sizes, under the weight budget:
node.attrs[ALLOWED_ATTR] = the tile sizes allowed, largest first; the cost model (fluid/winograd_costs.py) then
prices them next to the direct orders and fluid's search picks per layer. Called by pipeline.import_graph with the
build's --conv-algo and --max-memory (not a registered pass: it needs them).

Budget: the transformed weights replace the direct kernel's (alpha^2 / 9 of their bytes: F(2x2) 16/9, F(4x4) 4x);
the bytes they add over the whole model may not exceed GROWTH_BUDGET times the model's constant bytes, nor take
weights plus every activation's bytes (the arena's bound before it is planned) past --max-memory. Layers are served in order of weight bytes per multiply-add (cheapest growth per
saved multiplication first), each the largest tile that still fits. The whole-image form (WHOLE_ATTR) is allowed
where its transformed input V (an arena tensor) fits under --max-memory too, after the growth."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir import Graph, Node
from ..kernels.winograd import ALLOWED_ATTR, TRANSFORMS, WHOLE_ATTR, grouped_ok, growth, v_copies

CONV_ALGOS = ("auto", "direct")
"""--conv-algo: auto (the cost model chooses per layer) or direct (never Winograd)."""
GROWTH_BUDGET = 3.0
"""Winograd may add at most this many times the model's constant bytes (its weights) in transformed weights."""


def _ints(node: Node, name: str, default) -> list[int]:
    return [int(v) for v in (node.attrs.get(name) or default)]


def eligible(graph: Graph, node: Node) -> bool:
    """A float32 2-D Conv, 3x3, stride 1, dilation 1, one group or groups of at least 8 channels in and out, constant
    finite weights, a constant bias or none, static dims, output >= 2x2."""
    if node.op_type != "Conv" or len(node.inputs) < 2 or node.domain not in ("", "ai.onnx"):
        return False
    x, w, out = (graph.tensors.get(n) for n in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if x is None or w is None or out is None or len(x.shape) != 4 or np.dtype(out.dtype) != np.float32:
        return False
    if not w.is_const or w.value is None or tuple(w.shape[2:]) != (3, 3) or not np.isfinite(w.value).all():
        return False
    if x.dyn is not None or out.dyn is not None or not grouped_ok(int(node.attrs.get("group", 1)), x.shape[1], out.shape[1]):
        return False
    if _ints(node, "strides", [1, 1]) != [1, 1] or _ints(node, "dilations", [1, 1]) != [1, 1]:
        return False
    bias = graph.tensors.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    return (bias is None or bias.is_const) and min(out.shape[2:]) >= 2


def mark_winograd(graph: Graph, algo: str = "auto", max_bytes: int | None = None, whole_image: bool = True,
                  copies: int = 1) -> dict[str, int]:
    """Set ALLOWED_ATTR on the eligible convs `algo` and the budget allow (removing stale marks); returns node name ->
    the largest tile size allowed. whole_image=False: no WHOLE_ATTR (a dynamic build: V has no run-time extents);
    copies: the threads whole-image V is copied for (fluid/winograd_split.py v_copies; 1: one V)."""
    if algo not in CONV_ALGOS:
        raise InputError(f"unknown --conv-algo {algo!r}; choose one of {', '.join(CONV_ALGOS)}")
    for node in graph.nodes:
        node.attrs.pop(ALLOWED_ATTR, None)
        node.attrs.pop(WHOLE_ATTR, None)
    if algo == "direct":
        return {}
    convs = [n for n in graph.nodes if eligible(graph, n)]
    if not convs:
        return {}
    weights = sum(t.nbytes for t in graph.tensors.values() if t.is_const)
    left = GROWTH_BUDGET * weights
    room = None  # bytes under --max-memory for the weights' growth and every whole-image V
    if max_bytes is not None:  # the arena at most every activation apart (the memory plan comes later)
        room = max_bytes - weights - sum(t.nbytes for t in graph.tensors.values() if not t.is_const)
        left = min(left, room)

    def per_mac(node: Node) -> float:
        out, w = graph.tensors[node.outputs[0]], graph.tensors[node.inputs[1]]
        return w.nbytes / max(1.0, float(out.size) * w.size / w.shape[0])
    chosen = {}
    for node in sorted(convs, key=per_mac):
        w_bytes = graph.tensors[node.inputs[1]].nbytes
        sizes = [m for m in sorted(TRANSFORMS, reverse=True) if (growth(m) - 1) * w_bytes <= left]
        if sizes:
            grown = (growth(sizes[0]) - 1) * w_bytes
            left -= grown
            node.attrs[ALLOWED_ATTR] = tuple(sizes)
            chosen[node.name] = sizes[0]
            if room is not None:
                room -= grown
            n_copies = node_copies(graph, node, copies)
            whole = [m for m in sizes if whole_image and (room is None or n_copies * v_bytes(graph, node, m) <= room)]
            if whole:
                node.attrs[WHOLE_ATTR] = tuple(whole)
                room = None if room is None else room - n_copies * v_bytes(graph, node, whole[0])
    return chosen


def node_copies(graph: Graph, node: Node, threads: int) -> int:
    """Copies of conv `node`'s whole-image V in a build that copies V for `threads` threads (1: one V; v_copies)."""
    groups = int(node.attrs.get("group", 1))
    images, channels = graph.tensors[node.inputs[0]].shape[0] * groups, graph.tensors[node.outputs[0]].shape[1] // groups
    return v_copies(threads > 1, threads, images, channels)


def v_bytes(graph: Graph, node: Node, m: int) -> int:
    """Bytes of the whole-image form's transformed input V (kernels/winograd.py v_shape) of conv `node`."""
    x, out = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
    tiles = -(-out.shape[2] // m) * -(-out.shape[3] // m)
    return x.shape[0] * (m + 2) ** 2 * tiles * x.shape[1] * 4
