"""MatMul + Add(constant bias along the last dim) -> MatMul with the bias applied in the kernel's epilogue.

PyTorch's Linear exports as MatMul followed by Add(bias) (bert_tiny, GPT-style models). When the
MatMul's output feeds only that Add, is not a graph output, and the other Add operand is a constant of
N (the last dim) or 1 elements whose leading dims are all 1 (so the Add does not broadcast the output
any further), the bias becomes the MatMul's third input with node.attrs["_bias"] = True
(ops/matmul.py adds it in the register-blocked kernels' epilogue, or initialises C with it on the
scalar path). The MatMul takes over the Add's output tensor; its old output is deleted.

Then a residual: MatMul (+ bias) followed by Add(an activation of the output's shape) takes the
activation as input 3 (fuse_matmul_residual); then a following Relu (after MatMul or Gemm) becomes
node.attrs["_activation"] (fuse_matmul_relu).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, is_onnx_domain
from . import graph_pass


def _bias_operand(graph: Graph, name: str, out_shape: tuple[int, ...], dtype) -> bool:
    t = graph.tensors.get(name)
    if t is None or not t.is_const or np.dtype(t.dtype) != np.dtype(dtype) or len(t.shape) > len(out_shape):
        return False
    if any(d != 1 for d in t.shape[:-1]):
        return False
    return t.size == 1 or (len(t.shape) >= 1 and t.shape[-1] == out_shape[-1])


@graph_pass(order=40)
def fuse_matmul_bias(graph: Graph) -> None:
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    drop = set()
    for node in graph.nodes:
        if node.op_type != "Add" or not is_onnx_domain(node.domain) or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        for side in (0, 1):
            mm_out, bias = node.inputs[side], node.inputs[1 - side]
            mm = producers.get(mm_out)
            if mm is None or mm.op_type != "MatMul" or not is_onnx_domain(mm.domain) or len(mm.inputs) != 2:
                continue
            if mm_out in outputs or len({id(u) for u in consumers.get(mm_out, [])}) != 1 or mm_out == bias:
                continue
            a, b, c = (graph.tensors[n] for n in (mm.inputs[0], mm.inputs[1], mm_out))
            out = graph.tensors[node.outputs[0]]
            if len(a.shape) < 2 or len(b.shape) < 2 or c.shape != out.shape or c.is_const:
                continue
            if not _bias_operand(graph, bias, c.shape, c.dtype):
                continue
            mm.inputs = [mm.inputs[0], mm.inputs[1], bias]
            mm.attrs["_bias"] = True
            mm.attrs["_fused_nodes"] = [mm.name, node.name]
            del graph.tensors[mm_out]
            mm.outputs = [node.outputs[0]]
            drop.add(id(node))
            break
    if drop:
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    fuse_matmul_residual(graph)
    fuse_matmul_relu(graph)


def fuse_matmul_residual(graph: Graph) -> None:
    """MatMul (+ bias) followed by Add(activation of the same shape and dtype): the residual joins the
    MatMul as input 3 (input 2 is the bias or ""), added in the epilogue. The MatMul moves to the Add's
    place in the node order, so a residual computed between the two is ready."""
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    moved: dict[int, object] = {}
    for node in graph.nodes:
        if node.op_type != "Add" or not is_onnx_domain(node.domain) or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        for side in (0, 1):
            mm_out, res = node.inputs[side], node.inputs[1 - side]
            mm = producers.get(mm_out)
            if mm is None or mm.op_type != "MatMul" or not is_onnx_domain(mm.domain) or len(mm.inputs) > 3 or id(mm) in moved:
                continue
            if mm_out in outputs or len({id(u) for u in consumers.get(mm_out, [])}) != 1 or mm_out == res:
                continue
            a, b, c = (graph.tensors[n] for n in (mm.inputs[0], mm.inputs[1], mm_out))
            r, out = graph.tensors[res], graph.tensors[node.outputs[0]]
            if len(a.shape) < 2 or len(b.shape) < 2 or r.is_const or c.is_const:
                continue
            if not (r.shape == c.shape == out.shape and np.dtype(r.dtype) == np.dtype(c.dtype) == np.dtype(out.dtype)):
                continue
            bias = mm.inputs[2] if len(mm.inputs) > 2 else ""
            mm.inputs = [mm.inputs[0], mm.inputs[1], bias, res]
            mm.attrs["_residual"] = True
            mm.attrs["_fused_nodes"] = list(mm.attrs.get("_fused_nodes", [mm.name])) + [node.name]
            del graph.tensors[mm_out]
            mm.outputs = [node.outputs[0]]
            moved[id(mm)] = node
            break
    if moved:
        at_add = {id(add): mm for mm_id, add in moved.items() for mm in graph.nodes if id(mm) == mm_id}
        graph.nodes = [at_add.get(id(n), n) for n in graph.nodes if id(n) not in moved]


def fuse_matmul_relu(graph: Graph) -> None:
    """MatMul/Gemm (after bias and residual) followed by Relu: node.attrs["_activation"] = "Relu", applied last in
    the epilogue (max with 0, as the Relu kernel computes it)."""
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    drop = set()
    for node in graph.nodes:
        if node.op_type != "Relu" or not is_onnx_domain(node.domain) or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        src = node.inputs[0]
        mm = producers.get(src)
        if mm is None or mm.op_type not in ("MatMul", "Gemm") or not is_onnx_domain(mm.domain) or "_activation" in mm.attrs:
            continue
        if src in outputs or len({id(u) for u in consumers.get(src, [])}) != 1 or len(mm.outputs) != 1:
            continue
        if graph.tensors[src].shape != graph.tensors[node.outputs[0]].shape or graph.tensors[src].is_const:
            continue
        if mm.op_type == "MatMul" and any(len(graph.tensors[n].shape) < 2 for n in mm.inputs[:2]):
            continue
        mm.attrs["_activation"] = "Relu"
        mm.attrs["_fused_nodes"] = list(mm.attrs.get("_fused_nodes", [mm.name])) + [node.name]
        del graph.tensors[src]
        mm.outputs = [node.outputs[0]]
        drop.add(id(node))
    if drop:
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]
