"""Kernel costs (docs/DESIGN.md 1.6): an analytic model by default, measurements when asked, cached on disk.

Analytic: a kernel is a loop nest over a domain; each operand is addressed through its storage strides. Cost = cache
lines each operand moves (a footprint/reuse model walked from the innermost loop outwards) + arithmetic, vectorized
when every operand is unit-stride (or invariant) in the innermost loop. MatMul/Gemm use the register-blocked kernels
of kernels/matmul_blocked.py when their strides allow and the best of the loop orders in kernels/matmul_geometry.py
otherwise. Conv prices the plan ops/conv/ runs (kernels/conv_plan.py plan_conv) under the operands' strides (channel
vectors, row vectors, depthwise channels-last): vector FMAs (slowed when too few accumulators hide their latency),
input loads (broadcast, vector or gathered), stores and the residual read (vector, or scattered per element when
channels are not innermost), and the bytes each Conv loop order moves; the blocking, tiles and forms (row pairs, taps
as lanes of weight vectors, channel vectors per depthwise block) come from the same plan_conv call the kernel makes
(fluid/geometry.py). Pools, Concat and inference BatchNormalization are costed in the layouts their kernels iterate
(vectors over channels when channels are innermost).

Measured: the node's kernel alone, JIT-compiled for this machine with llvmlite (warm-up, median of
several runs; a KernelTimer, emit/measure.py's Measurer, which the pipeline passes in when this machine can
run the target's code; without one only cached measurements count), keyed by target, kernel signature and
layouts in a JSON cache under $FLUIDML_XC_CACHE (default ~/.cache/fluidml-xc/costs; fluid/cost_cache.py).
Measurements taken on a board go in the same format (`source` names the board) and are preferred for that target.
"""
from __future__ import annotations

import math
import platform
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from .. import opspec
from ..ir import Graph, Node
from ..kernels.conv_geometry import RVV_UNPACKED_K_STEPS, TargetForms
from .depthwise_costs import (RVV_STRIDED_ROWS, STRIP_VECTOR_LOADS, X60_STRIP_VECTOR_CYCLES, rvv_channels_last_factor,
                              rvv_routine_cycles, scalar_depthwise_cycles)
from ..kernels.conv_plan import strips_fit
from ..opspec import CostKind, OpSpec
from ..kernels.vectors import column_lanes
from ..kernels.kernel import PARALLEL_MIN_WORK, chunk_count, element_work, layout_strides
from .cost_cache import CostCache, kernel_signature, layouts_key, target_key
from .geometry import ConvGeometry, conv_geometry
from .winograd_costs import Figures, allowed_orders, tiles as winograd_tiles, winograd_ns
from ..kernels.winograd import v_copies
from .split_costs import generic_tiles, parallel_time, rvv_pack_ns, split_tiles
from .layouts import Perm
from ..target.arch import half_arithmetic
from ..kernels.matmul_geometry import (MATMUL_ORDERS, MR_DOT, NC_DOT, MatmulGeometry, blocked_kind, default_order, domain_order,
                                       matmul_geometry)

LINE = 64
CACHE_BYTES = 512 * 1024
LINE_NS = 0.6
"""Time to move one cache line (L2-ish bandwidth)."""
FLOP_NS = 0.3
"""One scalar operation."""
CALL_NS = 50.0
VIEW_NS = 1.0
"""A Transpose whose layouts make it a plain copy becomes an aliased view."""
VFMA_NS = 0.16
"""One vector FMA in a register-blocked MatMul tile (calibrated on Zen 3 against --costs measure)."""
VLOAD_NS = 0.03
BCAST_NS = 0.05
REDUCE_NS = 0.5
"""Summing one dot-product tile's lanes, per output element."""
DOT_FMA_FACTOR = 1.15
"""Dot-product tiles run ~10-15% below the outer-product ones per FMA (measured, 128x128x128..512, Zen 3)."""
STORE_NS = 0.03
SCATTER_NS = 0.4
GATHER_NS = 0.3
"""Gathering one element of a strided B into the outer-product kernel's stack panel."""
SCALAR_TILE_CYCLES = 1.42
"""llvm-mca-22 cycles per fmadd.s of the U74's GEMM tile (kernels/scalar_tile.py), which blocked_cost prices a lane
of a vector FMA: the unit that turns a scalar routine's cycles into this model's ns."""
# -- analytic ------------------------------------------------------------------------------------
@dataclass
class Use:
    """One operand of a loop nest: element strides per domain dim."""

    strides: tuple[int, ...]
    itemsize: int


