"""MatMul and Gemm under any operand layouts.

Floats run register-blocked kernels (kernels/matmul_blocked.py) with explicit target vectors (k.vector_bits:
8 x f32 on AVX2, 4 x f32 on NEON) whenever the loop order the optimizer chose (k.loop_order,
see kernels/matmul_geometry.py) allows it under the operands' strides:

- outer (ikj): an MR x NR tile of C accumulated in registers across the whole K loop, each step an
  outer product of MR broadcast A elements and NR/V vectors of B's row. Constant B is repacked at
  build time into NR-column panels (K x NR, zero-padded; one width for every code variant of a build,
  _panel_columns), so every B load is a full vector and
  the edge panel only stores its valid columns; activation B must be unit-stride along n (edge
  columns then run as one-lane groups).
- outer_t (jki): the same kernel on C^T = B^T A^T (A unit-stride along m, or constant).
- dot (ijk): MR x NC dot products with vectors along k (A and B unit-stride along k, e.g. attention's
  K^T kept in K's storage order), lanes summed by shuffles at the end, scalar K tail.

Gemm's alpha and beta * C are fused into the store (constant C is pre-scaled by beta at build time);
batch dimensions broadcast through stride 0. Anything else (integer types, orders whose strides do
not suit a blocked kernel) runs the scalar loop nest of that order, with constant weights repacked
into the orientation it streams.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..kernels.epilogue import fused_epilogue
from ..kernels.matmul_geometry import MATMUL_ORDERS, blocked_dtype, blocked_kind, default_order, domain_order
from ..kernels.kernel import Access, Operand, row_major_strides
from ..kernels.scalar import const, llvm_type, saturated
from ..kernels.loops import nest
from ..kernels.matmul_blocked import Mat, Problem, RunDims, repacked
from ..kernels.matmul_runtime import emit_matmul
from ..opspec import register
from ..target.arch import half_arithmetic

def _blocked(k, dtype) -> bool:
    """The blocked kernels take `dtype` on this target (float16 where the CPU has float16 vectors)."""
    return blocked_dtype(dtype, k.spec is not None and half_arithmetic(k.spec.triple, k.spec.features))


def _order(k, a_mk, b_kn, c_mn, m=2, n=2, a_const=False, b_const=False, dtype=np.float32) -> str:
    order = k.loop_order
    return order if order in MATMUL_ORDERS else default_order(a_mk, b_kn, c_mn, m, n, a_const, b_const,
                                                             _blocked(k, dtype))


def matmul_accumulate(k, a: Access, b: Access, c: Access, batch: tuple[int, ...], m: int, n: int, kk: int, dtype, scale=None,
                      order: str = "ikj") -> None:
    """C[batch, m, n] += (scale *) A[batch, m, k] * B[batch, k, n]; domain (batch..., m, k, n), loops in `order` (scalar)."""
    nb = len(batch)
    domain = (*batch, m, kk, n)
    loops = domain_order(order, nb)
    if np.dtype(dtype) == np.float16:
        _dot_in_float32(k, a, b, c, domain, nb, loops, scale)
        return
    if order == "ijk":  # dot products: accumulate in a register, add to C once
        def dot(values, idx):
            return [k.s.mul(dtype, values[0], values[1])]

        def finish(accs, idx):
            total = accs[0] if scale is None else k.s.mul(dtype, accs[0], scale)
            return [k.s.add(dtype, k.load(c, idx), total)]
        k.generic(domain, [c], [a, b], dot, reduce_dims=[nb + 1], init=[0], finalize=finish, order=loops)
        return

    def body(values, idx):
        prod = k.s.mul(dtype, values[1], values[2])
        if scale is not None:
            prod = k.s.mul(dtype, prod, scale)
        return [k.s.add(dtype, values[0], prod)]
    k.generic(domain, [c], [c, a, b], body, order=loops)


def _dot_in_float32(k, a: Access, b: Access, c: Access, domain: tuple[int, ...], nb: int, loops: list[int], scale) -> None:
    """float16: each dot product summed in float32 and rounded once into C, as numpy and ONNX Runtime do
    (summing in float16 loses about one bit per doubling of K)."""
    f16, f32, s = np.float16, np.float32, k.s
    red = nb + 1

    def point(ix):
        acc = k.local(llvm_type(f32), const(f32, 0))

        def step(ix2):
            prod = s.mul(f32, s.cast(f16, f32, k.load(a, ix2)), s.cast(f16, f32, k.load(b, ix2)))
            k.b.store(s.add(f32, k.b.load(acc), prod), acc)
        k.loops(domain, [red], ix, step)
        ix[red] = k.index(0)
        total = k.b.load(acc)
        if scale is not None:
            total = s.mul(f32, total, s.cast(f16, f32, scale))
        k.store(c, ix, s.cast(f32, f16, s.add(f32, s.cast(f16, f32, k.load(c, ix)), total)))
    k.loops(domain, [d for d in loops if d != red], [None] * len(domain), point)




# -- the ops ----------------------------------------------------------------------------------------
def _as_matrix_access(op: Operand, batch_rank: int, ndomain: int, row_dim: int, col_dim: int, rows_axis: int, cols_axis: int) -> Access:
    """Access of op's last two dims as (rows_axis, cols_axis) of a domain; leading dims broadcast over batch."""
    dims: list = [None] * op.rank
    lead = op.rank - 2
    for j in range(lead):
        dims[j] = batch_rank - lead + j
    dims[lead + rows_axis] = row_dim
    dims[lead + cols_axis] = col_dim
    return op.access(dims, ndomain)


