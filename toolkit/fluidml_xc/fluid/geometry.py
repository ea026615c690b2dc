"""Conv and MatMul/Gemm as their kernels see them (ops/conv.py, ops/matmul.py), from a graph node and its
operands' strides: the shapes, strides and blocking choices the cost model (fluid/costs.py) prices."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node
from ..kernels.conv_geometry import FLAT_ROW_MIN_PIXELS, TargetForms

BLOCKED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""Dtypes ops/matmul.py's register-blocked kernels handle."""
CONV_ORDERS = ("co>px", "px>co")
"""Conv loop orders: output-channel blocks outermost (weights of a block stay cached while the input
streams past once per block) or pixel rows (pixel tiles when flat) outermost (the input row stays
cached while every block's weights stream past)."""


@dataclass
class ConvGeometry:
    """A float 1D/2D Conv as ops/conv.py's Conv2D sees it (rank 3 as one row), strides in elements."""

    N: int
    C: int
    H: int
    W: int
    OC: int
    OH: int
    OW: int
    KH: int
    KW: int
    G: int
    sw: int
    xs: tuple[int, ...]
    os: tuple[int, ...]
    residual: tuple[int, ...] | None
    w_const: bool
    flat: bool
    V: int
    itemsize: int
    pointwise: bool = False
    """An unpadded 1x1 conv that is not flat (strided, or not flattenable)."""
    sh: int = 1
    dh: int = 1
    forms: TargetForms = TargetForms("")
    """The target's forms (kernels/conv_geometry.py TargetForms): tiles and instructions beyond the vector width."""

    @property
    def Cig(self) -> int:
        return self.C // self.G

    @property
    def Cog(self) -> int:
        return self.OC // self.G

    @property
    def kind(self) -> str:
        """The blocking Conv2D picks (same tests, same order)."""
        if self.w_const and self.Cig == 1 and self.Cog == 1 and self.V > 1 and self.G >= self.V and self.xs[1] == 1 and self.os[1] == 1:
            return "depthwise_c"
        rows_unit = self.xs[3] == 1 and self.os[3] == 1
        if (self.w_const and self.Cog >= self.V and self.V > 1
                and (not self.flat or self.W < FLAT_ROW_MIN_PIXELS or not rows_unit)):
            return "channels"
        return "rows"

    @property
    def R(self) -> int:
        kind = self.kind
        if kind == "channels":
            return 2 * self.V if self.Cog >= 2 * self.V else self.V
        return 1 if kind == "depthwise_c" else self.forms.row_channels(self.Cog, self.flat and self.w_const)

    @property
    def pairs(self) -> bool:
        """Conv2D.row_pairs (weights assumed finite)."""
        edges = (self.kind == "rows" and self.w_const and not self.flat
                 and self.forms.edges(self.V, self.sw, self.xs[3] == 1 and self.os[3] == 1, self.W))
        return self.forms.row_pairs(edges, self.Cog, self.sh, self.dh, self.KH, self.KW)

    @property
    def lane_taps(self) -> bool:
        """Conv2D.lane_taps: the taps as lanes of loaded weight vectors instead of splats."""
        if self.kind != "rows" or not self.w_const:
            return False
        f32, taps = self.itemsize == 4, self.Cig * self.KH * self.KW
        return self.forms.lane_taps(self.forms.by_lane(f32, self.V, self.Cog, taps), self.pairs, f32, self.V, taps)

    @property
    def U(self) -> int:
        """Vectors along the row per row-vector block (Conv2D.U)."""
        return self.forms.row_vectors(self.R, self.pairs, self.flat and self.w_const)

    @property
    def pack_groups(self) -> int:
        """Conv2D.pack_groups: 0 unless the input is packed into pixel blocks (flat, small, NCHW; packs_input),
        else the groups of blocks packed at once."""
        block_bytes = self.N * self.C * self.P * self.itemsize
        if not self.forms.packs_input(self.kind == "channels", self.flat, self.xs[3] == 1, self.W, block_bytes):
            return 0
        return self.forms.pack_groups(-(-self.OW // self.P), block_bytes)

    @property
    def P(self) -> int:
        if self.kind == "depthwise_c":
            return self.forms.dw_pixels()
        return (6 if self.R > self.V else 12) if self.kind == "channels" else 4 * self.V

    def default_order(self) -> str:
        """Conv2D.blocks_outer's choice when the optimizer gives none."""
        if self.kind != "channels":
            return self.orders()[0]
        in_bytes = self.Cig * self.H * self.W * self.itemsize
        w_bytes = self.Cog * self.Cig * self.KH * self.KW * self.itemsize
        units = -(-self.OW // self.P) if self.flat else self.OH
        return "co>px" if in_bytes * -(-self.Cog // self.R) <= w_bytes * units else "px>co"

    def orders(self) -> tuple[str, ...]:
        """Loop orders the kernel implements for this blocking."""
        if self.kind == "channels":
            return CONV_ORDERS
        return ("px>co",) if self.kind == "depthwise_c" or self.flat else ("co>px",)


def conv_geometry(graph: Graph, node: Node, strides_of, vector_bits: int, forms: TargetForms | None = None) -> ConvGeometry | None:
    x, w, out = (graph.tensors[n] for n in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if len(x.shape) not in (3, 4) or np.dtype(out.dtype).kind != "f" or out.size == 0:
        return None

    def as2d(shape, strides):
        return (tuple(shape), tuple(strides)) if len(shape) == 4 else ((*shape[:2], 1, shape[2]), (*strides[:2], 0, strides[2]))
    (N, C, H, W), xs = as2d(x.shape, strides_of(node.inputs[0]))
    (_, OC, OH, OW), os_ = as2d(out.shape, strides_of(node.outputs[0]))
    wshape = as2d(w.shape, [0] * len(w.shape))[0]
    KH, KW = wshape[2], wshape[3]
    epi = node.attrs.get("_epilogue") or {}
    residual = None
    if epi.get("residual") and len(node.inputs) > 3 and node.inputs[3]:
        residual = as2d(graph.tensors[node.inputs[3]].shape, strides_of(node.inputs[3]))[1]
    sp = len(x.shape) - 2
    strides = list(node.attrs.get("strides") or [1] * sp)
    pads = list(node.attrs.get("pads") or [0] * (2 * sp))
    sw = int(strides[-1])
    sh = int(strides[0]) if sp == 2 else 1
    dils = list(node.attrs.get("dilations") or [1] * sp)
    dh = int(dils[0]) if sp == 2 else 1
    flat = ((KH, KW) == (1, 1) and all(int(v) == 1 for v in strides) and all(int(p) == 0 for p in pads) and (OH, OW) == (H, W)
            and xs[2] == W * xs[3] and os_[2] == W * os_[3] and (residual is None or residual[2] == W * residual[3]))
    if flat:
        H, W, OH, OW = 1, H * W, 1, H * W
        xs, os_ = (xs[0], xs[1], 0, xs[3]), (os_[0], os_[1], 0, os_[3])
        if residual is not None:
            residual = (residual[0], residual[1], 0, residual[3])
    item = np.dtype(out.dtype).itemsize
    pointwise = (KH, KW) == (1, 1) and all(int(p) == 0 for p in pads) and not flat and node.attrs.get("auto_pad", "NOTSET") in (
        "NOTSET", b"NOTSET", "VALID", b"VALID")
    return ConvGeometry(N, C, H, W, OC, OH, OW, KH, KW, int(node.attrs.get("group", 1)), sw, xs, os_, residual, w.is_const, flat,
                        max(1, vector_bits // (8 * item)), item, pointwise, sh, dh, forms or TargetForms(""))


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
