"""Fuse a residual Add and an activation (Relu, Clip with constant bounds, LeakyRelu) into the Conv
that produces their input, so the conv kernel applies them as it stores its output.

First, Mul and Add by a constant that varies only along the output channels (an unfolded
BatchNormalization, as in the older model-zoo exports) fold into the Conv's constant weights and bias.
Then the patterns (each intermediate has exactly one consumer and is not a graph output):

    Conv -> Act                 Conv -> Add(., other)            Conv -> Add(., other) -> Act

(Sum with two operands counts as Add.)
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

from ..ir import Graph, Node, Tensor
from ..opspec import traits
from . import graph_pass
from .batchnorm import folds_exactly

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


def _per_channel(graph: Graph, name: str, out_shape) -> np.ndarray | None:
    """A constant that broadcasts against the conv output varying only along dim 1, as (OC,) float64."""
    t = graph.tensors.get(name)
    if t is None or not t.is_const or np.dtype(t.dtype).kind != "f":
        return None
    value = np.asarray(t.value)
    rank = len(out_shape)
    if value.ndim > rank:
        return None
    full = value.reshape((1,) * (rank - value.ndim) + value.shape)
    for d, n in enumerate(full.shape):
        if n != 1 and (d != 1 or n != out_shape[1]):
            return None
    return np.broadcast_to(full.reshape(-1) if full.shape[1] != 1 else full.reshape(1), (out_shape[1],)).astype(np.float64)


def fold_channel_affine(graph: Graph) -> None:
    """Conv -> Mul(per-channel const) / Add(per-channel const) into the conv's weights and bias."""
    outputs = set(graph.outputs)
    changed = True
    while changed:
        changed = False
        producers, consumers = graph.producers(), graph.consumers()
        for node in graph.nodes:
            if node.op_type not in ("Mul", "Add") or len(node.inputs) != 2 or len(node.outputs) != 1:
                continue
            for pos in (0, 1):
                conv = producers.get(node.inputs[pos])
                if conv is None or conv.op_type != "Conv" or "_epilogue" in conv.attrs or len(conv.outputs) != 1:
                    continue
                out = conv.outputs[0]
                if out in outputs or len(consumers.get(out, [])) != 1 or node.inputs[1 - pos] == out:
                    continue
                t_out = graph.tensors[out]
                if np.dtype(t_out.dtype).kind != "f" or tuple(graph.tensors[node.outputs[0]].shape) != tuple(t_out.shape):
                    continue
                c = _per_channel(graph, node.inputs[1 - pos], t_out.shape)
                w = graph.tensors[conv.inputs[1]]
                bias_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
                if c is None or not w.is_const or (bias_name is not None and not graph.tensors[bias_name].is_const):
                    continue
                bias = graph.tensors[bias_name].value.astype(np.float64) if bias_name else np.zeros(t_out.shape[1])
                weight = w.value
                with np.errstate(all="ignore"):
                    if node.op_type == "Mul":
                        weight = (weight.astype(np.float64) * c.reshape(-1, *([1] * (weight.ndim - 1)))).astype(weight.dtype)
                        bias = bias * c
                    else:
                        bias = bias + c
                if not folds_exactly(w.value, weight, c, bias):  # a NaN or infinite constant stays its own node
                    continue
                w_name = graph.unique_name(f"{conv.name}.affine_weight")
                b_name = graph.unique_name(f"{conv.name}.affine_bias")
                graph.tensors[w_name] = Tensor(w_name, weight.dtype, weight.shape, weight)
                b_value = bias.astype(weight.dtype)
                graph.tensors[b_name] = Tensor(b_name, b_value.dtype, b_value.shape, b_value)
                conv.inputs = [conv.inputs[0], w_name, b_name]
                final = node.outputs[0]
                del graph.tensors[out]
                conv.outputs = [final]
                graph.nodes = [n for n in graph.nodes if n is not node]
                changed = True
                break
            if changed:
                break


def fuse_norm_activation(graph: Graph) -> None:
    """BatchNormalization (constant statistics, one output) -> activation: the activation becomes the
    BN's epilogue (ops/norm.py applies it as it stores), as in DenseNet's pre-activation blocks."""
    outputs = set(graph.outputs)
    consumers = graph.consumers()
    drop = set()
    for node in graph.nodes:
        if (node.op_type != "BatchNormalization" or "_epilogue" in node.attrs or len([o for o in node.outputs if o]) != 1
                or node.attrs.get("training_mode")
                or not all(n and graph.tensors[n].is_const for n in node.inputs[1:5])):
            continue
        out = node.outputs[0]
        users = consumers.get(out, [])
        if out in outputs or len(users) != 1 or np.dtype(graph.tensors[out].dtype).kind != "f":
            continue
        act_node = users[0]
        if not traits(act_node.op_type, graph.opset, act_node.domain).epilogue_activation or len(act_node.outputs) != 1 or act_node.inputs[0] != out:
            continue
        act = activation_of(graph, act_node)
        if act is None:
            continue
        node.attrs["_epilogue"] = {"residual": False, **act}
        node.outputs = [act_node.outputs[0], *node.outputs[1:]]
        del graph.tensors[out]
        drop.add(id(act_node))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]


@graph_pass(order=30)
def fuse_conv_epilogue(graph: Graph) -> None:
    fold_channel_affine(graph)
    fuse_norm_activation(graph)
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
            if nxt.op_type in ("Add", "Sum") and len(nxt.inputs) == 2 and len(nxt.outputs) == 1:
                other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
                t_other = graph.tensors.get(other)
                rival = producers.get(other)
                later_conv = (rival is not None and rival.op_type == "Conv" and "_epilogue" not in rival.attrs
                              and position[id(rival)] > position[id(conv)] and sole_consumer(other) is nxt)
                # when both operands are convs, the later one takes the add (nothing has to move)
                if not later_conv and (other and other != out and t_other is not None and tuple(t_other.shape) == tuple(t_out.shape)
                        and np.dtype(t_other.dtype) == np.dtype(t_out.dtype)
                        and tuple(graph.tensors[nxt.outputs[0]].shape) == tuple(t_out.shape)):
                    residual = other
                    epilogue["residual"] = True
                    fused.append(nxt)
                    last = nxt.outputs[0]
                    nxt = sole_consumer(last)
            if nxt is not None and traits(nxt.op_type, graph.opset, nxt.domain).epilogue_activation and len(nxt.outputs) == 1:
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
