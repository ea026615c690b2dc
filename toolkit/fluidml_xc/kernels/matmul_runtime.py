"""The register-blocked float MatMul kernels of kernels/matmul_blocked.py over extents that vary at run time
(Problem.run, symbolic dims: fluidml_xc/symbolic.py).

Tiles (MR x NR, MR x NC) and vector bodies are the static kernels', chosen at the capacity; only trip counts are
run-time values. Whole row blocks run to the run-time block count and the remaining rows (fewer than MR, known only
at run time) branch to one tile per possible row count. A varying N's last, partial panel reads its whole vectors
in place (one tile per possible vector count) and gathers only its partial vector, zero-padded, into a stack buffer
(B gathered anyway: the whole edge, then a tile of as many vectors as it needs); columns past the run-time N are
computed in spare lanes and never stored. A varying K is the trip count of the K loop (outer products) or of the vector loop plus a scalar tail loop (dot
products). Parallel tiles keep their build-time count; each one's range is a run-time fraction of the block count
and a tile past a varying batch extent does nothing. Nothing beyond an operand's actual extents is read.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import replace

import numpy as np
from llvmlite import ir

from .kernel import PARALLEL_MIN_WORK, Access
from .matmul_blocked import (Mat, Problem, add_index, add_residual, emit_blocked, epilogue, i32, mul_index, pack_panels,
                             pack_rows, panel_bases, panel_columns, split_chunks)
from .matmul_geometry import MR_DOT, NC_DOT, outer_tile
from .scalar import FAST, const, llvm_type
from .vectors import fma


def emit_matmul(k, P: Problem, kind: str) -> None:
    """emit_blocked, or the run-time form of its kernel when a dim of P.run varies."""
    run = P.run
    if run is None or all(isinstance(v, int) for v in (*run.batch, run.m, run.n, run.kk)):
        emit_blocked(k, replace(P, run=None), kind)
        return
    if kind == "outer_t":
        P, kind = P.transposed(), "outer"
    (_emit_outer if kind == "outer" else _emit_dot)(k, P)


# -- run-time index arithmetic -----------------------------------------------------------------------
def _div(k, v, c: int):
    if isinstance(v, int):
        return v // c
    return v if c == 1 else k.b.udiv(v, k.index(c))


def _sub(k, x, y):
    if isinstance(x, int) and isinstance(y, int):
        return x - y
    return k.b.sub(x if not isinstance(x, int) else k.index(x), y if not isinstance(y, int) else k.index(y))


def _blocks(k, v, c: int):
    """ceil(v / c) for an extent v >= 0."""
    return -(-v // c) if isinstance(v, int) else _div(k, add_index(k, v, c - 1), c)


def _remainder(k, count, most: int, emit_for) -> None:
    """emit_for(r) for the run-time count r in [1, most] (nothing for 0): one code path per possible count."""
    if isinstance(count, int):
        if count:
            emit_for(count)
        return
    if most < 1:
        return
    b = k.b
    done = k.fn.append_basic_block("rem_done")
    switch = b.switch(count, done)
    for r in range(1, most + 1):
        block = k.fn.append_basic_block(f"rem{r}")
        switch.add_case(k.index(r), block)
        b.position_at_end(block)
        emit_for(r)
        b.branch(done)
    b.position_at_end(done)


def _ranged(k, rng, full, has_rest: bool, each, rest) -> None:
    """each(i) for whole blocks i in [lo, min(hi, full)), then rest() when the range reaches the partial block."""
    lo, hi = rng
    with k.for_range(k.imin(hi, k.as_index(full)), lo) as i:
        each(i)
    if has_rest:
        with k.b.if_then(k.b.icmp_signed(">", hi, k.as_index(full))):
            rest()


@contextmanager
def _range(k, stop, start=0):
    """Indices [start, stop); nothing when both are ints and the range is empty."""
    if isinstance(stop, int) and isinstance(start, int) and stop <= start:
        yield None
        return
    with k.for_range(stop, start) as i:
        yield i


def _emit_batched(k, P: Problem, mats, body) -> None:
    """body(bases) per batch point, batch loops to their run-time extents."""
    with ExitStack() as stack:
        idx = [k.index(0) if cap == 1 else stack.enter_context(k.for_range(run))
               for cap, run in zip(P.batch, P.run.batch)]
        body(*[k.linear(Access(None, None, m.bstrides, 0), idx) for m in mats])


def _emit_tiled(k, P: Problem, mats, work: float, caps, runs, body_ranged, splittable) -> bool:
    """kernels/matmul_blocked.py _emit_tiled with run-time extents: the tile count is the capacity's, each tile's
    ranges are run-time fractions of `runs`; tiles past a varying batch extent do nothing."""
    chunks = split_chunks(P.batch, work, caps, splittable)
    nbp = int(np.prod(P.batch, dtype=np.int64)) if P.batch else 1
    if k.tile_range is None or work < PARALLEL_MIN_WORK or nbp * int(np.prod(chunks)) < 2:
        return False
    nb = len(P.batch)
    with k.parallel_tiles([*P.batch, *chunks], work) as idx:
        inside = None
        for i, run in zip(idx[:nb], P.run.batch):
            if not isinstance(run, int):
                below = k.b.icmp_signed("<", i, run)
                inside = below if inside is None else k.b.and_(inside, below)
        with (k.b.if_then(inside) if inside is not None else ExitStack()):
            bases = [k.linear(Access(None, None, m.bstrides, 0), idx[:nb]) for m in mats]
            body_ranged(bases, [k.chunk(i, c, e) for i, c, e in zip(idx[nb:], chunks, runs)])
    return True


# -- outer products ------------------------------------------------------------------------------------
def _emit_outer(k, P: Problem) -> None:
    dt, V, nb = P.dtype, k.lanes(P.dtype), len(P.batch)
    M, N, K = P.m, P.n, P.kk
    run = P.run
    mr_main, nr = outer_tile(M, N, V, k.accumulators)
    if P.b.value is not None:
        P = replace(P, b=pack_panels(k, P.b, nb, panel_columns(k, M, N, nr, dt), dt))
    src = P.b
    gather_all = not src.panel and src.cs != 1 and N > 1
    n_varies = not isinstance(run.n, int)
    buf = scratch = None
    if gather_all or n_varies:  # B read in place gathers only an edge's partial vector: K x V
        with k.b.goto_entry_block():
            buf = k.b.alloca(llvm_type(dt), size=ir.Constant(ir.IntType(32), max(1, K * (nr if gather_all else V))))
    if n_varies:
        with k.b.goto_entry_block():
            scratch = k.b.alloca(llvm_type(dt), size=ir.Constant(ir.IntType(32), nr))
    gathered = Mat(buf, (0,) * nb, nr, 1, None, nr)
    full_p = _div(k, run.n, nr)
    full_widths = [V] * (nr // V)

    def gather(bb, col0, valid, width=nr):
        _gather(k, src, buf, run.kk, bb, col0, valid, width)

    def tile(bases, b, i0, mr, col0, pidx, widths, valid):
        _outer_tile(k, P, (nr, scratch), bases, b, i0, mr, col0, pidx, widths, valid)

    full_r = _div(k, run.m, mr_main)
    rem_r = _sub(k, run.m, mul_index(k, full_r, mr_main)) if not isinstance(run.m, int) else run.m % mr_main

    def rows(bases, b, col0, pidx, widths, valid, rng=None):
        def each(ib):
            tile(bases, b, mul_index(k, ib, mr_main), mr_main, col0, pidx, widths, valid)

        def rest():
            _remainder(k, rem_r, mr_main - 1,
                       lambda r: tile(bases, b, mul_index(k, full_r, mr_main), r, col0, pidx, widths, valid))
        if rng is not None:
            _ranged(k, rng, full_r, not isinstance(rem_r, int) or rem_r > 0, each, rest)
            return
        with _range(k, full_r) as ib:
            if ib is not None:
                each(ib)
        rest()

    def panel(bases, col0, pidx, widths, valid, rng=None):
        b = src
        if gather_all:
            gather(bases[1], col0, valid)
            bases, pidx, b = (bases[0], k.index(0), bases[2]), 0, gathered
        rows(bases, b, col0, pidx, widths, valid, rng)

    if n_varies:
        rem_n = _sub(k, run.n, mul_index(k, full_p, nr))

        def edge(bases, rng=None):
            """B read in place: whole vectors there, the last partial vector gathered; B gathered anyway: one tile
            of as many vectors as the valid columns need."""
            col0 = mul_index(k, full_p, nr)
            if gather_all:
                gather(bases[1], col0, rem_n)
                _remainder(k, _blocks(k, rem_n, V), nr // V,
                           lambda j: rows((bases[0], k.index(0), bases[2]), gathered, col0, 0, [V] * j, rem_n, rng))
                return
            whole = _div(k, rem_n, V)
            _remainder(k, whole, nr // V - 1, lambda j: rows(bases, src, col0, full_p, [V] * j, j * V, rng))
            tail_col, tail = add_index(k, col0, mul_index(k, whole, V)), _sub(k, rem_n, mul_index(k, whole, V))
            with k.b.if_then(k.b.icmp_signed(">", tail, k.index(0))):
                gather(bases[1], tail_col, tail, V)
                rows((bases[0], k.index(0), bases[2]), Mat(buf, (0,) * nb, V, 1, None, V), tail_col, 0, [V], tail, rng)
        has_edge = True
    else:
        rem = N % nr
        rem_widths = [V] * (-(-rem // V)) if src.panel else [V] * (rem // V) + [1] * (rem % V)

        def edge(bases, rng=None):
            panel(bases, full_p * nr, full_p, rem_widths, rem, rng)
        has_edge = rem > 0

    def ranged(bases, rngs):
        prng, rrng = rngs
        _ranged(k, prng, full_p, has_edge, lambda p: panel(bases, mul_index(k, p, nr), p, full_widths, nr, rrng),
                lambda: edge(bases, rrng))

    def body(*bases):
        with _range(k, full_p) as p:
            if p is not None:
                panel(bases, mul_index(k, p, nr), p, full_widths, nr)
        if n_varies:
            with k.b.if_then(k.b.icmp_signed(">", rem_n, k.index(0))):
                edge(bases)
        elif has_edge:
            edge(bases)
    mats = (P.a, src, P.c)
    nbp = int(np.prod(P.batch, dtype=np.int64)) if P.batch else 1
    caps = (-(-N // nr), -(-M // mr_main))
    runs = (_blocks(k, run.n, nr), _blocks(k, run.m, mr_main))
    if not _emit_tiled(k, P, mats, float(nbp) * M * N * K, caps, runs, ranged, (True, not gather_all)):
        _emit_batched(k, P, mats, body)


def _gather(k, src: Mat, buf, kk, bb, col0, valid, width: int) -> None:
    """B's columns [col0, col0 + valid) (of batch point base bb) into buf as a kk x width panel, zero-padded."""
    with k.for_range(valid) as q:
        base = add_index(k, bb, mul_index(k, add_index(k, col0, q), src.cs))
        with k.for_range(kk) as kv:
            x = k.b.load(k.b.gep(src.ptr, [add_index(k, base, mul_index(k, kv, src.rs))], inbounds=True))
            k.b.store(x, k.b.gep(buf, [add_index(k, mul_index(k, kv, width), q)], inbounds=True))
    with _range(k, width, valid) as q:
        if q is not None:
            with k.for_range(kk) as kv:
                k.b.store(ir.Constant(buf.type.pointee, 0), k.b.gep(buf, [add_index(k, mul_index(k, kv, width), q)], inbounds=True))


