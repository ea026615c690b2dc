"""TfIdfIds: TfIdfVectorizer over the dense token ids 0..vocabulary-1 (-1: a token of no n-gram) that
frontend/tfidf.py gives a string pool (`pool_strings`). The counts are the TfIdfVectorizer's (ops/misc.py, as
onnx.reference and ONNX Runtime count): per row, unigrams once per position, longer n-grams once per skip distance
1 .. max_skip_count + 1, each n-gram of the pool adding 1 to its column; then the TF, IDF or TFIDF weights.

The ids being dense, an n-gram is one int64 key (its ids in base `vocabulary`): a unigram's column is one table
load, a longer n-gram's a binary search among the pool's sorted keys of its length, where ops/misc.py compares
the row with every n-gram of the pool (rows x width x pool)."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..kernels.scalar import const
from ..opspec import OUR_DOMAIN, register

I64 = np.dtype(np.int64)
MAX_KEY = 1 << 62


def pool_grams(attrs: dict, where: str) -> dict[int, dict[tuple[int, ...], int]]:
    """n -> {ids of the n-gram: output column} for the pool's n-grams of min_gram_length..max_gram_length (a
    repeated n-gram keeps its last column, as the reference does)."""
    min_n, max_n = int(attrs.get("min_gram_length", 1)), int(attrs.get("max_gram_length", 1))
    counts = [int(c) for c in attrs.get("ngram_counts") or []]
    indexes = [int(i) for i in attrs.get("ngram_indexes") or []]
    pool = [int(v) for v in attrs.get("pool_int64s") or []]
    grams: dict[int, dict[tuple[int, ...], int]] = {}
    gram_id = 0
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        items = pool[start:end]
        for g in range(len(items) // size):
            if gram_id >= len(indexes):
                raise InputError(f"{where}: ngram_indexes has {len(indexes)} values, fewer than the pool's n-grams")
            if min_n <= size <= max_n:
                grams.setdefault(size, {})[tuple(items[g * size:(g + 1) * size])] = indexes[gram_id]
            gram_id += 1
    return grams


def column_weights(attrs: dict, columns: int, where: str) -> np.ndarray:
    """Each output column's weight: weights[i] belongs to the pool's i-th n-gram, whose column is ngram_indexes[i]
    (ONNX Runtime's reading, which skl2onnx's models rely on; onnx.reference weighs by column, the same only when
    ngram_indexes is 0..n-1); 1 without weights. Both TfIdfVectorizer kernels (ops/misc.py too) use it."""
    weights = attrs.get("weights")
    out = np.ones(columns, np.float32)
    if weights is None or not len(weights):
        return out
    indexes = [int(i) for i in attrs.get("ngram_indexes") or []]
    if len(weights) != len(indexes):
        raise InputError(f"{where}: weights has {len(weights)} values, expected one per n-gram ({len(indexes)}); "
                         "fix the model's weights attribute")
    out[indexes] = np.asarray(weights, np.float32)
    return out


def output_size(attrs: dict) -> int:
    return max((int(i) for i in attrs.get("ngram_indexes") or []), default=-1) + 1


@register("TfIdfIds", domain=OUR_DOMAIN, dtypes=("int64",), heavy=True)
def lower_tfidf_ids(k):
    x, out = k.inputs[0], k.outputs[0]
    where = f"node {k.node.name!r} (TfIdfIds)"
    mode = k.attr("mode", "TF")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise InputError(f"{where}: mode {mode!r} is not TF, IDF or TFIDF")
    vocabulary = int(k.attr("vocabulary"))
    grams = pool_grams(k.node.attrs, where)
    if grams and vocabulary ** max(grams) >= MAX_KEY:
        raise InputError(f"{where}: {max(grams)}-grams over {vocabulary} tokens do not fit an int64 key; give "
                         "max_gram_length <= 3 or a smaller vocabulary")
    max_skip = int(k.attr("max_skip_count", 0))
    columns = output_size(k.node.attrs)
    rows, width = (x.shape[0], x.shape[1]) if x.rank == 2 else (1, x.size)
    b, dt = k.b, out.dtype
    one = const(dt, 1)
    if not out.size:
        return
    with k.for_range(rows * columns) as i:
        k.store_ptr(const(dt, 0), out.ptr, dt, i)
    if not width:
        grams = {}

    def token(r, p):
        return k.load_ptr(x.ptr, x.dtype, b.add(b.mul(r, k.index(width)), p))

    def bump(r, column):
        at = b.add(b.mul(r, k.index(columns)), column)
        k.store_ptr(b.fadd(k.load_ptr(out.ptr, dt, at), one), out.ptr, dt, at)

    for n, table in sorted(grams.items()):
        if n == 1:
            unigram = np.full(vocabulary, -1, np.int64)
            for (t,), col in table.items():
                if 0 <= t < vocabulary:
                    unigram[t] = col
            col_ptr = k.constant_array(unigram)
            with k.for_range(rows) as r, k.for_range(width) as p:
                t = token(r, p)
                inside = b.and_(b.icmp_signed(">=", t, const(I64, 0)), b.icmp_signed("<", t, const(I64, vocabulary)))
                with b.if_then(inside):
                    col = k.load_ptr(col_ptr, I64, b.trunc(t, k.idx_t) if k.idx_t.width < 64 else t)
                    with b.if_then(b.icmp_signed(">=", col, const(I64, 0))):
                        bump(r, b.trunc(col, k.idx_t) if k.idx_t.width < 64 else col)
            continue
        keys = {sum(t * vocabulary ** (n - 1 - j) for j, t in enumerate(g)): col for g, col in table.items()
                if all(0 <= t < vocabulary for t in g)}
        order = sorted(keys)
        keys_ptr = k.constant_array(np.asarray(order, np.int64))
        cols_ptr = k.constant_array(np.asarray([keys[o] for o in order], np.int64))
        for d in range(1, max_skip + 2):
            span = (n - 1) * d
            if span >= width:
                break
            with k.for_range(rows) as r, k.for_range(width - span) as p:
                key, valid = const(I64, 0), None
                for j in range(n):
                    t = token(r, b.add(p, k.index(j * d)))
                    ok = b.and_(b.icmp_signed(">=", t, const(I64, 0)), b.icmp_signed("<", t, const(I64, vocabulary)))
                    valid = ok if valid is None else b.and_(valid, ok)
                    key = b.add(b.mul(key, const(I64, vocabulary)), t)
                with b.if_then(valid):
                    _search(k, keys_ptr, cols_ptr, len(order), key, lambda col: bump(r, col))
    if mode == "TF":
        return
    w_ptr = k.constant_array(column_weights(k.node.attrs, columns, where).astype(dt))
    with k.for_range(rows) as r, k.for_range(columns) as c:
        at = b.add(b.mul(r, k.index(columns)), c)
        f, wv = k.load_ptr(out.ptr, dt, at), k.load_ptr(w_ptr, dt, c)
        value = b.select(b.fcmp_ordered(">", f, const(dt, 0)), wv, const(dt, 0)) if mode == "IDF" else b.fmul(wv, f)
        k.store_ptr(value, out.ptr, dt, at)


def _search(k, keys_ptr, cols_ptr, count: int, key, found) -> None:
    """found(column) when `key` is among the `count` sorted keys (binary search)."""
    from ..kernels.strings import loop_while
    b = k.b
    lo, hi = k.local(k.idx_t, k.index(0)), k.local(k.idx_t, k.index(count))
    with loop_while(k, lambda: b.icmp_signed("<", b.load(lo), b.load(hi))):
        mid = b.lshr(b.add(b.load(lo), b.load(hi)), k.index(1))
        probe = k.load_ptr(keys_ptr, I64, mid)
        with b.if_else(b.icmp_signed("<", probe, key)) as (below, other):
            with below:
                b.store(b.add(mid, k.index(1)), lo)
            with other:
                b.store(mid, hi)
    at = b.load(lo)
    inside = b.icmp_signed("<", at, k.index(count))
    with b.if_then(inside):
        with b.if_then(b.icmp_signed("==", k.load_ptr(keys_ptr, I64, at), key)):
            col = k.load_ptr(cols_ptr, I64, at)
            found(b.trunc(col, k.idx_t) if k.idx_t.width < 64 else col)
