"""Assorted ops: ConstantOfShape left to run time (its output's size varies: ir.Tensor.dyn), ReverseSequence, TensorScatter, Det, TfIdfVectorizer (integer pools) and the ai.onnx.ml Binarizer and
ArrayFeatureExtractor.

Det runs Gaussian elimination with partial pivoting in double precision on a stack copy of each
matrix. TfIdfVectorizer turns its n-gram pool (attributes, so known at build time) into constant
tables and counts, per row, every n-gram at every skip distance, exactly as onnx.reference's trie
walk does (unigrams once, longer n-grams once per skip distance 1 .. max_skip_count + 1).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.kernel import row_major_strides
from ..kernels.scalar import const, is_float, llvm_type
from ..opspec import register
from .tfidf_ids import column_weights

I64 = np.dtype(np.int64)
DET_STACK_BYTES = 128 * 1024
"""Det eliminates on a stack copy of one matrix in double precision: n <= 128."""


def _index_dtype(k):
    return np.dtype(f"int{k.idx_t.width}")


def _as_index(k, dtype, value):
    return k.s.cast(dtype, _index_dtype(k), value)


@register("ConstantOfShape", since=9, runtime_extents=True)
def lower_constant_of_shape(k):
    """The `value` attribute (default float 0) over the output's extents (run-time where they vary); the shape
    input's values are the output's dims, which the output's shape (or its dyn) already holds."""
    out = k.outputs[0]
    value = np.asarray(k.attr("value", np.zeros(1, np.float32))).reshape(-1)
    fill = const(out.dtype, value[0] if value.size else 0)
    domain, capacity = k.domain(out)
    k.generic(domain, [out.identity_access()], [], lambda v, i: [fill], capacity=capacity)


@register("ReverseSequence")
def lower_reverse_sequence(k):
    x, lens, out = k.inputs[0], k.inputs[1], k.outputs[0]
    batch_axis, time_axis = int(k.attr("batch_axis", 1)), int(k.attr("time_axis", 0))
    if not out.size:
        return
    b = k.b
    x_acc, o_acc = x.identity_access(), out.identity_access()
    lens_acc = lens.access([0], 1)

    def point(idx):
        n = _as_index(k, lens.dtype, k.load(lens_acc, [idx[batch_axis]]))
        n = k.s.min(_index_dtype(k), n, k.index(x.shape[time_axis]))  # lengths past the axis read nothing outside
        t = idx[time_axis]
        src = b.select(b.icmp_signed("<", t, n), b.sub(b.sub(n, k.index(1)), t), t)
        sidx = list(idx)
        sidx[time_axis] = src
        k.store(o_acc, idx, k.load(x_acc, sidx))
    k.loops(out.shape, list(range(out.rank)), [None] * out.rank, point)


@register("TensorScatter", index_inputs=(2,))
def lower_tensor_scatter(k):
    past, update, out = k.inputs[0], k.inputs[1], k.outputs[0]
    indices = k.inputs[2] if len(k.inputs) > 2 else None
    mode = k.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise InputError(f"node {k.node.name!r} (TensorScatter): mode {mode!r} is not linear or circular")
    axis = int(k.attr("axis", -2)) % past.rank
    if not out.size:
        return
    b = k.b
    k.copy(past, out)
    if not update.size:
        return
    max_len = past.shape[axis]
    u_acc, o_acc = update.identity_access(), out.identity_access()
    i_acc = indices.access([0], 1) if indices is not None else None

    def point(idx):
        start = _as_index(k, indices.dtype, k.load(i_acc, [idx[0]])) if i_acc is not None else k.index(0)
        pos = b.add(start, idx[axis])
        if mode == "circular":
            pos = b.srem(pos, k.index(max_len))
            pos = b.select(b.icmp_signed("<", pos, k.index(0)), b.add(pos, k.index(max_len)), pos)
        oidx = list(idx)
        oidx[axis] = pos
        with b.if_then(b.and_(b.icmp_signed(">=", pos, k.index(0)), b.icmp_signed("<", pos, k.index(max_len)))):
            k.store(o_acc, oidx, k.load(u_acc, idx))
    k.loops(update.shape, list(range(update.rank)), [None] * update.rank, point)