def _outer_tile(k, P: Problem, geometry, bases, b: Mat, i0, mr: int, col0, pidx, widths, valid) -> None:
    """One mr x sum(widths) tile of C over the run-time K (kernels/matmul_blocked.py's outer-product tile); valid
    (the columns to store) an int, or a run-time count stored by _store_valid. geometry: (nr, scratch)."""
    dt, a, c, run = P.dtype, P.a, P.c, P.run
    nr, scratch = geometry
    ab, bb, cb = bases
    slots = [[k.local(k.vector_type(dt, w), k.vzero(dt, w)) for w in widths] for _ in range(mr)]
    if b.panel:
        bcols, kstride = panel_bases(k, bb, pidx, nr, b.panel, P.kk, [sum(widths[:g]) for g in range(len(widths))]), b.panel
    else:
        bcol, kstride = add_index(k, bb, mul_index(k, col0, b.cs)), b.rs
        bcols = [add_index(k, bcol, sum(widths[:g]) * b.cs) for g in range(len(widths))]
    arows = [add_index(k, ab, mul_index(k, add_index(k, i0, r), a.rs)) for r in range(mr)]
    with k.for_range(run.kk) as kv:
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
    if not isinstance(valid, int):
        _store_valid(k, P, slots, cb, i0, mr, col0, widths, valid, scratch)
        return
    for r in range(mr):
        row = add_index(k, i0, r)
        crow = add_index(k, cb, mul_index(k, row, c.rs))
        off = 0
        for g, w in enumerate(widths):
            count = min(w, valid - off)
            if count <= 0:
                break
            col = add_index(k, col0, off)
            acc = epilogue(k, P, k.b.load(slots[r][g]), row, col, w, count)
            at = add_index(k, crow, mul_index(k, col, c.cs))
            acc = add_residual(k, P, acc, at, c.cs, w, count)
            k.vscatter(acc, c.ptr, dt, at, c.cs, count)
            off += w


