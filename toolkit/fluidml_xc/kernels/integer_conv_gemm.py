"""ConvInteger and QLinearConv as the blocked int8 GEMM (qgemm.py): output channels x blocks of output
pixels packed im2col-style per row into a stack buffer (else kernels/integer_conv.py's direct loops)."""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
from llvmlite import ir

from .epilogue import fused_epilogue
from .kernel import chunk_count, row_major
from . import qgemm
from .integer import (MAX_PACK_BYTES, conv_window, masked_load, multipliers, param_access, per_extent, single_value,
                      tap_columns, y_zero_splat)

MAX_FLAT_BLOCK_TAPS = 160
"""Outputs narrower than a column block pack blocks of pixels across rows, each block's packing emitted
on its own, while blocks per plane x kernel taps stays within this (build time); else row by row."""


class _ConvGemm:
    """fast_conv's state: the shapes and checks (__init__), the packed weights, scales and the stack pack
    (constants), then per output row or block of pixels the im2col packing and the GEMM of every channel block."""

    def __init__(self, k, x, w, x_zp, w_zp, bias, quant):
        """Everything fast_conv decides before emitting any code; self.fits is False when the shapes do not fit."""
        self.k, self.x, self.w, self.x_zp, self.bias, self.quant = k, x, w, x_zp, bias, quant
        out = self.out = k.outputs[0]
        self.fits = False
        if x.rank != 4 or w.value is None or not (row_major(x) and row_major(out)):
            return
        spatial, kernel, self.strides, self.dilations, self.begins = conv_window(k, x, w, out)
        group = self.group = int(k.attr("group", 1))
        self.n_batch, m_out, self.oh_n, self.ow_n = out.shape
        self.m_out = m_out
        cg, self.mg = w.shape[1], m_out // group
        self.cg = cg
        self.kh_n, self.kw_n = kernel
        taps = self.taps = self.kh_n * self.kw_n
        if cg < 2 or taps > 64 or not single_value(x_zp) or w_zp is not None and (w_zp.value is None or not per_extent(w_zp, m_out)):
            return
        if bias is not None and not per_extent(bias, m_out):
            return
        if quant is not None:
            x_s, w_s, y_s, y_zp = quant
            if not (single_value(x_s) and single_value(y_s) and single_value(y_zp) and per_extent(w_s, m_out)):
                return
        cfg = qgemm.config(k)
        if cfg.x86 and cfg.lanes == 16:  # AVX-512: 8-lane vectors (32 registers: 8 x 2 accumulators), finer column
            cfg = qgemm.Config(True, 8, 8, 2, cfg.quad)  # blocks (rows of 56 = 3 x 16 + 8) for the same multiply-adds per cycle
        wv = np.asarray(w.value).astype(np.int32).reshape(m_out, cg, taps)
        wz = np.zeros(m_out, np.int32) if w_zp is None else np.broadcast_to(np.asarray(w_zp.value).reshape(-1).astype(np.int32), (m_out,))
        wv = self.wv = wv - wz[:, None, None]
        quad = self.quad = cfg.quad and cfg.fits(wv)
        if cfg.quad and not quad:
            cfg = cfg.without_quads()
        self.cfg = cfg
        G = self.G = 4 if quad else 2
        self.cgr = -(-cg // G)
        self.kgroups = taps * self.cgr
        self.L, self.nr = cfg.lanes, cfg.nr
        self.fits = self.kgroups * self.nr * 2 * G <= MAX_PACK_BYTES

    def constants(self):
        """The packed weights, scales, bias, the stack pack and the zero point / padding values."""
        k, x, x_zp, quant, m_out, quad, G, cgr, kgroups, nr = (self.k, self.x, self.x_zp, self.quant, self.m_out, self.quad,
                                                              self.G, self.cgr, self.kgroups, self.nr)
        cfg, cg, taps, wv = self.cfg, self.cg, self.taps, self.wv
        b = k.b
        self.ih_n, self.iw_n = x.shape[2], x.shape[3]
        # weights: [M][k-groups][G], k-group (tap t, channel group j) at t * cgr + j
        wpad = np.zeros((m_out, G * cgr, taps), np.int32)
        wpad[:, :cg] = wv
        wk = wpad.reshape(m_out, cgr, G, taps).transpose(0, 3, 1, 2).reshape(m_out, G * kgroups)
        if quad:
            self.wpack = k.constant_array(np.ascontiguousarray(wk.astype(np.int8)).view(np.int32))
            self.wsum_ptr = k.constant_array(wv.sum(axis=(1, 2)).astype(np.int32))
        else:
            self.wpack = k.constant_array(qgemm.pack_a_rows(wk.astype(np.int16), cfg))
        if quant is not None:
            x_s, w_s, y_s, y_zp = quant
            self.mult = multipliers(k, [x_s, w_s, y_s], m_out, m_out, 1)
            self.y_zero = y_zero_splat(k, y_zp, self.L)
        self.bias_acc = param_access(k, self.bias, "B", 1, 0, m_out) if self.bias is not None else None
        elem = ir.IntType(8 if quad else 16)
        with b.goto_entry_block():
            self.xpack = b.alloca(elem, size=ir.Constant(ir.IntType(32), kgroups * G * nr))
        flip = quad and cfg.flips(x.dtype)
        zraw = None
        if x_zp is not None:
            zraw = k.load(x_zp.identity_access(), [k.index(0)] * x_zp.rank)
            x_zero = b.xor(zraw, ir.Constant(ir.IntType(8), 0x80)) if flip else (zraw if quad else qgemm.ext16(k, zraw, x_zp.dtype))
        else:
            x_zero = ir.Constant(ir.IntType(8), 0x80 if flip else 0) if quad else None
        self.x_zero, self.flip = x_zero, flip
        vec_t = ir.VectorType(elem, nr)
        self.zero_v = ir.Constant(vec_t, None)
        self.pad_v = k.splat(x_zero, nr) if quad else self.zero_v  # what padding packs as
        self.x_zero_v = k.splat(x_zero, nr) if (x_zero is not None and not quad) else None
        self.flip_v = ir.Constant(vec_t, [ir.Constant(ir.IntType(8), 0x80)] * nr) if flip else None
        if quad:
            self.zu32 = cfg.widen_flipped(k, x_zero, ir.IntType(32))
        (_, s_w), (_, d_w), (_, p_w) = self.strides, self.dilations, self.begins
        self.cols = cols = [tap_columns(kw, d_w, p_w, s_w, self.iw_n, self.ow_n) for kw in range(self.kw_n)]
        blocks = -(-self.ow_n // nr)
        interior = [j for j in range(blocks) if all(lo <= j * nr and j * nr + nr <= hi for _, lo, hi in cols)]
        self.j_lo, self.j_hi = (interior[0], interior[-1] + 1) if interior else (0, 0)
        self.edges = [j for j in range(blocks) if not self.j_lo <= j < self.j_hi]
        self.x_pass = k.splat(zraw, 1) if x_zp is not None else ir.Constant(ir.IntType(8), 0)  # padding before value()

    def pairs(self, u, v):
        """Two vectors of n lanes -> u0 v0 u1 v1 ..."""
        n = u.type.count
        mask = [i // 2 + (n if i % 2 else 0) for i in range(2 * n)]
        return self.k.b.shuffle_vector(u, v, ir.Constant(ir.VectorType(ir.IntType(32), 2 * n), mask))

    def interleave(self, vs):
        """G vectors of nr lanes -> one of G * nr: lane 0 of every vector, then lane 1, ..."""
        b, nr, pairs = self.k.b, self.nr, self.pairs
        if len(vs) == 2:
            return pairs(vs[0], vs[1])
        w16 = ir.VectorType(ir.IntType(16), nr)
        both = pairs(b.bitcast(pairs(vs[0], vs[1]), w16), b.bitcast(pairs(vs[2], vs[3]), w16))
        return b.bitcast(both, ir.VectorType(ir.IntType(8), 4 * nr))

    def value(self, raw):
        """Loaded int8/uint8 lanes -> packed element lanes."""
        k, b, x_zero = self.k, self.k.b, self.x_zero
        if self.quad:
            return b.xor(raw, self.flip_v if isinstance(raw.type, ir.VectorType) else ir.Constant(ir.IntType(8), 0x80)) if self.flip else raw
        v = qgemm.ext16(k, raw, self.x.dtype)
        if x_zero is not None:
            v = b.sub(v, self.x_zero_v if isinstance(raw.type, ir.VectorType) else x_zero)
        return v

    def pack(self, ni, g, oh, ow0, static_ow0):
        """xpack[k-group][nr][G] for output row oh, columns ow0..ow0+nr-1."""
        k, b, x, G, cg, cgr, nr, kw_n, cols = self.k, self.k.b, self.x, self.G, self.cg, self.cgr, self.nr, self.kw_n, self.cols
        ih_n, iw_n, value, pad_v, zero_v, x_pass = self.ih_n, self.iw_n, self.value, self.pad_v, self.zero_v, self.x_pass
        (s_h, s_w), (d_h, _), (p_h, _) = self.strides, self.dilations, self.begins
        with k.for_range(cgr) as j:
            c0 = b.add(b.mul(g, k.index(cg)), b.mul(j, k.index(G)))
            has = [None] + [b.icmp_signed("<", b.add(b.mul(j, k.index(G)), k.index(i)), k.index(cg)) if cg % G else None
                            for i in range(1, G)]
            for kh in range(self.kh_n):
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
                                raw = masked_load(k, x.ptr, start, -first * s_w, mask[first * s_w:] + [False] * (first * s_w),
                                                  x_pass)
                                if s_w != 1:
                                    raw = b.shuffle_vector(raw, raw, ir.Constant(ir.VectorType(ir.IntType(32), nr), [s_w * i for i in range(nr)]))
                                v = value(raw)
                        if has[ch] is not None:
                            v = b.select(has[ch], v, zero_v)
                        vecs.append(v)
                    packed = self.interleave(vecs)
                    fill = k.splat(self.x_zero, G * nr) if self.quad else ir.Constant(packed.type, None)  # a padding row
                    packed = b.select(row_ok, packed, fill)
                    at = b.add(b.mul(k.index(kh * kw_n + kw), k.index(cgr)), j)
                    dst = b.gep(self.xpack, [b.mul(at, k.index(G * nr))], inbounds=True)
                    b.store(packed, b.bitcast(dst, packed.type.as_pointer()), align=1)

    def pack_lanes(self, ni, g, positions):
        """xpack[k-group][nr][G] for the pixels positions[lane] = (oh, ow) (None: past the plane), all
        known at build time: per tap, one masked load per run of lanes in one output row."""
        k, b, x, G, cg, cgr, nr, kw_n, cols = self.k, self.k.b, self.x, self.G, self.cg, self.cgr, self.nr, self.kw_n, self.cols
        ih_n, iw_n, value, pad_v, zero_v, x_pass = self.ih_n, self.iw_n, self.value, self.pad_v, self.zero_v, self.x_pass
        (s_h, s_w), (d_h, _), (p_h, _) = self.strides, self.dilations, self.begins
        segments = {}
        for lane, pos in enumerate(positions):
            if pos is not None:
                segments.setdefault(pos[0], []).append((lane, pos[1]))
        with k.for_range(cgr) as j:
            c0 = b.add(b.mul(g, k.index(cg)), b.mul(j, k.index(G)))
            has = [None] + [b.icmp_signed("<", b.add(b.mul(j, k.index(G)), k.index(i)), k.index(cg)) if cg % G else None
                            for i in range(1, G)]
            plane0 = b.mul(b.add(b.mul(ni, k.index(x.shape[1])), c0), k.index(ih_n * iw_n))
            for kh in range(self.kh_n):
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
                            raw = masked_load(k, x.ptr, b.add(base, k.index(ih * iw_n + first)), 0, mask, x_pass)
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
                    packed = self.interleave(vecs)
                    at = b.add(b.mul(k.index(kh * kw_n + kw), k.index(cgr)), j)
                    dst = b.gep(self.xpack, [b.mul(at, k.index(G * nr))], inbounds=True)
                    b.store(packed, b.bitcast(dst, packed.type.as_pointer()), align=1)

    def channels(self, ni, g, pix0, count):
        """The GEMM of every channel block of group g against xpack; pixels pix0.. of each output plane."""
        k, b, cfg, quad, quant, L, out, m_out = self.k, self.k.b, self.cfg, self.quad, self.quant, self.L, self.out, self.m_out
        bias, bias_acc, kgroups, wpack, xpack = self.bias, self.bias_acc, self.kgroups, self.wpack, self.xpack

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
                    corr = b.neg(b.mul(self.zu32, k.load_ptr(self.wsum_ptr, np.int32, mi)))
                    extra = corr if extra is None else b.add(extra, corr)
                extra = k.splat(extra, L) if extra is not None else None
                mul_v = k.splat(k.load_ptr(self.mult, np.float64, mi), L) if quant is not None else None
                row_at = b.add(b.mul(b.add(b.mul(ni, k.index(m_out)), mi), k.index(self.oh_n * self.ow_n)), pix0)
                for v in range(nv):
                    c = count - v * L
                    acc = accs[r][v]
                    if extra is not None:
                        acc = b.add(acc, extra)
                    if quant is not None:
                        acc = qgemm.requantize_vec(k, acc, mul_v, self.y_zero, out.dtype, fused_epilogue(k).relu_floor)
                    qgemm.store_lanes(k, acc, out.ptr, b.add(row_at, k.index(v * L)), min(c, L), out.dtype)
        g0 = b.mul(g, k.index(self.mg))
        qgemm.blocks(k, self.mg, cfg.mr, lambda i, mr: block(b.add(g0, b.mul(i, k.index(cfg.mr))), mr))

    def conv_row(self, ni, g, oh):
        k, b, nr, ow_n = self.k, self.k.b, self.nr, self.ow_n
        if self.j_hi > self.j_lo:
            with k.for_range(self.j_hi, self.j_lo) as jb:
                ow0 = b.mul(jb, k.index(nr))
                self.pack(ni, g, oh, ow0, None)
                self.channels(ni, g, b.add(b.mul(oh, k.index(ow_n)), ow0), nr)
        for jb in self.edges:
            self.pack(ni, g, oh, k.index(jb * nr), jb * nr)
            self.channels(ni, g, b.add(b.mul(oh, k.index(ow_n)), k.index(jb * nr)), min(nr, ow_n - jb * nr))

    def emit(self):
        """Narrow rows: blocks of nr pixels across rows; else row by row; tiles over images, groups and chunks."""
        k, b, nr, n_batch, group, oh_n, ow_n = self.k, self.k.b, self.nr, self.n_batch, self.group, self.oh_n, self.ow_n
        work = float(n_batch) * self.m_out * oh_n * ow_n * self.cg * self.taps
        if ow_n < nr and -(-oh_n * ow_n // nr) * self.taps <= MAX_FLAT_BLOCK_TAPS:  # narrow rows: blocks of nr pixels across rows
            plane = oh_n * ow_n
            starts = list(range(0, plane, nr))
            chunks = chunk_count(len(starts), work, -(-chunk_count(1 << 30, work) // (n_batch * group)))
            with k.parallel_tiles([n_batch, group, chunks], work) as (ni, g, c):
                lo, hi = k.chunk(c, chunks, len(starts))
                for j, p0 in enumerate(starts):
                    inside = b.and_(b.icmp_signed("<=", lo, k.index(j)), b.icmp_signed(">", hi, k.index(j)))
                    with (b.if_then(inside) if chunks > 1 else nullcontext()):
                        self.pack_lanes(ni, g, [divmod(p, ow_n) if p < plane else None for p in range(p0, p0 + nr)])
                        self.channels(ni, g, k.index(p0), min(nr, plane - p0))
            return
        chunks = chunk_count(oh_n, work, -(-chunk_count(1 << 30, work) // (n_batch * group)))
        with k.parallel_tiles([n_batch, group, chunks], work) as (ni, g, c):
            if chunks == 1:
                with k.for_range(oh_n) as oh:
                    self.conv_row(ni, g, oh)
            else:
                rlo, rhi = k.chunk(c, chunks, oh_n)
                with k.for_range(rhi, rlo) as oh:
                    self.conv_row(ni, g, oh)


def fast_conv(k, x, w, x_zp, w_zp, bias, quant=None) -> bool:
    """2-D ConvInteger/QLinearConv as the blocked int8 GEMM (qgemm.py) per output row: output channels
    are the GEMM rows (constant weights packed at build time), a block of NR output columns the GEMM
    columns, packed per row (im2col of NR pixels) into a stack buffer reused by every channel block.
    A k-group is G input channels at one kernel tap: G = 2 (int16 k-pairs: x - x_zp, 0 for padding;
    weights - w_zp) or, with VNNI, G = 4 (uint8 k-quads: x with int8's top bit flipped, x_zp for
    padding; int8 weights - w_zp, then acc - zu * sum(weights) per channel). Blocks whose taps all
    read inside the row load vectors (a run loop); the edge blocks are emitted one by one with their
    valid lanes known at build time. quant = (x_s, w_s, y_s, y_zp) for QLinearConv. Returns False when
    the shapes do not fit."""
    conv = _ConvGemm(k, x, w, x_zp, w_zp, bias, quant)
    if not conv.fits:
        return False
    conv.constants()
    conv.emit()
    return True