@register("Det", dtypes=("float32", "float64", "float16"))
def lower_det(k):
    x, out = k.inputs[0], k.outputs[0]
    n = x.shape[-1]
    if not out.size:
        return
    if n * n * 8 > DET_STACK_BYTES:
        raise InputError(f"node {k.node.name!r} (Det): {n}x{n} matrices need {n * n * 8} bytes of stack for the "
                         f"elimination; at most {DET_STACK_BYTES} (n <= 128) are supported")
    b = k.b
    f64 = np.dtype(np.float64)
    d_t = llvm_type(f64)
    nb = x.rank - 2
    with b.goto_entry_block():
        buf = b.alloca(d_t, size=ir.Constant(ir.IntType(32), max(1, n * n)))
    x_acc = x.identity_access()
    o_acc = out.identity_access() if out.rank else out.access([], 0)

    def cell(r, c):
        return b.gep(buf, [b.add(b.mul(r, k.index(n)), c)], inbounds=True)

    def matrix(idx):
        ix = list(idx) + [None, None]
        with k.for_range(n) as r, k.for_range(n) as c:
            ix[nb], ix[nb + 1] = r, c
            b.store(k.s.cast(x.dtype, f64, k.load(x_acc, ix)), cell(r, c))
        det = k.local(d_t, const(f64, 1.0))
        with k.for_range(n) as col:
            # pivot: the row at or below `col` with the largest magnitude
            best = k.local(k.idx_t, col)
            with k.for_range(n, b.add(col, k.index(1))) as r:
                cur = k.s.intrinsic("llvm.fabs", b.load(cell(r, col)))
                top = k.s.intrinsic("llvm.fabs", b.load(cell(b.load(best), col)))
                b.store(b.select(b.fcmp_ordered(">", cur, top), r, b.load(best)), best)
            p = b.load(best)
            with b.if_then(b.icmp_signed("!=", p, col)):
                with k.for_range(n) as c:
                    u, v = b.load(cell(col, c)), b.load(cell(p, c))
                    b.store(v, cell(col, c))
                    b.store(u, cell(p, c))
                b.store(b.fneg(b.load(det)), det)
            pivot = b.load(cell(col, col))
            b.store(b.fmul(b.load(det), pivot), det)
            with b.if_then(b.fcmp_unordered("!=", pivot, const(f64, 0.0))):
                with k.for_range(n, b.add(col, k.index(1))) as r:
                    factor = b.fdiv(b.load(cell(r, col)), pivot)
                    with k.for_range(n, b.add(col, k.index(1))) as c:
                        b.store(b.fsub(b.load(cell(r, c)), b.fmul(factor, b.load(cell(col, c)))), cell(r, c))
        k.store(o_acc, list(idx), k.s.cast(f64, out.dtype, b.load(det)))
    k.loops(out.shape, list(range(nb)), [None] * nb, matrix)


@register("Binarizer", domain="ai.onnx.ml")
def lower_binarizer(k):
    x, out = k.inputs[0], k.outputs[0]
    dt = x.dtype
    threshold = float(k.attr("threshold", 0.0))
    if not out.size:
        return

    def fn(v):
        if is_float(dt):
            above = k.s.cmp(dt, ">", v[0], const(dt, threshold))
        else:
            above = k.s.cmp(np.float64, ">", k.s.cast(dt, np.float64, v[0]), const(np.float64, threshold))
        return k.b.select(above, const(dt, 1), const(dt, 0))
    k.elementwise(fn, out, [x])


@register("ArrayFeatureExtractor", domain="ai.onnx.ml", index_inputs=(1,))
def lower_array_feature_extractor(k):
    x, ind, out = k.inputs[0], k.inputs[1], k.outputs[0]
    if not out.size:
        return
    count = ind.size
    x_acc, o_acc = x.identity_access(), out.identity_access()
    flat = ind.access([None] * ind.rank, 1)
    flat.strides = (1,)  # indices are read in their flat order (rank 1 or 1 x K in the cases ONNX defines)
    if ind.strides != row_major_strides(ind.shape):
        raise InputError(f"node {k.node.name!r} (ArrayFeatureExtractor): indices must be stored row-major")
    lead = out.shape[:-1] if x.rank > 1 else ()

    def point(idx):
        j = idx[-1]
        col = _as_index(k, ind.dtype, k.load(flat, [j]))
        xi = list(idx[:-1]) + [col] if x.rank > 1 else [col]
        k.store(o_acc, idx if x.rank > 1 else [k.index(0), j], k.load(x_acc, xi))
    shape = (*lead, count)
    k.loops(shape, list(range(len(shape))), [None] * len(shape), point)


