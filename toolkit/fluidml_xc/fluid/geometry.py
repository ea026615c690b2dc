"""Conv as its kernel sees it (ops/conv/), from a graph node and its operands' strides: the shapes, strides and
blocking choices the cost model (fluid/costs.py) prices (MatMul/Gemm's: kernels/matmul_geometry.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node
from ..kernels.conv_geometry import TargetForms
from ..kernels.conv_plan import ConvPlan, conv_shape, plan_conv
from ..kernels.epilogue import EPILOGUE_ATTR

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