def operand_lines(extents: Sequence[int], order: Sequence[int], strides: Sequence[int], itemsize: int) -> float:
    """Cache lines an operand moves over a loop nest (order outermost first)."""
    lines, span, started = 1.0, itemsize, False
    for d in reversed(order):
        e = extents[d]
        if e <= 1:
            continue
        step = abs(strides[d]) * itemsize
        fits = lines * LINE <= CACHE_BYTES
        if step == 0:
            if not fits:
                lines *= e
            continue
        if not started:
            new = min(1.0, step / LINE)
            started = True
        elif not fits:
            new = lines
        else:
            new = lines * min(1.0, step / max(span, LINE))
        lines = lines + (e - 1) * new
        span = span + (e - 1) * step
    return lines


def nest_cost(extents: Sequence[int], order: Sequence[int], uses: Sequence[Use], ops_per_point: float, vector: int) -> float:
    points = float(np.prod([max(e, 1) for e in extents], dtype=np.float64)) if extents else 1.0
    inner = next((d for d in reversed(order) if extents[d] > 1), None)
    vectorized = inner is not None and all(u.strides[inner] in (0, 1, -1) for u in uses)
    lines = sum(operand_lines(extents, order, u.strides, u.itemsize) for u in uses)
    strided = 0 if vectorized else sum(1 for u in uses if inner is not None and abs(u.strides[inner]) > 1)
    arith = points * (ops_per_point + 0.5 * len(uses) + strided) * FLOP_NS / (vector if vectorized else 1)
    return CALL_NS + lines * LINE_NS + arith


def _dom_strides(shape: Sequence[int], strides: Sequence[int], dims: Sequence[int | None], ndom: int) -> tuple[int, ...]:
    out = [0] * ndom
    for k, d in enumerate(dims):
        if d is not None and shape[k] != 1:
            out[d] += strides[k]
    return tuple(out)


