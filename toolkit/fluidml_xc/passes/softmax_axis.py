"""Softmax / LogSoftmax over an axis that is not the last -> ReduceMax, Sub, Exp, ReduceSum, Div (or Sub, Log).

The Softmax kernel walks one row at a time, which is fast when the row is contiguous (the last axis)
and a strided gather otherwise. The decomposed form runs the max and the sum as reductions over the
axis, which the reduction kernels vectorize across the contiguous inner dims, and the elementwise
steps fuse (passes/elementwise_fusion.py). Only float32 at opset >= 13 (one axis; older opsets
flatten from `axis` on, and those rows are contiguous already); float16 keeps the kernel's float32
sum.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, is_onnx_domain
from . import graph_pass


def _rewrite(graph: Graph, node: Node) -> list[Node] | None:
    if not is_onnx_domain(node.domain) or graph.opset < 13 or len(node.outputs) != 1:
        return None
    x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
    rank = len(x.shape)
    if np.dtype(x.dtype) != np.float32 or rank < 2 or x.size == 0:
        return None
    axis = int(node.attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1 or all(d == 1 for d in x.shape[axis + 1:]):
        return None
    base = node.name or node.op_type
    reduced = tuple(1 if d == axis else s for d, s in enumerate(x.shape))

    def tensor(suffix: str, shape, value=None) -> str:
        return graph.add_tensor(f"{base}.{suffix}", np.float32, shape, value)

    def reduce(op: str, src: str, suffix: str) -> Node:
        out = tensor(suffix, reduced)
        if graph.opset >= (13 if op == "ReduceSum" else 18):
            return Node(op, f"{base}.{suffix}", [src, tensor(f"{suffix}_axes", (1,), np.array([axis], np.int64))], [out], {"keepdims": 1})
        return Node(op, f"{base}.{suffix}", [src], [out], {"axes": [axis], "keepdims": 1})

    top = reduce("ReduceMax", x.name, "max")
    shifted = tensor("shifted", x.shape)
    nodes = [top, Node("Sub", f"{base}.shift", [x.name, top.outputs[0]], [shifted])]
    exps = tensor("exp", x.shape)
    nodes.append(Node("Exp", f"{base}.exp", [shifted], [exps]))
    total = reduce("ReduceSum", exps, "sum")
    nodes.append(total)
    if node.op_type == "Softmax":
        nodes.append(Node("Div", f"{base}.normalize", [exps, total.outputs[0]], [y.name]))
    else:
        log_total = tensor("log_sum", reduced)
        nodes += [Node("Log", f"{base}.log_sum", [total.outputs[0]], [log_total]),
                  Node("Sub", f"{base}.normalize", [shifted, log_total], [y.name])]
    return nodes


@graph_pass(order=13)
def softmax_off_last_axis(graph: Graph) -> None:
    rewritten: list[Node] = []
    for node in graph.nodes:
        replacement = _rewrite(graph, node) if node.op_type in ("Softmax", "LogSoftmax") else None
        rewritten.extend(replacement or [node])
    graph.nodes = rewritten
