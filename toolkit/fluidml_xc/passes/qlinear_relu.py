"""QLinearConv / QLinearMatMul -> DequantizeLinear -> Relu -> QuantizeLinear -> the QLinear node alone.

onnxruntime.quantization's QOperator models keep Relu in float between a DequantizeLinear and a
QuantizeLinear. With scalar parameters the three nodes map each of the 256 int8/uint8 values to one
output value, so they fold into the QLinear node's requantization:
- same scale and zero point: node.attrs["_relu_floor"] = zp, since for v = q - zp (|v| <= 255)
  saturate(round(max(0, v * s) / s) + zp) = max(q, zp) (float32 v * s / s is within a few ulps of v);
- else node.attrs["_lut"] = the 256 results (index q - min), computed here as onnx.reference does
  (float32 (q - z1) * s1, max 0, / s2, round half to even, + z2, saturate).
kernels/integer.py applies them after requantizing; the three nodes and their two float tensors disappear.
Only when the intermediate tensors have one consumer each and are not graph outputs, the parameters are
build-time float32 / int8 / uint8 scalars and the output dtype is the QLinear node's.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, is_onnx_domain
from . import graph_pass

PRODUCERS = ("QLinearConv", "QLinearMatMul")


def _scalar(graph: Graph, name: str, dtype=None):
    t = graph.tensors.get(name) if name else None
    if t is None or not t.is_const or t.size != 1 or (dtype is not None and np.dtype(t.dtype) != np.dtype(dtype)):
        return None
    return np.asarray(t.value).reshape(-1)[0]


def relu_table(dtype, s1, z1, s2, z2) -> np.ndarray:
    """QuantizeLinear(Relu(DequantizeLinear(q, s1, z1)), s2, z2) for every q of dtype, as onnx.reference."""
    info = np.iinfo(dtype)
    q = np.arange(info.min, info.max + 1).astype(dtype)
    with np.errstate(all="ignore"):
        y = (q.astype(np.float32) - np.asarray(z1, dtype).astype(np.float32)) * np.float32(s1)
        y = np.maximum(y, np.float32(0))
        xi = np.rint(y / np.float32(s2)).astype(np.float64) + float(z2)  # clip before any integer cast
    return np.clip(xi, info.min, info.max).astype(dtype)


@graph_pass(order=35)
def fold_qdq_relu(graph: Graph) -> None:
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)

    def single(name, node):
        users = consumers.get(name, [])
        return name not in outputs and len(users) == 1 and users[0] is node and list(node.inputs).count(name) == 1

    drop = set()
    for q in graph.nodes:
        if q.op_type != "QuantizeLinear" or not is_onnx_domain(q.domain) or len(q.inputs) < 3 or len(q.outputs) != 1:
            continue
        relu = producers.get(q.inputs[0])
        if relu is None or relu.op_type != "Relu" or not is_onnx_domain(relu.domain) or not single(q.inputs[0], q):
            continue
        dq = producers.get(relu.inputs[0])
        if dq is None or dq.op_type != "DequantizeLinear" or not is_onnx_domain(dq.domain) or len(dq.inputs) < 3 \
                or not single(relu.inputs[0], relu):
            continue
        node = producers.get(dq.inputs[0])
        if node is None or node.op_type not in PRODUCERS or not is_onnx_domain(node.domain) or "_relu_floor" in node.attrs or "_lut" in node.attrs \
                or not single(dq.inputs[0], dq):
            continue
        qt = graph.tensors[dq.inputs[0]]
        if np.dtype(qt.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)) or np.dtype(graph.tensors[q.outputs[0]].dtype) != np.dtype(qt.dtype):
            continue
        if np.dtype(graph.tensors[relu.inputs[0]].dtype) != np.dtype(np.float32):
            continue
        s1, s2 = _scalar(graph, dq.inputs[1], np.float32), _scalar(graph, q.inputs[1], np.float32)
        z1, z2 = _scalar(graph, dq.inputs[2], qt.dtype), _scalar(graph, q.inputs[2], qt.dtype)
        if s1 is None or s2 is None or z1 is None or z2 is None or not (np.isfinite(s1) and np.isfinite(s2) and s2 != 0):
            continue
        if s1 == s2 and z1 == z2 and s1 > 0:
            node.attrs["_relu_floor"] = int(z1)
        else:
            node.attrs["_lut"] = [int(v) for v in relu_table(qt.dtype, np.float32(s1), z1, np.float32(s2), z2)]
        node.attrs["_fused_nodes"] = [*node.attrs.get("_fused_nodes", [node.name]), dq.name, relu.name, q.name]
        for name in (dq.inputs[0], relu.inputs[0], q.inputs[0]):
            graph.tensors.pop(name, None)
        node.outputs = [q.outputs[0]]
        drop.update({id(dq), id(relu), id(q)})
    if drop:
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]
