"""The register-blocked float MatMul kernels of kernels/matmul_blocked.py over extents that vary at run time
(Problem.run, symbolic dims: fluidml_xc/symbolic.py).

Tiles (MR x NR, MR x NC) and vector bodies are the static kernels', chosen at the capacity; only trip counts are
run-time values. Whole row blocks run to the run-time block count and the remaining rows (fewer than MR, known only
at run time) branch to one tile per possible row count. A varying N's last, partial panel reads its whole vectors
in place (one tile per possible vector count) and gathers only its partial vector, zero-padded, into a stack buffer
(B gathered anyway: the whole edge, then a tile of as many vectors as it needs); columns past the run-time N are
computed in spare lanes and never stored. A varying K is the trip count of the K loop (outer products) or of the
vector loop plus a scalar tail loop (dot products). Parallel tiles keep their build-time count; each one's range is
a run-time fraction of the block count and a tile past a varying batch extent does nothing. Nothing beyond an
operand's actual extents is read. The tile bodies are the static kernels' own (`outer_accumulate`, `store_tile`,
`dot_tile`), given run-time trip counts.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import replace

import numpy as np
from llvmlite import ir

from .kernel import PARALLEL_MIN_WORK, Access
from .matmul_blocked import (Mat, Problem, add_index, dot_problem, dot_tile, emit_blocked, mul_index, outer_accumulate,
                             pack_panels, panel_columns, ranged_blocks, split_chunks, store_tile)
from .matmul_geometry import outer_tile
from .scalar import llvm_type


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
            ranged_blocks(k, rng, full_r, not isinstance(rem_r, int) or rem_r > 0, each, rest)
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
        ranged_blocks(k, prng, full_p, has_edge, lambda p: panel(bases, mul_index(k, p, nr), p, full_widths, nr, rrng),
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
    """One mr x sum(widths) outer-product tile of C over the run-time K (kernels/matmul_blocked.py's); valid (the
    columns to store) an int or a run-time count. geometry: (nr, scratch)."""
    nr, scratch = geometry
    slots = outer_accumulate(k, replace(P, b=b), nr, P.run.kk, bases, i0, mr, col0, pidx, widths)
    store_tile(k, P, slots, bases[2], i0, mr, col0, widths, valid, scratch)


# -- dot products --------------------------------------------------------------------------------------
def _emit_dot(k, P: Problem) -> None:
    M, N, K = P.m, P.n, P.kk
    run = P.run
    P, mr_main, nc_main = dot_problem(k, P)

    def tile(bases, i0, mr, j0, nc):
        dot_tile(k, P, run.kk, bases, i0, mr, j0, nc)

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
        ranged_blocks(k, rngs[0], full_r, not isinstance(rem_r, int) or rem_r > 0,
                lambda ib: cols(bases, mul_index(k, ib, mr_main), mr_main), lambda: rest(bases))
    nbp = int(np.prod(P.batch, dtype=np.int64)) if P.batch else 1
    if not _emit_tiled(k, P, (P.a, P.b, P.c), float(nbp) * M * N * K, (-(-M // mr_main),),
                       (_blocks(k, run.m, mr_main),), ranged, (True,)):
        _emit_batched(k, P, (P.a, P.b, P.c), body)
