"""`build --precision fp16`: the float32 graph narrowed to float16 where float16 arithmetic keeps the model's
accuracy (docs/FP16.md), for CPUs with float16 vectors (target/arch.py half_arithmetic; the build refuses others).

A node computes in float16 when it is a GEMM (Conv, MatMul, Gemm: their kernels sum float16 products in short
float16 blocks added into float32, kernels/matmul_blocked.py and ops/conv/), or when it is a cheap elementwise,
pooling or data-movement op (HALF_FOLLOWERS) whose float32 activations all come from float16 nodes, a LayerNormalization fed by float16
(HALF_STORAGE: its kernel computes in float32 inside), or a lookup in a constant table (HALF_LOOKUPS: embeddings). Everything else
(Softmax, reductions, Exp/Log/Erf/Sigmoid/Tanh, Resize, ...) keeps float32. Its float32 tensors
become float16: constants converted at build time (saturated to float16's finite range, so a -1e9 mask stays
finite), activations stored as float16 (half the arena), a Cast node wherever a float16 value meets a float32 node
(fused into its neighbours' chains by elementwise_fusion, which runs after). Graph inputs and outputs keep float32,
so the C API does not change: a Cast at each edge.
"""
from __future__ import annotations

import sys

import numpy as np
from onnx import TensorProto

from ..ir import Graph, Node, Tensor, is_onnx_domain
from ..kernels.epilogue import Epilogue
from ..kernels.scalar import HALF_MAX, saturated
from . import graph_pass

PRECISIONS = ("fp32", "fp16")
"""--precision: fp32 (the model's own types) or fp16."""
HALF_ANCHORS = frozenset({"Conv", "MatMul", "Gemm"})
"""Always float16 (their float32 inputs converted)."""
HALF_FOLLOWERS = frozenset({
    "Add", "Sub", "Mul", "Relu", "Clip", "LeakyRelu", "Neg", "Abs", "Max", "Min", "PRelu", "HardSwish", "HardSigmoid",
    "MaxPool", "AveragePool", "Reshape", "Flatten", "Transpose", "Concat", "Slice", "Split", "Squeeze", "Unsqueeze",
    "Identity", "Gather", "Expand", "Pad", "Tile", "DepthToSpace", "SpaceToDepth"})
"""float16 when every float32 activation they read is float16: rounding once per value, no long sums, no
exponentials."""
HALF_STORAGE = frozenset({"LayerNormalization"})
"""float16 in and out when their float32 activations are float16; their kernels compute in float32 inside (ops/reduce.py:
the mean, the variance and the scaling of a float16 row in float32, rounded once on store)."""
HALF_LOOKUPS = frozenset({"Gather"})
"""float16 when their data is a constant table (embeddings: the table's bytes halve, each value rounds once)."""
F32, F16 = np.dtype(np.float32), np.dtype(np.float16)


def _is_f32(graph: Graph, name: str) -> bool:
    return bool(name) and name in graph.tensors and np.dtype(graph.tensors[name].dtype) == F32


def _computes_half(graph: Graph, node: Node, half: set[str]) -> bool:
    if not is_onnx_domain(node.domain) or not any(_is_f32(graph, o) for o in node.outputs):
        return False
    if node.op_type in HALF_ANCHORS:
        return True
    if node.op_type in HALF_LOOKUPS and node.inputs and graph.tensors[node.inputs[0]].is_const:
        return True
    if node.op_type not in HALF_FOLLOWERS | HALF_STORAGE:
        return False
    acts = [n for n in node.inputs if (n in half or _is_f32(graph, n)) and not graph.tensors[n].is_const]
    return bool(acts) and all(n in half for n in acts)


def _cast(graph: Graph, name: str, src: str, to: np.dtype) -> tuple[str, Node]:
    t = graph.tensors[src]
    dst = graph.unique_name(f"{src}/{'f16' if to == F16 else 'f32'}")
    graph.tensors[dst] = Tensor(dst, to, t.shape, None, t.dyn)
    code = TensorProto.FLOAT16 if to == F16 else TensorProto.FLOAT
    return dst, Node("Cast", name, [src], [dst], {"to": code})


