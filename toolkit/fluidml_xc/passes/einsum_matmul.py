"""Two-operand Einsum that is a (batched) matrix product -> Transpose + Reshape + MatMul (+ Reshape, Transpose).

Labels fall into batch (both operands and the output), left (A and the output), right (B and the
output) and contracted (both operands, not the output). A is permuted to [batch, left, contracted]
and flattened to [B, L, K], B to [batch, contracted, right] as [B, K, R]; the blocked MatMul gives
[B, L, R], which is unflattened and permuted to the output's label order. Identity permutations are
left out and constant operands are permuted at build time. Equations with a label repeated in one
operand (a diagonal), a label summed within one operand only, broadcasting of shared labels, or no
contracted label (an outer product, already a plain elementwise product) keep the generic lowering
(ops/einsum.py).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..ir import Graph, Node, Tensor, is_onnx_domain
from ..einsum_equation import parse_equation
from . import graph_pass


class _Names:
    def __init__(self, graph: Graph, base: str):
        self.graph, self.base = graph, base

    def const(self, suffix: str, value: np.ndarray) -> str:
        return self.graph.add_tensor(f"{self.base}.{suffix}", value.dtype, value.shape, value)

    def activation(self, suffix: str, dtype, shape) -> str:
        return self.graph.add_tensor(f"{self.base}.{suffix}", dtype, shape)


def _arrange(names: _Names, nodes: list[Node], src: Tensor, perm: list[int], shape: tuple[int, ...], tag: str) -> str:
    """`src` permuted by `perm` and reshaped to `shape`: constants at build time, activations as nodes."""
    if src.is_const:
        return names.const(tag, np.ascontiguousarray(np.transpose(src.value, perm)).reshape(shape))
    name = src.name
    if perm != sorted(perm):
        permuted = names.activation(f"{tag}_t", src.dtype, [src.shape[p] for p in perm])
        nodes.append(Node("Transpose", f"{names.base}.{tag}_transpose", [name], [permuted], {"perm": perm}))
        name = permuted
    if tuple(names.graph.tensors[name].shape) != tuple(shape):
        flat = names.activation(tag, src.dtype, shape)
        nodes.append(Node("Reshape", f"{names.base}.{tag}_reshape", [name, names.const(f"{tag}_shape", np.array(shape, np.int64))], [flat]))
        name = flat
    return name


def _rewrite(graph: Graph, node: Node) -> list[Node] | None:
    if not is_onnx_domain(node.domain) or len(node.inputs) != 2 or not all(node.inputs):
        return None
    a, b = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    out = graph.tensors[node.outputs[0]]
    if np.dtype(a.dtype).kind != "f" or a.dtype != b.dtype or out.size == 0:
        return None
    try:
        (ta, tb), to = parse_equation(str(node.attrs.get("equation", "")), [len(a.shape), len(b.shape)], node.name)
    except InputError:
        return None
    if len(set(ta)) != len(ta) or len(set(tb)) != len(tb) or len(set(to)) != len(to):
        return None
    size: dict[str, int] = {}
    for term, shape in ((ta, a.shape), (tb, b.shape)):
        for c, d in zip(term, shape):
            if size.setdefault(c, d) != d:
                return None
    batch = [c for c in to if c in ta and c in tb]
    left = [c for c in to if c in ta and c not in tb]
    right = [c for c in to if c in tb and c not in ta]
    contract = [c for c in ta if c in tb and c not in to]
    if not contract or sorted(batch + left + right) != sorted(to) or set(ta) != set(batch + left + contract) \
            or set(tb) != set(batch + contract + right):
        return None
    nb, nl, nk, nr = (math.prod(size[c] for c in group) for group in (batch, left, contract, right))
    names, nodes = _Names(graph, node.name or "Einsum"), []
    lead = (nb,) if batch else ()
    a_in = _arrange(names, nodes, a, [ta.index(c) for c in batch + left + contract], (*lead, nl, nk), "lhs")
    b_in = _arrange(names, nodes, b, [tb.index(c) for c in batch + contract + right], (*lead, nk, nr), "rhs")
    product_labels = batch + left + right
    final_perm = [product_labels.index(c) for c in to]
    product_shape = tuple(size[c] for c in product_labels)
    needs_transpose = final_perm != sorted(final_perm)
    mm_shape = (*lead, nl, nr)
    direct = not needs_transpose and mm_shape == tuple(out.shape)
    mm_out = out.name if direct else names.activation("product", out.dtype, mm_shape)
    nodes.append(Node("MatMul", f"{names.base}.matmul", [a_in, b_in], [mm_out]))
    if direct:
        return nodes
    current = mm_out
    if mm_shape != product_shape:
        target = out.name if not needs_transpose else names.activation("product_unflat", out.dtype, product_shape)
        nodes.append(Node("Reshape", f"{names.base}.unflatten", [current, names.const("product_shape", np.array(product_shape, np.int64))],
                          [target]))
        current = target
    if needs_transpose:
        nodes.append(Node("Transpose", f"{names.base}.to_output", [current], [out.name], {"perm": final_perm}))
    return nodes


@graph_pass(order=11)
def einsum_as_matmul(graph: Graph) -> None:
    rewritten: list[Node] = []
    for node in graph.nodes:
        replacement = _rewrite(graph, node) if node.op_type == "Einsum" else None
        rewritten.extend(replacement or [node])
    graph.nodes = rewritten
