"""The register-blocked float MatMul kernels (ops/matmul.py, and the LSTM/GRU gates in ops/recurrent.py): a
Problem over Mat operands, run as outer-product tiles (outer / outer_t) or dot-product tiles (dot), split
into parallel tiles over batch points and blocks."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from ..target.arch import arch_of
from .epilogue import Epilogue, activate
from .half_blocks import reduce_in_blocks
from .matmul_geometry import MR_DOT, NC_DOT, gemm_steps, outer_tile
from .index_math import add_index, mul_index, panel_bases
from .kernel import PARALLEL_MIN_WORK, UNSHARED_MAC_WORK, Access, Operand, chunk_count, row_major_strides
from .scalar import FAST, const, llvm_type
from . import matmul_gemv, scalar_tile
from .vectors import fma


@dataclass
class Mat:
    """A matrix operand of the canonical problem: element (r, c) of batch point b at
    ptr[sum(b * bstrides) + r * rs + c * cs], or, packed in panels of `panel` columns,
    ptr[... + (c // panel) * rows * panel + r * panel + c % panel].
    `storage` is the pointer or a function making it, called on first use (constants the kernel
    repacks are then never stored as they came)."""

    storage: object
    bstrides: tuple[int, ...]
    rs: int
    cs: int
    value: np.ndarray | None = None
    """Logical (*lead, rows, cols) value of a constant."""
    panel: int = 0

    @property
    def ptr(self):
        if callable(self.storage):
            self.storage = self.storage()
        return self.storage

    def t(self) -> "Mat":
        return Mat(self.storage, self.bstrides, self.cs, self.rs, None if self.value is None else np.swapaxes(self.value, -1, -2))


@dataclass
class RunDims:
    """A Problem's extents at run time: per batch dim and m, n, kk an int (static) or an index-typed ir.Value."""

    batch: tuple
    m: object
    n: object
    kk: object


@dataclass
class Problem:
    """C = alpha * A @ B + beta * bias over batch dims, A m x k, B k x n, C m x n."""

    dtype: np.dtype
    batch: tuple[int, ...]
    m: int
    n: int
    kk: int
    a: Mat
    b: Mat
    c: Mat
    bias: Mat | None = None
    alpha: float = 1.0
    beta: float = 1.0
    residual: Mat | None = None
    """Added after the bias, element for element of C: stored with C's strides, so read at C's own offsets."""
    relu: bool = False
    """max(., 0) last (passes/epilogues.py fused a Relu)."""
    activation: "Epilogue | None" = None
    """Another fused activation applied last (kernels/epilogue.py activate: a Clip or a leaky Relu; the convs the
    U74's GEMM tile runs, ops/conv/pointwise.py and im2col.py)."""
    run: "RunDims | None" = None
    """The run-time extents when some vary (kernels/matmul_runtime.py); batch, m, n, kk are then the capacities."""

    def transposed(self) -> "Problem":
        return replace(self, m=self.n, n=self.m, a=self.b.t(), b=self.a.t(), c=self.c.t(),
                       bias=None if self.bias is None else self.bias.t(),  # residual: same offsets as C
                       run=None if self.run is None else replace(self.run, m=self.run.n, n=self.run.m))


def repacked(k, op: Operand, transpose: bool, column_major: bool = False) -> Operand:
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


def _lead_strides(nb: int, lead: tuple[int, ...], stored_strides: tuple[int, ...]) -> tuple[int, ...]:
    out = [0] * nb
    for j, e in enumerate(lead):
        if e != 1:
            out[nb - len(lead) + j] = stored_strides[j]
    return tuple(out)


def panels(v: np.ndarray, nr: int, dtype) -> np.ndarray:
    """Constant B (*lead, K, N) -> (*lead, ceil(N/nr), K, nr), zero-padded: each k step of a panel is nr contiguous values."""
    lead, kk, n = v.shape[:-2], v.shape[-2], v.shape[-1]
    count = -(-n // nr)
    padded = np.zeros((*lead, kk, count * nr), dtype=dtype)
    padded[..., :n] = v
    return np.ascontiguousarray(np.swapaxes(padded.reshape(*lead, kk, count, nr), -2, -3))


def pack_panels(k, mat: Mat | None, nb: int, nr: int, dtype, packed: np.ndarray | None = None,
                argument: bool = False) -> Mat:
    """mat's constant B in panels (`panels`; `packed`: computed already, mat then None); `argument`: passed as an
    argument of no declared size (Kernel.argument_array)."""
    packed = panels(mat.value, nr, dtype) if packed is None else packed
    lead, strides = packed.shape[:-3], row_major_strides(packed.shape)
    return Mat((k.argument_array if argument else k.constant_array)(packed), _lead_strides(nb, lead, strides[:len(lead)]), nr, 1, None, nr)


def panel_columns(k, m: int, n: int, nr: int, dtype) -> int:
    """Columns per packed panel: the NR of a kernel at k.pack_vector_bits, one for every code variant, so all read
    one copy (panel_bases); this kernel's nr when a vector would straddle two panels."""
    lanes = k.lanes(dtype)
    wide = outer_tile(m, n, max(1, lanes * k.pack_vector_bits // k.vector_bits), k.accumulators)[1]
    return wide if wide % lanes == 0 and (wide % nr == 0 or nr % wide == 0) else nr


def pack_rows(k, value: np.ndarray, nb: int, dtype) -> tuple[object, tuple[int, ...], int]:
    """A constant (*lead, R, C) stored row-major: (pointer, batch strides, row stride)."""
    v = np.ascontiguousarray(value.astype(dtype))
    strides = row_major_strides(v.shape)
    return k.constant_array(v), _lead_strides(nb, v.shape[:-2], strides[:-2]), v.shape[-1]


def _emit_batched(k, P: Problem, body, mats=None) -> None:
    """body(a_base, b_base, c_base) per batch point (index values)."""
    mats = mats or (P.a, P.b, P.c)
    nb = len(P.batch)

    def point(ix):
        body(*[k.linear(Access(None, None, m.bstrides, 0), ix) for m in mats])
    k.loops(P.batch, list(range(nb)), [None] * nb, point)


def split_chunks(batch: tuple[int, ...], work: float, extents: tuple[int, ...], splittable: tuple[bool, ...]) -> list[int]:
    """Chunks per extent (outermost split first) so batch points x chunks make about TARGET_TILES tiles."""
    nbp = int(np.prod(batch, dtype=np.int64)) if batch else 1
    chunks, have = [], nbp
    for e, ok in zip(extents, splittable):
        c = chunk_count(e, work, -(-chunk_count(1 << 30, work) // have)) if ok else 1
        chunks.append(c)
        have *= c
    return chunks


def gemm_work(nbp: int, M: int, N: int, K: int) -> float:
    """The split estimate of nbp M x N x K products: a one-row product's multiply-adds read each B element once."""
    return float(nbp) * M * N * K * (UNSHARED_MAC_WORK if M == 1 else 1)


def _emit_tiled(k, P: Problem, mats, work: float, extents: tuple[int, ...], body_ranged, splittable=None) -> bool:
    """Batch points x chunks of `extents` as parallel tiles: body_ranged(bases, [(lo, hi) per extent]).
    False (nothing emitted) when the op is too small to split."""
    chunks = split_chunks(P.batch, work, extents, splittable or (True,) * len(extents))
    nbp = int(np.prod(P.batch, dtype=np.int64)) if P.batch else 1
    if k.tile_range is None or work < PARALLEL_MIN_WORK or nbp * int(np.prod(chunks)) < 2:
        return False
    nb = len(P.batch)
    with k.parallel_tiles([*P.batch, *chunks], work) as idx:
        bases = [k.linear(Access(None, None, m.bstrides, 0), idx[:nb]) for m in mats]
        body_ranged(bases, [k.chunk(i, c, e) for i, c, e in zip(idx[nb:], chunks, extents)])
    return True


def ranged_blocks(k, rng, full, has_rest: bool, each, rest) -> None:
    """each(i) for full units i in [lo, min(hi, full)), then rest() when the range reaches the partial unit; `full`
    an int or a run-time value."""
    lo, hi = rng
    with k.for_range(k.imin(hi, k.as_index(full)), lo) as i:
        each(i)
    if has_rest:
        with k.b.if_then(k.b.icmp_signed(">", hi, k.as_index(full))):
            rest()


def epilogue(k, P: Problem, acc, row, col, width: int, count: int):
    """alpha * acc + beta * bias[row, col : col + count] (lanes past count are left as they are)."""
    dt = P.dtype
    if P.alpha != 1.0:
        acc = k.b.fmul(acc, k.splat(const(dt, P.alpha), width), flags=FAST)
    if P.bias is not None:
        bias = P.bias
        at = add_index(k, mul_index(k, row, bias.rs), mul_index(k, col, bias.cs))
        if count == width or bias.cs == 0:
            vec = k.vgather(bias.ptr, dt, at, bias.cs, width)
        else:
            vec = k.vzero(dt, width)
            for l in range(count):
                x = k.b.load(k.b.gep(bias.ptr, [add_index(k, at, l * bias.cs)], inbounds=True))
                vec = k.b.insert_element(vec, x, i32(l))
        if P.beta != 1.0:
            vec = k.b.fmul(vec, k.splat(const(dt, P.beta), width), flags=FAST)
        acc = k.b.fadd(acc, vec, flags=FAST)
    return acc


def add_residual(k, P: Problem, acc, at, cs: int, width: int, count: int):
    """acc + residual[C offset at + l * cs] for the first `count` lanes (no read past them), then the Relu or the
    activation."""
    if P.activation is not None:
        return activate(k, P.activation, add_residual(k, replace(P, activation=None), acc, at, cs, width, count))
    if P.relu:  # select(x < 0, 0, x): NaN stays NaN, as the Relu kernel (docs/GUARANTEES.md)
        x = add_residual(k, replace(P, relu=False), acc, at, cs, width, count)
        zero = k.vzero(P.dtype, width)
        return k.b.select(k.b.fcmp_ordered("<", x, zero), zero, x)
    if P.residual is None:
        return acc
    dt, ptr = P.dtype, P.residual.ptr
    if count == width or cs == 0:
        vec = k.vgather(ptr, dt, at, cs, width)
    else:
        vec = k.vzero(dt, width)
        for l in range(count):
            vec = k.b.insert_element(vec, k.b.load(k.b.gep(ptr, [add_index(k, at, l * cs)], inbounds=True)), i32(l))
    return k.b.fadd(acc, vec, flags=FAST)


def i32(v: int):
    return ir.Constant(ir.IntType(32), v)


def outer_accumulate(k, P: Problem, nr: int, kk, bases, i0, mr: int, col0, pidx, widths: list[int],
                     last_row: int | None = None, steps: int = 0) -> list:
    """The accumulators (per row, one vector per width) of one mr x sum(widths) outer-product tile of C at
    (i0, col0) over kk steps of K: an int, or a run-time value (kernels/matmul_runtime.py). B is P.b: its panel pidx
    of nr columns when packed, else read at col0. last_row: rows past it read that row (their results unused).
    steps: K steps per loop iteration (0: the target's, k_steps)."""
    dt, a, b = P.dtype, P.a, P.b
    ab, bb, _ = bases
    b_step = b.panel or (b.rs if b.cs == 1 else 0)
    if b_step and scalar_tile.takes(k, dt, kk, mr, widths, a.cs, b_step):
        return _scalar_tile_slots(k, P, kk, bases, i0, mr, col0, pidx, widths, last_row)
    if b.panel and matmul_gemv.takes(k, dt, kk, mr, widths, a.cs, b.panel):  # the X60's GEMV routine
        x = k.b.gep(a.ptr, [add_index(k, ab, mul_index(k, i0, a.rs))], inbounds=True)
        panel = k.b.gep(b.ptr, [panel_bases(k, bb, pidx, matmul_gemv.PANEL, b.panel, P.kk, [0])[0]], inbounds=True)
        return [matmul_gemv.slots(k, dt, x, panel, kk, a.cs, widths)]
    slots = [[k.local(k.vector_type(dt, w), k.vzero(dt, w)) for w in widths] for _ in range(mr)]
    if b.panel:
        bcols, kstride = panel_bases(k, bb, pidx, nr, b.panel, P.kk, [sum(widths[:g]) for g in range(len(widths))]), b.panel
    else:
        bcol, kstride = add_index(k, bb, mul_index(k, col0, b.cs)), b.rs
        bcols = [add_index(k, bcol, sum(widths[:g]) * b.cs) for g in range(len(widths))]
    if last_row is None:
        arows = [add_index(k, ab, mul_index(k, add_index(k, i0, r), a.rs)) for r in range(mr)]
    else:
        arows = [add_index(k, ab, mul_index(k, k.imin(add_index(k, i0, r), k.as_index(last_row)), a.rs)) for r in range(mr)]

    def step(kv):
        bk = mul_index(k, kv, kstride)
        bvals = [k.vgather(b.ptr, dt, add_index(k, bcol, bk), 1 if b.panel else b.cs, w) for bcol, w in zip(bcols, widths)]
        ak = mul_index(k, kv, a.cs)
        for r in range(mr):
            av = k.b.load(k.b.gep(a.ptr, [add_index(k, arows[r], ak)], inbounds=True))
            splats = {}
            for g, w in enumerate(widths):
                if w not in splats:
                    splats[w] = k.splat(av, w)
                k.b.store(fma(k, k.b.load(slots[r][g]), splats[w], bvals[g]), slots[r][g])
    steps = (steps or k_steps(k)) if isinstance(kk, int) else 1
    if steps == 1:  # float16 sums (half_blocks) never meet a target of several K steps: RISC-V has no fp16 path
        reduce_in_blocks(k, dt, kk, [s for row in slots for s in row], step)
        return slots
    with k.for_range(kk // steps) as kv:
        base = mul_index(k, kv, steps)
        for s in range(steps):
            step(add_index(k, base, s))
    for s in range(kk - kk % steps, kk):
        step(k.index(s))
    return slots


def _scalar_tile_slots(k, P: Problem, kk: int, bases, i0, mr: int, col0, pidx, widths: list[int], last_row) -> list:
    """outer_accumulate's slots from the target's hand-scheduled tile (kernels/scalar_tile.py)."""
    dt, a, b = P.dtype, P.a, P.b
    ab, bb, _ = bases
    bcol = panel_bases(k, bb, pidx, sum(widths), b.panel, P.kk, [0])[0] if b.panel else add_index(k, bb, col0)
    rows = [add_index(k, i0, r) for r in range(mr)]
    if last_row is not None:
        rows = [k.imin(row, k.as_index(last_row)) for row in rows]
    a_rows = [k.b.gep(a.ptr, [add_index(k, ab, mul_index(k, row, a.rs))], inbounds=True) for row in rows]
    sums = scalar_tile.accumulate(k, a_rows, k.b.gep(b.ptr, [bcol], inbounds=True), kk, a.cs, b.panel or b.rs)
    n, slots = sum(widths), []
    for r in range(mr):
        row, off = [], 0
        for w in widths:
            vec = sums[r * n + off] if w == 1 else k.vzero(dt, w)
            for lane in range(w if w > 1 else 0):
                vec = k.b.insert_element(vec, sums[r * n + off + lane], i32(lane))
            row.append(k.local(k.vector_type(dt, w), vec))
            off += w
        slots.append(row)
    return slots


def k_steps(k) -> int:
    """K steps per iteration of the outer-product loop for the kernel's target (target/arch.py Arch.k_steps)."""
    return arch_of(k.spec.triple).k_steps if k.spec is not None else 1


def store_tile(k, P: Problem, slots, cb, i0, mr: int, col0, widths: list[int], valid, scratch=None) -> None:
    """C[i0 + r, col0 + q] for q < valid from outer_accumulate's slots, through the epilogue and the residual.
    `valid` an int, or a run-time count (kernels/matmul_runtime.py): then each vector group is stored whole when
    all its columns are valid, else element by element through `scratch` (a stack vector)."""
    dt, c = P.dtype, P.c
    for r in range(mr):
        row = add_index(k, i0, r)
        crow = add_index(k, cb, mul_index(k, row, c.rs))
        off = 0
        for g, w in enumerate(widths):
            if not isinstance(valid, int):
                _store_valid(k, P, k.b.load(slots[r][g]), row, crow, add_index(k, col0, off), w, k.b.sub(valid, k.index(off)),
                             scratch)
                off += w
                continue
            count = min(w, valid - off)
            if count <= 0:
                break
            col = add_index(k, col0, off)
            acc = epilogue(k, P, k.b.load(slots[r][g]), row, col, w, count)
            at = add_index(k, crow, mul_index(k, col, c.cs))
            acc = add_residual(k, P, acc, at, c.cs, w, count)
            k.vscatter(acc, c.ptr, dt, at, c.cs, count)
            off += w


def _store_valid(k, P: Problem, vec, row, crow, col0, w: int, valid, scratch) -> None:
    """One vector group of a row at col0 whose first `valid` columns (a run-time count) are stored."""
    dt, c = P.dtype, P.c
    with k.b.if_else(k.b.icmp_signed(">=", valid, k.index(w))) as (whole, part):
        with whole:
            at = add_index(k, crow, mul_index(k, col0, c.cs))
            acc = add_residual(k, P, epilogue(k, P, vec, row, col0, w, w), at, c.cs, w, w)
            k.vscatter(acc, c.ptr, dt, at, c.cs)
        with part:
            k.vstore(vec, scratch, dt, k.index(0))
            with k.for_range(valid) as q:
                col = add_index(k, col0, q)
                acc = epilogue(k, P, k.b.load(k.b.gep(scratch, [q], inbounds=True)), row, col, 1, 1)
                at = add_index(k, crow, mul_index(k, col, c.cs))
                acc = add_residual(k, P, acc, at, c.cs, 1, 1)
                k.b.store(acc, k.b.gep(c.ptr, [at], inbounds=True))


def _dot_tails(k, P: Problem, arows, bcols, kmain, kk) -> list:
    """Per row, the sums over K in [kmain, kk) per column (what the vector loop left) when kk is a run-time value:
    one loop emitted before the rows are stored. For an int kk: None per row (_dot_tail unrolls each row's)."""
    dt, a, b = P.dtype, P.a, P.b
    if isinstance(kk, int):
        return [None] * len(arows)
    slots = [[k.local(llvm_type(dt), const(dt, 0)) for _ in bcols] for _ in arows]
    with k.for_range(kk, kmain) as kv:
        xs = [k.b.load(k.b.gep(a.ptr, [add_index(k, arow, kv)], inbounds=True)) for arow in arows]
        for q, bcol in enumerate(bcols):
            y = k.b.load(k.b.gep(b.ptr, [add_index(k, bcol, kv)], inbounds=True))
            for r in range(len(arows)):
                k.b.store(fma(k, k.b.load(slots[r][q]), xs[r], y), slots[r][q])
    return [[k.b.load(s) for s in row] for row in slots]


def _dot_tail(k, P: Problem, arow, bcols, kmain: int, kk: int) -> list:
    """One row's sums over K in [kmain, kk) per column, unrolled."""
    tails = []
    for bcol in bcols:
        t = const(P.dtype, 0)
        for kv in range(kmain, kk):
            x = k.b.load(k.b.gep(P.a.ptr, [add_index(k, arow, kv)], inbounds=True))
            y = k.b.load(k.b.gep(P.b.ptr, [add_index(k, bcol, kv)], inbounds=True))
            t = fma(k, t, x, y)
        tails.append(t)
    return tails


def dot_tile(k, P: Problem, kk, bases, i0, mr: int, j0, nc: int) -> None:
    """One mr x nc dot-product tile of C at (i0, j0) over kk steps of K (an int, or a run-time value): a loop over
    K's whole vectors, a scalar tail, each row reduced and stored through the epilogue and the residual."""
    dt, V, a, b, c = P.dtype, k.lanes(P.dtype), P.a, P.b, P.c
    ab, bb, cb = bases
    kmain = kk // V * V if isinstance(kk, int) else mul_index(k, k.b.udiv(kk, k.index(V)) if V > 1 else kk, V)
    slots = [[k.local(k.vector_type(dt, V), k.vzero(dt, V)) for _ in range(nc)] for _ in range(mr)]
    arows = [add_index(k, ab, mul_index(k, add_index(k, i0, r), a.rs)) for r in range(mr)]
    bcols = [add_index(k, bb, mul_index(k, add_index(k, j0, q), b.cs)) for q in range(nc)]
    if not (isinstance(kmain, int) and kmain == 0):
        def step(kv):
            avs = [k.vload(a.ptr, dt, add_index(k, arows[r], kv), V) for r in range(mr)]
            for q in range(nc):
                bv = k.vload(b.ptr, dt, add_index(k, bcols[q], kv), V)
                for r in range(mr):
                    k.b.store(fma(k, k.b.load(slots[r][q]), avs[r], bv), slots[r][q])
        reduce_in_blocks(k, dt, kmain, [s for row in slots for s in row], step, 0, V)
    run_tails = _dot_tails(k, P, arows, bcols, kmain, kk)
    for r in range(mr):
        sums = k.reduce_lanes([k.b.load(s) for s in slots[r]])
        tails = run_tails[r]
        if tails is None and kmain < kk:
            tails = _dot_tail(k, P, arows[r], bcols, kmain, kk)
        if tails is not None:
            if nc == 1:
                sums = k.b.fadd(sums, tails[0], flags=FAST)
            else:
                vec = k.vzero(dt, nc)
                for q, t in enumerate(tails):
                    vec = k.b.insert_element(vec, t, i32(q))
                sums = k.b.fadd(sums, vec, flags=FAST)
        row = add_index(k, i0, r)
        acc = epilogue(k, P, sums, row, j0, nc, nc)
        at = add_index(k, add_index(k, cb, mul_index(k, row, c.rs)), mul_index(k, j0, c.cs))
        acc = add_residual(k, P, acc, at, c.cs, nc, nc)
        k.vscatter(acc, c.ptr, dt, at, c.cs)


def _emit_outer(k, P: Problem) -> None:
    dt, V = P.dtype, k.lanes(P.dtype)
    M, N, K = P.m, P.n, P.kk
    mr_main, nr = outer_tile(M, N, V, k.accumulators)
    tile = scalar_tile.kernel_tile(k)
    if tile and M >= tile.rows and N >= tile.cols and scalar_tile.takes(
            k, dt, K, tile.rows, [tile.cols], P.a.cs, P.b.rs if P.b.value is None and P.b.cs == 1 else tile.cols):
        mr_main, nr = tile.rows, tile.cols
    whole = [V] * (nr // V) + [1] * (nr % V)
    if P.b.value is not None:
        P = replace(P, b=pack_panels(k, P.b, len(P.batch), panel_columns(k, M, N, nr, dt), dt))
    stack = None
    if P.b.value is None and not P.b.panel and P.b.cs != 1 and N > 1:
        # B strided along n (e.g. K-contiguous): gather each K x NR panel into a stack buffer first
        src = P.b
        with k.b.goto_entry_block():
            buf = k.b.alloca(llvm_type(dt), size=ir.Constant(ir.IntType(32), max(1, K * nr)))
        stack = (src, buf)
        P = replace(P, b=Mat(buf, tuple(0 for _ in P.batch), nr, 1, None, nr))
    b = P.b
    full_p, rem = N // nr, N % nr

    def gather_panel(bb, col0, valid):
        src, buf = stack
        with k.for_range(valid) as q:
            base = add_index(k, bb, mul_index(k, add_index(k, col0, q), src.cs))
            with k.for_range(K) as kv:
                x = k.b.load(k.b.gep(src.ptr, [add_index(k, base, mul_index(k, kv, src.rs))], inbounds=True))
                k.b.store(x, k.b.gep(buf, [add_index(k, mul_index(k, kv, nr), q)], inbounds=True))
        if valid < nr:
            with k.for_range(K) as kv:
                for q in range(valid, nr):
                    k.b.store(const(dt, 0), k.b.gep(buf, [add_index(k, mul_index(k, kv, nr), q)], inbounds=True))

    def tile(bases, i0, mr, col0, pidx, widths, valid):
        slots = outer_accumulate(k, P, nr, K, bases, i0, mr, col0, pidx, widths, steps=gemm_steps(k, P.a.rs, P.dtype))
        store_tile(k, P, slots, bases[2], i0, mr, col0, widths, valid)

    def rows(bases, col0, pidx, widths, valid, rng=None):
        full_r = M // mr_main
        if rng is not None:
            ranged_blocks(k, rng, full_r, M % mr_main > 0, lambda ib: tile(bases, mul_index(k, ib, mr_main), mr_main, col0, pidx, widths, valid),
                    lambda: tile(bases, full_r * mr_main, M % mr_main, col0, pidx, widths, valid))
            return
        if full_r == 1:
            tile(bases, 0, mr_main, col0, pidx, widths, valid)
        elif full_r:
            with k.for_range(full_r) as ib:
                tile(bases, mul_index(k, ib, mr_main), mr_main, col0, pidx, widths, valid)
        if M % mr_main:
            tile(bases, full_r * mr_main, M % mr_main, col0, pidx, widths, valid)

    def panel(bases, col0, pidx, widths, valid, rng=None):
        if stack is not None:
            gather_panel(bases[1], col0, valid)
            bases, pidx = (bases[0], k.index(0), bases[2]), 0
        rows(bases, col0, pidx, widths, valid, rng)

    def rem_widths():
        return [V] * (-(-rem // V)) if b.panel else [V] * (rem // V) + [1] * (rem % V)

    def ranged(bases, rngs):
        prng, rrng = rngs
        ranged_blocks(k, prng, full_p, rem > 0, lambda p: panel(bases, mul_index(k, p, nr), p, whole, nr, rrng),
                lambda: panel(bases, full_p * nr, full_p, rem_widths(), rem, rrng))

    def body(*bases):
        if full_p == 1:
            panel(bases, 0, 0, whole, nr)
        elif full_p:
            with k.for_range(full_p) as p:
                panel(bases, mul_index(k, p, nr), p, whole, nr)
        if rem:
            panel(bases, full_p * nr, full_p, rem_widths(), rem)
    mats = (P.a, stack[0] if stack else P.b, P.c)
    nbp = int(np.prod(P.batch, dtype=np.int64)) if P.batch else 1
    # a gathered B panel is reused by every row: then tiles take whole panels (rows are not split)
    extents = (full_p + (rem > 0), M // mr_main + (M % mr_main > 0))
    if not _emit_tiled(k, P, mats, gemm_work(nbp, M, N, K), extents, ranged, (True, stack is None)):
        _emit_batched(k, P, body, mats)


def dot_problem(k, P: Problem) -> tuple[Problem, int, int]:
    """P with its constant operands packed K-contiguous for dot tiles, and the tiles' rows and columns (at P's
    capacity)."""
    dt, nb = P.dtype, len(P.batch)
    if P.a.value is not None:
        ptr, bs, rs = pack_rows(k, P.a.value, nb, dt)
        P = replace(P, a=Mat(ptr, bs, rs, 1))
    if P.b.value is not None:
        ptr, bs, rs = pack_rows(k, np.swapaxes(P.b.value, -1, -2), nb, dt)
        P = replace(P, b=Mat(ptr, bs, 1, rs))
    nc = min(NC_DOT, k.lanes(dt), 16 // np.dtype(dt).itemsize, 1 << (max(P.n, 1).bit_length() - 1))
    return P, max(1, min(MR_DOT, P.m)), nc


def _emit_dot(k, P: Problem) -> None:
    M, N, K = P.m, P.n, P.kk
    P, mr_main, nc_main = dot_problem(k, P)

    def tile(bases, i0, mr, j0, nc):
        dot_tile(k, P, K, bases, i0, mr, j0, nc)

    def cols(bases, i0, mr):
        full_c = N // nc_main
        if full_c == 1:
            tile(bases, i0, mr, 0, nc_main)
        elif full_c:
            with k.for_range(full_c) as jb:
                tile(bases, i0, mr, mul_index(k, jb, nc_main), nc_main)
        j0, rem = full_c * nc_main, N % nc_main
        while rem:
            nc = 1 << (rem.bit_length() - 1)
            tile(bases, i0, mr, j0, nc)
            j0, rem = j0 + nc, rem - nc

    def body(*bases):
        full_r = M // mr_main
        if full_r == 1:
            cols(bases, 0, mr_main)
        elif full_r:
            with k.for_range(full_r) as ib:
                cols(bases, mul_index(k, ib, mr_main), mr_main)
        if M % mr_main:
            cols(bases, full_r * mr_main, M % mr_main)

    def ranged(bases, rngs):
        full_r = M // mr_main
        ranged_blocks(k, rngs[0], full_r, M % mr_main > 0, lambda ib: cols(bases, mul_index(k, ib, mr_main), mr_main),
                lambda: cols(bases, full_r * mr_main, M % mr_main))
    nbp = int(np.prod(P.batch, dtype=np.int64)) if P.batch else 1
    if not _emit_tiled(k, P, (P.a, P.b, P.c), gemm_work(nbp, M, N, K), (M // mr_main + (M % mr_main > 0),), ranged):
        _emit_batched(k, P, body)


def emit_blocked(k, P: Problem, kind: str) -> None:
    if kind == "outer_t":
        P, kind = P.transposed(), "outer"
    if kind == "outer":
        _emit_outer(k, P)
    else:
        _emit_dot(k, P)
