"""com.microsoft Tokenizer (ONNX Runtime's contrib op; skl2onnx writes it for CountVectorizer / TfidfVectorizer) and
its fused form TokenIds (passes/token_ids.py: Tokenizer -> views -> the token-to-id CategoryMapper of a string
TfIdfVectorizer), which looks each token up in a build-time hash table as it is found.

Per string, ONNX Runtime's loop: `tokenexp` is searched leftmost-longest (RE2 with longest_match) from the position;
a match of `mincharnum` code points or more is a token and the search goes on after it, a shorter one moves the
search one character past its start. The pattern is compiled at build time (kernels/regex_search.py). `separators`
that each match one character (skl2onnx's `[' ', '[.]', '\\\\?', ...]`) split the text the same way as the tokens
`[^separators]+`; tokenexp `.` or the one separator "" take each character ((?s).). Other separators are refused.

Output: the input's shape plus a last dim of tokens, per string [\\x02 if mark] tokens [\\x03 if mark] then
`pad_value` up to the width. ONNX Runtime's width is the batch's most tokens; here it is a build-time bound (the
most tokens a string of --max-string-bytes can give, or a smaller --max-dim NODE=N; a run needing more fails), so
the rows carry more padding: what the TfIdfVectorizer after it counts is the same unless pad_value maps to an id
(refused by passes/token_ids.py) or a view merges several strings' tokens into one row (docs/CLASSIC_ML.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..ir import DEFAULT_BOUND
from ..kernels import strings as ks
from ..kernels.regex_search import SearchDfa, compile_search, emit_search
from ..kernels.regex_syntax import Chars, Repeat, negate, normalize, parse
from ..opspec import OUR_DOMAIN, register
from ..strings import DEFAULT_MAX_STRING_BYTES, capacity, encode, room_for
from .string_maps import sorted_keys

I64, I32 = ks.I64, ks.I32
MS_DOMAIN = "com.microsoft"
FNV_OFFSET, FNV_PRIME = 0x811C9DC5, 0x01000193
START_MARK, END_MARK = b"\x02", b"\x03"


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class TokenizerSpec:
    """What a Tokenizer node asks for: the search pattern (a regex_syntax tree or string), whether it takes each
    character, the marks, the padding and the least code points of a token."""
    pattern: object
    chars: bool
    mark: bool
    pad: bytes
    mincharnum: int
    where: str

    @cached_property
    def dfa(self) -> SearchDfa:
        return compile_search(self.pattern, self.where)

    def most_tokens(self, max_bytes: int) -> int:
        """The most entries one string of max_bytes bytes gives (marks included)."""
        return max_bytes // self.mincharnum + 2 * self.mark


def tokenizer_spec(attrs: dict, where: str) -> TokenizerSpec:
    """The node's attributes checked as ONNX Runtime checks them; one line naming the attribute otherwise."""
    for name in ("mark", "pad_value", "mincharnum"):
        if attrs.get(name) is None:
            raise InputError(f"{where}: the {name} attribute is missing (ONNX Runtime requires it)")
    mincharnum = int(attrs["mincharnum"])
    if mincharnum < 1:
        raise InputError(f"{where}: mincharnum is {mincharnum}; give 1 or more")
    separators = attrs.get("separators")
    tokenexp = attrs.get("tokenexp")
    if separators is not None and len(separators):
        seps = [_text(s) for s in separators]
        chars = seps == [""]
        if not chars:
            if "" in seps:
                raise InputError(f"{where}: an empty separator among others; give non-empty separators, or [\"\"] alone "
                                 "for one token per character")
            pattern = Repeat(Chars(negate(normalize([r for s in seps for r in _one_char(s, where)]))), 1, None)
    elif tokenexp:
        chars = _text(tokenexp) == "."
        pattern = _text(tokenexp)
        parse(pattern, where)
    else:
        raise InputError(f"{where}: neither separators nor tokenexp is set; give one (ONNX Runtime requires it)")
    if chars:
        if mincharnum > 1:
            raise InputError(f"{where}: mincharnum {mincharnum} with one token per character; give mincharnum 1 "
                             "(ONNX Runtime refuses it too)")
        pattern = "(?s)."
    return TokenizerSpec(pattern, chars, bool(int(attrs["mark"])), encode(_text(attrs["pad_value"])), mincharnum, where)


