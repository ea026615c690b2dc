"""MatMul and Gemm under any operand layouts, in the loop order the optimizer chose (node.attrs["_loop_order"],
see fluid/loop_order.py) or the best one for the operands' strides; constant weights repacked at build time
into the orientation that order streams (unit stride innermost)."""
from __future__ import annotations

import numpy as np

from ..codegen.kernel import Access, Operand, row_major_strides
from ..codegen.scalar import const
from ..fluid.loop_order import MATMUL_ORDERS, default_order, domain_order
from .registry import register


def _repacked(k, op: Operand, transpose: bool, column_major: bool = False) -> Operand:
    """A constant matrix (logically K x N after `transpose`) stored row-major, or column-major (N x K in memory)."""
    value = op.value.T if transpose else op.value
    if column_major:
        stored = np.ascontiguousarray(np.swapaxes(value, -1, -2))
        strides = list(row_major_strides(value.shape))
        strides[-1], strides[-2] = value.shape[-2] if value.ndim >= 2 else 1, 1
        lead = row_major_strides(stored.shape)[:-2]
        return Operand(op.name + ".packedT", op.dtype, value.shape, (*lead, *strides[-2:]), k.constant_array(stored), value)
    value = np.ascontiguousarray(value)
    return Operand(op.name + ".packed", op.dtype, value.shape, row_major_strides(value.shape), k.constant_array(value), value)


def _order(k, a_mk, b_kn, c_mn) -> str:
    order = k.attr("_loop_order")
    return order if order in MATMUL_ORDERS else default_order(a_mk, b_kn, c_mn)


def matmul_accumulate(k, a: Access, b: Access, c: Access, batch: tuple[int, ...], m: int, n: int, kk: int, dtype, scale=None,
                      order: str = "ikj") -> None:
    """C[batch, m, n] += (scale *) A[batch, m, k] * B[batch, k, n]; domain (batch..., m, k, n), loops in `order`."""
    nb = len(batch)
    domain = (*batch, m, kk, n)
    loops = domain_order(order, nb)
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


def _as_matrix_access(op: Operand, batch_rank: int, ndomain: int, row_dim: int, col_dim: int, rows_axis: int, cols_axis: int) -> Access:
    """Access of op's last two dims as (rows_axis, cols_axis) of a domain; leading dims broadcast over batch."""
    dims: list = [None] * op.rank
    lead = op.rank - 2
    for j in range(lead):
        dims[j] = batch_rank - lead + j
    dims[lead + rows_axis] = row_dim
    dims[lead + cols_axis] = col_dim
    return op.access(dims, ndomain)


@register("MatMul")
def lower_matmul(k):
    a, b = k.inputs[0], k.inputs[1]
    out = k.outputs[0]
    dt = out.dtype
    a_shape, b_shape = a.shape, b.shape
    a_op = a if a.rank >= 2 else Operand(a.name, a.dtype, (1, *a.shape), (0, *a.strides), a.ptr, None)
    c_mn = (out.strides[-2], out.strides[-1]) if a.rank >= 2 and b.rank >= 2 else (1, 1)
    b_kn = (b.strides[-2], b.strides[-1]) if b.rank >= 2 else (b.strides[-1], 0)
    order = _order(k, (a_op.strides[-2], a_op.strides[-1]), b_kn, c_mn)
    if b.value is not None and b.rank >= 2:
        want_col = order == "ijk"
        b = _repacked(k, b, False, column_major=want_col)
    b_op = b if b.rank >= 2 else Operand(b.name, b.dtype, (*b.shape, 1), (*b.strides, 0), b.ptr, None)
    m, kk, n = a_op.shape[-2], a_op.shape[-1], b_op.shape[-1]
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
    k.generic((*batch, m, n), [out.access(out_dims[:nb] + ([nb] if len(a_shape) > 1 else []) + ([nb + 1] if len(b_shape) > 1 else []), nb + 2)], [],
              lambda v, i: [const(dt, 0)])
    a_acc = _as_matrix_access(a_op, nb, ndom, nb, nb + 1, 0, 1)
    b_acc = _as_matrix_access(b_op, nb, ndom, nb + 1, nb + 2, 0, 1)
    matmul_accumulate(k, a_acc, b_acc, c_acc, batch, m, n, kk, dt, order=order)


@register("Gemm")
def lower_gemm(k):
    a, b = k.inputs[0], k.inputs[1]
    c = k.inputs[2] if len(k.inputs) > 2 else None
    out = k.outputs[0]
    dt = out.dtype
    alpha, beta = float(k.attr("alpha", 1.0)), float(k.attr("beta", 1.0))
    trans_a, trans_b = int(k.attr("transA", 0)), int(k.attr("transB", 0))
    a_mk = (a.strides[1], a.strides[0]) if trans_a else (a.strides[0], a.strides[1])
    b_kn = (b.strides[1], b.strides[0]) if trans_b else (b.strides[0], b.strides[1])
    order = _order(k, a_mk, b_kn, (out.strides[0], out.strides[1]))
    if b.value is not None:
        b, trans_b = _repacked(k, b, bool(trans_b), column_major=order == "ijk"), 0
    m, kk = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = b.shape[0] if trans_b else b.shape[1]
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
