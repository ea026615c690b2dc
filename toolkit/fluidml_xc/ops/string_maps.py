"""ai.onnx.ml LabelEncoder and CategoryMapper where keys or values are strings (docs/STRINGS.md; numeric-only
LabelEncoders are expanded at import, frontend/ml_ops.py): per element, the first key equal to it picks its value,
else the default. Keys and values are build-time tables (kernels/strings.py `table`), string keys sorted by (length,
bytes) at build time for a binary search per element (numeric keys: a linear search)."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..kernels import strings as ks
from ..kernels.scalar import is_float
from ..opspec import register
from ..strings import capacity, encode, is_slot

ML_DOMAIN = "ai.onnx.ml"
ONNX_DEFAULT_STRING = "_Unused"


def _list(attrs: dict, name: str) -> np.ndarray | None:
    """NAME_strings / NAME_int64s / NAME_floats / NAME_tensor as a flat array (strings as an object array)."""
    for suffix, dtype in (("_strings", object), ("_int64s", np.int64), ("_floats", np.float32), ("_tensor", None)):
        value = attrs.get(name + suffix)
        if value is None or (suffix != "_tensor" and len(value) == 0):
            continue
        arr = np.asarray(value) if dtype is None else np.asarray(list(value), dtype=dtype)
        return arr.astype(object).reshape(-1) if arr.dtype.kind in "OSU" else arr.reshape(-1)
    return None


def _default(attrs: dict, out_dtype) -> object:
    if attrs.get("default_tensor") is not None:
        return np.asarray(attrs["default_tensor"]).reshape(-1)[0]
    if is_slot(out_dtype):
        return attrs.get("default_string", ONNX_DEFAULT_STRING)
    if np.dtype(out_dtype).kind == "f":
        return attrs.get("default_float", -0.0)
    return attrs.get("default_int64", -1)


def _keys_table(k, keys: np.ndarray, x):
    if keys.dtype == object:
        if not is_slot(x.dtype):
            raise InputError(f"node {k.node.name!r} ({k.node.op_type}): string keys but a {x.dtype} input")
        return ks.table(k, keys)
    if is_slot(x.dtype):
        raise InputError(f"node {k.node.name!r} ({k.node.op_type}): {keys.dtype} keys but a string input")
    return k.constant_array(keys.astype(x.dtype)), 0


def _matches(k, x, i, keys_ptr, j, key_cap: int):
    b = k.b
    if is_slot(x.dtype):
        return ks.slots_equal(k, ks.slot_at(k, x.ptr, i), capacity(x.dtype), ks.slot_at(k, keys_ptr, j), key_cap)
    value, key = k.load_ptr(x.ptr, x.dtype, i), k.load_ptr(keys_ptr, x.dtype, j)
    return b.fcmp_ordered("==", value, key) if is_float(x.dtype) else b.icmp_signed("==", value, key)


def sorted_keys(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """String keys ordered by (byte length, bytes) for the binary search, each key once (its first value)."""
    first: dict[bytes, int] = {}
    for j, key in enumerate(keys):
        first.setdefault(encode(key), j)
    order = sorted(first, key=lambda kb: (len(kb), kb))
    return np.array(order, dtype=object), np.asarray(values)[[first[kb] for kb in order]]


def _binary_search(k, slot, cap: int, keys_ptr, key_cap: int, count: int, hit) -> None:
    """hit = the index of the key equal to the slot's string among `count` keys sorted by (length, bytes)."""
    search_bytes(k, ks.data(k, slot), ks.clamp_length(k, slot, cap), keys_ptr, key_cap, count, hit)