def _finish_pass(k, out: Operand, residual: Operand | None, relu: bool) -> None:
    """out (+= residual) (= max(out, 0)) in one pass, where the kernel could not do it in its epilogue."""
    dt = out.dtype
    if residual is None and not relu:
        return
    ins = [out.identity_access()] + ([residual.broadcast_access(out.shape)] if residual is not None else [])

    def body(v, i):
        x = k.s.add(dt, v[0], v[1]) if residual is not None else v[0]
        return [k.s.clamp(dt, x, const(dt, 0), None) if relu else x]  # NaN stays NaN
    if k.dynamic:
        nest(k, k.extents(out), lambda ix: k.store(ins[0], ix, body([k.load(a, ix) for a in ins], ix)[0]))
        return
    k.generic(out.shape, [out.identity_access()], ins, body)


def _accumulate_runtime(k, a: Access, b: Access, c: Access, run: RunDims, dtype, starts: list[tuple[Access, float]],
                        scale, relu: bool) -> None:
    """C = (sum over k of A * B) (* scale) + sum of factor * start (max 0), serial loops to run-time extents: the
    kernel of orders and dtypes without a blocked form. Domain (batch..., m, k, n); each start (Access, factor) read
    over (batch..., m, n); float16 sums in float32."""
    s, nb = k.s, len(run.batch)
    ct = np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)

    def load(acc, ix):
        return s.cast(dtype, ct, k.load(acc, ix)) if ct != dtype else k.load(acc, ix)

    def point(ix):
        full = [*ix[:nb + 1], k.index(0), ix[nb + 1]]
        slot = k.local(llvm_type(ct), const(ct, 0))
        with k.for_range(run.kk) as r:
            full[nb + 1] = r
            k.b.store(s.add(ct, k.b.load(slot), s.mul(ct, load(a, full), load(b, full))), slot)
        full[nb + 1] = k.index(0)
        total = k.b.load(slot)
        if scale is not None:
            total = s.mul(ct, total, s.cast(dtype, ct, scale) if ct != dtype else scale)
        for st, factor in starts:
            x = load(st, ix)
            total = s.add(ct, total, x if factor == 1.0 else s.mul(ct, x, const(ct, factor)))
        if relu:
            total = s.clamp(ct, total, const(ct, 0), None)
        k.store(c, full, s.cast(ct, dtype, total) if ct != dtype else total)
    nest(k, [*run.batch, run.m, run.n], point)


def _run_dims(k, out: Operand, a_op: Operand, b_op: Operand, nb: int) -> RunDims | None:
    """MatMul's extents at run time (None for a static node): batch dims are C's leading ones."""
    if not k.dynamic:
        return None
    return RunDims(tuple(k.extent(out, j) for j in range(nb)), k.extent(a_op, a_op.rank - 2), k.extent(b_op, b_op.rank - 1),
                   k.extent(a_op, a_op.rank - 1))


def _bias_mat(bias: Operand | None) -> Mat | None:
    """The epilogue's view of a MatMul bias (passes/epilogues.py): N or 1 constant elements along the last dim."""
    if bias is None:
        return None
    return Mat(lambda op=bias: op.ptr, (), 0, 1 if bias.size > 1 else 0)


