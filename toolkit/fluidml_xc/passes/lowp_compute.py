"""Storage-only dtypes (bfloat16, float8, float4, int4, int2, ...) around kernels that cannot load them.

Kernels written with the kernel builder (`Kernel.load` / `store` / `generic`: the elementwise family,
fused chains, Cast, Quantize/DequantizeLinear, data movement, Einsum, OneHot; OpSpec.lowp_native) read
and write these dtypes directly: a load converts to the compute dtype (float32, int8/uint8) and a store
rounds back (kernels/lowp.py). Every other op (hand-tuned MatMul/Conv/pooling, reductions, ...) gets its
storage-only inputs converted to the compute dtype first (constants at build time, activations by
a Cast node) and computes its outputs in the compute dtype, followed by a Cast back (attribute
`_astype`: ml_dtypes' rounding, as a kernel's store would do). Either way an op computes in float32
and rounds once on store.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from ..dtypes import compute_dtype, is_storage_only
from ..ir import Graph, Node, Tensor
from ..opspec import lookup
from . import graph_pass


def _cast(name: str, src: str, dst: str, to: np.dtype) -> Node:
    return Node("Cast", name, [src], [dst], {"to": int(helper.np_dtype_to_tensor_dtype(np.dtype(to))), "_astype": 1})


@graph_pass(order=5)
def widen_lowp_operands(graph: Graph) -> None:
    nodes: list[Node] = []
    converted: dict[str, str] = {}
    for node in graph.nodes:
        names = [n for n in list(node.inputs) + list(node.outputs) if n]
        spec = lookup(node.op_type, graph.opset, node.domain)
        if (spec is not None and spec.lowp_native) or not any(is_storage_only(graph.tensors[n].dtype) for n in names if n in graph.tensors):
            nodes.append(node)
            continue
        for i, name in enumerate(node.inputs):
            if not name or not is_storage_only(graph.tensors[name].dtype):
                continue
            if name not in converted:
                t = graph.tensors[name]
                wide = graph.unique_name(f"{name}/wide")
                cdt = compute_dtype(t.dtype)
                value = None if t.value is None else np.asarray(t.value).astype(cdt)
                graph.tensors[wide] = Tensor(wide, cdt, t.shape, value)
                if value is None:
                    nodes.append(_cast(f"{node.name}/widen{i}", name, wide, cdt))
                converted[name] = wide
            node.inputs[i] = converted[name]
        after = []
        for i, name in enumerate(node.outputs):
            if not name or not is_storage_only(graph.tensors[name].dtype):
                continue
            t = graph.tensors[name]
            wide = graph.unique_name(f"{name}/wide")
            graph.tensors[wide] = Tensor(wide, compute_dtype(t.dtype), t.shape)
            node.outputs[i] = wide
            after.append(_cast(f"{node.name}/narrow{i}", wide, name, t.dtype))
        nodes.append(node)
        nodes.extend(after)
    graph.nodes[:] = nodes