class AnalyticModel:
    """cost(node, layouts) in estimated nanoseconds; layouts map activation tensors to permutations."""

    def __init__(self, graph: Graph, vector_bits: int = 256, threads: int = 1, forms: TargetForms | None = None,
                 half: bool = False):
        self.graph = graph
        self.half = half  # the target computes float16 in the blocked MatMul kernels (matmul_geometry.blocked_dtype)
        self.vector_bits = vector_bits
        self.threads = max(1, int(threads))
        """Threads the build runs on: a split op costs its busiest thread's share (parallel_time)."""
        self.forms = replace(forms or TargetForms(""), parallel=self.threads > 1)
        """The target's Conv kernel forms (kernels/conv_geometry.py), as the Conv kernel of a build on `threads` gets them."""
        self.vector_cycles = self.forms.vector_cycles(vector_bits)  # a cycle per register of RVV's groups
        self.figures = FIGURES.vectors_times(self.vector_cycles)

    def threaded(self, ns: float, tiles: int) -> float:
        return parallel_time(ns, tiles, self.threads)

    def strides(self, name: str, layouts: Mapping[str, Perm]) -> tuple[int, ...]:
        t = self.graph.tensors[name]
        return layout_strides(t.shape, layouts.get(name))

    def lanes(self, name: str) -> int:
        return max(1, self.vector_bits // (8 * np.dtype(self.graph.tensors[name].dtype).itemsize))

    def cost(self, node: Node, layouts: Mapping[str, Perm]) -> float:
        return self.cost_and_order(node, layouts)[0]

    def spec(self, node: Node) -> OpSpec | None:
        return opspec.lookup(node.op_type, self.graph.opset, node.domain)

    def cost_and_order(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, str | None]:
        """Estimated ns and the loop order (the ops whose OpSpec has loop_orders) for node under layouts: by
        the op's cost kind (OpSpec.cost_kind), else as an elementwise op (OpSpec.elementwise), else opaque."""
        spec = self.spec(node)
        if spec is not None and spec.cost_kind is not None:
            return KIND_COSTS[spec.cost_kind](self, node, layouts)
        if spec is not None and spec.elementwise:
            return self.elementwise(node, layouts)
        return self.opaque(node), None

    # -- kinds ---------------------------------------------------------------------------------
    def opaque(self, node: Node) -> float:
        g = self.graph
        total = sum(g.tensors[n].nbytes for n in list(node.inputs) + list(node.outputs) if n)
        points = sum(g.tensors[n].size for n in node.outputs if n)
        return CALL_NS + total / LINE * LINE_NS + points * 4 * FLOP_NS / 4

    def elementwise(self, node: Node, layouts: Mapping[str, Perm], ops: float = 1.0) -> tuple[float, None]:
        g = self.graph
        out = node.outputs[0]
        shape = g.tensors[out].shape
        n = len(shape)
        uses = [Use(_dom_strides(shape, self.strides(out, layouts), range(n), n), np.dtype(g.tensors[out].dtype).itemsize)]
        for name in node.inputs:
            if not name:
                continue
            t = g.tensors[name]
            shift = n - len(t.shape)
            uses.append(Use(_dom_strides(t.shape, self.strides(name, layouts), [k + shift for k in range(len(t.shape))], n),
                            np.dtype(t.dtype).itemsize))
        order = sorted(range(n), key=lambda d: -abs(uses[0].strides[d]))  # Kernel.generic: the output's storage order
        chain = element_work(s["op"] for s in node.attrs.get("program", ())) if node.op_type == "FusedElementwise" else 0.0
        tiles = generic_tiles(shape, order, float(np.prod(shape, dtype=np.float64)) * (len(uses) + chain))
        return self.threaded(nest_cost(shape, order, uses, ops, self.lanes(out) / self.vector_cycles), tiles), None

    def transpose(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, None]:
        g = self.graph
        if transpose_is_view(g, node, layouts):
            return VIEW_NS, None
        x, out = node.inputs[0], node.outputs[0]
        shape = g.tensors[out].shape
        n = len(shape)
        perm = node.attrs.get("perm") or list(range(n))[::-1]
        dims = [0] * n
        for j, p in enumerate(perm):
            dims[p] = j
        out_strides = _dom_strides(shape, self.strides(out, layouts), range(n), n)
        in_strides = _dom_strides(g.tensors[x].shape, self.strides(x, layouts), dims, n)
        order = sorted(range(n), key=lambda d: -abs(out_strides[d]))
        item = np.dtype(g.tensors[out].dtype).itemsize
        tiles = generic_tiles(shape, order, float(np.prod(shape, dtype=np.float64)) * 2)
        uses, rate = [Use(out_strides, item), Use(in_strides, item)], self.lanes(out) / self.vector_cycles
        return self.threaded(nest_cost(shape, order, uses, 0.0, rate), tiles), None

    def matmul(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, str]:
        geo = matmul_geometry(self.graph, node, lambda n: self.strides(n, layouts), self.half)
        costs = {order: self.threaded(self.matmul_order_cost(geo, order), self.matmul_tiles(geo, order)) for order in MATMUL_ORDERS}
        best = min(costs, key=costs.get)
        default = default_order(geo.a, geo.b, geo.c, geo.m, geo.n, geo.a_const, geo.b_const, geo.is_float)
        if default in costs and costs[best] > costs[default] * (1 - ORDER_MARGIN):
            best = default  # within the model's error: the kernel's own order (greedy's)
        return costs[best], best

    def matmul_tiles(self, geo: MatmulGeometry, order: str) -> int:
        """Tiles ops/matmul.py splits `order`'s kernel into: outer products by NR-column panels x MR-row
        blocks (a B gathered into a stack panel keeps its rows together), dot products by row blocks,
        scalar nests by their leading loops."""
        work = float(geo.batch_points) * geo.m * geo.n * geo.k
        kind = blocked_kind(order, geo.a, geo.b, geo.m, geo.n, geo.a_const, geo.b_const, geo.is_float)
        if kind is None:  # k.generic over (batch, m, k, n), the reduction innermost
            outer = [0] + [1 + d for d in domain_order(order, 0) if d != 1]
            return generic_tiles((geo.batch_points, geo.m, geo.k, geo.n), outer, work * 3)
        if kind == "dot":
            return split_tiles(geo.batch_points, work, (-(-geo.m // max(1, min(MR_DOT, geo.m))),), (True,))
        lanes = max(1, self.vector_bits // (8 * geo.itemsize))
        m, n = (geo.n, geo.m) if kind == "outer_t" else (geo.m, geo.n)
        mr, nr = self.forms.outer_tile(m, n, lanes, geo.is_float and geo.itemsize == 4)
        gathered = kind == "outer" and not geo.b_const and geo.b[1] != 1 and n > 1
        return split_tiles(geo.batch_points, work, (-(-n // nr), -(-m // mr)), (True, not gathered))

    def matmul_order_cost(self, geo: MatmulGeometry, order: str) -> float:
        kind = blocked_kind(order, geo.a, geo.b, geo.m, geo.n, geo.a_const, geo.b_const, geo.is_float)
        if kind is not None:
            return CALL_NS + geo.batch_points * self.blocked_cost(geo, kind) * self.vector_cycles + self.matmul_lines(geo)
        extents = (geo.m, geo.k, geo.n)
        dom = domain_order(order, 0)
        uses = [Use((geo.a[0], geo.a[1], 0), geo.itemsize), Use((0, geo.b[0], geo.b[1]), geo.itemsize),
                Use((geo.c[0], 0, geo.c[1]), geo.itemsize), Use((geo.c[0], 0, geo.c[1]), geo.itemsize)]
        lanes = max(1, self.vector_bits // (8 * geo.itemsize))
        inner = dom[-1]
        if inner == 1:  # reductions innermost do not vectorize without reassociation
            lanes = 1
        return geo.batch_points * nest_cost(extents, dom, uses, 2.0, lanes / self.vector_cycles if lanes > 1 else 1) * 1.5

    def matmul_lines(self, geo: MatmulGeometry) -> float:
        """Compulsory traffic of the blocked kernels: each operand once (they block for registers, not caches)."""
        item = geo.itemsize
        total = geo.batch_points * (geo.m * geo.k + geo.k * geo.n + geo.m * geo.n) * item
        return total / LINE * LINE_NS * 0.25

    def blocked_cost(self, geo: MatmulGeometry, kind: str) -> float:
        """One batch point of ops/matmul.py's register-blocked kernels (ns): vector FMAs, loads, edges, epilogue."""
        lanes = max(1, self.vector_bits // (8 * geo.itemsize))
        m, n, kk = geo.m, geo.n, geo.k
        c_inner = geo.c[1]
        if kind == "outer_t":
            m, n, c_inner = n, m, geo.c[0]
        store = m * n * (STORE_NS if c_inner in (0, 1) else SCATTER_NS)
        if kind == "dot":
            mr = max(1, min(MR_DOT, m))
            nc = min(NC_DOT, lanes, 1 << (max(n, 1).bit_length() - 1))
            vk, tail = kk // lanes, kk % lanes
            tiles = -(-m // mr) * -(-n // nc)
            return (m * n * vk * VFMA_NS * DOT_FMA_FACTOR + tiles * vk * (mr + nc) * VLOAD_NS + m * n * (REDUCE_NS + tail * 2 * VLOAD_NS)
                    + store)
        mr, nr = self.forms.outer_tile(m, n, lanes, geo.is_float and geo.itemsize == 4)
        packed = geo.b_const if kind == "outer" else geo.a_const
        b_inner = geo.b[1] if kind == "outer" else geo.a[0]
        gather = 0.0 if packed or b_inner == 1 or n == 1 else n * kk * GATHER_NS  # stack panels
        packed = packed or gather > 0
        rem = n % nr
        groups = ((n // nr) * (nr // lanes) + (-(-rem // lanes) if packed else rem // lanes + rem % lanes) if nr % lanes == 0
                  else -(-n // nr) * nr / lanes)  # a scalar tile (TargetForms.gemm_tile): its columns, a lane each
        col_tiles = -(-n // nr)
        return (m * kk * groups * VFMA_NS + -(-m // mr) * kk * groups * VLOAD_NS + m * kk * col_tiles * BCAST_NS + store
                + gather)


    # -- convolution and its neighbours (ops/conv/, ops/pool.py, Concat) -------------------------
    def conv(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, str | None]:
        geo = conv_geometry(self.graph, node, lambda n: self.strides(n, layouts), self.vector_bits, self.forms)
        if geo is None:
            return self.opaque(node), None
        split, whole = rvv_pack_ns(geo, self.forms.rvv, VFMA_NS)  # the input pack's copy (VFMA_NS: one X60 cycle)
        costs = {o: self.threaded(self.conv_order_cost(geo, o) + split, self.conv_tiles(geo, o)) + whole for o in geo.orders()}
        copies = v_copies(self.forms.private_caches, self.threads, geo.N * geo.G, geo.Cog)
        for order, wp in allowed_orders(node, geo, self.forms.conv_accumulators, tile=self.forms.gemm_tile).items():
            work, shared = winograd_ns(geo, wp, self.figures, copies)
            costs[order] = self.threaded(CALL_NS + work, winograd_tiles(geo, wp, copies)) + shared
        best = min(costs, key=costs.get)
        default = geo.default_order()
        if default in costs and costs[best] > costs[default] * (1 - ORDER_MARGIN):
            best = default  # within the model's error: keep the kernel's own choice (greedy's)
        return costs[best], best

    def conv_tiles(self, geo: ConvGeometry, order: str) -> int:
        """Tiles ConvKernel.split (ops/conv/walk.py) makes: images x groups x chunks of channel blocks x chunks of
        output rows (pixel tiles when flat), the outer loop of the order split first."""
        work = float(geo.N) * geo.OC * geo.OH * geo.OW * geo.Cig * geo.KH * geo.KW
        if work < PARALLEL_MIN_WORK:
            return 1
        kind, V = geo.kind, geo.V
        groups = 1 if kind == "depthwise_c" else geo.G
        want = -(-chunk_count(1 << 30, work) // (geo.N * groups))
        nb = -(-geo.Cog // geo.R)
        if kind == "depthwise_c":
            rows = chunk_count(geo.OH, work, want)
            unit = geo.blocking.dw_vec * V  # ConvPlan.dw_units
            chunks = rows * chunk_count(geo.G // unit + (1 if geo.G % unit else 0), work, -(-want // rows))
        elif geo.blocking.pointwise_tiles:
            chunks = chunk_count(nb, work, want)
        elif geo.pack_groups > 1:  # the groups of packed pixel blocks
            return geo.pack_groups
        elif geo.pack_groups:
            chunks = chunk_count(nb, work, want)
        else:
            if not geo.flat:
                units = geo.OH
            elif kind == "channels":
                units = 0 if geo.OW <= 4 * geo.P else geo.OW // geo.P
            else:
                units = geo.OW // (geo.U * V)
            if (order == "co>px") if kind == "channels" else not geo.flat:
                blocks = chunk_count(nb, work, want)
                chunks = blocks * chunk_count(units, work, -(-want // blocks))
            else:
                split = chunk_count(units, work, want)
                chunks = split * chunk_count(nb, work, -(-want // split))
        tiles = geo.N * groups * chunks
        return tiles if tiles >= 2 else 1

    def conv_order_cost(self, geo: ConvGeometry, order: str) -> float:
        """ns of ops/conv/'s kernel for this geometry: vector FMAs (slowed when too few accumulators
        hide the FMA latency), input loads (broadcast / vector / gathered), stores (vector or scattered
        per element), the residual read like the store, and memory traffic under the loop order."""
        V, pts, item = geo.V, geo.N * geo.OH * geo.OW, geo.itemsize
        if self.forms.gemm_tile and (cycles := scalar_depthwise_cycles(geo)) is not None:
            moved = geo.N * geo.G * (geo.H * geo.W + geo.OH * geo.OW) * item
            return CALL_NS + cycles * VFMA_NS / (self.vector_bits // 32) / SCALAR_TILE_CYCLES + moved / LINE * LINE_NS * 0.25
        taps = geo.Cig * geo.KH * geo.KW
        out_elems = pts * geo.OC
        if geo.kind == "depthwise_c":
            vecs = geo.G // V + geo.G % V
            strip_ns = taps * VFMA_NS + STRIP_VECTOR_LOADS * VLOAD_NS
            if geo.blocking.dw_rows and (cycles := rvv_routine_cycles(geo, self.forms)) is not None:
                work = cycles * strip_ns / X60_STRIP_VECTOR_CYCLES  # the X60's routine at the strips' ns per cycle
            elif geo.blocking.dw_rows:  # RVV: the column strips' price per output vector x the loops' X60 cycles
                work = pts * vecs * strip_ns * rvv_channels_last_factor(geo)
            else:
                work = pts * vecs * (taps * VFMA_NS + taps * VLOAD_NS)  # a load per tap and pixel
            stores = pts * vecs * STORE_NS
            res = stores if geo.residual is not None else 0.0
        elif geo.kind == "channels":
            nv, nb = geo.R // V, -(-geo.Cog // geo.R)
            # RVV: a broadcast is the `flw` of `vfmacc.vf`, free at an immediate offset (consecutive pixels: NCHW or packed);
            # channels-last ones take an address `add` each, a 1x1's per RVV_UNPACKED_K_STEPS channels (X60: 1.04-1.06x)
            bcast = (0.0 if self.forms.rvv and (geo.xs[3] == 1 or geo.pack_groups) else BCAST_NS / 6
                     if self.forms.rvv and geo.KH * geo.KW == 1 and geo.Cig >= RVV_UNPACKED_K_STEPS else BCAST_NS)
            work = pts * geo.G * nb * taps * (nv * VFMA_NS + bcast)
            unit = geo.os[1] == 1
            stores = pts * geo.G * nb * nv * STORE_NS if unit else out_elems * CONV_SCATTER_NS
            res = 0.0
            if geo.residual is not None:
                res = pts * geo.G * nb * nv * VLOAD_NS if geo.residual[1] == 1 else out_elems * CONV_SCATTER_NS
        else:  # row vectors (or scalar when V == 1)
            R, U, pairs = geo.R, geo.U, geo.pairs
            slow = max(1.0, FMA_IN_FLIGHT / (R * U * (2 if pairs else 1)))
            nb = -(-geo.Cog // R)
            vecs = geo.N * geo.G * geo.OH * -(-geo.OW // V)
            x_unit = geo.xs[3] == 1
            load = VLOAD_NS * (1 if geo.sw == 1 else 2) if x_unit else V * GATHER_NS
            if pairs:  # two output rows read KH + 1 input rows
                load *= (geo.KH + 1) / (2 * geo.KH)
            weight = VLOAD_NS / V if geo.lane_taps else BCAST_NS  # a lane of a loaded weight vector, or a splat
            if self.forms.rvv and geo.flat:  # RVV flat 1x1 rows: `vfmacc.vf` reads the weight as a scalar (an `flw`
                weight = 0.0  # beside the vector work; llvm-mca-22, X60: 12 channels x 1 vector 0.91x 4 x 2's time)
            if strips_fit(geo.plan, self.forms.rvv, geo.residual is not None):
                # RVV column strips (ops/conv/strips.py): per output vector one vector load and two slides, the
                # weights scalars in FP registers (vfmacc.vf); the step's three accumulators and the rows before and
                # after it keep the in-order FP unit busy (llvm-mca-22 on the X60: 100 of 128 cycles)
                load, weight, slow = STRIP_VECTOR_LOADS * VLOAD_NS / taps, 0.0, 1.0
            work = vecs * taps * (geo.Cog * VFMA_NS * slow + nb * load + geo.Cog * weight / max(U, 1))
            if self.forms.rvv and geo.sw > 1 and x_unit:
                work *= RVV_STRIDED_ROWS
            unit = geo.os[3] == 1
            stores = vecs * geo.Cog * STORE_NS if unit else out_elems * CONV_SCATTER_NS
            res = 0.0
            if geo.residual is not None:
                res = vecs * geo.Cog * VLOAD_NS if geo.residual[3] == 1 else out_elems * CONV_SCATTER_NS
        in_bytes = geo.Cig * geo.H * geo.W * item
        w_bytes = geo.Cog * taps * item
        nb = -(-geo.Cog // geo.R)
        units = -(-geo.OW // geo.P) if geo.flat else geo.OH
        if order == "co>px":
            traffic = in_bytes * (nb if in_bytes > self.forms.input_kept(CACHE_BYTES, taps, V * item) else 1) + w_bytes
        else:
            traffic = w_bytes * (units if w_bytes > self.forms.weights_kept(CACHE_BYTES, taps, V * item) else 1) + in_bytes
        if geo.pack_groups:  # the input read once into the stack, which stays cached; all weights once per group
            traffic = 2 * in_bytes + w_bytes * (units if order == "px>co" and w_bytes > CACHE_BYTES else geo.pack_groups)
        traffic = geo.N * geo.G * traffic + out_elems * item * (2 if geo.residual is not None else 1)
        return CALL_NS + (vc := self.vector_cycles) * work + vc * stores + vc * res + traffic / LINE * LINE_NS * 0.25

    def pool(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, None]:
        """ops/pool.py's vector pools: lanes over channels when both store channels innermost, else over
        output columns (unit-stride rows), else scalar; plus the bytes moved."""
        g = self.graph
        x, out = node.inputs[0], node.outputs[0]
        tx, to = g.tensors[x], g.tensors[out]
        if len(tx.shape) != 4 or len([o for o in node.outputs if o]) > 1:
            return self.opaque(node), None
        xs, os_ = self.strides(x, layouts), self.strides(out, layouts)
        V = self.lanes(out)
        taps = int(np.prod(node.attrs.get("kernel_shape") or [1]))
        if xs[1] == 1 and os_[1] == 1:
            lanes = V
        elif xs[3] == 1 and os_[3] == 1:
            lanes = V
        else:
            lanes = 1
        work = to.size * taps * (VFMA_NS + VLOAD_NS) / lanes * (self.vector_cycles if lanes > 1 else 1) + (0.0 if lanes > 1 else to.size * taps * FLOP_NS)
        n, c, oh, ow = to.shape
        scalar_rows = not (xs[1] == 1 and os_[1] == 1 and c >= V) and ow < column_lanes(V, ow)  # ops/pool.py: V x work per tap
        tiles = generic_tiles((n, oh, ow) if xs[1] == 1 and os_[1] == 1 else (n, c, oh), [0, 1, 2],
                              float(to.size) * taps * (V if scalar_rows else 1))
        return self.threaded(CALL_NS + work + (tx.nbytes + to.nbytes) / LINE * LINE_NS, tiles), None

    def global_pool(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, None]:
        g = self.graph
        x, out = node.inputs[0], node.outputs[0]
        shape = g.tensors[x].shape
        n = len(shape)
        item = np.dtype(g.tensors[x].dtype).itemsize
        uses = [Use(_dom_strides(shape, self.strides(x, layouts), range(n), n), item),
                Use(tuple(s if shape[d] == g.tensors[out].shape[d] else 0 for d, s in enumerate(self.strides(out, layouts))), item)]
        return nest_cost(shape, list(range(n)), uses, 1.0, self.lanes(out) / self.vector_cycles), None

    def channel_affine(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, None]:
        """Inference BatchNormalization: x * a[c] + b[c] in the output's storage order."""
        g = self.graph
        x, out = node.inputs[0], node.outputs[0]
        shape = g.tensors[out].shape
        n = len(shape)
        item = np.dtype(g.tensors[out].dtype).itemsize
        so = _dom_strides(shape, self.strides(out, layouts), range(n), n)
        uses = [Use(so, item), Use(_dom_strides(shape, self.strides(x, layouts), range(n), n), item)]
        order = sorted(range(n), key=lambda d: -abs(so[d]))
        tiles = generic_tiles(shape, order, float(np.prod(shape, dtype=np.float64)) * (1 + sum(1 for i in node.inputs if i)))
        return self.threaded(nest_cost(shape, order, uses, 2.0, self.lanes(out) / self.vector_cycles), tiles), None

    def concat(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, None]:
        g = self.graph
        out = node.outputs[0]
        so = self.strides(out, layouts)
        item = np.dtype(g.tensors[out].dtype).itemsize
        total = 0.0
        for name in node.inputs:
            if not name:
                continue
            shape = g.tensors[name].shape
            n = len(shape)
            order = sorted(range(n), key=lambda d: -abs(so[d]))
            uses = [Use(_dom_strides(shape, so, range(n), n), item), Use(_dom_strides(shape, self.strides(name, layouts), range(n), n), item)]
            total += nest_cost(shape, order, uses, 0.0, self.lanes(out) / self.vector_cycles)
        return total, None


CONV_SCATTER_NS = 0.15
"""An element of a vector of output channels stored where channels are not innermost (measured: 3x3 convs, AVX-512)."""
FIGURES = Figures(VFMA_NS, VLOAD_NS, BCAST_NS, STORE_NS, FLOP_NS, CONV_SCATTER_NS, LINE_NS, LINE, CACHE_BYTES)
ORDER_MARGIN = 0.02
"""A Conv loop order other than the kernel's default must be predicted this much faster."""
FMA_IN_FLIGHT = 8
"""Independent vector accumulators needed to hide FMA latency (two FMA ports x ~4 cycles)."""


def transpose_is_copy(graph: Graph, node: Node, layouts: Mapping[str, Perm]) -> bool:
    """The Transpose's output, stored in its layout, holds exactly the input's bytes in the input's layout."""
    x, out = node.inputs[0], node.outputs[0]
    tx, to = graph.tensors[x], graph.tensors[out]
    n = len(to.shape)
    perm = node.attrs.get("perm") or list(range(n))[::-1]
    sx = layout_strides(tx.shape, layouts.get(x))
    so = layout_strides(to.shape, layouts.get(out))
    return all(to.shape[j] == 1 or so[j] == sx[perm[j]] for j in range(n))


def transpose_is_view(graph: Graph, node: Node, layouts: Mapping[str, Perm]) -> bool:
    """A copying Transpose the optimizer turns into a view (the planner aliases it: no kernel at all)."""
    if node.op_type != "Transpose" or not node.inputs or not node.outputs:
        return False
    x, out = node.inputs[0], node.outputs[0]
    boundary = set(graph.inputs) | set(graph.outputs)
    if x in boundary or out in boundary or graph.tensors[x].is_const or graph.tensors[out].is_const:
        return False
    return transpose_is_copy(graph, node, layouts)


KIND_COSTS: dict[CostKind, Callable[[AnalyticModel, Node, Mapping[str, Perm]], tuple[float, str | None]]] = {
    "conv": AnalyticModel.conv, "pool": AnalyticModel.pool, "global_pool": AnalyticModel.global_pool, "concat": AnalyticModel.concat,
    "channel_affine": AnalyticModel.channel_affine, "transpose": AnalyticModel.transpose, "matmul": AnalyticModel.matmul}
"""OpSpec.cost_kind -> the formula that costs the kernel (inference BatchNormalization: channel_affine)."""


class KernelTimer(Protocol):
    """Times one node's kernel on this machine (emit/measure.py's Measurer)."""

    runs: int
    """Runs a measurement is the median of (recorded with it in the cache)."""

    def measure(self, node: Node, layouts: Mapping[str, Perm], loop_order: str | None = None) -> float | None:
        """Milliseconds per run of `node`'s kernel under `layouts` and `loop_order`, None when it has no kernel."""


class Costs:
    """The optimizer's cost source: analytic, or measured (`timer` on this machine / board entries) through the cache."""

    def __init__(self, graph: Graph, spec, mode: str = "analytic", cache: CostCache | None = None, threads: int = 1,
                 timer: KernelTimer | None = None):
        if mode not in ("analytic", "measure"):
            raise ValueError(f"unknown cost mode {mode!r}: analytic or measure")
        self.graph, self.spec, self.mode = graph, spec, mode
        forms = TargetForms(str(getattr(spec, "triple", "")), getattr(spec, "conv_accumulators", 12), str(getattr(spec, "features", "")),
                            private_caches=bool(getattr(spec, "private_caches", False)), cpu=str(getattr(spec, "cpu", "")))
        half = hasattr(spec, "triple") and half_arithmetic(spec.triple, spec.features)
        self.model = AnalyticModel(graph, getattr(spec, "vector_bits", 256), threads, forms, half)
        self.serial = AnalyticModel(graph, getattr(spec, "vector_bits", 256), forms=forms, half=half) if threads > 1 else self.model
        self.cache = cache
        self.measurer = None
        if mode == "measure":
            self.cache = cache or CostCache(target_key(spec.triple, spec.cpu))
            self.measurer = timer
        self.signatures: dict[str, str] = {}

    def analytic(self, node: Node, layouts: Mapping[str, Perm]) -> tuple[float, str | None]:
        return self.model.cost_and_order(node, layouts)

    def cost_and_order(self, node: Node, layouts: Mapping[str, Perm], varies: bool = True) -> tuple[float, str | None]:
        """Estimated ns and the loop order (MatMul/Gemm) for node under layouts."""
        est, order = self.model.cost_and_order(node, layouts)
        if self.mode != "measure" or not varies or self.cache is None or transpose_is_view(self.graph, node, layouts):
            return est, order
        sig = self.signatures.get(node.name)
        if sig is None:
            sig = self.signatures[node.name] = kernel_signature(self.graph, node)
        orders = [order] if order is None else self._order_candidates(node, layouts)
        best = (math.inf, order)
        for o in orders:
            key = layouts_key(self.graph, node, layouts, o)
            ms = self.cache.get(sig, key)
            if ms is None and self.measurer is not None:
                ms = self.measurer.measure(node, layouts, o)
                if ms is not None:
                    self.cache.put(sig, key, ms, self.measurer.runs, f"host:{platform.node()}")
            if ms is None:
                return est, order
            ns = self.threaded(node, layouts, o, ms * 1e6)
            if ns < best[0]:
                best = (ns, o)
        return best

    def threaded(self, node: Node, layouts: Mapping[str, Perm], order: str | None, ns: float) -> float:
        """A one-thread measurement (the JIT runs tiles serially) on the build's threads: the kernel's own
        split for a loop order, else the analytic model's threaded / one-thread ratio."""
        if self.model.threads == 1:
            return ns
        kind = self._loop_orders(node)
        if order is not None and kind is not None:
            strides = lambda n: self.model.strides(n, layouts)  # noqa: E731
            if kind == "conv":
                geo = conv_geometry(self.graph, node, strides, self.model.vector_bits, self.model.forms)
                wino = allowed_orders(node, geo, self.model.forms.conv_accumulators, tile=self.model.forms.gemm_tile).get(order)
                copies = 1 if geo is None else v_copies(self.model.forms.private_caches, self.model.threads, geo.N * geo.G, geo.Cog)
                tiles = None if geo is None else winograd_tiles(geo, wino, copies) if wino else self.model.conv_tiles(geo, order)
                return ns if geo is None else self.model.threaded(ns, tiles)
            return self.model.threaded(ns, self.model.matmul_tiles(matmul_geometry(self.graph, node, strides, self.model.half), order))
        serial = self.serial.cost_and_order(node, layouts)[0]
        return ns * self.model.cost_and_order(node, layouts)[0] / serial if serial > 0 else ns

    def _loop_orders(self, node: Node) -> str | None:
        spec = self.model.spec(node)
        return None if spec is None else spec.loop_orders

    def _order_candidates(self, node: Node, layouts) -> list[str]:
        if self._loop_orders(node) == "conv":
            geo = conv_geometry(self.graph, node, lambda n: self.model.strides(n, layouts), self.model.vector_bits, self.model.forms)
            wino = list(allowed_orders(node, geo, self.model.forms.conv_accumulators, whole=False,
                                        tile=self.model.forms.gemm_tile))
            return list(geo.orders()) + wino if geo is not None else [None]
        geo = matmul_geometry(self.graph, node, lambda n: self.model.strides(n, layouts), self.model.half)
        scored = sorted((self.model.matmul_order_cost(geo, o), o) for o in MATMUL_ORDERS)
        return [o for c, o in scored if c <= 2 * scored[0][0]][:2]

    def save(self) -> None:
        if self.cache is not None:
            self.cache.save()
