"""Conv as its kernel sees it (ops/conv.py), from a graph node and its operands' strides: the shapes, strides and
blocking choices the cost model (fluid/costs.py) prices (MatMul/Gemm's: kernels/matmul_geometry.py)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..ir import Graph, Node
from ..kernels.conv_geometry import ConvBlocking, TargetForms

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
    unpadded: bool = False
    """No begin pads and every output pixel reads an input pixel (ConvBlocking.choose)."""
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

    @cached_property
    def blocking(self) -> ConvBlocking:
        """Conv2D's blocking of this conv (weights assumed finite)."""
        return ConvBlocking.choose(self.forms, N=self.N, C=self.C, H=self.H, W=self.W, OC=self.OC, OH=self.OH, OW=self.OW,
                                   KH=self.KH, KW=self.KW, G=self.G, sh=self.sh, sw=self.sw, dh=self.dh, xs=self.xs, os=self.os,
                                   flat=self.flat, w_const=self.w_const, finite=True, itemsize=self.itemsize, V=self.V,
                                   unpadded=self.unpadded)

    @property
    def kind(self) -> str:
        return self.blocking.kind

    @property
    def R(self) -> int:
        return self.blocking.R

    @property
    def pairs(self) -> bool:
        return self.blocking.row_pairs

    @property
    def lane_taps(self) -> bool:
        return self.blocking.lane_taps

    @property
    def U(self) -> int:
        return self.blocking.U

    @property
    def pack_groups(self) -> int:
        return self.blocking.pack_groups

    @property
    def P(self) -> int:
        """Pixels per block; row vectors have no P, the traffic model counts 4 vectors as their unit."""
        return 4 * self.V if self.kind == "rows" else self.blocking.P

    def default_order(self) -> str:
        return self.blocking.default_order

    def orders(self) -> tuple[str, ...]:
        return self.blocking.orders


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
    unpadded = all(int(p) == 0 for p in pads[:sp]) and (OH - 1) * sh < H and (OW - 1) * sw < W
    return ConvGeometry(N, C, H, W, OC, OH, OW, KH, KW, int(node.attrs.get("group", 1)), sw, xs, os_, residual, w.is_const, flat,
                        max(1, vector_bits // (8 * item)), item, unpadded, sh, dh, forms or TargetForms(""))
