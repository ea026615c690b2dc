"""Split a channel-wise chain and Conv that read a kept Concat into one chain and Conv per part.

DenseNet's layers read X_k = Concat(X_{k-1}, n_{k-1}) through BatchNormalization, a per-channel
Mul/Add and Relu into a 1x1 Conv, and X_k is kept for the next Concat. The normalized copy of X_k
then lives beside X_k and the Conv output: 2c + 128 channels at the Conv, above the 2c + 64 the
next Concat touches, so the arena stays about 12% above the op bound. Every op of the chain is
per channel and a group-1 Conv is linear in its input channels, so

    Conv(W, chain(Concat(A, B))) = Conv(W[:, A's channels], chain_A(A)) + Conv(W[:, B's channels], chain_B(B))

with the per-channel constants sliced (the bias stays with A's Conv). Each part's normalized copy
is only as big as the part, and the parts run one after the other; the Add becomes the second
Conv's residual epilogue (passes/epilogues.py). Applied only when the Concat has exactly two
inputs on axis 1, its output also feeds something else (so it stays live anyway), each op of the
chain has a single consumer, and the layer would otherwise need more bytes at its Conv (the Concat
output, its normalized copy and the Conv output) than the graph's order-independent op bound
(planning.op_lower_bound): elsewhere the split would cost time (two smaller Convs) and save no arena bytes.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Tensor, is_onnx_domain
from ..planning import op_lower_bound
from . import graph_pass

UNARY = frozenset({"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus",
                   "Identity", "Clip"})
BINARY = frozenset({"Mul", "Add", "Sub", "Div", "PRelu"})


def _slice_const(graph: Graph, name: str, rank: int, channels: int, lo: int, hi: int, cache: dict | None) -> str | None:
    """`name`, a constant broadcast against a rank-`rank` output with `channels` on axis 1, for channels
    [lo, hi); None when it does not broadcast that way. With `cache` None, only checks."""
    t = graph.tensors.get(name)
    if t is None or not t.is_const or len(t.shape) > rank:
        return None
    shape = (1,) * (rank - len(t.shape)) + tuple(t.shape)
    if shape[1] == 1:
        return name
    if shape[1] != channels or len(t.shape) < rank - 1:
        return None
    if cache is None:
        return name
    key = (name, lo, hi)
    if key not in cache:
        new = f"{name}#ch{lo}_{hi}"
        sliced = t.value.reshape(shape)[:, lo:hi]
        sliced = sliced.reshape(sliced.shape[rank - len(t.shape):])
        graph.tensors[new] = Tensor(new, t.dtype, tuple(sliced.shape), np.ascontiguousarray(sliced))
        cache[key] = new
    return cache[key]


def _chain(graph: Graph, start: str, consumers: dict[str, list[Node]], outputs: set[str]) -> tuple[list[Node], Node] | None:
    """The single-consumer channel-wise nodes from `start` to a group-1 Conv, and that Conv."""
    chain: list[Node] = []
    current = start
    while True:
        users = [u for u in consumers.get(current, []) if u.op_type != "Concat"] if not chain else consumers.get(current, [])
        if len(users) != 1 or (chain and current in outputs):
            return None
        node = users[0]
        if not is_onnx_domain(node.domain) or not node.outputs or len([o for o in node.outputs if o]) != 1:
            return None
        if node.op_type == "Conv":
            if node.inputs[0] != current or int(node.attrs.get("group", 1)) != 1 or len(node.inputs) < 2:
                return None
            if any(not graph.tensors[x].is_const for x in node.inputs[1:] if x):
                return None
            return (chain, node) if chain else None
        if node.op_type == "BatchNormalization":
            if (node.inputs[0] != current or node.attrs.get("training_mode")
                    or any(not graph.tensors[x].is_const for x in node.inputs[1:5])):
                return None
        elif node.op_type in UNARY:
            if node.inputs[0] != current or any(x and not graph.tensors[x].is_const for x in node.inputs[1:]):
                return None
        elif node.op_type in BINARY:
            if len(node.inputs) != 2 or sum(x == current for x in node.inputs) != 1:
                return None
            other = node.inputs[1] if node.inputs[0] == current else node.inputs[0]
            if not graph.tensors[other].is_const or graph.tensors[node.outputs[0]].shape != graph.tensors[current].shape:
                return None
        else:
            return None
        chain.append(node)
        current = node.outputs[0]


@graph_pass(order=5)
def split_conv_over_kept_concat(graph: Graph) -> None:
    outputs = set(graph.outputs)
    done = 0
    bound = None
    for concat in [n for n in graph.nodes if n.op_type == "Concat" and is_onnx_domain(n.domain)]:
        consumers = graph.consumers()
        if len(concat.inputs) != 2 or len(concat.outputs) != 1 or concat.outputs[0] in outputs:
            continue
        x = graph.tensors[concat.outputs[0]]
        rank = len(x.shape)
        if rank < 3 or int(concat.attrs.get("axis", 0)) % rank != 1 or np.dtype(x.dtype) not in (np.float32, np.float64):
            continue
        users = consumers.get(x.name, [])
        if not any(u.op_type == "Concat" for u in users) or len(users) != 2:
            continue
        found = _chain(graph, x.name, consumers, outputs)
        if found is None:
            continue
        chain, conv = found
        if bound is None:
            bound = op_lower_bound(graph)
        if x.nbytes + graph.tensors[chain[-1].outputs[0]].nbytes + graph.tensors[conv.outputs[0]].nbytes <= bound:
            continue
        parts, lo = [], 0
        for name in concat.inputs:
            c = graph.tensors[name].shape[1]
            parts.append((name, lo, lo + c))
            lo += c
        channels = x.shape[1]
        weight = graph.tensors[conv.inputs[1]]
        if weight.shape[1] != channels:
            continue
        if any(_slice_const(graph, arg, rank, channels, 0, channels, None) is None
               for node in chain if node.op_type != "BatchNormalization" for arg in node.inputs
               if arg and graph.tensors[arg].is_const):
            continue
        cache: dict = {}
        new_nodes: list[Node] = []
        done += 1
        partials = []
        for p, (name, c0, c1) in enumerate(parts):
            current = name
            for node in chain:
                if node.op_type == "BatchNormalization":
                    params = []
                    for param in node.inputs[1:5]:
                        t = graph.tensors[param]
                        new = f"{param}#ch{c0}_{c1}"
                        graph.tensors[new] = Tensor(new, t.dtype, (c1 - c0,), np.ascontiguousarray(t.value[c0:c1]))
                        params.append(new)
                    inputs = [current] + params + node.inputs[5:]
                else:
                    inputs = [arg if not arg else current if not graph.tensors[arg].is_const
                              else _slice_const(graph, arg, rank, channels, c0, c1, cache) for arg in node.inputs]
                out = f"{node.outputs[0]}#split{done}.{p}"
                t = graph.tensors[node.outputs[0]]
                graph.tensors[out] = Tensor(out, t.dtype, (t.shape[0], c1 - c0) + tuple(t.shape[2:]))
                new_nodes.append(Node(node.op_type, f"{node.name}#split{done}.{p}", inputs, [out], dict(node.attrs), node.domain))
                current = out
            w = f"{conv.inputs[1]}#ch{c0}_{c1}"
            graph.tensors[w] = Tensor(w, weight.dtype, (weight.shape[0], c1 - c0) + tuple(weight.shape[2:]),
                                      np.ascontiguousarray(weight.value[:, c0:c1]))
            bias = [conv.inputs[2]] if p == 0 and len(conv.inputs) > 2 and conv.inputs[2] else []
            y = graph.tensors[conv.outputs[0]]
            out = f"{conv.outputs[0]}#split{done}.{p}"
            graph.tensors[out] = Tensor(out, y.dtype, y.shape)
            new_nodes.append(Node("Conv", f"{conv.name}#split{done}.{p}", [current, w] + bias, [out], dict(conv.attrs), conv.domain))
            partials.append(out)
        new_nodes.append(Node("Add", f"{conv.name}#split{done}.sum", partials, [conv.outputs[0]]))
        drop = {id(n) for n in chain} | {id(conv)}
        at = next(k for k, n in enumerate(graph.nodes) if n is conv)
        graph.nodes[at:at] = new_nodes
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]
        for node in chain:
            graph.tensors.pop(node.outputs[0], None)
