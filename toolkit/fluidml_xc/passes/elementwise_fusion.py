"""Fuse chains/trees of elementwise ops into one FusedElementwise node (ops/fused.py): one pass over memory.

A group grows from a root (walking the graph backwards) into the producers of its inputs while the
producer is fusable, its output has exactly one consuming node (the group member), is not a graph
output and has as many elements as the root's output (a smaller intermediate, e.g. an attention mask
broadcast into the scores, would be recomputed per output element: it stays its own group). Groups of
two or more nodes become one node named after its ops in order ("Div+Erf+Add+Mul+Mul@<root node>");
the root's output keeps its Tensor entry and the intermediates are deleted from graph.tensors.
Scalar constants become immediates of the program, other constants stay build-time operands.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import compute_dtype, has_scalar_type
from ..ir import Graph, Node
from ..opspec import FUSED_OP, OUR_DOMAIN, lookup, traits
from . import graph_pass

def _scalar_const(graph: Graph, name: str):
    t = graph.tensors.get(name)
    if t is not None and t.is_const and t.size == 1:
        return t.value.reshape(-1)[0]
    return None


def _imm(value, dtype) -> list:
    dtype = np.dtype(dtype)
    if compute_dtype(dtype).kind == "f":
        return ["imm", float(value), dtype.name]
    if dtype == np.bool_:
        return ["imm", int(bool(value)), dtype.name]
    return ["imm", int(value), dtype.name]


def fusable(graph: Graph, node: Node) -> bool:
    """A single-output elementwise node the fused kernel can evaluate."""
    spec = lookup(node.op_type, graph.opset, node.domain)
    if spec is None or not spec.fusable:
        return False
    outs = [o for o in node.outputs if o]
    if len(node.outputs) != 1 or len(outs) != 1 or not node.inputs or not node.inputs[0]:
        return False
    out = graph.tensors.get(outs[0])
    if out is None or out.is_const:
        return False
    tensors = [graph.tensors.get(name) for name in [outs[0]] + [n for n in node.inputs if n]]
    if any(t is None or not has_scalar_type(t.dtype) for t in tensors):
        return False
    if spec.dtypes is not None and np.dtype(graph.tensors[node.inputs[0]].dtype).name not in spec.dtypes:
        return False
    op = node.op_type
    if op == "Clip" and graph.opset >= 11:
        for name in node.inputs[1:3]:
            if name and _scalar_const(graph, name) is None:
                return False
    if op == "Pow" and not graph.tensors[node.inputs[1]].is_const:
        return False
    if op in ("Sum", "Max", "Min", "Mean") and any(not n for n in node.inputs):
        return False
    if op == "Where" and len(node.inputs) != 3:
        return False
    return True


def _grow(graph: Graph, root: Node, index: dict[int, int], producers, consumers, taken: set[int]) -> list[Node]:
    """The group rooted at `root`, in graph order."""
    outputs = set(graph.outputs)
    size = graph.tensors[root.outputs[0]].size
    group = [root]
    members = {id(root)}
    stack = [root]
    while stack:
        node = stack.pop()
        for i, name in enumerate(node.inputs):
            if not name or i in traits(node.op_type, graph.opset, node.domain).type_only_inputs:
                continue
            p = producers.get(name)
            if p is None or id(p) in taken or id(p) in members or not fusable(graph, p):
                continue
            users = {id(u) for u in consumers.get(name, [])}
            if len(users) != 1 or name in outputs or graph.tensors[name].size != size:
                continue
            group.append(p)
            members.add(id(p))
            stack.append(p)
    return sorted(group, key=lambda n: index[id(n)])


def _program(graph: Graph, group: list[Node]) -> tuple[list[dict], list[str]]:
    """The steps of a group (in graph order) and its fused inputs (activations first, full-size ones first)."""
    step_of = {n.outputs[0]: j for j, n in enumerate(group)}
    inputs: list[str] = []
    steps = []

    def ref(name: str) -> list:
        if name in step_of:
            return ["step", step_of[name]]
        value = _scalar_const(graph, name)
        if value is not None:
            return _imm(value, graph.tensors[name].dtype)
        if name not in inputs:
            inputs.append(name)
        return ["in", name]

    for node in group:
        op = node.op_type
        attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in node.attrs.items() if not k.startswith("_") or k == "_astype"}
        out_dt = np.dtype(graph.tensors[node.outputs[0]].dtype)
        if op == "Clip":
            x = ref(node.inputs[0])
            bounds = []
            if graph.opset < 11:
                for key in ("min", "max"):
                    present = key in node.attrs
                    attrs[f"has_{key}"] = present
                    if present:
                        bounds.append(_imm(node.attrs[key], out_dt))
            else:
                for key, i in (("min", 1), ("max", 2)):
                    present = i < len(node.inputs) and bool(node.inputs[i])
                    attrs[f"has_{key}"] = present
                    if present:
                        bounds.append(_imm(_scalar_const(graph, node.inputs[i]), out_dt))
            args = [x] + bounds
        else:
            skip = traits(op, graph.opset, node.domain).type_only_inputs
            args = [ref(n) for i, n in enumerate(node.inputs) if n and i not in skip]
            if op == "Pow":
                e = _scalar_const(graph, node.inputs[1])
                if e is not None:
                    attrs["exponent"] = float(e)
        steps.append({"op": op, "args": args, "dtype": out_dt.name, "attrs": attrs})
    # input order: an activation of the output's shape and item size first (the in-place candidate)
    out = graph.tensors[group[-1].outputs[0]]

    def rank(name: str) -> tuple:
        t = graph.tensors[name]
        same = t.shape == out.shape and np.dtype(t.dtype).itemsize == np.dtype(out.dtype).itemsize
        return (t.is_const, not same)
    ordered = sorted(inputs, key=rank)
    position = {name: i for i, name in enumerate(ordered)}
    for step in steps:
        step["args"] = [["in", position[a[1]]] if a[0] == "in" else a for a in step["args"]]
    return steps, ordered


def fuse_groups(graph: Graph) -> int:
    """Rewrite every fusable group of two or more nodes; returns the number of fused nodes made."""
    producers = graph.producers()
    consumers = graph.consumers()
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    taken: set[int] = set()
    replace: dict[int, Node | None] = {}
    names = {n.name for n in graph.nodes}
    made = 0
    for node in reversed(graph.nodes):
        if id(node) in taken or not fusable(graph, node):
            continue
        group = _grow(graph, node, index, producers, consumers, taken)
        taken.update(id(n) for n in group)
        if len(group) < 2:
            continue
        steps, inputs = _program(graph, group)
        ops = "+".join(n.op_type for n in group)
        name = f"{ops}@{node.name}"
        while name in names:
            name += "_"
        names.add(name)
        fused = Node(FUSED_OP, name, inputs, [node.outputs[0]],
                     {"program": steps, "_fused_nodes": [n.name for n in group], "_fused_ops": [n.op_type for n in group]},
                     domain=OUR_DOMAIN)
        for member in group:
            replace[id(member)] = None
            if member is not node:
                graph.tensors.pop(member.outputs[0], None)
        replace[id(node)] = fused
        made += 1
    if made:
        graph.nodes = [replace.get(id(n), n) for n in graph.nodes if replace.get(id(n), n) is not None]
    return made


@graph_pass(order=50)
def fuse_elementwise(graph: Graph) -> None:
    fuse_groups(graph)
