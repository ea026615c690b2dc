"""Quantized integer ops: MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv.

int8/uint8 operands minus their zero points, products accumulated exactly in int32. The QLinear ops
requantize like onnx.reference: multiplier = x_scale * w_scale / y_scale in the scales' own dtype
(float32 or float16), then acc * multiplier + y_zero_point in double, rounded half to even and
saturated to the output type. Zero points and scales are per tensor, or per row of A / per column of
B (MatMul) and per output channel of W (Conv), as the spec allows.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.scalar import const
from . import qgemm
from .matmul import _repacked
from .registry import register

I32 = np.dtype(np.int32)
F64 = np.dtype(np.float64)


def _opt(k, i):
    return k.inputs[i] if i < len(k.inputs) else None


def _param_access(k, op, what: str, ndom: int, dim: int | None, extent: int | None):
    """Access of a zero point / scale: one value (size 1), or `extent` values along domain dim `dim`."""
    if op is None:
        return None
    if op.size == 1:
        return op.access([None] * op.rank, ndom)
    if dim is not None and op.rank == 1 and op.shape[0] == extent:
        return op.access([dim], ndom)
    raise InputError(f"node {k.node.name!r} ({k.node.op_type}): {what} of shape {list(op.shape)} is not supported; "
                     f"use a scalar{'' if dim is None else f' or a 1-D tensor of {extent} values'}")


def _widen(k, dt, v):
    return k.s.cast(dt, I32, v)


def _requantize(k, acc, scales: list, y_zp, out_dt):
    """round(acc * (s0 * s1 / s2) + y_zp) saturated to out_dt (and at least the node's `_relu_floor`,
    passes/qlinear_relu.py); scales = [(dtype, value)] x3."""
    b = k.b
    (d0, s0), (d1, s1), (d2, s2) = scales
    sdt = np.dtype(d0)
    s1 = k.s.cast(d1, sdt, s1)
    s2 = k.s.cast(d2, sdt, s2)
    mult = b.fdiv(b.fmul(s0, s1), s2)
    mult = k.s.cast(sdt, F64, mult)
    value = b.fmul(k.s.cast(I32, F64, acc), mult)
    if y_zp is not None:
        value = b.fadd(value, k.s.cast(y_zp[0], F64, y_zp[1]))
    value = k.s.intrinsic("llvm.roundeven", value)
    info = np.iinfo(out_dt)
    floor = k.attr("_relu_floor")
    value = k.s.min(F64, k.s.max(F64, value, const(F64, info.min if floor is None else max(info.min, floor))), const(F64, info.max))
    value = k.b.fptosi(value, ir.IntType(32))
    if k.attr("_lut") is not None:  # a folded DequantizeLinear -> Relu -> QuantizeLinear (passes/qlinear_relu.py)
        table = qgemm.lut_table(k, out_dt, k.attr("_lut"))
        return k.load_ptr(table, out_dt, qgemm.lut_index(k, value, int(info.min)))
    return k.s.cast(I32, out_dt, value)


# -- MatMul ---------------------------------------------------------------------------------------
def _matmul(k, a, b_op, a_zp, b_zp, epilogue):
    out = k.outputs[0]
    if a.rank < 2 or b_op.rank < 2:
        raise InputError(f"node {k.node.name!r} ({k.node.op_type}): 1-D operands are not supported; reshape them to 2-D")
    m, kk, n = a.shape[-2], a.shape[-1], b_op.shape[-1]
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b_op.shape[:-2]))
    nb = len(batch)
    ndom = nb + 3
    if not out.size:
        return

    def matrix(op, rows, cols):
        lead = op.rank - 2
        dims = [nb - lead + j for j in range(lead)] + [rows, cols]
        return op.access(dims, ndom)
    if b_op.value is not None:  # constant B stored column by column: the k loop reads both operands contiguously
        b_op = _repacked(k, b_op, False, column_major=True)
    a_acc, b_acc = matrix(a, nb, nb + 1), matrix(b_op, nb + 1, nb + 2)
    c_acc = out.access(list(range(nb)) + [nb, nb + 2], ndom)
    az = _param_access(k, a_zp, "a_zero_point", ndom, nb, m)
    bz = _param_access(k, b_zp, "b_zero_point", ndom, nb + 2, n)
    i32 = ir.IntType(32)
    domain = (*batch, m, kk, n)
    idx: list = [None] * ndom

    def point(ix):
        slot = k.local(i32, ir.Constant(i32, 0))
        a_zero = _widen(k, a_zp.dtype, k.load(az, ix)) if az is not None else None
        b_zero = _widen(k, b_zp.dtype, k.load(bz, ix)) if bz is not None else None
        with k.for_range(kk) as kv:
            ix[nb + 1] = kv
            x, y = _widen(k, a.dtype, k.load(a_acc, ix)), _widen(k, b_op.dtype, k.load(b_acc, ix))
            if a_zero is not None:
                x = k.b.sub(x, a_zero)
            if b_zero is not None:
                y = k.b.sub(y, b_zero)
            k.b.store(k.b.add(k.b.load(slot), k.b.mul(x, y)), slot)
        ix[nb + 1] = k.index(0)
        k.store(c_acc, ix, epilogue(k.b.load(slot), ix))
    k.loops(domain, list(range(nb)) + [nb, nb + 2], idx, point)


def _size1(op):
    return op is None or op.size == 1


def _per(op, extent):
    """None, one value, or a 1-D tensor of `extent` values."""
    return op is None or op.size == 1 or (op.rank == 1 and op.shape[0] == extent)


def _multipliers(k, scales, extent: int, padded: int, per_index: int | None):
    """double[padded] with multiplier i = double((s0 * s1 / s2) in s0's dtype) for i < extent (0 after).

    scales = [(operand, per-index?)] x3; one of them (index `per_index`) may hold `extent` values.
    Build-time constants when every scale is one, else computed at run time into a stack array."""
    ops = [s for s in scales]
    if all(op.value is not None for op in ops):
        sdt = np.dtype(ops[0].dtype)
        vals = [np.asarray(op.value).reshape(-1).astype(sdt) for op in ops]
        vals = [v if v.size > 1 else np.repeat(v, extent) for v in vals]
        with np.errstate(all="ignore"):
            mult = ((vals[0] * vals[1]) / vals[2]).astype(np.float64)
        table = np.zeros(padded, np.float64)
        table[:extent] = mult
        return k.constant_array(table)
    b = k.b
    with b.goto_entry_block():
        table = b.alloca(ir.DoubleType(), size=ir.Constant(ir.IntType(32), padded))
    zero = k.index(0)
    with k.for_range(extent) as i:
        vals = []
        for j, op in enumerate(ops):
            at = i if (j == per_index and op.size > 1) else zero
            vals.append(k.load(_param_access(k, op, "scale", 1, 0 if op.size > 1 else None, op.size), [at]))
        sdt = np.dtype(ops[0].dtype)
        s1 = k.s.cast(ops[1].dtype, sdt, vals[1])
        s2 = k.s.cast(ops[2].dtype, sdt, vals[2])
        mult = k.s.cast(sdt, F64, b.fdiv(b.fmul(vals[0], s1), s2))
        b.store(mult, b.gep(table, [i], inbounds=True))
    for i in range(extent, padded):
        b.store(ir.Constant(ir.DoubleType(), 0.0), b.gep(table, [k.index(i)], inbounds=True))
    return table


def _y_zero(k, y_zp, lanes):
    if y_zp is None:
        return None
    v = k.s.cast(y_zp.dtype, F64, k.load(_param_access(k, y_zp, "y_zero_point", 1, None, None), [k.index(0)]))
    return k.splat(v, lanes)


MAX_FLAT_BLOCK_TAPS = 160
"""Outputs narrower than a column block pack blocks of pixels across rows, each block's packing emitted
on its own, while blocks per plane x kernel taps stays within this (build time); else row by row."""

MAX_PACK_BYTES = 1 << 18
"""Largest run-time pack (stack) of the blocked int8 kernels; bigger operands take the plain loops."""


def _fast_matmul(k, a, b_op, a_zp, b_zp, quant=None) -> bool:
    """The blocked int8 GEMM (qgemm.py) for a constant 2-D B: rows of A packed MR at a time as int16
    k-pairs (minus a's zero point), B packed at build time as int8 in column blocks. B's zero point is
    folded into the packed values when b - zb fits int8, else into a per-column correction
    (sum_k a'(b - zb) = sum_k a'(b - o) - (zb - o) * sum_k a', o = 128 for uint8 B).
    quant = (a_s, b_s, y_s, y_zp) for QLinearMatMul. Returns False when the shapes do not fit."""
    out = k.outputs[0]
    if b_op.value is None and a.rank >= 2 and b_op.rank >= 2:
        return _runtime_b_matmul(k, a, b_op, a_zp, b_zp, quant)
    if b_op.value is None or a.rank < 2 or b_op.rank < 2 or any(d != 1 for d in b_op.shape[:-2]):
        return False
    m, kk, n = a.shape[-2], a.shape[-1], b_op.shape[-1]
    if not (qgemm.row_major(a) and qgemm.row_major(out)) or out.size != a.size // kk * n or not kk:
        return False
    if not _per(a_zp, m) or not _size1(a_zp) and a_zp.rank != 1 or b_zp is not None and (b_zp.value is None or not _per(b_zp, n)):
        return False
    if quant is not None:
        a_s, b_s, y_s, y_zp = quant
        if not (_size1(a_s) and _size1(y_s) and _size1(y_zp) and _per(b_s, n)):
            return False
    cfg = qgemm.config(k)
    kp = (kk + 1) // 2
    if cfg.mr * kp * 4 > MAX_PACK_BYTES:
        return False
    if cfg.quad:
        _matmul_quad(k, cfg, a, b_op, a_zp, b_zp, quant)
        return True
    b = k.b
    L, nr = cfg.lanes, cfg.nr
    rows = a.size // kk
    bv = np.asarray(b_op.value).reshape(kk, n).astype(np.int32)
    zb = np.zeros(n, np.int32) if b_zp is None else np.broadcast_to(np.asarray(b_zp.value).reshape(-1).astype(np.int32), (n,))
    diff = bv - zb
    coef = None
    if diff.min() >= -128 and diff.max() <= 127:
        packed = diff.astype(np.int8)
    else:
        off = 128 if b_op.dtype.kind == "u" else 0
        packed = (bv - off).astype(np.int8)
        coef = np.zeros(-(-n // nr) * nr, np.int32)
        coef[:n] = zb - off
    bpack = k.constant_array(qgemm.pack_b_columns(packed, cfg))
    coef_ptr = k.constant_array(coef) if coef is not None else None
    nblocks, ntail = n // nr, n % nr
    npad = (nblocks + (1 if ntail else 0)) * nr
    if quant is not None:
        mult = _multipliers(k, [a_s, b_s, y_s], n, npad, 1)
        y_zero = _y_zero(k, y_zp, L)
    with b.goto_entry_block():
        apack = b.alloca(ir.IntType(32), size=ir.Constant(ir.IntType(32), cfg.mr * kp))
        sums = b.alloca(ir.IntType(32), size=ir.Constant(ir.IntType(32), cfg.mr))
    apack16 = b.bitcast(apack, ir.IntType(16).as_pointer())
    a_zero = None
    if a_zp is not None and a_zp.size == 1:
        a_zero = qgemm.ext16(k, k.load(a_zp.identity_access(), [k.index(0)] * a_zp.rank), a_zp.dtype)

    def row_block(r0, mr):
        for r in range(mr):
            ri = b.add(r0, k.index(r)) if r else r0
            zero = a_zero
            if a_zp is not None and a_zp.size > 1:
                zero = qgemm.ext16(k, k.load_ptr(a_zp.ptr, a_zp.dtype, b.urem(ri, k.index(m))), a_zp.dtype)
            total = qgemm.pack_row(k, a.ptr, a.dtype, b.mul(ri, k.index(kk)), kk, b.gep(apack16, [k.index(2 * kp * r)]),
                                   zero, coef is not None, 2 * L)
            if total is not None:
                b.store(total, b.gep(sums, [k.index(r)]))

        def col_block(nb_idx, count):
            n0 = b.mul(nb_idx, k.index(nr))
            bp = b.gep(bpack, [b.mul(nb_idx, k.index(kp * 2 * nr))], inbounds=True)
            nv = -(-count // L)
            accs = qgemm.micro_kernel(k, cfg, mr, lambda r: b.gep(apack, [k.index(r * kp)]), bp, ir.IntType(8), kp, nv)
            for r in range(mr):
                ri = b.add(r0, k.index(r)) if r else r0
                row_sum = k.splat(b.load(b.gep(sums, [k.index(r)])), L) if coef is not None else None
                for v in range(nv):
                    c = count - v * L
                    col = b.add(n0, k.index(v * L)) if v else n0
                    acc = accs[r][v]
                    if row_sum is not None:
                        acc = b.sub(acc, b.mul(k.vload(coef_ptr, np.int32, col, L), row_sum))
                    if quant is not None:
                        acc = qgemm.requantize_vec(k, acc, k.vload(mult, np.float64, col, L), y_zero, out.dtype, k.attr("_relu_floor"))
                    qgemm.store_lanes(k, acc, out.ptr, b.add(b.mul(ri, k.index(n)), col), min(c, L), out.dtype)
        qgemm.blocks(k, n, nr, col_block)
    qgemm.tiled_blocks(k, [], rows, cfg.mr, float(rows) * n * kk, lambda _, i, mr: row_block(b.mul(i, k.index(cfg.mr)), mr))
    return True


def _runtime_b_matmul(k, a, b_op, a_zp, b_zp, quant) -> bool:
    """Both operands computed at run time (attention-like batched products): per batch matrix, B is
    packed whole into a stack buffer as int16 k-pairs minus its zero point (no corrections), A's rows
    MR at a time as in _fast_matmul, then the pmaddwd / widening micro-kernel (k-pairs on every target)."""
    out = k.outputs[0]
    m, kk, n = a.shape[-2], a.shape[-1], b_op.shape[-1]
    if not (qgemm.row_major(a) and qgemm.row_major(b_op) and qgemm.row_major(out)) or not kk or not out.size:
        return False
    if not _per(a_zp, m) or not _size1(a_zp) and a_zp.rank != 1 or not _per(b_zp, n) or not _size1(b_zp) and b_zp.rank != 1:
        return False
    if quant is not None:
        a_s, b_s, y_s, y_zp = quant
        if not (_size1(a_s) and _size1(y_s) and _size1(y_zp) and _per(b_s, n)):
            return False
    cfg = qgemm.config(k)
    if cfg.quad:
        cfg = qgemm.Config(cfg.x86, cfg.lanes, cfg.mr, 2 if cfg.sdot else cfg.nv)
    L, nr = cfg.lanes, cfg.nr
    kp = (kk + 1) // 2
    nbt = -(-n // nr)
    if nbt * kp * nr * 4 + cfg.mr * kp * 4 > MAX_PACK_BYTES:
        return False
    b = k.b
    batch = out.shape[:-2]
    i32, i16 = ir.IntType(32), ir.IntType(16)
    with b.goto_entry_block():
        apack = b.alloca(i32, size=ir.Constant(i32, cfg.mr * kp))
        bpack = b.alloca(i16, size=ir.Constant(i32, nbt * kp * nr * 2))
    apack16 = b.bitcast(apack, i16.as_pointer())
    if quant is not None:
        mult = _multipliers(k, [a_s, b_s, y_s], n, nbt * nr, 1)
        y_zero = _y_zero(k, y_zp, L)
    a_zero = None
    if a_zp is not None and a_zp.size == 1:
        a_zero = qgemm.ext16(k, k.load(a_zp.identity_access(), [k.index(0)] * a_zp.rank), a_zp.dtype)
    b_zero = None
    if b_zp is not None and b_zp.size == 1:
        b_zero = k.splat(qgemm.ext16(k, k.load(b_zp.identity_access(), [k.index(0)] * b_zp.rank), b_zp.dtype), nr)
    pair_mask = ir.Constant(ir.VectorType(i32, 2 * nr), [i // 2 + (nr if i % 2 else 0) for i in range(2 * nr)])

    def batch_offset(op, bi):
        """Element offset of batch matrix bi (flattened over the output's batch dims) in op (broadcast)."""
        lead = op.rank - 2
        total, inner = k.index(0), 1
        for d in range(len(batch) - 1, -1, -1):
            od = d - (len(batch) - lead)
            if od >= 0 and op.shape[od] != 1:
                i = b.urem(b.udiv(bi, k.index(inner)), k.index(batch[d]))
                total = b.add(total, b.mul(i, k.index(op.strides[od])))
            inner *= batch[d]
        return total

    def load_row(base, count):
        """nr int16 values of a row of B from base (count valid lanes, the rest 0 - zero point)."""
        if count == nr:
            raw = k.vload(b_op.ptr, b_op.dtype, base, nr)
        else:
            raw = _masked_load(k, b_op.ptr, base, 0, [i < count for i in range(nr)], ir.Constant(ir.IntType(8), 0))
        return qgemm.ext16(k, raw, b_op.dtype)

    def pack_b(b0):
        def block(nb, count):
            n0 = b.mul(nb, k.index(nr))
            zero = b_zero
            if b_zp is not None and b_zp.size > 1:
                zraw = k.vload(b_zp.ptr, b_zp.dtype, n0, nr) if count == nr else \
                    _masked_load(k, b_zp.ptr, n0, 0, [i < count for i in range(nr)], ir.Constant(ir.IntType(8), 0))
                zero = qgemm.ext16(k, zraw, b_zp.dtype)
            dst0 = b.mul(nb, k.index(kp * 2 * nr))

            def pair(p, second: bool):
                r0 = b.add(b0, b.add(b.mul(p, k.index(2 * n)), n0))
                v0 = load_row(r0, count)
                v1 = load_row(b.add(r0, k.index(n)), count) if second else ir.Constant(v0.type, None)
                if zero is not None:
                    v0 = b.sub(v0, zero)
                    if second:
                        v1 = b.sub(v1, zero)
                packed = b.shuffle_vector(v0, v1, pair_mask)
                dst = b.gep(bpack, [b.add(dst0, b.mul(p, k.index(2 * nr)))], inbounds=True)
                b.store(packed, b.bitcast(dst, packed.type.as_pointer()), align=2)
            qgemm.blocks(k, kk, 2, lambda p, width: pair(p, width == 2))
        qgemm.blocks(k, n, nr, block)

    def row_block(a0, o0, r0, mr):
        for r in range(mr):
            ri = b.add(r0, k.index(r)) if r else r0
            zero = a_zero
            if a_zp is not None and a_zp.size > 1:
                zero = qgemm.ext16(k, k.load_ptr(a_zp.ptr, a_zp.dtype, ri), a_zp.dtype)
            qgemm.pack_row(k, a.ptr, a.dtype, b.add(a0, b.mul(ri, k.index(kk))), kk, b.gep(apack16, [k.index(2 * kp * r)]),
                           zero, False, 2 * L)

        def col_block(nb_idx, count):
            n0 = b.mul(nb_idx, k.index(nr))
            bp = b.gep(bpack, [b.mul(nb_idx, k.index(kp * 2 * nr))], inbounds=True)
            nv = -(-count // L)
            accs = qgemm.micro_kernel(k, cfg, mr, lambda r: b.gep(apack, [k.index(r * kp)]), bp, i16, kp, nv)
            for r in range(mr):
                ri = b.add(r0, k.index(r)) if r else r0
                for v in range(nv):
                    col = b.add(n0, k.index(v * L)) if v else n0
                    acc = accs[r][v]
                    if quant is not None:
                        acc = qgemm.requantize_vec(k, acc, k.vload(mult, np.float64, col, L), y_zero, out.dtype, k.attr("_relu_floor"))
                    qgemm.store_lanes(k, acc, out.ptr, b.add(o0, b.add(b.mul(ri, k.index(n)), col)), min(count - v * L, L), out.dtype)
        qgemm.blocks(k, n, nr, col_block)

    nbatch = int(np.prod(batch, dtype=np.int64))
    work = float(nbatch) * m * n * kk
    from ..kernels.kernel import PARALLEL_MIN_WORK
    if k.tile_range is not None and work >= PARALLEL_MIN_WORK and nbatch >= 2:  # one tile per batch matrix (B packed once)
        with k.parallel_tiles([nbatch], work) as (bi,):
            pack_b(batch_offset(b_op, bi))
            a0, o0 = batch_offset(a, bi), b.mul(bi, k.index(m * n))
            qgemm.blocks(k, m, cfg.mr, lambda i, mr: row_block(a0, o0, b.mul(i, k.index(cfg.mr)), mr))
        return True
    with k.for_range(nbatch) as bi:
        pack_b(batch_offset(b_op, bi))
        a0 = batch_offset(a, bi)
        o0 = b.mul(bi, k.index(m * n))
        qgemm.blocks(k, m, cfg.mr, lambda i, mr: row_block(a0, o0, b.mul(i, k.index(cfg.mr)), mr))
    return True


def _matmul_quad(k, cfg, a, b_op, a_zp, b_zp, quant):
    """_fast_matmul with VNNI (qgemm.quad_kernel): rows of A packed as uint8 (int8 with the top bit
    flipped), B packed at build time as int8 k-quads; zero points through per-column terms:
    acc = sum u*s + zu * (K * zs[n] - colsum_s[n]) - zs[n] * rowsum_u[r]."""
    out = k.outputs[0]
    b = k.b
    m, kk, n = a.shape[-2], a.shape[-1], b_op.shape[-1]
    L, nr = cfg.lanes, cfg.nr
    rows = a.size // kk
    kq = (kk + 3) // 4
    bv = np.asarray(b_op.value).reshape(kk, n).astype(np.int32)
    zb = np.zeros(n, np.int32) if b_zp is None else np.broadcast_to(np.asarray(b_zp.value).reshape(-1).astype(np.int32), (n,))
    bs, zs = qgemm.signed_operand(bv, zb, b_op.dtype.kind == "u")
    nblocks, ntail = n // nr, n % nr
    npad = (nblocks + (1 if ntail else 0)) * nr
    t = np.zeros(npad, np.int64)
    t[:n] = kk * zs.astype(np.int64) - bs.astype(np.int64).sum(axis=0)
    zs_pad = np.zeros(npad, np.int32)
    zs_pad[:n] = zs
    with_rowsum = bool(zs.any())
    a_off = cfg.offset if cfg.flips(a.dtype) else 0
    const_zu = None
    if a_zp is None:
        const_zu = a_off
    elif a_zp.size == 1 and a_zp.value is not None:
        const_zu = int(np.asarray(a_zp.value).reshape(-1)[0]) + a_off
    if const_zu is not None:
        corr_ptr = k.constant_array((t * const_zu).astype(np.int32))  # wraps like the int32 sums
        t_ptr = None
    else:
        corr_ptr, t_ptr = None, k.constant_array(t.astype(np.int32))
    zs_ptr = k.constant_array(zs_pad) if with_rowsum else None
    bpack = k.constant_array(qgemm.pack_b_quads(bs, cfg))
    if quant is not None:
        a_s, b_s, y_s, y_zp = quant
        mult = _multipliers(k, [a_s, b_s, y_s], n, npad, 1)
        y_zero = _y_zero(k, y_zp, L)
    with b.goto_entry_block():
        apack = b.alloca(ir.IntType(32), size=ir.Constant(ir.IntType(32), cfg.mr * kq))
        sums = b.alloca(ir.IntType(32), size=ir.Constant(ir.IntType(32), cfg.mr))
        zus = b.alloca(ir.IntType(32), size=ir.Constant(ir.IntType(32), cfg.mr))
    apack8 = b.bitcast(apack, ir.IntType(8).as_pointer())

    def zero_u(ri):
        idx = k.index(0) if a_zp.size == 1 else b.urem(ri, k.index(m))
        v = k.load_ptr(a_zp.ptr, a_zp.dtype, idx)
        v = b.zext(v, ir.IntType(32)) if a_zp.dtype.kind == "u" else b.sext(v, ir.IntType(32))
        return b.add(v, ir.Constant(ir.IntType(32), a_off))

    def row_block(r0, mr):
        for r in range(mr):
            ri = b.add(r0, k.index(r)) if r else r0
            total = qgemm.pack_row_u8(k, cfg, a.ptr, a.dtype, b.mul(ri, k.index(kk)), kk, b.gep(apack8, [k.index(4 * kq * r)]), 4 * L)
            if with_rowsum:
                b.store(total, b.gep(sums, [k.index(r)]))
            if const_zu is None:
                b.store(zero_u(ri), b.gep(zus, [k.index(r)]))

        def col_block(nb_idx, count):
            n0 = b.mul(nb_idx, k.index(nr))
            bp = b.gep(bpack, [b.mul(nb_idx, k.index(kq * 4 * nr))], inbounds=True)
            nv = -(-count // L)
            accs = qgemm.quad_kernel(k, cfg, mr, lambda r: b.gep(apack, [k.index(r * kq)]), bp, kq, True, nv)
            for r in range(mr):
                ri = b.add(r0, k.index(r)) if r else r0
                row_sum = k.splat(b.load(b.gep(sums, [k.index(r)])), L) if with_rowsum else None
                zu = k.splat(b.load(b.gep(zus, [k.index(r)])), L) if const_zu is None else None
                for v in range(nv):
                    c = count - v * L
                    col = b.add(n0, k.index(v * L)) if v else n0
                    acc = accs[r][v]
                    if corr_ptr is not None:
                        acc = b.add(acc, k.vload(corr_ptr, np.int32, col, L))
                    else:
                        acc = b.add(acc, b.mul(zu, k.vload(t_ptr, np.int32, col, L)))
                    if row_sum is not None:
                        acc = b.sub(acc, b.mul(k.vload(zs_ptr, np.int32, col, L), row_sum))
                    if quant is not None:
                        acc = qgemm.requantize_vec(k, acc, k.vload(mult, np.float64, col, L), y_zero, out.dtype, k.attr("_relu_floor"))
                    qgemm.store_lanes(k, acc, out.ptr, b.add(b.mul(ri, k.index(n)), col), min(c, L), out.dtype)
        qgemm.blocks(k, n, nr, col_block)
    qgemm.tiled_blocks(k, [], rows, cfg.mr, float(rows) * n * kk, lambda _, i, mr: row_block(b.mul(i, k.index(cfg.mr)), mr))


def _scalar_or_indexed(k, op, idx, ndom, dim, extent, what):
    acc = _param_access(k, op, what, ndom, dim, extent)
    return None if acc is None else k.load(acc, idx)


@register("MatMulInteger", dtypes=("uint8", "int8"))
def lower_matmul_integer(k):
    if _fast_matmul(k, k.inputs[0], k.inputs[1], _opt(k, 2), _opt(k, 3)):
        return
    _matmul(k, k.inputs[0], k.inputs[1], _opt(k, 2), _opt(k, 3), lambda acc, idx: acc)


@register("QLinearMatMul", dtypes=("uint8", "int8"))
def lower_qlinear_matmul(k):
    a, a_s, a_zp, b_op, b_s, b_zp, y_s, y_zp = (list(k.inputs) + [None] * 8)[:8]
    out = k.outputs[0]
    nb = max(a.rank, b_op.rank) - 2
    ndom = nb + 3
    m, n = a.shape[-2], b_op.shape[-1]
    if _fast_matmul(k, a, b_op, a_zp, b_zp, (a_s, b_s, y_s, y_zp)):
        return

    def epilogue(acc, idx):
        s0 = _scalar_or_indexed(k, a_s, idx, ndom, nb, m, "a_scale")
        s1 = _scalar_or_indexed(k, b_s, idx, ndom, nb + 2, n, "b_scale")
        s2 = _scalar_or_indexed(k, y_s, idx, ndom, nb, m, "y_scale")
        zp = _scalar_or_indexed(k, y_zp, idx, ndom, nb, m, "y_zero_point")
        return _requantize(k, acc, [(a_s.dtype, s0), (b_s.dtype, s1), (y_s.dtype, s2)],
                           None if zp is None else (y_zp.dtype, zp), out.dtype)
    _matmul(k, a, b_op, a_zp, b_zp, epilogue)


# -- Conv -----------------------------------------------------------------------------------------
def _conv_geometry(k, x, w, out):
    spatial = x.rank - 2
    kernel = list(k.attr("kernel_shape", None) or w.shape[2:])
    strides = list(k.attr("strides", None) or [1] * spatial)
    dilations = list(k.attr("dilations", None) or [1] * spatial)
    auto_pad = k.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins = []
        for i in range(spatial):
            total = max(0, (out.shape[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - x.shape[2 + i])
            begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
    elif auto_pad == "VALID":
        begins = [0] * spatial
    else:
        begins = list(k.attr("pads", None) or [0] * (2 * spatial))[:spatial]
    return spatial, kernel, strides, dilations, begins


MAX_UNROLLED_TAPS = 32
"""Kernel widths up to this unroll their taps along the last spatial dim (bounds known at build time)."""


def _conv(k, x, w, x_zp, w_zp, bias, epilogue, vec_epilogue=None):
    """out[n, m, o...] = epilogue(sum over c, kernel of (x - x_zp) * (w[m] - w_zp[m]) (+ bias[m]), m).

    Output rows (the last spatial dim) one at a time. Every kernel tap along the row reads inside the
    image for one range of output columns, known at build time; where all taps do (the interior),
    blocks of V columns accumulate in int32 vector registers over channels and taps (x as one vector
    load per tap, the weight splat). The other columns (padding edges, the interior's tail) accumulate
    in an int32 stack row, tap by tap over their valid range. Padding contributes nothing: it stands
    for the zero point."""
    out = k.outputs[0]
    if not out.size:
        return
    spatial, kernel, strides, dilations, begins = _conv_geometry(k, x, w, out)
    if kernel[-1] > MAX_UNROLLED_TAPS:
        _conv_points(k, x, w, x_zp, w_zp, bias, epilogue)
        return
    b = k.b
    group = int(k.attr("group", 1))
    n_batch, m_out = out.shape[0], out.shape[1]
    cg = w.shape[1]
    mg = m_out // group
    i32 = ir.IntType(32)
    ow_n, iw_n = out.shape[-1], x.shape[-1]
    s_w, d_w, p_w = strides[-1], dilations[-1], begins[-1]
    x_acc, w_acc, o_acc = x.identity_access(), w.identity_access(), out.identity_access()
    xz = _param_access(k, x_zp, "x_zero_point", 1, None, None)
    wz = _param_access(k, w_zp, "w_zero_point", 1, 0, m_out)
    bias_acc = _param_access(k, bias, "B", 1, 0, m_out)
    zero_idx = [k.index(0)]
    with b.goto_entry_block():
        row = b.alloca(i32, size=ir.Constant(ir.IntType(32), ow_n))

    def valid(kw):
        """Output columns whose input column for tap kw is inside the image."""
        off = kw * d_w - p_w
        lo = 0
        while lo * s_w + off < 0:
            lo += 1
        hi = (iw_n - 1 - off) // s_w + 1 if iw_n - 1 - off >= 0 else 0
        return off, lo, max(lo, min(ow_n, hi))
    taps_w = [valid(kw) for kw in range(kernel[-1])]
    c_lo, c_hi = max(t[1] for t in taps_w), min(t[2] for t in taps_w)
    # vector blocks over [c_lo, c_hi): full-width ones, then (stride 1) at most one of each halved width (>= 4 lanes)
    segments, vec_end = [], c_lo
    width = k.lanes(np.int32)
    while width > 1:
        count = max(0, c_hi - vec_end) // width
        if count:
            segments.append((vec_end, count, width))
            vec_end += count * width
        if width <= 4 or s_w != 1:  # (strided columns are gathered lane by lane: the scalar loop does as well)
            break
        width //= 2
    blocks = sum(seg[1] for seg in segments)
    scalar_ranges = [(0, ow_n)] if not blocks else [(0, c_lo), (vec_end, ow_n)]
    x_col = x.strides[-1] * s_w

    def cell(ow):
        return b.gep(row, [ow], inbounds=True)

    mr = next(r for r in (4, 2, 1) if mg % r == 0) if blocks else 1

    with k.for_range(n_batch) as ni, k.for_range(m_out // mr) as mb:
        m0 = b.mul(mb, k.index(mr))
        g = b.sdiv(m0, k.index(mg))
        x_zero = _widen(k, x_zp.dtype, k.load(xz, zero_idx)) if xz is not None else None
        out_idx = [ni, m0] + [None] * spatial

        def w_zero(mi):
            return _widen(k, w_zp.dtype, k.load(wz, [mi])) if wz is not None else None

        def weight(mi, ci, kidx, kw, zero):
            wv = _widen(k, w.dtype, k.load(w_acc, [mi, ci, *kidx, k.index(kw)]))
            return b.sub(wv, zero) if zero is not None else wv

        def over_taps(idx, body):
            """body(kidx, pos) for every tap of the outer kernel dims that reads inside the image."""
            def taps(kidx):
                ok, pos = None, []
                for s in range(spatial - 1):
                    p = b.sub(b.add(b.mul(idx[2 + s], k.index(strides[s])), b.mul(kidx[s], k.index(dilations[s]))), k.index(begins[s]))
                    inside = b.and_(b.icmp_signed(">=", p, k.index(0)), b.icmp_signed("<", p, k.index(x.shape[2 + s])))
                    ok = inside if ok is None else b.and_(ok, inside)
                    pos.append(p)
                if ok is None:
                    body(kidx, pos)
                else:
                    with b.if_then(ok):
                        body(kidx, pos)
            k.loops(kernel[:-1], list(range(spatial - 1)), [None] * (spatial - 1), taps)

        def finish(idx, mi, ow, acc):
            if bias_acc is not None:
                acc = b.add(acc, _widen(k, bias.dtype, k.load(bias_acc, [mi])))
            oidx = list(idx)
            oidx[1], oidx[2 + spatial - 1] = mi, ow
            k.store(o_acc, oidx, epilogue(acc, mi))

        def edges(idx, mi):
            for lo, hi in scalar_ranges:
                if lo < hi:
                    with k.for_range(hi, lo) as ow:
                        b.store(ir.Constant(i32, 0), cell(ow))
            zero = w_zero(mi)

            def scalar_taps(kidx, pos):
                with k.for_range(cg) as ci:
                    c = b.add(b.mul(g, k.index(cg)), ci)
                    for kw, (off, lo_kw, hi_kw) in enumerate(taps_w):
                        ranges = [(max(lo, lo_kw), min(hi, hi_kw)) for lo, hi in scalar_ranges]
                        ranges = [r for r in ranges if r[0] < r[1]]
                        if not ranges:
                            continue
                        wv = weight(mi, ci, kidx, kw, zero)
                        for lo, hi in ranges:
                            with k.for_range(hi, lo) as ow:
                                iw = b.add(b.mul(ow, k.index(s_w)), k.index(off)) if s_w != 1 else b.add(ow, k.index(off))
                                xv = _widen(k, x.dtype, k.load(x_acc, [ni, c, *pos, iw]))
                                if x_zero is not None:
                                    xv = b.sub(xv, x_zero)
                                b.store(b.add(b.load(cell(ow)), b.mul(xv, wv)), cell(ow))
            over_taps(idx, scalar_taps)
            for lo, hi in scalar_ranges:
                if lo < hi:
                    with k.for_range(hi, lo) as ow:
                        finish(idx, mi, ow, b.load(cell(ow)))

        def out_row(idx):
            if mr == 1:
                edges(idx, m0)
            else:
                with k.for_range(mr) as r:
                    edges(idx, b.add(m0, r))
            if not blocks:
                return
            channels = [b.add(m0, k.index(r)) if r else m0 for r in range(mr)]
            zeros = [w_zero(mi) for mi in channels]
            for start, count, lanes in segments:
                vector_blocks(idx, channels, zeros, start, count, lanes)

        def vector_blocks(idx, channels, zeros, start, count, lanes):
            vt = ir.VectorType(i32, lanes)
            x_zero_v = k.splat(x_zero, lanes) if x_zero is not None else None
            with k.for_range(count) as blk:
                ow0 = b.add(k.index(start), b.mul(blk, k.index(lanes)))
                accs = [k.local(vt, k.vzero(np.int32, lanes)) for _ in range(mr)]

                def vector_taps(kidx, pos):
                    with k.for_range(cg) as ci:
                        c = b.add(b.mul(g, k.index(cg)), ci)
                        for kw, (off, _, _) in enumerate(taps_w):
                            iw0 = b.add(b.mul(ow0, k.index(s_w)), k.index(off))
                            at = k.linear(x_acc, [ni, c, *pos, iw0])
                            xv = k.vgather(x.ptr, x.dtype, at, x_col, lanes)
                            xv = b.zext(xv, vt) if x.dtype.kind == "u" else b.sext(xv, vt)
                            if x_zero_v is not None:
                                xv = b.sub(xv, x_zero_v)
                            for acc, mi, zero in zip(accs, channels, zeros):
                                b.store(b.add(b.load(acc), b.mul(xv, k.splat(weight(mi, ci, kidx, kw, zero), lanes))), acc)
                over_taps(idx, vector_taps)
                for acc, mi in zip(accs, channels):
                    total = b.load(acc)
                    if vec_epilogue is not None and out.strides[-1] == 1:  # the whole block at once, one store
                        if bias_acc is not None:
                            total = b.add(total, k.splat(_widen(k, bias.dtype, k.load(bias_acc, [mi])), lanes))
                        oidx = list(idx)
                        oidx[1], oidx[2 + spatial - 1] = mi, ow0
                        qgemm.store_lanes(k, vec_epilogue(total, mi), out.ptr, k.linear(o_acc, oidx), lanes, out.dtype)
                        continue
                    for lane in range(lanes):
                        finish(idx, mi, b.add(ow0, k.index(lane)), b.extract_element(total, ir.Constant(ir.IntType(32), lane)))
        k.loops(out.shape, list(range(2, 1 + spatial)), out_idx, out_row)


def _fast_conv(k, x, w, x_zp, w_zp, bias, quant=None) -> bool:
    """2-D ConvInteger/QLinearConv as the blocked int8 GEMM (qgemm.py) per output row: output channels
    are the GEMM rows (constant weights packed at build time), a block of NR output columns the GEMM
    columns, packed per row (im2col of NR pixels) into a stack buffer reused by every channel block.
    A k-group is G input channels at one kernel tap: G = 2 (int16 k-pairs: x - x_zp, 0 for padding;
    weights - w_zp) or, with VNNI, G = 4 (uint8 k-quads: x with int8's top bit flipped, x_zp for
    padding; int8 weights - w_zp, then acc - zu * sum(weights) per channel). Blocks whose taps all
    read inside the row load vectors (a run loop); the edge blocks are emitted one by one with their
    valid lanes known at build time. quant = (x_s, w_s, y_s, y_zp) for QLinearConv. Returns False when
    the shapes do not fit."""
    out = k.outputs[0]
    if x.rank != 4 or w.value is None or not (qgemm.row_major(x) and qgemm.row_major(out)):
        return False
    spatial, kernel, strides, dilations, begins = _conv_geometry(k, x, w, out)
    group = int(k.attr("group", 1))
    n_batch, m_out, oh_n, ow_n = out.shape
    cg, mg = w.shape[1], m_out // group
    kh_n, kw_n = kernel
    taps = kh_n * kw_n
    if cg < 2 or taps > 64 or not _size1(x_zp) or w_zp is not None and (w_zp.value is None or not _per(w_zp, m_out)):
        return False
    if bias is not None and not _per(bias, m_out):
        return False
    if quant is not None:
        x_s, w_s, y_s, y_zp = quant
        if not (_size1(x_s) and _size1(y_s) and _size1(y_zp) and _per(w_s, m_out)):
            return False
    cfg = qgemm.config(k)
    if cfg.x86 and cfg.lanes == 16:  # AVX-512: 8-lane vectors (32 registers: 8 x 2 accumulators), finer column
        cfg = qgemm.Config(True, 8, 8, 2, cfg.quad)  # blocks (rows of 56 = 3 x 16 + 8) for the same multiply-adds per cycle
    wv = np.asarray(w.value).astype(np.int32).reshape(m_out, cg, taps)
    wz = np.zeros(m_out, np.int32) if w_zp is None else np.broadcast_to(np.asarray(w_zp.value).reshape(-1).astype(np.int32), (m_out,))
    wv = wv - wz[:, None, None]
    quad = cfg.quad and wv.min() >= -128 and wv.max() <= 127
    if cfg.quad and not quad:
        cfg = qgemm.Config(cfg.x86, cfg.lanes, cfg.mr, cfg.nv, False)
    G = 4 if quad else 2
    cgr = -(-cg // G)
    kgroups = taps * cgr
    L, nr = cfg.lanes, cfg.nr
    if kgroups * nr * 2 * G > MAX_PACK_BYTES:
        return False
    b = k.b
    ih_n, iw_n = x.shape[2], x.shape[3]
    (s_h, s_w), (d_h, d_w), (p_h, p_w) = strides, dilations, begins
    # weights: [M][k-groups][G], k-group (tap t, channel group j) at t * cgr + j
    wpad = np.zeros((m_out, G * cgr, taps), np.int32)
    wpad[:, :cg] = wv
    wk = wpad.reshape(m_out, cgr, G, taps).transpose(0, 3, 1, 2).reshape(m_out, G * kgroups)
    if quad:
        wpack = k.constant_array(np.ascontiguousarray(wk.astype(np.int8)).view(np.int32))
        wsum_ptr = k.constant_array(wv.sum(axis=(1, 2)).astype(np.int32))
    else:
        wpack = k.constant_array(qgemm.pack_a_rows(wk.astype(np.int16), cfg))
    if quant is not None:
        mult = _multipliers(k, [x_s, w_s, y_s], m_out, m_out, 1)
        y_zero = _y_zero(k, y_zp, L)
    bias_acc = _param_access(k, bias, "B", 1, 0, m_out) if bias is not None else None
    elem = ir.IntType(8 if quad else 16)
    with b.goto_entry_block():
        xpack = b.alloca(elem, size=ir.Constant(ir.IntType(32), kgroups * G * nr))
    flip = quad and cfg.flips(x.dtype)
    if x_zp is not None:
        zraw = k.load(x_zp.identity_access(), [k.index(0)] * x_zp.rank)
        x_zero = b.xor(zraw, ir.Constant(ir.IntType(8), 0x80)) if flip else (zraw if quad else qgemm.ext16(k, zraw, x_zp.dtype))
    else:
        x_zero = ir.Constant(ir.IntType(8), 0x80 if flip else 0) if quad else None
    vec_t = ir.VectorType(elem, nr)
    zero_v = ir.Constant(vec_t, None)
    pad_v = k.splat(x_zero, nr) if quad else zero_v  # what padding packs as
    x_zero_v = k.splat(x_zero, nr) if (x_zero is not None and not quad) else None
    flip_v = ir.Constant(vec_t, [ir.Constant(ir.IntType(8), 0x80)] * nr) if flip else None
    if quad:
        zu32 = cfg.widen_flipped(k, x_zero, ir.IntType(32))

    def pairs(u, v):
        """Two vectors of n lanes -> u0 v0 u1 v1 ..."""
        n = u.type.count
        mask = [i // 2 + (n if i % 2 else 0) for i in range(2 * n)]
        return b.shuffle_vector(u, v, ir.Constant(ir.VectorType(ir.IntType(32), 2 * n), mask))

    def interleave(vs):
        """G vectors of nr lanes -> one of G * nr: lane 0 of every vector, then lane 1, ..."""
        if len(vs) == 2:
            return pairs(vs[0], vs[1])
        w16 = ir.VectorType(ir.IntType(16), nr)
        both = pairs(b.bitcast(pairs(vs[0], vs[1]), w16), b.bitcast(pairs(vs[2], vs[3]), w16))
        return b.bitcast(both, ir.VectorType(ir.IntType(8), 4 * nr))

    def col_range(kw):
        """Output columns whose tap kw reads inside the row: [lo, hi)."""
        off = kw * d_w - p_w
        lo = 0
        while lo * s_w + off < 0:
            lo += 1
        hi = (iw_n - 1 - off) // s_w + 1 if iw_n - 1 - off >= 0 else 0
        return off, lo, max(lo, min(ow_n, hi))
    cols = [col_range(kw) for kw in range(kw_n)]
    blocks = -(-ow_n // nr)
    interior = [j for j in range(blocks) if all(lo <= j * nr and j * nr + nr <= hi for _, lo, hi in cols)]
    j_lo, j_hi = (interior[0], interior[-1] + 1) if interior else (0, 0)
    edges = [j for j in range(blocks) if not j_lo <= j < j_hi]

    x_pass = k.splat(zraw, 1) if x_zp is not None else ir.Constant(ir.IntType(8), 0)  # padding before value()

    def value(raw):
        """Loaded int8/uint8 lanes -> packed element lanes."""
        if quad:
            return b.xor(raw, flip_v if isinstance(raw.type, ir.VectorType) else ir.Constant(ir.IntType(8), 0x80)) if flip else raw
        v = qgemm.ext16(k, raw, x.dtype)
        if x_zero is not None:
            v = b.sub(v, x_zero_v if isinstance(raw.type, ir.VectorType) else x_zero)
        return v

    def pack(ni, g, oh, ow0, static_ow0):
        """xpack[k-group][nr][G] for output row oh, columns ow0..ow0+nr-1."""
        with k.for_range(cgr) as j:
            c0 = b.add(b.mul(g, k.index(cg)), b.mul(j, k.index(G)))
            has = [None] + [b.icmp_signed("<", b.add(b.mul(j, k.index(G)), k.index(i)), k.index(cg)) if cg % G else None
                            for i in range(1, G)]
            for kh in range(kh_n):
                ih = b.add(b.mul(oh, k.index(s_h)), k.index(kh * d_h - p_h))
                row_ok = b.and_(b.icmp_signed(">=", ih, k.index(0)), b.icmp_signed("<", ih, k.index(ih_n)))
                ih_c = b.select(row_ok, ih, k.index(0))
                base0 = b.add(b.mul(b.add(b.mul(ni, k.index(x.shape[1])), c0), k.index(ih_n * iw_n)), b.mul(ih_c, k.index(iw_n)))
                for kw, (off, lo, hi) in enumerate(cols):
                    vecs = []
                    for ch in range(G):
                        base = b.add(base0, k.index(ch * ih_n * iw_n)) if ch else base0
                        if has[ch] is not None:  # past the last channel: clamp, masked below
                            base = b.select(has[ch], base, base0)
                        if static_ow0 is None:  # interior: every lane inside the row
                            start = b.add(base, b.add(b.mul(ow0, k.index(s_w)), k.index(off)))
                            if s_w == 1:
                                v = k.vload(x.ptr, x.dtype, start, nr)
                            else:
                                raw = k.vload(x.ptr, x.dtype, start, s_w * (nr - 1) + 1)
                                v = b.shuffle_vector(raw, raw, ir.Constant(ir.VectorType(ir.IntType(32), nr), [s_w * i for i in range(nr)]))
                            v = value(v)
                        else:  # an edge block: a masked load of the lanes inside the row (known now)
                            valid = [lo <= static_ow0 + lane < hi for lane in range(nr)]
                            if not any(valid):
                                v = pad_v
                            else:
                                first = valid.index(True)
                                span = s_w * (nr - 1) + 1
                                mask = [False] * span
                                for lane in range(nr):
                                    mask[lane * s_w] = valid[lane]
                                start = b.add(base, k.index((static_ow0 + first) * s_w + off))
                                raw = _masked_load(k, x.ptr, start, -first * s_w, mask[first * s_w:] + [False] * (first * s_w),
                                                   x_pass)
                                if s_w != 1:
                                    raw = b.shuffle_vector(raw, raw, ir.Constant(ir.VectorType(ir.IntType(32), nr), [s_w * i for i in range(nr)]))
                                v = value(raw)
                        if has[ch] is not None:
                            v = b.select(has[ch], v, zero_v)
                        vecs.append(v)
                    packed = interleave(vecs)
                    fill = k.splat(x_zero, G * nr) if quad else ir.Constant(packed.type, None)  # a padding row
                    packed = b.select(row_ok, packed, fill)
                    at = b.add(b.mul(k.index(kh * kw_n + kw), k.index(cgr)), j)
                    dst = b.gep(xpack, [b.mul(at, k.index(G * nr))], inbounds=True)
                    b.store(packed, b.bitcast(dst, packed.type.as_pointer()), align=1)

    def pack_lanes(ni, g, positions):
        """xpack[k-group][nr][G] for the pixels positions[lane] = (oh, ow) (None: past the plane), all
        known at build time: per tap, one masked load per run of lanes in one output row."""
        segments = {}
        for lane, pos in enumerate(positions):
            if pos is not None:
                segments.setdefault(pos[0], []).append((lane, pos[1]))
        with k.for_range(cgr) as j:
            c0 = b.add(b.mul(g, k.index(cg)), b.mul(j, k.index(G)))
            has = [None] + [b.icmp_signed("<", b.add(b.mul(j, k.index(G)), k.index(i)), k.index(cg)) if cg % G else None
                            for i in range(1, G)]
            plane0 = b.mul(b.add(b.mul(ni, k.index(x.shape[1])), c0), k.index(ih_n * iw_n))
            for kh in range(kh_n):
                for kw, (off, _, _) in enumerate(cols):
                    vecs = []
                    for ch in range(G):
                        base = b.add(plane0, k.index(ch * ih_n * iw_n)) if ch else plane0
                        if has[ch] is not None:
                            base = b.select(has[ch], base, plane0)
                        v = pad_v
                        for oh, lanes in segments.items():
                            ih = oh * s_h + kh * d_h - p_h
                            if not 0 <= ih < ih_n:
                                continue
                            inside = [(lane, ow * s_w + off) for lane, ow in lanes if 0 <= ow * s_w + off < iw_n]
                            if not inside:
                                continue
                            first = inside[0][1]
                            span = max(nr, inside[-1][1] - first + 1)
                            mask = [False] * span
                            for _, iw in inside:
                                mask[iw - first] = True
                            raw = _masked_load(k, x.ptr, b.add(base, k.index(ih * iw_n + first)), 0, mask, x_pass)
                            sel = [0] * nr
                            for lane, iw in inside:
                                sel[lane] = iw - first
                            moved = b.shuffle_vector(raw, raw, ir.Constant(ir.VectorType(ir.IntType(32), nr), sel))
                            lane_set = {lane for lane, _ in inside}
                            keep = ir.Constant(ir.VectorType(ir.IntType(1), nr), [ir.Constant(ir.IntType(1), int(l in lane_set)) for l in range(nr)])
                            v = b.select(keep, value(moved), v)
                        if has[ch] is not None:
                            v = b.select(has[ch], v, zero_v)
                        vecs.append(v)
                    packed = interleave(vecs)
                    at = b.add(b.mul(k.index(kh * kw_n + kw), k.index(cgr)), j)
                    dst = b.gep(xpack, [b.mul(at, k.index(G * nr))], inbounds=True)
                    b.store(packed, b.bitcast(dst, packed.type.as_pointer()), align=1)

    def channels(ni, g, pix0, count):
        """The GEMM of every channel block of group g against xpack; pixels pix0.. of each output plane."""
        def block(m0, mr):
            row = lambda r: b.gep(wpack, [b.mul(b.add(m0, k.index(r)), k.index(kgroups))], inbounds=True)  # noqa: E731
            nv = -(-count // L)  # a tail block computes only the vectors it stores
            if quad:
                accs = qgemm.quad_kernel(k, cfg, mr, row, xpack, kgroups, False, nv)
            else:
                accs = qgemm.micro_kernel(k, cfg, mr, row, xpack, ir.IntType(16), kgroups, nv)
            for r in range(mr):
                mi = b.add(m0, k.index(r)) if r else m0
                extra = None
                if bias_acc is not None:
                    extra = k.load(bias_acc, [mi if bias.size > 1 else k.index(0)])
                if quad:
                    corr = b.neg(b.mul(zu32, k.load_ptr(wsum_ptr, np.int32, mi)))
                    extra = corr if extra is None else b.add(extra, corr)
                extra = k.splat(extra, L) if extra is not None else None
                mul_v = k.splat(k.load_ptr(mult, np.float64, mi), L) if quant is not None else None
                row_at = b.add(b.mul(b.add(b.mul(ni, k.index(m_out)), mi), k.index(oh_n * ow_n)), pix0)
                for v in range(nv):
                    c = count - v * L
                    acc = accs[r][v]
                    if extra is not None:
                        acc = b.add(acc, extra)
                    if quant is not None:
                        acc = qgemm.requantize_vec(k, acc, mul_v, y_zero, out.dtype, k.attr("_relu_floor"))
                    qgemm.store_lanes(k, acc, out.ptr, b.add(row_at, k.index(v * L)), min(c, L), out.dtype)
        g0 = b.mul(g, k.index(mg))
        qgemm.blocks(k, mg, cfg.mr, lambda i, mr: block(b.add(g0, b.mul(i, k.index(cfg.mr))), mr))

    from ..kernels.kernel import chunk_count
    work = float(n_batch) * m_out * oh_n * ow_n * cg * taps
    if ow_n < nr and -(-oh_n * ow_n // nr) * taps <= MAX_FLAT_BLOCK_TAPS:  # narrow rows: blocks of nr pixels across rows
        plane = oh_n * ow_n
        starts = list(range(0, plane, nr))
        chunks = chunk_count(len(starts), work, -(-chunk_count(1 << 30, work) // (n_batch * group)))
        with k.parallel_tiles([n_batch, group, chunks], work) as (ni, g, c):
            lo, hi = k.chunk(c, chunks, len(starts))
            for j, p0 in enumerate(starts):
                inside = b.and_(b.icmp_signed("<=", lo, k.index(j)), b.icmp_signed(">", hi, k.index(j)))
                with (b.if_then(inside) if chunks > 1 else nullcontext()):
                    pack_lanes(ni, g, [divmod(p, ow_n) if p < plane else None for p in range(p0, p0 + nr)])
                    channels(ni, g, k.index(p0), min(nr, plane - p0))
        return True
    def conv_row(ni, g, oh):
        if j_hi > j_lo:
            with k.for_range(j_hi, j_lo) as jb:
                ow0 = b.mul(jb, k.index(nr))
                pack(ni, g, oh, ow0, None)
                channels(ni, g, b.add(b.mul(oh, k.index(ow_n)), ow0), nr)
        for jb in edges:
            pack(ni, g, oh, k.index(jb * nr), jb * nr)
            channels(ni, g, b.add(b.mul(oh, k.index(ow_n)), k.index(jb * nr)), min(nr, ow_n - jb * nr))

    chunks = chunk_count(oh_n, work, -(-chunk_count(1 << 30, work) // (n_batch * group)))
    with k.parallel_tiles([n_batch, group, chunks], work) as (ni, g, c):
        if chunks == 1:
            with k.for_range(oh_n) as oh:
                conv_row(ni, g, oh)
        else:
            rlo, rhi = k.chunk(c, chunks, oh_n)
            with k.for_range(rhi, rlo) as oh:
                conv_row(ni, g, oh)
    return True


def _masked_load(k, ptr, first_index, shift: int, mask: list, passthru_scalar):
    """Lanes l (mask[l - shift] true, shifted so lane `shift`.. start at ptr[first_index]) of bytes, others passthru.

    Only the bytes of true mask lanes are read (llvm.masked.load), counted from ptr[first_index] for
    the first true lane; the vector returned has the lanes in their block positions (shift <= 0)."""
    b = k.b
    n = len(mask)
    vt = ir.VectorType(ir.IntType(8), n)
    name = f"llvm.masked.load.v{n}i8.p0v{n}i8"
    fn = k.module.globals.get(name) or ir.Function(k.module, ir.FunctionType(vt, [vt.as_pointer(), ir.IntType(32), ir.VectorType(ir.IntType(1), n), vt]), name)
    at = b.bitcast(b.gep(ptr, [first_index]), vt.as_pointer())
    m = ir.Constant(ir.VectorType(ir.IntType(1), n), [ir.Constant(ir.IntType(1), int(x)) for x in mask])
    loaded = b.call(fn, [at, ir.Constant(ir.IntType(32), 1), m, k.splat(passthru_scalar, n)])
    if shift == 0:
        return loaded
    # lane j of the result = loaded[j + shift] (shift < 0: the first -shift lanes are passthru)
    pad = k.splat(passthru_scalar, n)
    idx = [j + shift if j + shift >= 0 else n + j for j in range(n)]
    return b.shuffle_vector(loaded, pad, ir.Constant(ir.VectorType(ir.IntType(32), n), idx))


def _conv_points(k, x, w, x_zp, w_zp, bias, epilogue):
    """One output point at a time, every kernel tap bounds-checked (very wide kernels)."""
    out = k.outputs[0]
    b = k.b
    spatial, kernel, strides, dilations, begins = _conv_geometry(k, x, w, out)
    group = int(k.attr("group", 1))
    n_batch, m_out = out.shape[0], out.shape[1]
    cg = w.shape[1]
    mg = m_out // group
    i32 = ir.IntType(32)
    x_acc, w_acc, o_acc = x.identity_access(), w.identity_access(), out.identity_access()
    xz = _param_access(k, x_zp, "x_zero_point", 1, None, None)
    wz = _param_access(k, w_zp, "w_zero_point", 1, 0, m_out)
    bias_acc = _param_access(k, bias, "B", 1, 0, m_out)
    zero_idx = [k.index(0)]

    with k.for_range(n_batch) as ni, k.for_range(m_out) as mi:
        g = b.sdiv(mi, k.index(mg))
        w_zero = _widen(k, w_zp.dtype, k.load(wz, [mi])) if wz is not None else None
        x_zero = _widen(k, x_zp.dtype, k.load(xz, zero_idx)) if xz is not None else None
        out_idx = [ni, mi] + [None] * spatial

        def out_point(idx):
            slot = k.local(i32, ir.Constant(i32, 0))
            kpos = [None] * spatial

            def tap(kidx):
                ok = None
                pos = []
                for s in range(spatial):
                    p = b.sub(b.add(b.mul(idx[2 + s], k.index(strides[s])), b.mul(kidx[s], k.index(dilations[s]))), k.index(begins[s]))
                    inside = b.and_(b.icmp_signed(">=", p, k.index(0)), b.icmp_signed("<", p, k.index(x.shape[2 + s])))
                    ok = inside if ok is None else b.and_(ok, inside)
                    pos.append(p)
                with b.if_then(ok):
                    with k.for_range(cg) as ci:
                        c = b.add(b.mul(g, k.index(cg)), ci)
                        xv = _widen(k, x.dtype, k.load(x_acc, [ni, c, *pos]))
                        wv = _widen(k, w.dtype, k.load(w_acc, [mi, ci, *kidx]))
                        if x_zero is not None:
                            xv = b.sub(xv, x_zero)
                        if w_zero is not None:
                            wv = b.sub(wv, w_zero)
                        b.store(b.add(b.load(slot), b.mul(xv, wv)), slot)
            k.loops(kernel, list(range(spatial)), kpos, tap)
            acc = b.load(slot)
            if bias_acc is not None:
                acc = b.add(acc, _widen(k, bias.dtype, k.load(bias_acc, [mi])))
            k.store(o_acc, idx, epilogue(acc, mi))
        k.loops(out.shape, list(range(2, 2 + spatial)), out_idx, out_point)


@register("ConvInteger", dtypes=("uint8", "int8"))
def lower_conv_integer(k):
    if _fast_conv(k, k.inputs[0], k.inputs[1], _opt(k, 2), _opt(k, 3), None):
        return
    _conv(k, k.inputs[0], k.inputs[1], _opt(k, 2), _opt(k, 3), None, lambda acc, m: acc, lambda acc, m: acc)


@register("QLinearConv", dtypes=("uint8", "int8"))
def lower_qlinear_conv(k):
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = (list(k.inputs) + [None] * 8)[:8]
    bias = _opt(k, 8)
    out = k.outputs[0]
    m_out = out.shape[1]
    zero = [k.index(0)]
    if _fast_conv(k, x, w, x_zp, w_zp, bias, (x_s, w_s, y_s, y_zp)):
        return

    def epilogue(acc, mi):
        s0 = k.load(_param_access(k, x_s, "x_scale", 1, None, None), zero)
        s1 = k.load(_param_access(k, w_s, "w_scale", 1, 0, m_out), [mi])
        s2 = k.load(_param_access(k, y_s, "y_scale", 1, None, None), zero)
        zp = k.load(_param_access(k, y_zp, "y_zero_point", 1, None, None), zero) if y_zp is not None else None
        return _requantize(k, acc, [(x_s.dtype, s0), (w_s.dtype, s1), (y_s.dtype, s2)],
                           None if zp is None else (y_zp.dtype, zp), out.dtype)

    def vec_epilogue(acc, mi):
        """_requantize on a vector of one channel: the same multiplier and zero point, lane-wise doubles."""
        lanes = acc.type.count
        s0 = k.load(_param_access(k, x_s, "x_scale", 1, None, None), zero)
        s1 = k.load(_param_access(k, w_s, "w_scale", 1, 0, m_out), [mi])
        s2 = k.load(_param_access(k, y_s, "y_scale", 1, None, None), zero)
        sdt = np.dtype(x_s.dtype)
        mult = k.s.cast(sdt, F64, k.b.fdiv(k.b.fmul(s0, k.s.cast(w_s.dtype, sdt, s1)), k.s.cast(y_s.dtype, sdt, s2)))
        yz = None
        if y_zp is not None:
            yz = k.splat(k.s.cast(y_zp.dtype, F64, k.load(_param_access(k, y_zp, "y_zero_point", 1, None, None), zero)), lanes)
        return qgemm.requantize_vec(k, acc, k.splat(mult, lanes), yz, out.dtype, k.attr("_relu_floor"))
    _conv(k, x, w, x_zp, w_zp, bias, epilogue, vec_epilogue)