def _one_char(separator: str, where: str):
    tree = parse(separator, where)
    if not isinstance(tree, Chars):
        raise InputError(f"{where}: separator {separator!r} matches more than one character; only separators of one "
                         "character (or a class of them) are supported: use tokenexp for the tokens instead")
    return tree.ranges


def bound_tokenizer(op_type: str, attrs: dict, inputs: list, opset: int, where: str, max_dims=None, declared=None,
                    max_string_bytes=DEFAULT_MAX_STRING_BYTES) -> list[tuple]:
    x = inputs[0]
    label = f"node {where!r} (Tokenizer)"
    if len(x.shape) not in (1, 2):
        raise InputError(f"{label}: its input is {list(x.shape)}; ONNX Runtime takes [C] or [N, C] strings")
    spec = tokenizer_spec(attrs, label)
    width = spec.most_tokens(room_for(max_string_bytes) - 1)
    for name, value in (max_dims or {}).items():
        if name == DEFAULT_BOUND:
            continue
        if value < 2 * spec.mark + 1:
            raise InputError(f"--max-dim {name}={value}: give a count of tokens of at least {2 * spec.mark + 1}")
        width = min(width, int(value))
    dtype = np.dtype(np.int64) if op_type == "TokenIds" else x.dtype
    return [(dtype, tuple(x.shape) + (width,), ())]


def run_check_tokenizer(graph, node) -> str | None:
    bound = graph.tensors[node.outputs[0]].shape[-1]
    spec = tokenizer_spec(node.attrs, f"node {node.name!r} ({node.op_type})")
    if bound >= spec.most_tokens(capacity(graph.tensors[node.inputs[0]].dtype)):
        return None
    return (f"{node.op_type} node {node.name!r}: a string has more than {bound - 2 * spec.mark} tokens; the outputs "
            f"are not valid: build with a larger --max-dim {node.name}=N")


def each_token(k, search: ir.Function, text, n, mincharnum: int, on_token) -> None:
    """ONNX Runtime's tokenexp loop over the n bytes at `text`: on_token(start, length) per token, in order."""
    b = k.b
    pos = k.local(I64, I64(0))
    with ks.loop_while(k, lambda: b.icmp_signed("<=", b.load(pos), n)):
        start, end = k.local(I64, b.load(pos)), k.local(I64, I64(-1))
        with ks.loop_while(k, lambda: b.and_(b.icmp_signed("<", b.load(end), I64(0)),
                                            b.icmp_signed("<=", b.load(start), n))):
            e = b.call(search, [text, n, b.load(start)])
            b.store(e, end)
            with b.if_then(b.icmp_signed("<", e, I64(0))):
                b.store(b.add(b.load(start), I64(1)), start)
        with b.if_else(b.icmp_signed("<", b.load(end), I64(0))) as (none, found):
            with none:
                b.store(b.add(n, I64(1)), pos)
            with found:
                s, e = b.load(start), b.load(end)
                chars = k.local(I64, I64(0))
                with k.for_range(ks.size_t(k, b.sub(e, s))) as j:
                    byte = b.load(b.gep(text, [b.add(ks.size_t(k, s), j)]))
                    lead = b.icmp_unsigned("!=", b.and_(byte, ks.I8(0xC0)), ks.I8(0x80))
                    b.store(b.add(b.load(chars), b.zext(lead, I64)), chars)
                with b.if_else(b.icmp_signed(">=", b.load(chars), I64(mincharnum))) as (token, short):
                    with token:
                        on_token(s, b.sub(e, s))
                        b.store(e, pos)
                    with short:
                        b.store(b.add(s, _width(k, text, s, n)), pos)


