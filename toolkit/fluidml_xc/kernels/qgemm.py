"""Register-blocked int8 GEMM for the quantized ops (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv).

C[r, n] = sum_k A'[r, k] * B'[k, n] in int32, with A' and B' the operands minus their zero points as
int16 (|value| <= 255, so every product and every sum of two products is exact in int32).

Both operands are consumed in pairs of k ("k-pairs"): A as one int32 per (row, k-pair) holding the two
int16 values (broadcast to every lane), B as 2*L int8 or int16 values per k-pair and block of L columns,
interleaved (b[k, n0], b[k+1, n0], b[k, n0+1], ...). On x86 one `pmaddwd` (vpdpwssd with VNNI)
multiplies and adds a k-pair for L columns; elsewhere (NEON, ...) the 2L products accumulate in
2L int32 lanes (smlal/smlal2) and the even and odd lanes are added once at the end. A block of MR rows
x NV vectors of L columns stays in registers over the whole k loop.

Layouts:
  A pack (runtime rows or build-time weights): int32 [MR rows][KP k-pairs] (row r at r * KP).
  B pack: [KP][NV * L * 2] per column block of NV * L columns (int8 or int16 elements).
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from .epilogue import fused_epilogue
from ..errors import InputError
from ..target.arch import arch_of, riscv_vlen
from .kernel import PARALLEL_MIN_WORK, chunk_count

I8, I16, I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
F64 = ir.DoubleType()
PAIR_SUM_LIMIT = 64
"""vpmaddubsw adds two uint8 x int8 products in int16 with saturation: |u0 s0 + u1 s1| <= 255 * (|s0| + |s1|) stays
within 32767 when |s| <= 64 (7-bit weights, onnxruntime.quantization's reduce_range), so the pair sums are exact."""


@lru_cache(maxsize=None)
def _host_flags() -> frozenset:
    return frozenset(llvm.get_host_cpu_features().flatten().split(","))


def target_flags(k) -> frozenset:
    """The target's LLVM feature flags ("+avx2", "+dotprod", ...) from the kernel's machine spec; without one,
    the host's on x86 and none elsewhere."""
    if k.spec is None:
        return _host_flags() if arch_of(str(k.module.triple)).x86 else frozenset()
    return frozenset(f.strip() for f in str(k.spec.features).split(",") if f.strip())


@dataclass(frozen=True)
class Config:
    x86: bool
    lanes: int  # int32 lanes of one accumulator vector
    mr: int  # rows per register block
    nv: int  # accumulator vectors per row (columns per block = nv * lanes)
    quad: bool = False  # k-quads of bytes: x86 VNNI (vpdpbusd, uint8 x int8) or aarch64 sdot (int8 x int8)
    sdot: bool = False
    pairs: bool = False
    """x86 AVX2 without VNNI: the k-quads through vpmaddubsw (uint8 x int8 pair sums in int16) and vpmaddwd by ones,
    exact only when every signed operand lies within +-PAIR_SUM_LIMIT (`fits`), which the op checks on its
    constant weights (else it runs the k-pairs)."""

    def fits(self, signed: np.ndarray) -> bool:
        """May the k-quads take these signed-operand values (int8; for `pairs` within +-PAIR_SUM_LIMIT)?"""
        bound = PAIR_SUM_LIMIT if self.pairs else 128
        return signed.size == 0 or (int(signed.min()) >= -bound and int(signed.max()) <= min(bound, 127))

    def without_quads(self) -> Config:
        """The same block over k-pairs (pmaddwd on int16)."""
        return Config(self.x86, self.lanes, self.mr, self.nv)

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    def flips(self, dtype) -> bool:
        """Whether a quad operand of `dtype` is stored with its top bit flipped (int8 -> uint8 for VNNI's
        unsigned operand, uint8 -> int8 for sdot)."""
        return (np.dtype(dtype).kind == "u") == self.sdot

    @property
    def offset(self) -> int:
        """What flipping adds to a value: +128 (int8 -> uint8) or -128 (uint8 -> int8)."""
        return -128 if self.sdot else 128

    def widen_flipped(self, k, value, ty):
        """A stored (flipped or not) byte as the int32 it stands for in the dot products."""
        return k.b.sext(value, ty) if self.sdot else k.b.zext(value, ty)


def _x86_config(flags: frozenset, vector_bits: int) -> Config:
    """pmaddwd k-pairs: AVX-512BW 6 x 2 zmm blocks, AVX2 4 x 2 ymm, else SSE2 xmm; VNNI k-quads where present."""
    if "+avx2" in flags and vector_bits >= 256:
        if "+avx512bw" in flags and vector_bits >= 512:
            return Config(True, 16, 6, 2, "+avx512vnni" in flags)
        vnni = "+avxvnni" in flags or {"+avx512vnni", "+avx512vl"} <= flags
        return Config(True, 8, 4, 2, True, pairs=not vnni)
    return Config(True, 4, 4, 2)


def _aarch64_config(flags: frozenset, vector_bits: int) -> Config:
    """32 NEON registers: 4 rows x 2 vectors of widened k-pairs, or 4 x 4 of sdot k-quads with +dotprod."""
    lanes = max(1, vector_bits // 32)
    if "+dotprod" in flags and lanes == 4:
        return Config(False, 4, 4, 4, True, True)
    return Config(False, lanes, 4, 2)


def _arm32_config(flags: frozenset, vector_bits: int) -> Config:
    """16 q registers: 2 rows x 2 vectors of widened k-pairs."""
    return Config(False, max(1, vector_bits // 32), 2, 2)


def _riscv_config(flags: frozenset, vector_bits: int) -> Config:
    """Widened k-pairs: RVV (32 vector registers) 4 rows x 2 vectors; RV64GC's scalarized 4-lane vectors 2 x 2
    (16 int32 accumulators in the 31 integer registers). RVV: one V register of int32 lanes (VLEN, not the float
    kernels' register groups: target vector_lmul)."""
    vlen = riscv_vlen(",".join(flags))
    lanes = max(1, (vlen or vector_bits) // 32)
    return Config(False, lanes, 4 if "+v" in flags else 2, 2)


CONFIGS: dict[str, Callable[[frozenset, int], Config]] = {
    "x86": _x86_config, "aarch64": _aarch64_config, "arm32": _arm32_config, "riscv": _riscv_config}
"""Arch.family (target/arch.py) -> the register block for the target's flags and vector width."""


def config(k) -> Config:
    """The int8 GEMM register block for the kernel's target; an architecture without one is an error."""
    family = arch_of(str(k.module.triple)).family
    if family not in CONFIGS:
        raise InputError(f"no int8 GEMM register block for the {family} architecture "
                         "(add one to kernels/qgemm.py CONFIGS)")
    return CONFIGS[family](target_flags(k), k.vector_bits)


def _fn(k, name: str, ret, args):
    fn = k.module.globals.get(name)
    if fn is None:
        fn = ir.Function(k.module, ir.FunctionType(ret, args), name)
    return fn


def blocks(k, total: int, size: int, fn) -> None:
    """fn(i, width) over [0, total) in blocks of `size`: a run-time loop over the full blocks (i is the
    block's index value, width == size), then the tail block (width total % size), if any."""
    if total // size:
        with k.for_range(total // size) as i:
            fn(i, size)
    if total % size:
        fn(k.index(total // size), total % size)


def blocks_in(k, total: int, size: int, fn, rng) -> None:
    """blocks() over the block indices [lo, hi) of rng (run time), or all of them when rng is None."""
    if rng is None:
        blocks(k, total, size, fn)
        return
    lo, hi = rng
    full = total // size
    if full:
        with k.for_range(k.imin(hi, k.index(full)), lo) as i:
            fn(i, size)
    if total % size:
        with k.b.if_then(k.b.icmp_signed(">", hi, k.index(full))):
            fn(k.index(full), total % size)


def tiled_blocks(k, outer: list[int], total: int, size: int, work: float, fn) -> None:
    """fn(outer index values, i, width) over `outer` extents x blocks() of [0, total), as parallel tiles
    (outer points x chunks of blocks) when the op is big enough, else plain loops."""
    nblk = -(-total // size)
    npts = int(np.prod(outer, dtype=np.int64)) if outer else 1
    chunks = chunk_count(nblk, work, -(-chunk_count(1 << 30, work) // npts))
    if k.tile_range is not None and work >= PARALLEL_MIN_WORK and npts * chunks >= 2:
        with k.parallel_tiles([*outer, chunks], work) as idx:
            blocks_in(k, total, size, lambda i, w: fn(idx[:-1], i, w), k.chunk(idx[-1], chunks, nblk))
        return
    with ExitStack() as stack:
        idx = [stack.enter_context(k.for_range(e)) if e > 1 else k.index(0) for e in outer]
        blocks(k, total, size, lambda i, w: fn(idx, i, w))


def micro_kernel(k, cfg: Config, mr: int, a_row, b_ptr, b_elem: ir.IntType, kp: int, nv: int | None = None) -> list[list[ir.Value]]:
    """accs[r][v] (<L x i32>) = sum over kp k-pairs of A pack rows a_row(r, kp_index) (i32*) x B pack b_ptr.

    a_row(r) returns the i32* of row r's k-pairs; b_ptr points at the block's [KP][NR * 2] elements;
    nv < cfg.nv computes only the first nv vectors of the block (a tail block)."""
    b = k.b
    L, nv = cfg.lanes, nv or cfg.nv
    wide = ir.VectorType(I16, 2 * L)
    if cfg.x86:
        acc_t = ir.VectorType(I32, L)
        pmadd = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd", 16: "llvm.x86.avx512.pmaddw.d.512"}[L]
        pmadd = _fn(k, pmadd, acc_t, [wide, wide])
    else:
        acc_t = ir.VectorType(I32, 2 * L)
    zero = ir.Constant(acc_t, None)
    slots = [[k.local(acc_t, zero) for _ in range(nv)] for _ in range(mr)]
    rows = [a_row(r) for r in range(mr)]
    b_vt = ir.VectorType(b_elem, 2 * L)
    with k.for_range(kp) as p:
        base = b.mul(p, k.index(2 * cfg.nr), flags=("nsw",))
        bvecs = []
        for v in range(nv):
            at = b.add(base, k.index(2 * L * v), flags=("nsw",)) if v else base
            raw = b.load(b.bitcast(b.gep(b_ptr, [at], inbounds=True), b_vt.as_pointer()), align=b_elem.width // 8)
            bv = raw if b_elem.width == 16 else b.sext(raw, wide)
            bvecs.append(bv if cfg.x86 else b.sext(bv, acc_t))
        for r in range(mr):
            a32 = b.load(b.gep(rows[r], [p], inbounds=True))
            av = b.bitcast(k.splat(a32, L), wide)
            if not cfg.x86:
                av = b.sext(av, acc_t)
            for v in range(nv):
                slot = slots[r][v]
                if cfg.x86:
                    prod = b.call(pmadd, [av, bvecs[v]])
                else:
                    prod = b.mul(av, bvecs[v], flags=("nsw",))
                b.store(b.add(b.load(slot), prod), slot)
    out = []
    for r in range(mr):
        row = []
        for v in range(nv):
            acc = b.load(slots[r][v])
            if not cfg.x86:  # even + odd lanes: the two products of each k-pair
                mask = lambda off: ir.Constant(ir.VectorType(I32, L), [2 * i + off for i in range(L)])  # noqa: E731
                acc = b.add(b.shuffle_vector(acc, acc, mask(0)), b.shuffle_vector(acc, acc, mask(1)))
            row.append(acc)
        out.append(row)
    return out


# -- build-time packing ------------------------------------------------------------------------------
def _pack_b(values: np.ndarray, nr: int, group: int, dtype) -> np.ndarray:
    """B (K x N) -> [N / NR blocks][K / GROUP][NR][GROUP] of DTYPE, K and N zero padded."""
    kk, n = values.shape
    kg = -(-kk // group)
    nblocks = -(-n // nr)
    padded = np.zeros((group * kg, nblocks * nr), dtype)
    padded[:kk, :n] = values
    # [KG, GROUP, NB, NR] -> [NB, KG, NR, GROUP]
    return np.ascontiguousarray(padded.reshape(kg, group, nblocks, nr).transpose(2, 0, 3, 1))


def pack_b_columns(values: np.ndarray, cfg: Config) -> np.ndarray:
    """B (K x N, integers fitting the element type) -> [N / NR blocks][KP][NR][2] (zero padded)."""
    return _pack_b(values, cfg.nr, 2, values.dtype)


def pack_a_rows(values: np.ndarray, cfg: Config) -> np.ndarray:
    """A (M x K int16 values) -> int32 [M][KP], each int32 the k-pair (low half: even k)."""
    m, kk = values.shape
    kp = (kk + 1) // 2
    padded = np.zeros((m, 2 * kp), np.int16)
    padded[:, :kk] = values
    return np.ascontiguousarray(padded).view(np.int32).reshape(m, kp)


# -- requantization (vectors) ---------------------------------------------------------------------------
def requantize_vec(k, acc, mult, y_zero, out_dtype, floor: int | None = None):
    """round_half_even(double(acc) * mult + y_zero) saturated to out_dtype (and >= floor: a folded Relu),
    as <L x i32> (mult: <L x double>)."""
    b = k.b
    L = acc.type.count
    dvt = ir.VectorType(F64, L)
    value = b.fmul(b.sitofp(acc, dvt), mult)
    if y_zero is not None:
        value = b.fadd(value, y_zero)
    value = b.call(_fn(k, f"llvm.roundeven.v{L}f64", dvt, [dvt]), [value])
    info = np.iinfo(out_dtype)
    lo = ir.Constant(dvt, [ir.Constant(F64, float(info.min if floor is None else max(info.min, floor)))] * L)
    hi = ir.Constant(dvt, [ir.Constant(F64, float(info.max))] * L)
    value = b.select(b.fcmp_ordered("<", value, lo), lo, value)
    value = b.select(b.fcmp_ordered(">", value, hi), hi, value)
    value = b.fptosi(value, ir.VectorType(I32, L))
    lut = fused_epilogue(k).lut
    if lut is not None:  # a folded DequantizeLinear -> Relu -> QuantizeLinear (passes/epilogues.py)
        table = lut_table(k, out_dtype, lut)
        mapped = ir.Constant(ir.VectorType(I32, L), None)
        for lane in range(L):
            i = b.extract_element(value, ir.Constant(I32, lane))
            e = k.load_ptr(table, out_dtype, lut_index(k, i, int(info.min)))
            mapped = b.insert_element(mapped, k.s.cast(out_dtype, np.int32, e), ir.Constant(I32, lane))
        value = mapped
    return value


def lut_table(k, out_dtype, lut):
    """The node's Epilogue table (256 values, index q - min) as a constant array, one per kernel."""
    cached = getattr(k, "_qgemm_lut", None)
    if cached is None:
        with k.b.goto_entry_block():
            cached = k.constant_array(np.asarray(lut, dtype=out_dtype))
        k._qgemm_lut = cached
    return cached


def lut_index(k, value, lowest: int):
    """An int32 in [lowest, lowest + 255] as the index of its table entry."""
    i = k.b.sub(value, ir.Constant(I32, lowest))
    return i if k.idx_t.width == 32 else k.b.sext(i, k.idx_t)


def store_lanes(k, value, ptr, index, count: int, out_dtype):
    """Store the first `count` lanes of the <L x i32> `value` (truncated to out_dtype) at ptr[index...]."""
    b = k.b
    L = value.type.count
    if np.dtype(out_dtype).itemsize != 4:
        value = b.trunc(value, ir.VectorType(ir.IntType(8 * np.dtype(out_dtype).itemsize), L))
    k.vscatter(value, ptr, out_dtype, index, 1, count)


# -- operand helpers -------------------------------------------------------------------------------------
def ext16(k, value, dtype):
    """int8/uint8 scalar or vector -> int16."""
    ty = ir.VectorType(I16, value.type.count) if isinstance(value.type, ir.VectorType) else I16
    return k.b.zext(value, ty) if np.dtype(dtype).kind == "u" else k.b.sext(value, ty)


def hsum(k, vec):
    b = k.b
    total = b.extract_element(vec, ir.Constant(I32, 0))
    for i in range(1, vec.type.count):
        total = b.add(total, b.extract_element(vec, ir.Constant(I32, i)))
    return total


def pack_row(k, src_ptr, src_dtype, src_index, kk: int, dst16, zero16, with_sum: bool, width: int):
    """dst16[0:KK] = src[src_index:+KK] - zero (int16), dst16[KK] = 0 when KK is odd; returns the row's sum (i32) or None."""
    b = k.b
    nchunks = kk // width
    vt8 = ir.VectorType(I8, width)
    vt32 = ir.VectorType(I32, width)
    total = None
    if nchunks:
        zero_v = k.splat(zero16, width) if zero16 is not None else None
        acc = k.local(vt32, ir.Constant(vt32, None)) if with_sum else None
        with k.for_range(nchunks) as c:
            at = b.mul(c, k.index(width), flags=("nsw",))
            src = b.gep(src_ptr, [b.add(src_index, at, flags=("nsw",))], inbounds=True)
            v = ext16(k, b.load(b.bitcast(src, vt8.as_pointer()), align=1), src_dtype)
            if zero_v is not None:
                v = b.sub(v, zero_v)
            b.store(v, b.bitcast(b.gep(dst16, [at], inbounds=True), v.type.as_pointer()), align=2)
            if with_sum:
                b.store(b.add(b.load(acc), b.sext(v, vt32)), acc)
        if with_sum:
            total = hsum(k, b.load(acc))
    for i in range(nchunks * width, kk):  # tail (fewer than `width` elements): unrolled
        v = ext16(k, b.load(b.gep(src_ptr, [b.add(src_index, k.index(i), flags=("nsw",))], inbounds=True)), src_dtype)
        if zero16 is not None:
            v = b.sub(v, zero16)
        b.store(v, b.gep(dst16, [k.index(i)], inbounds=True))
        if with_sum:
            s = b.sext(v, I32)
            total = s if total is None else b.add(total, s)
    if kk % 2:
        b.store(ir.Constant(I16, 0), b.gep(dst16, [k.index(kk)], inbounds=True))
    if with_sum and total is None:
        total = ir.Constant(I32, 0)
    return total


# -- k-quads: x86 VNNI (vpdpbusd, uint8 x int8), aarch64 sdot (int8 x int8) ----------------------------------
# The row operand u = v + o_u (VNNI: o_u = 128 for int8, sdot: -128 for uint8: the byte with its top bit
# flipped; else 0), the signed one
# s = v - o_s (o_s = 128 for uint8, or its zero point when v - zp fits int8). With zu = zp_u + o_u, zs = zp_s - o_s:
#   sum (u - zu)(s - zs) = sum u*s - zu * sum s - zs * sum u + K * zu * zs
# (every sum over the K real elements; the kernels fold the terms that are constants at build time).

def quad_kernel(k, cfg: Config, mr: int, a_row, b_ptr, kq: int, rows_unsigned: bool, nv: int | None = None) -> list[list[ir.Value]]:
    """accs[r][v] (<L x i32>) = sum over kq k-quads of rows a_row(r) (i32*: 4 bytes per k-quad, broadcast)
    x B pack b_ptr (i8*: [KQ][NR][4] bytes); rows_unsigned: the rows hold the uint8 operand; nv as micro_kernel."""
    b = k.b
    L, nv = cfg.lanes, nv or cfg.nv
    vt = ir.VectorType(I32, L)
    if cfg.sdot:
        bytes_t = ir.VectorType(I8, 4 * L)
        sdot = _fn(k, f"llvm.aarch64.neon.sdot.v{L}i32.v{4 * L}i8", vt, [vt, bytes_t, bytes_t])
    elif cfg.pairs:
        bytes_t, words_t = ir.VectorType(I8, 4 * L), ir.VectorType(I16, 2 * L)
        pair_sums = _fn(k, "llvm.x86.avx2.pmadd.ub.sw", words_t, [bytes_t, bytes_t])
        widen = _fn(k, "llvm.x86.avx2.pmadd.wd", vt, [words_t, words_t])
        ones = ir.Constant(words_t, [ir.Constant(I16, 1)] * (2 * L))

        def dot(acc, u, sg):
            words = b.call(pair_sums, [b.bitcast(u, bytes_t), b.bitcast(sg, bytes_t)])
            return b.add(acc, b.call(widen, [words, ones]))
    else:
        vpdpbusd = _fn(k, f"llvm.x86.avx512.vpdpbusd.{32 * L}", vt, [vt, vt, vt])

        def dot(acc, u, sg):
            return b.call(vpdpbusd, [acc, u, sg])
    zero = ir.Constant(vt, None)
    slots = [[k.local(vt, zero) for _ in range(nv)] for _ in range(mr)]
    rows = [a_row(r) for r in range(mr)]

    def step(p, row_quad):
        """k-quad p: B's vectors times row_quad(r), the row's quad in every lane."""
        base = b.mul(p, k.index(4 * cfg.nr), flags=("nsw",))
        bvecs = []
        for v in range(nv):
            at = b.add(base, k.index(4 * L * v), flags=("nsw",)) if v else base
            bvecs.append(b.load(b.bitcast(b.gep(b_ptr, [at], inbounds=True), vt.as_pointer()), align=1))
        for r in range(mr):
            av = row_quad(r)
            for v in range(nv):
                slot = slots[r][v]
                if cfg.sdot:  # int8 x int8 is symmetric: the row's lane goes last, where the indexed form takes it
                    b.store(b.call(sdot, [b.load(slot), b.bitcast(bvecs[v], bytes_t), b.bitcast(av, bytes_t)]), slot)
                else:
                    u, sg = (av, bvecs[v]) if rows_unsigned else (bvecs[v], av)
                    b.store(dot(b.load(slot), u, sg), slot)

    def broadcast(p):
        return lambda r: k.splat(b.load(b.gep(rows[r], [p], inbounds=True)), L)

    done = 0
    if cfg.sdot and kq >= L:
        # indexed sdot (sdot v.4s, v.16b, v.4b[i]): one 16-byte load of L k-quads per row, a lane of it per
        # k-quad, where broadcasting each k-quad (ld1r) takes a vector slot beside the sdots
        done = kq // L * L
        with k.for_range(kq // L) as pl:
            p0 = b.mul(pl, k.index(L), flags=("nsw",))
            quads = [b.load(b.bitcast(b.gep(rows[r], [p0], inbounds=True), vt.as_pointer()), align=1) for r in range(mr)]
            for i in range(L):
                lane = ir.Constant(ir.VectorType(I32, L), [i] * L)
                step(b.add(p0, k.index(i), flags=("nsw",)) if i else p0,
                     lambda r, i=i, lane=lane: b.shuffle_vector(quads[r], ir.Constant(vt, None), lane))
    if done < kq:
        with k.for_range(kq, done) as p:
            step(p, broadcast(p))
    return [[b.load(slots[r][v]) for v in range(nv)] for r in range(mr)]


def pack_b_quads(values: np.ndarray, cfg: Config) -> np.ndarray:
    """B (K x N int8) -> [N / NR blocks][KQ][NR][4] int8 (zero padded)."""
    return _pack_b(values, cfg.nr, 4, np.int8)


def signed_operand(values: np.ndarray, zero: np.ndarray, unsigned_dtype: bool):
    """(int8 values s, per-column zs) with values - zero = s - zs (zs = 0 when values - zero fits int8)."""
    diff = values - zero
    if diff.min() >= -128 and diff.max() <= 127:
        return diff.astype(np.int8), np.zeros(zero.shape[-1], np.int32)
    off = 128 if unsigned_dtype else 0
    return (values - off).astype(np.int8), (zero - off).astype(np.int32)


def pack_row_u8(k, cfg: Config, src_ptr, src_dtype, src_index, kk: int, dst8, width: int):
    """dst8[0:KK] = src as the quad operand (cfg.flips: top bit flipped), zero up to the next multiple of 4;
    returns the sum (i32) of the values the bytes stand for."""
    b = k.b
    flip = cfg.flips(src_dtype)
    vt8 = ir.VectorType(I8, width)
    vt32 = ir.VectorType(I32, width)
    nchunks = kk // width
    total = None
    if nchunks:
        acc = k.local(vt32, ir.Constant(vt32, None))
        with k.for_range(nchunks) as c:
            at = b.mul(c, k.index(width), flags=("nsw",))
            v = b.load(b.bitcast(b.gep(src_ptr, [b.add(src_index, at, flags=("nsw",))], inbounds=True), vt8.as_pointer()), align=1)
            if flip:
                v = b.xor(v, ir.Constant(vt8, [ir.Constant(I8, 0x80)] * width))
            b.store(v, b.bitcast(b.gep(dst8, [at], inbounds=True), vt8.as_pointer()), align=1)
            b.store(b.add(b.load(acc), cfg.widen_flipped(k, v, vt32)), acc)
        total = hsum(k, b.load(acc))
    for i in range(nchunks * width, kk):
        v = b.load(b.gep(src_ptr, [b.add(src_index, k.index(i), flags=("nsw",))], inbounds=True))
        if flip:
            v = b.xor(v, ir.Constant(I8, 0x80))
        b.store(v, b.gep(dst8, [k.index(i)], inbounds=True))
        total = cfg.widen_flipped(k, v, I32) if total is None else b.add(total, cfg.widen_flipped(k, v, I32))
    for i in range(kk, -(-kk // 4) * 4):
        b.store(ir.Constant(I8, 0), b.gep(dst8, [k.index(i)], inbounds=True))
    return total