def search_bytes(k, text, n, keys_ptr, key_cap: int, count: int, hit) -> None:
    """hit = the index of the key equal to the n bytes at `text` among `count` keys sorted by (length, bytes)
    (left as it was when none is)."""
    b = k.b
    lo, hi = k.local(k.idx_t, k.index(0)), k.local(k.idx_t, k.index(count))
    with ks.loop_while(k, lambda: b.icmp_signed("<", b.load(lo), b.load(hi))):
        mid = b.lshr(b.add(b.load(lo), b.load(hi)), k.index(1))
        key = ks.slot_at(k, keys_ptr, mid)
        m = ks.clamp_length(k, key, key_cap)
        order = k.local(ks.I32, b.select(b.icmp_signed("<", n, m), ks.I32(-1), b.select(b.icmp_signed(">", n, m), ks.I32(1), ks.I32(0))))
        with b.if_then(b.icmp_signed("==", b.load(order), ks.I32(0))):
            b.store(b.call(ks.memcmp(k), [text, ks.data(k, key), ks.size_t(k, n)]), order)
        c = b.load(order)
        with b.if_else(b.icmp_signed("==", c, ks.I32(0))) as (found, other):
            with found:
                b.store(mid, hit)
                b.store(b.load(hi), lo)
            with other:
                with b.if_else(b.icmp_signed("<", c, ks.I32(0))) as (below, above):
                    with below:
                        b.store(mid, hi)
                    with above:
                        b.store(b.add(mid, k.index(1)), lo)


def lookup(k, keys: np.ndarray, values: np.ndarray, default) -> None:
    """out[i] = values[first j with keys[j] == x[i]], else default."""
    x, out = k.inputs[0], k.outputs[0]
    if len(keys) != len(values):
        raise InputError(f"node {k.node.name!r} ({k.node.op_type}): {len(keys)} keys but {len(values)} values: give one "
                         "value per key")
    b = k.b
    if keys.dtype == object:
        keys, values = sorted_keys(keys, values)
    keys_ptr, key_cap = _keys_table(k, keys, x)
    extended = np.concatenate([values.astype(object), np.array([default], dtype=object)])
    if is_slot(out.dtype):
        values_ptr = ks.table(k, extended, capacity(out.dtype))[0]
    else:
        values_ptr = k.constant_array(extended.astype(out.dtype))
    count = k.index(len(keys))
    with k.for_range(x.size) as i:
        hit = k.local(k.idx_t, count)
        if is_slot(x.dtype):
            _binary_search(k, ks.slot_at(k, x.ptr, i), capacity(x.dtype), keys_ptr, key_cap, len(keys), hit)
        else:
            with k.for_range(len(keys)) as j:
                with b.if_then(b.icmp_signed("==", b.load(hit), count)):
                    with b.if_then(_matches(k, x, i, keys_ptr, j, key_cap)):
                        b.store(j, hit)
        at = b.load(hit)
        if is_slot(out.dtype):
            cap = capacity(out.dtype)
            ks.copy_slot(k, ks.slot_at(k, out.ptr, i), cap, ks.slot_at(k, values_ptr, at), cap)
        else:
            k.store_ptr(k.load_ptr(values_ptr, out.dtype, at), out.ptr, out.dtype, i)


@register("LabelEncoder", domain=ML_DOMAIN, strings=True)
def lower_label_encoder(k):
    keys, values = _list(k.node.attrs, "keys"), _list(k.node.attrs, "values")
    if keys is None or values is None:
        raise InputError(f"node {k.node.name!r} (LabelEncoder): it needs keys_* and values_* attributes")
    lookup(k, keys, values, _default(k.node.attrs, k.outputs[0].dtype))


@register("CategoryMapper", domain=ML_DOMAIN, strings=True)
def lower_category_mapper(k):
    attrs = k.node.attrs
    strings = np.asarray(list(attrs.get("cats_strings", [])), dtype=object)
    ints = np.asarray(list(attrs.get("cats_int64s", [])), dtype=np.int64)
    if is_slot(k.inputs[0].dtype):
        lookup(k, strings, ints, attrs.get("default_int64", -1))
    else:
        lookup(k, ints, strings, attrs.get("default_string", ONNX_DEFAULT_STRING))