def _store_valid(k, P: Problem, slots, cb, i0, mr: int, col0, widths, valid, scratch) -> None:
    """C[i0 + r, col0 + q] for q < valid (a run-time count) from the tile's accumulators: a vector group whose
    columns are all valid as a vector, the partial one element by element."""
    dt, c = P.dtype, P.c
    for r in range(mr):
        row = add_index(k, i0, r)
        crow = add_index(k, cb, mul_index(k, row, c.rs))
        off = 0
        for g, w in enumerate(widths):
            vec = k.b.load(slots[r][g])
            with k.b.if_else(k.b.icmp_signed(">=", valid, k.index(off + w))) as (whole, part):
                with whole:
                    col = add_index(k, col0, off)
                    at = add_index(k, crow, mul_index(k, col, c.cs))
                    acc = add_residual(k, P, epilogue(k, P, vec, row, col, w, w), at, c.cs, w, w)
                    k.vscatter(acc, c.ptr, dt, at, c.cs)
                with part:
                    k.vstore(vec, scratch, dt, k.index(0))
                    with k.for_range(k.b.sub(valid, k.index(off))) as q:
                        col = add_index(k, col0, add_index(k, q, off))
                        acc = epilogue(k, P, k.b.load(k.b.gep(scratch, [q], inbounds=True)), row, col, 1, 1)
                        at = add_index(k, crow, mul_index(k, col, c.cs))
                        acc = add_residual(k, P, acc, at, c.cs, 1, 1)
                        k.b.store(acc, k.b.gep(c.ptr, [at], inbounds=True))
            off += w