@register("MatMul", runtime_extents=True, strided=True, layout_anchor=True, loop_orders="matmul", heavy=True, cost_kind="matmul")
def lower_matmul(k):
    """C = A @ B, plus what passes/epilogues.py fused: input 2 a constant bias along the last dim (or ""),
    input 3 a residual activation of C's shape."""
    a, b = k.inputs[0], k.inputs[1]
    out = k.outputs[0]
    dt = out.dtype
    a_shape, b_shape = a.shape, b.shape
    a_op = a if a.rank >= 2 else Operand(a.name, a.dtype, (1, *a.shape), (0, *a.strides), a.ptr,
                                         None if a.value is None else a.value.reshape(1, -1), a.dyn and (1, *a.dyn))
    b_op = b if b.rank >= 2 else Operand(b.name, b.dtype, (*b.shape, 1), (*b.strides, 0), b.ptr,
                                         None if b.value is None else b.value.reshape(-1, 1), b.dyn and (*b.dyn, 1))
    c_mn = (out.strides[-2], out.strides[-1]) if a.rank >= 2 and b.rank >= 2 else (1, 1)
    m, kk, n = a_op.shape[-2], a_op.shape[-1], b_op.shape[-1]
    a_mk = (a_op.strides[-2], a_op.strides[-1])
    b_kn = (b_op.strides[-2], b_op.strides[-1])
    order = _order(k, a_mk, b_kn, c_mn, m, n, a.value is not None, b.value is not None, dt)
    kind = blocked_kind(order, a_mk, b_kn, m, n, a.value is not None, b.value is not None, _blocked(k, dt))
    batch = tuple(np.broadcast_shapes(a_op.shape[:-2], b_op.shape[:-2]))
    nb = len(batch)
    ndom = nb + 3
    out_dims: list = list(range(nb)) + [nb, nb + 2]
    if len(a_shape) == 1:
        out_dims = list(range(nb)) + [nb + 2]
    if len(b_shape) == 1:
        out_dims = out_dims[:-1]
    if len(a_shape) == 1 and len(b_shape) == 1:
        out_dims = []
    c_acc = out.access(out_dims, ndom)
    bias = k.inputs[2] if len(k.inputs) > 2 and k.inputs[2] is not None else None
    residual = k.inputs[3] if len(k.inputs) > 3 and k.inputs[3] is not None else None
    relu = fused_epilogue(k).activation == "relu"
    run = _run_dims(k, out, a_op, b_op, nb)
    if kind is not None:
        # the residual rides in the epilogue when stored like C (same shape and strides); else one pass after
        in_epilogue = residual is not None and residual.shape == out.shape and residual.strides == out.strides
        a_acc = _as_matrix_access(a_op, nb, ndom, nb, nb + 1, 0, 1)
        b_acc = _as_matrix_access(b_op, nb, ndom, nb + 1, nb + 2, 0, 1)
        sa, sb, sc = a_acc.strides, b_acc.strides, c_acc.strides
        P = Problem(np.dtype(dt), batch, m, n, kk,
                    Mat(lambda op=a: op.ptr, sa[:nb], sa[nb], sa[nb + 1], a_op.value),
                    Mat(lambda op=b: op.ptr, sb[:nb], sb[nb + 1], sb[nb + 2], b_op.value),
                    Mat(lambda op=out: op.ptr, sc[:nb], sc[nb], sc[nb + 2]), _bias_mat(bias),
                    residual=Mat(lambda op=residual: op.ptr, (), 0, 0) if in_epilogue else None, run=run)
        if residual is not None and not in_epilogue:
            emit_matmul(k, P, kind)
            _finish_pass(k, out, residual, relu)
        else:
            emit_matmul(k, replace(P, relu=relu), kind)
        return
    if b.value is not None and b.rank >= 2:
        b = repacked(k, b, False, column_major=order == "ijk")
        b_op = b
    a_acc = _as_matrix_access(a_op, nb, ndom, nb, nb + 1, 0, 1)
    b_acc = _as_matrix_access(b_op, nb, ndom, nb + 1, nb + 2, 0, 1)
    if run is not None:
        starts = [(op.broadcast_access((*batch, m, n)), 1.0) for op in (bias, residual) if op is not None]
        _accumulate_runtime(k, a_acc, b_acc, c_acc, run, dt, starts, None, relu)
        return
    c_init = out.access(out_dims[:nb] + ([nb] if len(a_shape) > 1 else []) + ([nb + 1] if len(b_shape) > 1 else []), nb + 2)
    if bias is not None or residual is not None:  # C starts as bias + residual (passes/epilogues.py: operands >= 2-D)
        starts = [op.broadcast_access((*batch, m, n)) for op in (bias, residual) if op is not None]
        k.generic((*batch, m, n), [c_init], starts, lambda v, i: [v[0] if len(v) == 1 else k.s.add(dt, v[0], v[1])])
    else:
        k.generic((*batch, m, n), [c_init], [], lambda v, i: [const(dt, 0)])
    matmul_accumulate(k, a_acc, b_acc, c_acc, batch, m, n, kk, dt, order=order)
    _finish_pass(k, out, None, relu)