@register("TfIdfVectorizer", dtypes=("int32", "int64"), heavy=True)
def lower_tfidf(k):
    x, out = k.inputs[0], k.outputs[0]
    name = k.node.name
    if k.attr("pool_strings", None):
        raise InputError(f"node {name!r} (TfIdfVectorizer): string pools are not supported; map tokens to integer ids first")
    mode = k.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise InputError(f"node {name!r} (TfIdfVectorizer): mode {mode!r} is not TF, IDF or TFIDF")
    min_n, max_n = int(k.attr("min_gram_length")), int(k.attr("max_gram_length"))
    max_skip = int(k.attr("max_skip_count"))
    counts = [int(c) for c in k.attr("ngram_counts")]
    indexes = [int(i) for i in k.attr("ngram_indexes")]
    pool = [int(v) for v in (k.attr("pool_int64s", None) or [])]
    out_size = max(indexes) + 1
    # n-grams of the pool: tuple -> output column (a repeated n-gram keeps its last id, like the reference)
    grams: dict[tuple[int, ...], int] = {}
    gram_id = 0
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        items = pool[start:end]
        for g in range(len(items) // size):
            if min_n <= size <= max_n:
                grams[tuple(items[g * size:(g + 1) * size])] = indexes[gram_id]
            gram_id += 1
    rows, width = (x.shape[0], x.shape[1]) if x.rank == 2 else (1, x.size)
    if not out.size:
        return
    b = k.b
    dt = out.dtype
    o_acc = out.identity_access()
    x_acc = x.identity_access()
    orank = out.rank

    def out_idx(r, c):
        return [r, c] if orank == 2 else [c]

    with k.for_range(rows) as r, k.for_range(out_size) as c:
        k.store(o_acc, out_idx(r, c), const(dt, 0))
    if grams and width:
        maxlen = max(len(g) for g in grams)
        table = np.zeros((len(grams), maxlen), dtype=np.int64)
        lens = np.zeros(len(grams), dtype=np.int64)
        cols = np.zeros(len(grams), dtype=np.int64)
        for i, (g, col) in enumerate(grams.items()):
            table[i, :len(g)] = g
            lens[i], cols[i] = len(g), col
        t_ptr, l_ptr, c_ptr = k.constant_array(table), k.constant_array(lens), k.constant_array(cols)

        def at(ptr, i):
            return _as_index(k, I64, b.load(b.gep(ptr, [i], inbounds=True)))

        def x_at(r, p):
            return k.s.cast(x.dtype, I64, k.load(x_acc, [r, p] if x.rank == 2 else [p]))

        with k.for_range(rows) as r, k.for_range(len(grams)) as g:
            n = at(l_ptr, g)
            col = at(c_ptr, g)
            skips = b.select(b.icmp_signed("==", n, k.index(1)), k.index(1), k.index(max_skip + 1))
            with k.for_range(b.add(skips, k.index(1)), k.index(1)) as d, k.for_range(width) as p:
                last = b.add(p, b.mul(b.sub(n, k.index(1)), d))
                with b.if_then(b.icmp_signed("<", last, k.index(width))):
                    ok = k.local(ir.IntType(1), ir.Constant(ir.IntType(1), 1))
                    with k.for_range(n) as j:
                        want = b.load(b.gep(t_ptr, [b.add(b.mul(g, k.index(maxlen)), j)], inbounds=True))
                        same = b.icmp_signed("==", x_at(r, b.add(p, b.mul(j, d))), want)
                        b.store(b.and_(b.load(ok), same), ok)
                    with b.if_then(b.load(ok)):
                        idx = out_idx(r, col)
                        k.store(o_acc, idx, b.fadd(k.load(o_acc, idx), const(dt, 1)))
    if mode == "TF":
        return
    w = column_weights(k.node.attrs, out_size, f"node {name!r} (TfIdfVectorizer)")
    w_ptr = k.constant_array(w.astype(dt))
    with k.for_range(rows) as r, k.for_range(out_size) as c:
        idx = out_idx(r, c)
        f = k.load(o_acc, idx)
        wv = b.load(b.gep(w_ptr, [c], inbounds=True))
        if mode == "IDF":
            value = b.select(b.fcmp_ordered(">", f, const(dt, 0)), wv, const(dt, 0))
        else:
            value = b.fmul(wv, f)
        k.store(o_acc, idx, value)