# -- dot products --------------------------------------------------------------------------------------
def _emit_dot(k, P: Problem) -> None:
    dt, V, nb = P.dtype, k.lanes(P.dtype), len(P.batch)
    M, N, K = P.m, P.n, P.kk
    run = P.run
    if P.a.value is not None:
        ptr, bs, rs = pack_rows(k, P.a.value, nb, dt)
        P = replace(P, a=Mat(ptr, bs, rs, 1))
    if P.b.value is not None:
        ptr, bs, rs = pack_rows(k, np.swapaxes(P.b.value, -1, -2), nb, dt)
        P = replace(P, b=Mat(ptr, bs, 1, rs))
    a, b, c = P.a, P.b, P.c
    mr_main = max(1, min(MR_DOT, M))
    nc_main = min(NC_DOT, V, 16 // np.dtype(dt).itemsize, 1 << (max(N, 1).bit_length() - 1))
    kmain = run.kk // V * V if isinstance(run.kk, int) else mul_index(k, _div(k, run.kk, V), V)

    def tails(arows, bcols, mr, nc):
        """Per row r and column q the sum over k in [kmain, K) (the part the vector loop left)."""
        if isinstance(run.kk, int):
            out = [[const(dt, 0) for _ in range(nc)] for _ in range(mr)]
            for kv in range(kmain, run.kk):
                for r in range(mr):
                    x = k.b.load(k.b.gep(a.ptr, [add_index(k, arows[r], kv)], inbounds=True))
                    for q in range(nc):
                        y = k.b.load(k.b.gep(b.ptr, [add_index(k, bcols[q], kv)], inbounds=True))
                        out[r][q] = fma(k, out[r][q], x, y)
            return out
        slots = [[k.local(llvm_type(dt), const(dt, 0)) for _ in range(nc)] for _ in range(mr)]
        with k.for_range(run.kk, kmain) as kv:
            xs = [k.b.load(k.b.gep(a.ptr, [add_index(k, arows[r], kv)], inbounds=True)) for r in range(mr)]
            for q in range(nc):
                y = k.b.load(k.b.gep(b.ptr, [add_index(k, bcols[q], kv)], inbounds=True))
                for r in range(mr):
                    k.b.store(fma(k, k.b.load(slots[r][q]), xs[r], y), slots[r][q])
        return [[k.b.load(s) for s in row] for row in slots]

    def tile(bases, i0, mr, j0, nc):
        ab, bb, cb = bases
        slots = [[k.local(k.vector_type(dt, V), k.vzero(dt, V)) for _ in range(nc)] for _ in range(mr)]
        arows = [add_index(k, ab, mul_index(k, add_index(k, i0, r), a.rs)) for r in range(mr)]
        bcols = [add_index(k, bb, mul_index(k, add_index(k, j0, q), b.cs)) for q in range(nc)]
        if not (isinstance(kmain, int) and kmain == 0):
            with k.for_range(kmain, 0, V) as kv:
                avs = [k.vload(a.ptr, dt, add_index(k, arows[r], kv), V) for r in range(mr)]
                for q in range(nc):
                    bv = k.vload(b.ptr, dt, add_index(k, bcols[q], kv), V)
                    for r in range(mr):
                        k.b.store(fma(k, k.b.load(slots[r][q]), avs[r], bv), slots[r][q])
        sums_tail = tails(arows, bcols, mr, nc)
        for r in range(mr):
            sums = k.reduce_lanes([k.b.load(s) for s in slots[r]])
            if nc == 1:
                sums = k.b.fadd(sums, sums_tail[r][0], flags=FAST)
            else:
                vec = k.vzero(dt, nc)
                for q, t in enumerate(sums_tail[r]):
                    vec = k.b.insert_element(vec, t, i32(q))
                sums = k.b.fadd(sums, vec, flags=FAST)
            row = add_index(k, i0, r)
            acc = epilogue(k, P, sums, row, j0, nc, nc)
            at = add_index(k, add_index(k, cb, mul_index(k, row, c.rs)), mul_index(k, j0, c.cs))
            acc = add_residual(k, P, acc, at, c.cs, nc, nc)
            k.vscatter(acc, c.ptr, dt, at, c.cs)

    def cols(bases, i0, mr):
        full_c = _div(k, run.n, nc_main)
        with _range(k, full_c) as jb:
            if jb is not None:
                tile(bases, i0, mr, mul_index(k, jb, nc_main), nc_main)
        if not isinstance(run.n, int):
            with k.for_range(run.n, mul_index(k, full_c, nc_main)) as j:
                tile(bases, i0, mr, j, 1)
            return
        j0, rem = full_c * nc_main, run.n % nc_main
        while rem:
            nc = 1 << (rem.bit_length() - 1)
            tile(bases, i0, mr, j0, nc)
            j0, rem = j0 + nc, rem - nc

    full_r = _div(k, run.m, mr_main)
    rem_r = _sub(k, run.m, mul_index(k, full_r, mr_main)) if not isinstance(run.m, int) else run.m % mr_main

    def rest(bases):
        _remainder(k, rem_r, mr_main - 1, lambda r: cols(bases, mul_index(k, full_r, mr_main), r))

    def body(*bases):
        with _range(k, full_r) as ib:
            if ib is not None:
                cols(bases, mul_index(k, ib, mr_main), mr_main)
        rest(bases)

    def ranged(bases, rngs):
        _ranged(k, rngs[0], full_r, not isinstance(rem_r, int) or rem_r > 0,
                lambda ib: cols(bases, mul_index(k, ib, mr_main), mr_main), lambda: rest(bases))
    nbp = int(np.prod(P.batch, dtype=np.int64)) if P.batch else 1
    if not _emit_tiled(k, P, (P.a, P.b, P.c), float(nbp) * M * N * K, (-(-M // mr_main),),
                       (_blocks(k, run.m, mr_main),), ranged, (True,)):
        _emit_batched(k, P, (P.a, P.b, P.c), body)