@register("Gemm", runtime_extents=True, strided=True, layout_anchor=True, loop_orders="matmul", heavy=True, cost_kind="matmul")
def lower_gemm(k):
    a, b = k.inputs[0], k.inputs[1]
    c = k.inputs[2] if len(k.inputs) > 2 else None
    out = k.outputs[0]
    dt = out.dtype
    alpha, beta = float(k.attr("alpha", 1.0)), float(k.attr("beta", 1.0))
    trans_a, trans_b = int(k.attr("transA", 0)), int(k.attr("transB", 0))
    relu = fused_epilogue(k).activation == "relu"
    a_mk = (a.strides[1], a.strides[0]) if trans_a else (a.strides[0], a.strides[1])
    b_kn = (b.strides[1], b.strides[0]) if trans_b else (b.strides[0], b.strides[1])
    m, kk = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    order = _order(k, a_mk, b_kn, (out.strides[0], out.strides[1]), m, n, a.value is not None, b.value is not None, dt)
    kind = blocked_kind(order, a_mk, b_kn, m, n, a.value is not None, b.value is not None, _blocked(k, dt))
    run = None if not k.dynamic else RunDims((), k.extent(a, 1 if trans_a else 0), k.extent(b, 0 if trans_b else 1),
                                             k.extent(a, 0 if trans_a else 1))
    if kind is not None:
        sa = a.access([1, 0] if trans_a else [0, 1], 3).strides
        sb = b.access([2, 1] if trans_b else [1, 2], 3).strides
        sc = out.access([0, 2], 3).strides
        a_val = None if a.value is None else (a.value.T if trans_a else a.value)
        b_val = None if b.value is None else (b.value.T if trans_b else b.value)
        bias = None
        bias_beta = beta
        if c is not None and beta != 0.0:
            if c.value is not None:
                folded = np.ascontiguousarray(saturated(np.asarray(c.value, dtype=np.float64) * beta, dt))
                c = Operand(c.name + ".scaled", c.dtype, c.shape, row_major_strides(c.shape), k.constant_array(folded), folded)
                bias_beta = 1.0
            bs = c.broadcast_access((m, n)).strides
            bias = Mat(lambda op=c: op.ptr, (), bs[0], bs[1])
        P = Problem(np.dtype(dt), (), m, n, kk, Mat(lambda op=a: op.ptr, (), sa[0], sa[1], a_val), Mat(lambda op=b: op.ptr, (), sb[1], sb[2], b_val),
                    Mat(lambda op=out: op.ptr, (), sc[0], sc[2]), bias, alpha, bias_beta, relu=relu, run=run)
        emit_matmul(k, P, kind)
        return
    if b.value is not None:
        b, trans_b = repacked(k, b, bool(trans_b), column_major=order == "ijk"), 0
    if run is not None:
        starts = [(c.broadcast_access((m, n)), beta)] if c is not None and beta != 0.0 else []
        _accumulate_runtime(k, a.access([1, 0] if trans_a else [0, 1], 3), b.access([2, 1] if trans_b else [1, 2], 3),
                            out.access([0, 2], 3), run, dt, starts, None if alpha == 1.0 else const(dt, alpha), relu)
        return
    out_acc2 = out.access([0, 1], 2)
    if c is not None and beta != 0.0:
        c_acc = c.broadcast_access((m, n))
        scale = None if beta == 1.0 else const(dt, beta)
        k.generic((m, n), [out_acc2], [c_acc], lambda v, i: [v[0] if scale is None else k.s.mul(dt, v[0], scale)])
    else:
        k.generic((m, n), [out_acc2], [], lambda v, i: [const(dt, 0)])
    a_acc = a.access([1, 0] if trans_a else [0, 1], 3)
    b_acc = b.access([2, 1] if trans_b else [1, 2], 3)
    matmul_accumulate(k, a_acc, b_acc, out.access([0, 2], 3), (), m, n, kk, dt, None if alpha == 1.0 else const(dt, alpha), order=order)
    _finish_pass(k, out, None, relu)
