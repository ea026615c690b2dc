"""MatMulInteger and QLinearMatMul's kernels (kernels/integer.py; ops/qlinear.py lowers them): the blocked int8
GEMM (qgemm.py) for a constant B or two run-time operands, VNNI k-quads where the target has them, else one int32
dot product per output."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from .epilogue import fused_epilogue
from ..errors import InputError
from .kernel import PARALLEL_MIN_WORK, row_major
from . import qgemm
from .integer import (MAX_PACK_BYTES, masked_load, multipliers, param_access, per_extent, single_value, widen, y_zero_splat)
from .matmul_blocked import repacked


def matmul_points(k, a, b_op, a_zp, b_zp, epilogue):
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
        b_op = repacked(k, b_op, False, column_major=True)
    a_acc, b_acc = matrix(a, nb, nb + 1), matrix(b_op, nb + 1, nb + 2)
    c_acc = out.access(list(range(nb)) + [nb, nb + 2], ndom)
    az = param_access(k, a_zp, "a_zero_point", ndom, nb, m)
    bz = param_access(k, b_zp, "b_zero_point", ndom, nb + 2, n)
    i32 = ir.IntType(32)
    domain = (*batch, m, kk, n)
    idx: list = [None] * ndom

    def point(ix):
        slot = k.local(i32, ir.Constant(i32, 0))
        a_zero = widen(k, a_zp.dtype, k.load(az, ix)) if az is not None else None
        b_zero = widen(k, b_zp.dtype, k.load(bz, ix)) if bz is not None else None
        with k.for_range(kk) as kv:
            ix[nb + 1] = kv
            x, y = widen(k, a.dtype, k.load(a_acc, ix)), widen(k, b_op.dtype, k.load(b_acc, ix))
            if a_zero is not None:
                x = k.b.sub(x, a_zero)
            if b_zero is not None:
                y = k.b.sub(y, b_zero)
            k.b.store(k.b.add(k.b.load(slot), k.b.mul(x, y)), slot)
        ix[nb + 1] = k.index(0)
        k.store(c_acc, ix, epilogue(k.b.load(slot), ix))
    k.loops(domain, list(range(nb)) + [nb, nb + 2], idx, point)


def fast_matmul(k, a, b_op, a_zp, b_zp, quant=None) -> bool:
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
    if not (row_major(a) and row_major(out)) or out.size != a.size // kk * n or not kk:
        return False
    if not per_extent(a_zp, m) or not single_value(a_zp) and a_zp.rank != 1 or b_zp is not None and (b_zp.value is None or not per_extent(b_zp, n)):
        return False
    if quant is not None:
        a_s, b_s, y_s, y_zp = quant
        if not (single_value(a_s) and single_value(y_s) and single_value(y_zp) and per_extent(b_s, n)):
            return False
    cfg = qgemm.config(k)
    kp = (kk + 1) // 2
    if cfg.mr * kp * 4 > MAX_PACK_BYTES:
        return False
    if cfg.quad:
        if _matmul_quad(k, cfg, a, b_op, a_zp, b_zp, quant):
            return True
        cfg = cfg.without_quads()
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
        mult = multipliers(k, [a_s, b_s, y_s], n, npad, 1)
        y_zero = y_zero_splat(k, y_zp, L)
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
                    _store_vec(k, out, acc, col, lambda: b.add(b.mul(ri, k.index(n)), col), min(c, L), (mult, y_zero) if quant is not None else None)
        qgemm.blocks(k, n, nr, col_block)
    qgemm.tiled_blocks(k, [], rows, cfg.mr, float(rows) * n * kk, lambda _, i, mr: row_block(b.mul(i, k.index(cfg.mr)), mr))
    return True


def _store_vec(k, out, acc, col, at, lanes: int, requant) -> None:
    """One accumulator vector of output columns `col..`: requantized when `requant` = (multipliers, y zero
    splat) is given, stored at the element index `at()` (built after the requantizing instructions)."""
    if requant:
        mult, y_zero = requant
        acc = qgemm.requantize_vec(k, acc, k.vload(mult, np.float64, col, acc.type.count), y_zero, out.dtype,
                                   fused_epilogue(k).relu_floor)
    qgemm.store_lanes(k, acc, out.ptr, at(), lanes, out.dtype)


def _runtime_b_matmul(k, a, b_op, a_zp, b_zp, quant) -> bool:
    """Both operands computed at run time (attention-like batched products): per batch matrix, B is
    packed whole into a stack buffer as int16 k-pairs minus its zero point (no corrections), A's rows
    MR at a time as in fast_matmul, then the pmaddwd / widening micro-kernel (k-pairs on every target)."""
    out = k.outputs[0]
    m, kk, n = a.shape[-2], a.shape[-1], b_op.shape[-1]
    if not (row_major(a) and row_major(b_op) and row_major(out)) or not kk or not out.size:
        return False
    if not per_extent(a_zp, m) or not single_value(a_zp) and a_zp.rank != 1 or not per_extent(b_zp, n) or not single_value(b_zp) and b_zp.rank != 1:
        return False
    if quant is not None:
        a_s, b_s, y_s, y_zp = quant
        if not (single_value(a_s) and single_value(y_s) and single_value(y_zp) and per_extent(b_s, n)):
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
        mult = multipliers(k, [a_s, b_s, y_s], n, nbt * nr, 1)
        y_zero = y_zero_splat(k, y_zp, L)
    a_zero = None
    if a_zp is not None and a_zp.size == 1:
        a_zero = qgemm.ext16(k, k.load(a_zp.identity_access(), [k.index(0)] * a_zp.rank), a_zp.dtype)
    b_zero = None
    if b_zp is not None and b_zp.size == 1:
        b_zero = k.splat(qgemm.ext16(k, k.load(b_zp.identity_access(), [k.index(0)] * b_zp.rank), b_zp.dtype), nr)

    def pack_b(b0):
        _pack_b_pairs(k, b_op, b_zp, b_zero, b0, bpack, kk, n, nr)

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
                    _store_vec(k, out, acc, col, lambda: b.add(o0, b.add(b.mul(ri, k.index(n)), col)), min(count - v * L, L),
                               (mult, y_zero) if quant is not None else None)
        qgemm.blocks(k, n, nr, col_block)

    nbatch = int(np.prod(batch, dtype=np.int64))
    work = float(nbatch) * m * n * kk
    if k.tile_range is not None and work >= PARALLEL_MIN_WORK and nbatch >= 2:  # one tile per batch matrix (B packed once)
        with k.parallel_tiles([nbatch], work) as (bi,):
            pack_b(_batch_offset(k, batch, b_op, bi))
            a0, o0 = _batch_offset(k, batch, a, bi), b.mul(bi, k.index(m * n))
            qgemm.blocks(k, m, cfg.mr, lambda i, mr: row_block(a0, o0, b.mul(i, k.index(cfg.mr)), mr))
        return True
    with k.for_range(nbatch) as bi:
        pack_b(_batch_offset(k, batch, b_op, bi))
        a0 = _batch_offset(k, batch, a, bi)
        o0 = b.mul(bi, k.index(m * n))
        qgemm.blocks(k, m, cfg.mr, lambda i, mr: row_block(a0, o0, b.mul(i, k.index(cfg.mr)), mr))
    return True


def _batch_offset(k, batch, op, bi):
    """Element offset of batch matrix bi (flattened over the output's batch dims `batch`) in op (broadcast)."""
    b = k.b
    lead = op.rank - 2
    total, inner = k.index(0), 1
    for d in range(len(batch) - 1, -1, -1):
        od = d - (len(batch) - lead)
        if od >= 0 and op.shape[od] != 1:
            i = b.urem(b.udiv(bi, k.index(inner)), k.index(batch[d]))
            total = b.add(total, b.mul(i, k.index(op.strides[od])))
        inner *= batch[d]
    return total


def _pack_b_pairs(k, b_op, b_zp, b_zero, b0, bpack, kk: int, n: int, nr: int):
    """B's batch matrix at element b0 into bpack as int16 k-pairs minus its zero point, in column blocks of nr
    (b_zero: the splatted scalar zero point, else per column from b_zp; padding lanes 0 - zero point)."""
    b = k.b
    kp = (kk + 1) // 2
    pair_mask = ir.Constant(ir.VectorType(ir.IntType(32), 2 * nr), [i // 2 + (nr if i % 2 else 0) for i in range(2 * nr)])

    def load_row(base, count):
        """nr int16 values of a row of B from base (count valid lanes, the rest 0 - zero point)."""
        if count == nr:
            raw = k.vload(b_op.ptr, b_op.dtype, base, nr)
        else:
            raw = masked_load(k, b_op.ptr, base, 0, [i < count for i in range(nr)], ir.Constant(ir.IntType(8), 0))
        return qgemm.ext16(k, raw, b_op.dtype)

    def block(nb, count):
        n0 = b.mul(nb, k.index(nr))
        zero = b_zero
        if b_zp is not None and b_zp.size > 1:
            zraw = k.vload(b_zp.ptr, b_zp.dtype, n0, nr) if count == nr else \
                masked_load(k, b_zp.ptr, n0, 0, [i < count for i in range(nr)], ir.Constant(ir.IntType(8), 0))
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


def _matmul_quad(k, cfg, a, b_op, a_zp, b_zp, quant):
    """fast_matmul with VNNI (qgemm.quad_kernel): rows of A packed as uint8 (int8 with the top bit
    flipped), B packed at build time as int8 k-quads; zero points through per-column terms:
    acc = sum u*s + zu * (K * zs[n] - colsum_s[n]) - zs[n] * rowsum_u[r]. False (nothing emitted) when B's signed
    operand does not fit the k-quads (Config.fits)."""
    out = k.outputs[0]
    b = k.b
    m, kk, n = a.shape[-2], a.shape[-1], b_op.shape[-1]
    L, nr = cfg.lanes, cfg.nr
    rows = a.size // kk
    kq = (kk + 3) // 4
    bv = np.asarray(b_op.value).reshape(kk, n).astype(np.int32)
    zb = np.zeros(n, np.int32) if b_zp is None else np.broadcast_to(np.asarray(b_zp.value).reshape(-1).astype(np.int32), (n,))
    bs, zs = qgemm.signed_operand(bv, zb, b_op.dtype.kind == "u")
    if not cfg.fits(bs):
        return False
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
        mult = multipliers(k, [a_s, b_s, y_s], n, npad, 1)
        y_zero = y_zero_splat(k, y_zp, L)
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
                    _store_vec(k, out, acc, col, lambda: b.add(b.mul(ri, k.index(n)), col), min(c, L), (mult, y_zero) if quant is not None else None)
        qgemm.blocks(k, n, nr, col_block)
    qgemm.tiled_blocks(k, [], rows, cfg.mr, float(rows) * n * kk, lambda _, i, mr: row_block(b.mul(i, k.index(cfg.mr)), mr))
    return True
