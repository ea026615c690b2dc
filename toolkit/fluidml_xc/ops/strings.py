"""The string ops (docs/STRINGS.md): Equal on strings (called by ops/elementwise.py's Equal), StringConcat,
StringSplit, StringNormalizer, and ai.onnx.ml LabelEncoder / CategoryMapper with string keys or values.

String tensors are slot arrays (strings.py); kernels/strings.py holds the slot arithmetic. A result that would not
fit its slot (StringConcat) or a split into more parts than its bound fails the run (OpSpec.run_check, FXC_ERR_RUN)
instead of writing past the slot. StringSplit and StringNormalizer with stopwords have data-dependent output
shapes (frontend/shapes.py): their bounds are below."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels import strings as ks
from ..opspec import register
from ..strings import DEFAULT_MAX_STRING_BYTES, capacity, encode

I64 = ks.I64
ML_DOMAIN = "ai.onnx.ml"


def lower_string_equal(k) -> None:
    a, b_, out = k.inputs[0], k.inputs[1], k.outputs[0]
    ca, cb = capacity(a.dtype), capacity(b_.dtype)

    def body(o, ins):
        eq = ks.slots_equal(k, ks.slot_at(k, a.ptr, ins[0]), ca, ks.slot_at(k, b_.ptr, ins[1]), cb)
        k.b.store(k.b.zext(eq, ir.IntType(8)), k.b.gep(out.ptr, [o], inbounds=True))
    ks.elements(k, out, [a, b_], body)


# --------------------------------------------------------------------------------------------------
# StringConcat
# --------------------------------------------------------------------------------------------------
def run_check_concat(graph, node) -> str | None:
    out = graph.tensors[node.outputs[0]]
    return (f"StringConcat node {node.name!r}: a joined string is longer than the {capacity(out.dtype)} bytes a string "
            "may hold; the outputs are not valid: build with a larger --max-string-bytes")


@register("StringConcat", since=20, strings=True, run_check=run_check_concat)
def lower_string_concat(k):
    a, b_, out = k.inputs[0], k.inputs[1], k.outputs[0]
    ca, cb, co = capacity(a.dtype), capacity(b_.dtype), capacity(out.dtype)

    def body(o, ins):
        sa, sb = ks.slot_at(k, a.ptr, ins[0]), ks.slot_at(k, b_.ptr, ins[1])
        ks.write(k, ks.slot_at(k, out.ptr, o), co,
                 [(ks.data(k, sa), ks.clamp_length(k, sa, ca)), (ks.data(k, sb), ks.clamp_length(k, sb, cb))])
    ks.elements(k, out, [a, b_], body)


# --------------------------------------------------------------------------------------------------
# StringNormalizer
# --------------------------------------------------------------------------------------------------
def bound_normalizer(op_type: str, attrs: dict, inputs: list, opset: int, where: str, max_dims=None,
                     declared=None, max_string_bytes=DEFAULT_MAX_STRING_BYTES) -> list[tuple]:
    """Output shape = the input's ([C] or [1, C]); with stopwords its last dim depends on the data (at least 1)."""
    x = inputs[0]
    if len(x.shape) not in (1, 2) or (len(x.shape) == 2 and x.shape[0] != 1):
        raise InputError(f"node {where!r} (StringNormalizer): input shape {list(x.shape)} is neither [C] nor [1, C]")
    shape = tuple(x.shape[:-1]) + (max(x.shape[-1], 1),)
    return [(x.dtype, shape, (len(shape) - 1,) if attrs.get("stopwords") else ())]


def _case_action(k) -> str:
    action = str(k.attr("case_change_action", "NONE")).upper()
    if action not in ("NONE", "LOWER", "UPPER"):
        raise InputError(f"node {k.node.name!r} (StringNormalizer): case_change_action {action!r} is not NONE, LOWER or UPPER")
    return action


def _copy_case(k, dst, src, cap: int, action: str) -> None:
    n = ks.clamp_length(k, src, cap)
    if action == "NONE":
        ks.write(k, dst, cap, [(ks.data(k, src), n)])
        return
    with k.for_range(ks.size_t(k, n)) as j:
        k.b.store(ks.case_changed(k, ks.data(k, src), j, action == "UPPER"), k.b.gep(ks.data(k, dst), [j]))
    ks.set_length(k, dst, n)


def _is_stopword(k, slot, cap: int, stops: ir.Value, n_stops: int, stop_cap: int, fold: bool) -> ir.Value:
    hit = k.local(ks.I1, ir.Constant(ks.I1, 0))
    n = ks.clamp_length(k, slot, cap)
    with k.for_range(n_stops) as s:
        stop = ks.slot_at(k, stops, s)
        k.b.store(k.b.or_(k.b.load(hit), _stop_equal(k, slot, n, stop, fold)), hit)
    return k.b.load(hit)


def _stop_equal(k, slot, n, stop, fold: bool) -> ir.Value:
    if not fold:
        return ks.bytes_equal(k, ks.data(k, slot), n, ks.data(k, stop), ks.length(k, stop))
    same = k.local(ks.I1, k.b.icmp_signed("==", n, ks.length(k, stop)))
    with k.b.if_then(k.b.load(same)):
        with k.for_range(ks.size_t(k, n)) as j:
            c = ks.ascii_lower(k, k.b.load(k.b.gep(ks.data(k, slot), [j])))
            k.b.store(k.b.and_(k.b.load(same), k.b.icmp_unsigned("==", c, k.b.load(k.b.gep(ks.data(k, stop), [j])))), same)
    return k.b.load(same)


@register("StringNormalizer", since=10, strings=True, output_bound=bound_normalizer)
def lower_string_normalizer(k):
    """Stopwords removed (whole elements; is_case_sensitive=0 compares with ASCII letters folded), then the case
    change (kernels/strings.py case_changed); all removed: one empty string."""
    x, out = k.inputs[0], k.outputs[0]
    cap, action = capacity(x.dtype), _case_action(k)
    count = x.shape[-1]
    words = [str(w) for w in (k.attr("stopwords", None) or [])]
    if not words:
        with k.for_range(count) as i:
            _copy_case(k, ks.slot_at(k, out.ptr, i), ks.slot_at(k, x.ptr, i), cap, action)
        return
    fold = not int(k.attr("is_case_sensitive", 0))
    keys = np.array([encode(w).lower() if fold else encode(w) for w in words], dtype=object)
    stops, stop_cap = ks.table(k, keys)
    kept = k.local(k.idx_t, k.index(0))
    with k.for_range(count) as i:
        src = ks.slot_at(k, x.ptr, i)
        with k.b.if_then(k.b.not_(_is_stopword(k, src, cap, stops, len(words), stop_cap, fold))):
            _copy_case(k, ks.slot_at(k, out.ptr, k.b.load(kept)), src, cap, action)
            k.b.store(k.b.add(k.b.load(kept), k.index(1)), kept)
    with k.b.if_then(k.b.icmp_signed("==", k.b.load(kept), k.index(0))):
        ks.set_length(k, ks.slot_at(k, out.ptr, 0), I64(0))
        k.b.store(k.index(1), kept)
    _set_dims(k, 0, [*([1] if x.rank == 2 else []), k.b.load(kept)])


def _set_dims(k, i: int, values) -> None:
    ptr = k.dims_out.get(i)
    if ptr is None:
        return
    for d, v in enumerate(values):
        value = I64(v) if isinstance(v, int) else (k.b.sext(v, I64) if v.type.width < 64 else v)
        k.b.store(value, k.b.gep(ptr, [k.index(d)], inbounds=True))
