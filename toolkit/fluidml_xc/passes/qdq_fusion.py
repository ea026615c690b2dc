"""QDQ models -> integer ops: DequantizeLinear(x), DequantizeLinear(w) -> Conv / MatMul -> QuantizeLinear
becomes one QLinearConv / QLinearMatMul (ops/qlinear.py: int32 accumulation, requantized once), as ONNX
Runtime does with the QDQ models its quantizer writes (onnxruntime.quantization, `fluidml-xc quantize`).

Without this pass a QDQ model computes in float on dequantized weights and activations, with every
weight dequantized on every run. Fused only when: the activation's scale and zero point are build-time
scalars (int8/uint8); the weights are a build-time int8/uint8 tensor with per-tensor or per-output-channel
(Conv: DequantizeLinear axis 0; MatMul: 2-D weights, axis 1 = per column) scale and zero point; the
bias (Conv) is a build-time int32 tensor dequantized with scale x_scale * w_scale (float32) and zero
point 0, as the quantizer writes it; the float result has the QuantizeLinear as its only consumer and
is not a graph output; the output scale and zero point are build-time scalars. Depthwise-style convs
(one input channel per group) stay in float: the int8 kernels run those as plain loops.

A Gather from a dequantized build-time table (quantized embeddings, per-tensor scale and zero point)
gathers the int8 rows first and dequantizes only those: otherwise the whole table (BERT's 30522 x 128)
would be dequantized into the arena on every run. Dequantized tensors nobody reads any more are removed.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Tensor, is_onnx_domain
from . import graph_pass

QTYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def _is(node: Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and is_onnx_domain(node.domain)


def _const(graph: Graph, name: str) -> np.ndarray | None:
    t = graph.tensors.get(name) if name else None
    return None if t is None or not t.is_const else np.asarray(t.value)


def _activation(graph: Graph, dq: Node | None) -> tuple[str, str, str] | None:
    """(q, scale, zero point) of a DequantizeLinear of a run-time int8/uint8 tensor with scalar parameters."""
    if not _is(dq, "DequantizeLinear") or len(dq.inputs) < 3 or not dq.inputs[2]:
        return None
    q, s, z = dq.inputs[:3]
    scale, zp = _const(graph, s), _const(graph, z)
    if scale is None or zp is None or scale.size != 1 or zp.size != 1 or np.dtype(scale.dtype) != np.float32:
        return None
    if np.dtype(graph.tensors[q].dtype) not in QTYPES or graph.tensors[q].is_const:
        return None
    return q, s, z


def _weights(graph: Graph, dq: Node | None, channel_axis: int) -> tuple[str, str, str] | None:
    """(q, scale, zero point) of a DequantizeLinear of build-time int8/uint8 weights, per tensor or per `channel_axis`."""
    if not _is(dq, "DequantizeLinear") or len(dq.inputs) < 3 or not dq.inputs[2] or dq.attrs.get("block_size", 0):
        return None
    q, s, z = dq.inputs[:3]
    w, scale, zp = _const(graph, q), _const(graph, s), _const(graph, z)
    if w is None or scale is None or zp is None or np.dtype(w.dtype) not in QTYPES or np.dtype(scale.dtype) != np.float32:
        return None
    if scale.size == 1 and zp.size == 1:
        return q, s, z
    axis = int(dq.attrs.get("axis", 1))
    axis = axis + w.ndim if axis < 0 else axis
    if axis != channel_axis or scale.ndim != 1 or zp.shape != scale.shape or scale.shape[0] != w.shape[axis]:
        return None
    return q, s, z


def _bias(graph: Graph, name: str, x_scale: str, w_scale: str) -> str | None:
    """The int32 bias a QLinearConv adds before requantizing, if `name` is DequantizeLinear(bias, x_scale * w_scale, 0)."""
    dq = graph.producers().get(name)
    if not _is(dq, "DequantizeLinear"):
        return None
    b, scale = _const(graph, dq.inputs[0]), _const(graph, dq.inputs[1])
    zp = _const(graph, dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else np.zeros(1, np.int32)
    if b is None or scale is None or zp is None or np.dtype(b.dtype) != np.int32 or np.any(zp != 0) or b.ndim != 1:
        return None
    expected = (_const(graph, x_scale).astype(np.float32) * _const(graph, w_scale).astype(np.float32)).reshape(-1)
    got = scale.astype(np.float32).reshape(-1)
    if got.size not in (1, b.shape[0]) or expected.size not in (1, b.shape[0]):
        return None
    if not np.allclose(np.broadcast_to(got, b.shape), np.broadcast_to(expected, b.shape), rtol=1e-6, atol=0):
        return None
    return dq.inputs[0]


def _output(graph: Graph, name: str, consumers: dict, outputs: set) -> Node | None:
    """The QuantizeLinear that is the only reader of the float result `name`, with scalar build-time parameters."""
    users = consumers.get(name, [])
    if name in outputs or len(users) != 1 or not _is(users[0], "QuantizeLinear") or len(users[0].inputs) < 3:
        return None
    q = users[0]
    scale, zp = _const(graph, q.inputs[1]), _const(graph, q.inputs[2]) if q.inputs[2] else None
    if scale is None or zp is None or scale.size != 1 or zp.size != 1 or np.dtype(zp.dtype) not in QTYPES:
        return None
    if q.attrs.get("axis", 1) not in (1, -1) and scale.ndim:
        return None
    return q


def _conv(graph: Graph, node: Node, producers: dict) -> list[str] | None:
    if len(node.inputs) < 2:
        return None
    x = _activation(graph, producers.get(node.inputs[0]))
    w = _weights(graph, producers.get(node.inputs[1]), 0)
    if x is None or w is None or len(graph.tensors[w[0]].shape) != 4:
        return None
    if graph.tensors[w[0]].shape[1] < 2:  # one input channel per group: the int8 kernel's plain loops
        return None
    inputs = [*x, *w]
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = _bias(graph, node.inputs[2], x[1], w[1])
        if bias is None:
            return None
        return inputs + [bias]
    return inputs


def _matmul(graph: Graph, node: Node, producers: dict) -> list[str] | None:
    a = _activation(graph, producers.get(node.inputs[0]))
    b = _weights(graph, producers.get(node.inputs[1]), 1)
    if a is None or b is None or len(graph.tensors[b[0]].shape) != 2:
        return None
    return [*a, *b]


FUSIONS = {"Conv": ("QLinearConv", _conv), "MatMul": ("QLinearMatMul", _matmul)}


def _gather_first(graph: Graph) -> bool:
    """Gather(DequantizeLinear(table), indices) -> DequantizeLinear(Gather(table, indices)); True if any changed."""
    producers = graph.producers()
    changed = False
    for k, node in enumerate(list(graph.nodes)):
        if not _is(node, "Gather") or len(node.outputs) != 1:
            continue
        dq = producers.get(node.inputs[0])
        if not _is(dq, "DequantizeLinear") or len(dq.inputs) < 3 or not dq.inputs[2]:
            continue
        table, scale, zp = (_const(graph, n) for n in dq.inputs[:3])
        if table is None or scale is None or zp is None or np.dtype(table.dtype) not in QTYPES or scale.size != 1 or zp.size != 1:
            continue
        out = graph.tensors[node.outputs[0]]
        rows = graph.unique_name(f"{node.outputs[0]}_quantized_rows")
        graph.tensors[rows] = Tensor(rows, table.dtype, out.shape)
        at = graph.nodes.index(node)
        graph.nodes[at] = Node("Gather", node.name, [dq.inputs[0], node.inputs[1]], [rows], dict(node.attrs), node.domain)
        graph.nodes.insert(at + 1, Node("DequantizeLinear", f"{node.name}/dequantize", [rows, dq.inputs[1], dq.inputs[2]],
                                        [node.outputs[0]], {}, ""))
        changed = True
    return changed


def _drop_dead(graph: Graph) -> None:
    """Remove nodes none of whose outputs is read or a graph output (the dequantized weights left behind)."""
    outputs = set(graph.outputs)
    while True:
        read = {n for node in graph.nodes for n in node.inputs if n}
        dead = [node for node in graph.nodes if node.op_type == "DequantizeLinear"
                and not any(o in read or o in outputs for o in node.outputs if o)]
        if not dead:
            return
        gone = {id(n) for n in dead}
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]
        for node in dead:
            for o in node.outputs:
                graph.tensors.pop(o, None)


@graph_pass(order=8)
def fuse_qdq(graph: Graph) -> None:
    gathered = _gather_first(graph)
    producers, consumers, outputs = graph.producers(), graph.consumers(), set(graph.outputs)
    replaced: dict[int, Node] = {}
    drop: set[int] = set()
    for node in graph.nodes:
        if not is_onnx_domain(node.domain) or node.op_type not in FUSIONS or len(node.outputs) != 1:
            continue
        op_type, match = FUSIONS[node.op_type]
        inputs = match(graph, node, producers)
        if inputs is None:
            continue
        q = _output(graph, node.outputs[0], consumers, outputs)
        if q is None:
            continue
        qlinear = inputs[:6] + [q.inputs[1], q.inputs[2]] + inputs[6:]
        attrs = {k: v for k, v in node.attrs.items() if not k.startswith("_")}
        replaced[id(node)] = Node(op_type, node.name, qlinear, [q.outputs[0]],
                                  {**attrs, "_fused_nodes": [node.name, q.name]}, "")
        graph.tensors.pop(node.outputs[0], None)
        drop.add(id(q))
    if replaced:
        graph.nodes = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    if replaced or gathered:
        _drop_dead(graph)
