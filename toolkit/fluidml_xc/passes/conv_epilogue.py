"""Fuse a residual Add and an activation (Relu, Clip with constant bounds, LeakyRelu) into the Conv
that produces their input, so the conv kernel applies them as it stores its output.

Patterns (each intermediate has exactly one consumer and is not a graph output):

    Conv -> Act                 Conv -> Add(., other)            Conv -> Add(., other) -> Act

The Add's other operand must have the conv output's shape and dtype (no broadcasting); the sum is
formed before the activation. The result is recorded on the Conv node:

    node.attrs["_epilogue"] = {"residual": bool, "activation": None | "relu" | "clip" | "leaky_relu",
                               "min": float | None, "max": float | None, "alpha": float}

and a residual operand becomes the Conv's input 3 (input 2, the bias, is "" when the Conv has none),
so the planner sees it as an ordinary input whose life ends at the Conv. The Conv takes the last
fused node's output name; the fused nodes and the intermediates disappear from the graph. When the
residual is produced after the Conv, the Conv moves to the Add's place in the node order (its other
inputs are produced earlier still, and only the fused nodes read its output).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from . import graph_pass

ACTIVATIONS = ("Relu", "Clip", "LeakyRelu")


def _scalar(graph: Graph, name: str) -> float | None | bool:
    """A constant scalar's value, None for an absent input, False when not a build-time scalar."""
    if not name:
        return None
    t = graph.tensors.get(name)
    if t is None or not t.is_const or t.value.size != 1:
        return False
    return float(np.asarray(t.value).reshape(()))


def activation_of(graph: Graph, node: Node) -> dict | None:
    """The epilogue fields of an activation node, or None when it cannot be fused."""
    if node.op_type == "Relu":
        return {"activation": "relu", "min": None, "max": None, "alpha": 0.0}
    if node.op_type == "LeakyRelu":
        return {"activation": "leaky_relu", "min": None, "max": None, "alpha": float(node.attrs.get("alpha", 0.01))}
    if node.op_type == "Clip":
        if graph.opset < 11 or (len(node.inputs) == 1 and ("min" in node.attrs or "max" in node.attrs)):
            lo, hi = node.attrs.get("min"), node.attrs.get("max")
            lo, hi = (None if lo is None else float(lo)), (None if hi is None else float(hi))
        else:
            lo = _scalar(graph, node.inputs[1]) if len(node.inputs) > 1 else None
            hi = _scalar(graph, node.inputs[2]) if len(node.inputs) > 2 else None
            if lo is False or hi is False:
                return None
        return {"activation": "clip", "min": lo, "max": hi, "alpha": 0.0}
    return None


@graph_pass(order=30)
def fuse_conv_epilogue(graph: Graph) -> None:
    outputs = set(graph.outputs)
    changed = True
    while changed:
        changed = False
        producers = graph.producers()
        consumers = graph.consumers()
        position = {id(n): i for i, n in enumerate(graph.nodes)}

        def sole_consumer(name: str) -> Node | None:
            users = consumers.get(name, [])
            if name in outputs or len(users) != 1 or len([n for n in users[0].inputs if n == name]) != 1:
                return None
            return users[0]

        for conv in graph.nodes:
            if conv.op_type != "Conv" or "_epilogue" in conv.attrs or len(conv.outputs) != 1:
                continue
            out = conv.outputs[0]
            t_out = graph.tensors[out]
            if np.dtype(t_out.dtype).kind != "f":
                continue
            nxt = sole_consumer(out)
            if nxt is None:
                continue
            fused: list[Node] = []
            epilogue = {"residual": False, "activation": None, "min": None, "max": None, "alpha": 0.0}
            residual = None
            if nxt.op_type == "Add" and len(nxt.inputs) == 2 and len(nxt.outputs) == 1:
                other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
                t_other = graph.tensors.get(other)
                if (other and other != out and t_other is not None and tuple(t_other.shape) == tuple(t_out.shape)
                        and np.dtype(t_other.dtype) == np.dtype(t_out.dtype)
                        and tuple(graph.tensors[nxt.outputs[0]].shape) == tuple(t_out.shape)):
                    residual = other
                    epilogue["residual"] = True
                    fused.append(nxt)
                    last = nxt.outputs[0]
                    nxt = sole_consumer(last)
            if nxt is not None and nxt.op_type in ACTIVATIONS and len(nxt.outputs) == 1:
                act = activation_of(graph, nxt)
                if act is not None:
                    epilogue.update(act)
                    fused.append(nxt)
            if not fused:
                continue
            final = fused[-1].outputs[0]
            # intermediates: the conv's old output and every fused node's output but the last
            dead = [out] + [n.outputs[0] for n in fused[:-1]]
            inputs = list(conv.inputs) + [""] * (3 - len(conv.inputs))
            if residual is not None:
                inputs.append(residual)
            conv.inputs = inputs
            conv.outputs = [final]
            conv.attrs["_epilogue"] = epilogue
            for name in dead:
                graph.tensors.pop(name, None)
            # the conv must run after the residual's producer
            target = position[id(conv)]
            if residual is not None and residual in producers:
                target = max(target, position[id(producers[residual])])
            drop = {id(n) for n in fused}
            nodes = [n for n in graph.nodes if id(n) not in drop and n is not conv]
            before = sum(1 for n in graph.nodes[:target + 1] if id(n) not in drop and n is not conv)
            nodes.insert(before, conv)
            graph.nodes = nodes
            changed = True
            break