def _beyond_half(values) -> bool:
    v = np.asarray(values, dtype=np.float64)
    return bool(np.any(np.isfinite(v) & (np.abs(v) > HALF_MAX)))


def _half_constant(graph: Graph, name: str) -> str:
    t = graph.tensors[name]
    return graph.add_tensor(f"{name}/f16", F16, t.shape, saturated(t.value, F16))


def _clamped_scalars(node: Node) -> list[str]:
    """The build-time float attributes of a float16 node (its own and its fused epilogue's) that the kernels
    saturate (kernels/scalar.py saturate_half)."""
    found = []
    for key, value in node.attrs.items():
        if isinstance(value, Epilogue):
            floats = [p for p in value.params if isinstance(p, float)] if value.activation in ("clip", "leaky_relu") else []
            if floats and _beyond_half(floats):
                found.append(f"the fused {value.activation} of {node.op_type} {node.name!r}")
        elif isinstance(value, float) and _beyond_half([value]):
            found.append(f"{key}={value:g} of {node.op_type} {node.name!r}")
    return found


class _Narrowing:
    """The rewrite's state: which tensors hold float16, and the converted copy of each value per dtype."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.half: set[str] = set()
        self.copies: dict[tuple[str, str], str] = {}
        self.nodes: list[Node] = []
        self.clamped: list[str] = []
        """What held finite values beyond float16's range (saturated to +-65504), for the build's warning."""

    def read_as(self, name: str, want: np.dtype) -> str:
        """The tensor holding `name`'s value in `want` (a Cast or a converted constant made once)."""
        g = self.graph
        stored = F16 if name in self.half else F32
        if stored == want:
            return name
        key = (name, want.name)
        if key not in self.copies:
            if g.tensors[name].is_const:
                if _beyond_half(g.tensors[name].value):
                    self.clamped.append(f"constant {name!r}")
                self.copies[key] = _half_constant(g, name)
            else:
                dst, cast = _cast(g, f"{name}/to_{want.name}", name, want)
                self.nodes.append(cast)
                self.copies[key] = dst
        return self.copies[key]

    def visit(self, node: Node) -> None:
        g = self.graph
        half = _computes_half(g, node, self.half)
        node.inputs = [self.read_as(n, F16 if half else F32) if n in self.half or _is_f32(g, n) else n for n in node.inputs]
        self.nodes.append(node)
        if not half:
            return
        self.clamped.extend(_clamped_scalars(node))
        edges = []
        for i, out in enumerate(node.outputs):
            if not _is_f32(g, out):
                continue
            if out in g.outputs:  # the C API keeps float32: the node writes a float16 twin, a Cast fills the output
                twin = g.unique_name(f"{out}/f16")
                g.tensors[twin] = Tensor(twin, F16, g.tensors[out].shape, None, g.tensors[out].dyn)
                node.outputs[i] = twin
                self.half.add(twin)
                self.copies[(twin, F32.name)] = out
                self.copies[(out, F16.name)] = twin
                edges.append(Node("Cast", f"{node.name}/output{i}", [twin], [out], {"to": TensorProto.FLOAT}))
            else:
                t = g.tensors[out]
                g.tensors[out] = Tensor(out, F16, t.shape, None, t.dyn)
                self.half.add(out)
        self.nodes.extend(edges)


def narrow_to_half(graph: Graph) -> None:
    """Rewrite `graph` in place as the module docstring says (no-op unless graph.precision is "fp16")."""
    if graph.precision != "fp16":
        return
    state = _Narrowing(graph)
    for node in graph.nodes:
        state.visit(node)
    graph.nodes[:] = state.nodes
    if state.clamped:
        more = f" and {len(state.clamped) - 3} more" if len(state.clamped) > 3 else ""
        print(f"fluidml-xc: warning: --precision fp16 saturates {', '.join(state.clamped[:3])}{more} to float16's range "
              "(+-65504); activations beyond it become +-inf (docs/FP16.md)", file=sys.stderr)


@graph_pass(order=45)
def half_precision(graph: Graph) -> None:
    """After the epilogue fusions (a Conv's Clip, a MatMul's bias stay fused), before elementwise fusion (which
    then takes the Casts into its chains)."""
    narrow_to_half(graph)

