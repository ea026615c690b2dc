"""Storage-only dtypes (bfloat16, float8, float4, int4, int2, ...) around kernels that cannot load them.

Kernels written with the kernel builder (`Kernel.load` / `store` / `generic`: the elementwise family,
fused chains, Cast, Quantize/DequantizeLinear, data movement, Einsum, OneHot) read and write these
dtypes directly: a load converts to the compute dtype (float32, int8/uint8) and a store rounds back
(kernels/lowp.py). Every other op (hand-tuned MatMul/Conv/pooling, reductions, ...) gets its
storage-only inputs converted to the compute dtype first (constants at build time, activations by
a Cast node) and computes its outputs in the compute dtype, followed by a Cast back (attribute
`_astype`: ml_dtypes' rounding, as a kernel's store would do). Either way an op computes in float32
and rounds once on store.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from ..ir import Graph, Node, Tensor
from ..kernels.lowp import compute_dtype, is_lowp
from . import graph_pass

NATIVE = frozenset({
    # ops/elementwise.py (Kernel.elementwise / generic)
    "Relu", "Neg", "Abs", "Sign", "Sqrt", "Exp", "Log", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos",
    "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tanh", "Erf", "Sigmoid", "Reciprocal", "LeakyRelu", "Elu",
    "Selu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Gelu", "Not",
    "Add", "Sub", "Mul", "Div", "Mod", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
    "Sum", "Max", "Min", "Mean", "Where", "Cast", "CastLike", "Clip", "PRelu", "ThresholdedRelu", "Celu", "IsNaN",
    "IsInf", "Pow", "EyeLike", "QuantizeLinear", "DequantizeLinear", "BitCast",
    # views and data movement (ops/views.py, ops/movement.py: Access copies)
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout",
    "Transpose", "Concat", "Slice", "Split", "Expand", "Tile", "DepthToSpace", "SpaceToDepth",
    "Gather", "GatherElements", "GatherND", "OneHot",
    # ops/einsum.py (one generic reduction)
    "Einsum",
    # the fused chains (ops/fused.py rounds lowp intermediate steps)
    "FusedElementwise",
})


def _cast(name: str, src: str, dst: str, to: np.dtype) -> Node:
    return Node("Cast", name, [src], [dst], {"to": int(helper.np_dtype_to_tensor_dtype(np.dtype(to))), "_astype": 1})


@graph_pass(order=5)
def widen_lowp_operands(graph: Graph) -> None:
    nodes: list[Node] = []
    converted: dict[str, str] = {}
    for node in graph.nodes:
        names = [n for n in list(node.inputs) + list(node.outputs) if n]
        if node.op_type in NATIVE or not any(is_lowp(graph.tensors[n].dtype) for n in names if n in graph.tensors):
            nodes.append(node)
            continue
        for i, name in enumerate(node.inputs):
            if not name or not is_lowp(graph.tensors[name].dtype):
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
            if not name or not is_lowp(graph.tensors[name].dtype):
                continue
            t = graph.tensors[name]
            wide = graph.unique_name(f"{name}/wide")
            graph.tensors[wide] = Tensor(wide, compute_dtype(t.dtype), t.shape)
            node.outputs[i] = wide
            after.append(_cast(f"{node.name}/narrow{i}", wide, name, t.dtype))
        nodes.append(node)
        nodes.extend(after)
    graph.nodes[:] = nodes