def _width(k, text, s, n):
    """Bytes of the UTF-8 sequence led by text[s] (1 at the end of the text or for a byte that leads none)."""
    b = k.b
    lead = b.zext(b.load(b.gep(text, [ks.size_t(k, b.select(b.icmp_signed("<", s, n), s, I64(0)))])), I64)
    width = b.select(b.icmp_unsigned(">=", lead, I64(0xF0)), I64(4),
                     b.select(b.icmp_unsigned(">=", lead, I64(0xE0)), I64(3),
                              b.select(b.icmp_unsigned(">=", lead, I64(0xC0)), I64(2), I64(1))))
    return b.select(b.icmp_signed("<", s, n), width, I64(1))


def lower_rows(k, spec: TokenizerSpec, put_token, put_constant) -> None:
    """Per string: [start mark] tokens [end mark] padding, through put_token(row, j, source, start, length) and
    put_constant(row, j, which) (which: "start", "end", "pad"); a string with more tokens than fit fails the run."""
    x, out = k.inputs[0], k.outputs[0]
    b = k.b
    width = out.shape[-1]
    room = width - 2 * spec.mark
    search = emit_search(k.module, k.module.get_unique_name("tokenizer_search"), spec.dfa)
    cap = capacity(x.dtype)
    with k.for_range(x.size) as i:
        row = b.mul(k.index(width), i)
        j = k.local(I64, I64(0))
        if spec.mark:
            put_constant(row, I64(0), "start")
            b.store(I64(1), j)
        slot = ks.slot_at(k, x.ptr, i)
        source = ks.data(k, slot)
        count = k.local(I64, I64(0))

        def token(start, length):
            with b.if_then(b.icmp_signed("<", b.load(count), I64(room))):
                put_token(row, b.load(j), source, start, length)
                b.store(b.add(b.load(j), I64(1)), j)
            b.store(b.add(b.load(count), I64(1)), count)
        each_token(k, search, source, ks.clamp_length(k, slot, cap), spec.mincharnum, token)
        ks.fail(k, b.icmp_signed(">", b.load(count), I64(room)))
        if spec.mark:
            put_constant(row, b.load(j), "end")
            b.store(b.add(b.load(j), I64(1)), j)
        with ks.loop_while(k, lambda: b.icmp_signed("<", b.load(j), I64(width))):
            put_constant(row, b.load(j), "pad")
            b.store(b.add(b.load(j), I64(1)), j)


def _at(k, row, j):
    return k.b.add(row, ks.size_t(k, j))


@register("Tokenizer", domain=MS_DOMAIN, strings=True, output_bound=bound_tokenizer, run_check=run_check_tokenizer)
def lower_tokenizer(k):
    spec = tokenizer_spec(k.node.attrs, f"node {k.node.name!r} (Tokenizer)")
    out = k.outputs[0]
    out_cap = capacity(out.dtype)
    constants, _ = ks.table(k, np.array([START_MARK, END_MARK, spec.pad], dtype=object), out_cap)
    which = {"start": 0, "end": 1, "pad": 2}

    def put_token(row, j, source, start, length):
        ks.write(k, ks.slot_at(k, out.ptr, _at(k, row, j)), out_cap, [(k.b.gep(source, [ks.size_t(k, start)]), length)])

    def put_constant(row, j, name):
        ks.copy_slot(k, ks.slot_at(k, out.ptr, _at(k, row, j)), out_cap, ks.slot_at(k, constants, which[name]), out_cap)
    lower_rows(k, spec, put_token, put_constant)


def fnv1a(data: bytes) -> int:
    """32-bit FNV-1a of the bytes (the kernel's `_hash`)."""
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFF
    return h


