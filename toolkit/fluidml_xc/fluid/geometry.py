"""Conv and MatMul/Gemm as their kernels see them (ops/conv/, ops/matmul.py), from a graph node and its
operands' strides: the shapes, strides and blocking choices the cost model (fluid/costs.py) prices."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node
from ..kernels.conv_geometry import TargetForms
from ..kernels.conv_plan import ConvPlan, conv_shape, plan_conv
from ..kernels.epilogue import EPILOGUE_ATTR

BLOCKED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""Dtypes ops/matmul.py's register-blocked kernels handle."""


@dataclass(frozen=True)
class ConvGeometry:
    """A float 1D/2D Conv as the cost model prices it: the kernel's own plan (kernels/conv_plan.py plan_conv), with the
    weights assumed finite and the default loop order; the names below are the plan's, as fluid/costs.py reads them."""

    plan: ConvPlan
    itemsize: int

    N = property(lambda self: self.plan.shape.N)
    C = property(lambda self: self.plan.shape.C)
    H = property(lambda self: self.plan.shape.H)
    W = property(lambda self: self.plan.shape.W)
    OC = property(lambda self: self.plan.shape.OC)
    OH = property(lambda self: self.plan.shape.OH)
    OW = property(lambda self: self.plan.shape.OW)
    KH = property(lambda self: self.plan.shape.KH)
    KW = property(lambda self: self.plan.shape.KW)
    G = property(lambda self: self.plan.shape.G)
    sw = property(lambda self: self.plan.shape.sw)
    xs = property(lambda self: self.plan.shape.xs)
    os = property(lambda self: self.plan.shape.os)
    flat = property(lambda self: self.plan.shape.flat)
    Cig = property(lambda self: self.plan.shape.Cig)
    Cog = property(lambda self: self.plan.shape.Cog)
    residual = property(lambda self: self.plan.shape.rs)
    """The residual input's strides, None without one."""
    V = property(lambda self: self.plan.V)
    blocking = property(lambda self: self.plan.blocking)
    kind = property(lambda self: self.plan.blocking.kind)
    R = property(lambda self: self.plan.blocking.R)
    U = property(lambda self: self.plan.blocking.U)
    pairs = property(lambda self: self.plan.blocking.row_pairs)
    lane_taps = property(lambda self: self.plan.blocking.lane_taps)
    pack_groups = property(lambda self: self.plan.blocking.pack_groups)

    @property
    def P(self) -> int:
        """Pixels per block; row vectors have no P, the traffic model counts 4 vectors as their unit."""
        return 4 * self.V if self.kind == "rows" else self.plan.blocking.P

    def default_order(self) -> str:
        return self.plan.blocking.default_order

    def orders(self) -> tuple[str, ...]:
        return self.plan.blocking.orders


def conv_geometry(graph: Graph, node: Node, strides_of, vector_bits: int, forms: TargetForms | None = None) -> ConvGeometry | None:
    """The plan of a float 1D/2D Conv node under the operands' strides (strides_of(name)); None for other convs. A k x 1
    conv is priced down its column (conv_shape's kx1_along_row=False), where the kernel runs it along the row."""
    x, w, out = (graph.tensors[n] for n in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if len(x.shape) not in (3, 4) or np.dtype(out.dtype).kind != "f" or out.size == 0:
        return None
    epi = node.attrs.get(EPILOGUE_ATTR)
    residual = None
    if epi is not None and epi.residual and len(node.inputs) > 3 and node.inputs[3]:
        residual = (graph.tensors[node.inputs[3]].shape, strides_of(node.inputs[3]))
    sp = len(x.shape) - 2
    pads = list(node.attrs.get("pads") or [0] * (2 * sp))
    shape = conv_shape((x.shape, strides_of(node.inputs[0])), (out.shape, strides_of(node.outputs[0])),
                       (w.shape, strides_of(node.inputs[1])), residual, [int(v) for v in node.attrs.get("strides") or [1] * sp],
                       [int(v) for v in node.attrs.get("dilations") or [1] * sp], [int(p) for p in pads[:sp]],
                       int(node.attrs.get("group", 1)), kx1_along_row=False)
    item = np.dtype(out.dtype).itemsize
    plan = plan_conv(shape, forms or TargetForms(""), dtype=np.dtype(out.dtype).name, V=max(1, vector_bits // (8 * item)),
                     w_const=w.is_const, finite=True)
    return ConvGeometry(plan, item)


@dataclass
class MatmulGeometry:
    m: int
    n: int
    k: int
    batch_points: int
    a: tuple[int, int]
    """(m stride, k stride) of A in elements."""
    b: tuple[int, int]
    """(k stride, n stride) of B."""
    c: tuple[int, int]
    """(m stride, n stride) of C."""
    a_const: bool
    b_const: bool
    itemsize: int
    is_float: bool = True


def matmul_geometry(graph: Graph, node: Node, strides_of) -> MatmulGeometry:
    ta, tb, tc = (graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]])
    sa, sb, sc = strides_of(node.inputs[0]), strides_of(node.inputs[1]), strides_of(node.outputs[0])
    if node.op_type == "Gemm":
        trans_a, trans_b = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
        a = (sa[1], sa[0]) if trans_a else (sa[0], sa[1])
        b = (sb[1], sb[0]) if trans_b else (sb[0], sb[1])
        m, kk = (ta.shape[1], ta.shape[0]) if trans_a else ta.shape
        n = tb.shape[0] if trans_b else tb.shape[1]
        return MatmulGeometry(m, n, kk, 1, a, b, (sc[0], sc[1]), ta.is_const, tb.is_const, np.dtype(tc.dtype).itemsize,
                              np.dtype(tc.dtype) in BLOCKED_DTYPES)
    a_shape, b_shape = ta.shape, tb.shape
    a = (sa[-2], sa[-1]) if len(a_shape) >= 2 else (0, sa[-1])
    b = (sb[-2], sb[-1]) if len(b_shape) >= 2 else (sb[-1], 0)
    m = a_shape[-2] if len(a_shape) >= 2 else 1
    kk = a_shape[-1]
    n = b_shape[-1] if len(b_shape) >= 2 else 1
    if len(a_shape) >= 2 and len(b_shape) >= 2:
        c = (sc[-2], sc[-1])
    elif len(a_shape) >= 2:
        c = (sc[-1], 0)
    elif len(b_shape) >= 2:
        c = (0, sc[-1])
    else:
        c = (0, 0)
    batch = int(np.prod(tc.shape[:-2], dtype=np.int64)) if len(a_shape) >= 2 and len(b_shape) >= 2 else \
        int(np.prod(tc.shape[:-1], dtype=np.int64)) if len(tc.shape) >= 1 and (len(a_shape) >= 2) != (len(b_shape) >= 2) else 1
    return MatmulGeometry(m, n, kk, max(batch, 1), a, b, c, ta.is_const, tb.is_const, np.dtype(tc.dtype).itemsize,
                          np.dtype(tc.dtype) in BLOCKED_DTYPES)