def hash_slots(keys: list[bytes]) -> np.ndarray:
    """Open addressing: a power-of-two table (at least twice the keys) of key indices, -1 where empty; a key sits at
    its hash's slot or the first free one after it (linear probing)."""
    size = 1 << max(1, (2 * len(keys) - 1).bit_length())
    table = np.full(size, -1, np.int32)
    for j, key in enumerate(keys):
        at = fnv1a(key) & (size - 1)
        while table[at] >= 0:
            at = (at + 1) & (size - 1)
        table[at] = j
    return table


def _hash(k, text, n):
    b = k.b
    h = k.local(I32, I32(FNV_OFFSET))
    with k.for_range(ks.size_t(k, n)) as j:
        byte = b.zext(b.load(b.gep(text, [j])), I32)
        b.store(b.mul(b.xor(b.load(h), byte), I32(FNV_PRIME)), h)
    return b.load(h)


def hash_lookup(k, text, n, slots_ptr, size: int, keys_ptr, key_cap: int, hit) -> None:
    """hit = the index of the key equal to the n bytes at `text` (left as it was when none is): the slots from the
    hash's on, until an empty one."""
    b = k.b
    at = k.local(I32, b.and_(_hash(k, text, n), I32(size - 1)))
    going = k.local(ks.I1, ir.Constant(ks.I1, 1))
    with ks.loop_while(k, lambda: b.load(going)):
        j = b.load(b.gep(slots_ptr, [ks.size_t(k, b.zext(b.load(at), I64))]))
        with b.if_else(b.icmp_signed("<", j, I32(0))) as (empty, full):
            with empty:
                b.store(ir.Constant(ks.I1, 0), going)
            with full:
                index = ks.size_t(k, b.zext(j, I64))
                key = ks.slot_at(k, keys_ptr, index)
                with b.if_then(ks.bytes_equal(k, text, n, ks.data(k, key), ks.clamp_length(k, key, key_cap))):
                    b.store(index, hit)
                    b.store(ir.Constant(ks.I1, 0), going)
                b.store(b.and_(b.add(b.load(at), I32(1)), I32(size - 1)), at)


@register("TokenIds", domain=OUR_DOMAIN, strings=True, output_bound=bound_tokenizer, run_check=run_check_tokenizer)
def lower_token_ids(k):
    """The Tokenizer's rows as the int64 ids of a vocabulary (`keys`, `values`, `default`: a LabelEncoder's), each
    token looked up as it is found in a build-time hash table (FNV-1a, linear probing): no string tensor of tokens."""
    spec = tokenizer_spec(k.node.attrs, f"node {k.node.name!r} (TokenIds)")
    keys = np.array([encode(_text(v)) for v in k.attr("keys")], dtype=object)
    values = np.asarray(k.attr("values"), np.int64)
    default = int(k.attr("default"))
    keys, values = sorted_keys(keys, values)
    lookup = {bytes(kb): int(v) for kb, v in zip(keys, values)}
    fixed = {"start": lookup.get(START_MARK, default), "end": lookup.get(END_MARK, default),
             "pad": lookup.get(spec.pad, default)}
    slots = hash_slots([bytes(kb) for kb in keys])
    slots_ptr = k.constant_array(slots)
    keys_ptr, key_cap = ks.table(k, keys)
    values_ptr = k.constant_array(np.concatenate([values, [default]]).astype(np.int64))
    out = k.outputs[0]
    b = k.b

    def put_token(row, j, source, start, length):
        hit = k.local(k.idx_t, k.index(len(keys)))
        hash_lookup(k, b.gep(source, [ks.size_t(k, start)]), length, slots_ptr, len(slots), keys_ptr, key_cap, hit)
        k.store_ptr(k.load_ptr(values_ptr, out.dtype, b.load(hit)), out.ptr, out.dtype, _at(k, row, j))

    def put_constant(row, j, name):
        k.store_ptr(I64(fixed[name]), out.ptr, out.dtype, _at(k, row, j))
    lower_rows(k, spec, put_token, put_constant)
