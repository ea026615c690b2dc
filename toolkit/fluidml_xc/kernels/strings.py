"""What the string kernels share (docs/STRINGS.md): a string element is a slot {i64 length, [room x i8] bytes}
(strings.py); these build its address, length and bytes, compare and copy bytes (memcmp / llvm.memcpy), fail the
run through the status word when a result would not fit its slot, and change ASCII and Latin-1 letters' case.

A per-string matcher `i1 match(i8 *bytes, i64 len)` (the regex automaton's) is called on each element with
`elements` + `data` + `length`: nothing here assumes more than the bytes and their count."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Sequence

import numpy as np
from llvmlite import ir

from ..strings import capacity, slot_dtype, to_slots
from .operand import Operand

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P = I8.as_pointer()
WHITESPACE = (9, 10, 11, 12, 13, 28, 29, 30, 31, 32)
"""The ASCII bytes Python's str.split() splits at (its non-ASCII whitespace is not split at)."""


def slot_at(k, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
    """Pointer to element `index` of a slot array."""
    return k.b.gep(ptr, [k.as_index(index)], inbounds=True)


def length(k, slot: ir.Value) -> ir.Value:
    return k.b.load(k.b.gep(slot, [I32(0), I32(0)], inbounds=True))


def set_length(k, slot: ir.Value, n: ir.Value) -> None:
    k.b.store(n, k.b.gep(slot, [I32(0), I32(0)], inbounds=True))


def data(k, slot: ir.Value) -> ir.Value:
    """i8* to the slot's first byte."""
    return k.b.gep(slot, [I32(0), I32(1), I32(0)], inbounds=True)


def clamp_length(k, slot: ir.Value, cap: int) -> ir.Value:
    """The slot's length as read, kept in [0, cap] (an input slot written by the caller is not trusted)."""
    n = length(k, slot)
    n = k.b.select(k.b.icmp_signed("<", n, I64(0)), I64(0), n)
    return k.b.select(k.b.icmp_signed(">", n, I64(cap)), I64(cap), n)


def size_t(k, n: ir.Value) -> ir.Value:
    return k.b.trunc(n, k.idx_t) if k.idx_t.width < 64 else n


def memcmp(k) -> ir.Function:
    fn = k.module.globals.get("memcmp")
    if fn is None:
        fn = ir.Function(k.module, ir.FunctionType(I32, [I8P, I8P, k.idx_t]), "memcmp")
    return fn


def copy_bytes(k, dst: ir.Value, src: ir.Value, n: ir.Value) -> None:
    fn = k.module.declare_intrinsic("llvm.memcpy", [I8P, I8P, k.idx_t])
    k.b.call(fn, [dst, src, size_t(k, n), ir.Constant(I1, 0)])


def bytes_equal(k, a: ir.Value, a_len: ir.Value, b: ir.Value, b_len: ir.Value) -> ir.Value:
    """i1: the a_len bytes at a equal the b_len bytes at b (memcmp only when the lengths agree)."""
    same = k.local(I1, k.b.icmp_signed("==", a_len, b_len))
    with k.b.if_then(k.b.load(same)):
        k.b.store(k.b.icmp_signed("==", k.b.call(memcmp(k), [a, b, size_t(k, a_len)]), I32(0)), same)
    return k.b.load(same)


def slots_equal(k, a: ir.Value, a_cap: int, b: ir.Value, b_cap: int) -> ir.Value:
    return bytes_equal(k, data(k, a), clamp_length(k, a, a_cap), data(k, b), clamp_length(k, b, b_cap))


def fail(k, bad: ir.Value) -> None:
    """The run fails when `bad` holds: this node's code into the status word (OpSpec.run_check)."""
    if k.status is None:
        return
    with k.b.if_then(bad, likely=False):
        k.b.store(I64(k.check_code), k.b.bitcast(k.status, I64.as_pointer()))


def write(k, slot: ir.Value, cap: int, parts: Sequence[tuple[ir.Value, ir.Value]]) -> None:
    """slot = the concatenation of (bytes, length) parts; a result over `cap` bytes fails the run and leaves ""."""
    total = I64(0)
    for _, n in parts:
        total = k.b.add(total, n)
    over = k.b.icmp_signed(">", total, I64(cap))
    fail(k, over)
    with k.b.if_else(over, likely=False) as (too_long, fits):
        with too_long:
            set_length(k, slot, I64(0))
        with fits:
            at = I64(0)
            for ptr, n in parts:
                copy_bytes(k, k.b.gep(data(k, slot), [size_t(k, at)]), ptr, n)
                at = k.b.add(at, n)
            set_length(k, slot, total)


def copy_slot(k, dst: ir.Value, dst_cap: int, src: ir.Value, src_cap: int) -> None:
    write(k, dst, dst_cap, [(data(k, src), clamp_length(k, src, src_cap))])


def elements(k, out: Operand, ins: Sequence[Operand], body: Callable[[ir.Value, list[ir.Value]], None]) -> None:
    """body(out linear index, [each input's linear index]) over the output's elements, numpy broadcasting (row-major
    operands: string tensors keep the row-major layout)."""
    accesses = [op.broadcast_access(out.shape) for op in ins]
    target = out.identity_access()
    idx = [None] * len(out.shape)

    def point(ix):
        body(k.linear(target, ix), [k.linear(a, ix) for a in accesses])
    k.loops(out.shape, list(range(len(out.shape))), idx, point)


def table(k, values: np.ndarray, max_bytes: int | None = None) -> tuple[ir.Value, int]:
    """Build-time strings as a read-only slot array (typed pointer) and its capacity."""
    flat = np.asarray(values, dtype=object).reshape(-1)
    longest = max((len(v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v)) for v in flat), default=0)
    dtype = slot_dtype(max(longest, 1) if max_bytes is None else max_bytes)
    return k.constant_array(to_slots(flat, dtype, f"node {k.node.name!r} strings")), capacity(dtype)


def case_changed(k, data_ptr: ir.Value, i: ir.Value, upper: bool) -> ir.Value:
    """Byte i of a UTF-8 string with its case changed: ASCII letters, and Latin-1's letters (U+00C0-U+00DE <->
    U+00E0-U+00FE but for the signs U+00D7 / U+00F7: the second byte after 0xC3, +-0x20); every other byte, and
    every byte of invalid UTF-8, is kept (so no byte count changes)."""
    b = k.b
    c = b.load(b.gep(data_ptr, [i]))
    lo, hi, shift = (ord("a"), ord("z"), -32) if upper else (ord("A"), ord("Z"), 32)
    u = b.zext(c, I32)
    ascii_letter = b.and_(b.icmp_unsigned(">=", u, I32(lo)), b.icmp_unsigned("<=", u, I32(hi)))
    prev = b.load(b.gep(data_ptr, [b.sub(i, ir.Constant(i.type, 1))]))
    has_prev = b.icmp_signed(">", i, ir.Constant(i.type, 0))
    lead = b.and_(has_prev, b.icmp_unsigned("==", b.select(has_prev, prev, I8(0)), I8(0xC3)))
    lo2, hi2, sign = (0xA0, 0xBE, 0xB7) if upper else (0x80, 0x9E, 0x97)
    latin = b.and_(b.and_(lead, b.icmp_unsigned(">=", u, I32(lo2))),
                   b.and_(b.icmp_unsigned("<=", u, I32(hi2)), b.icmp_unsigned("!=", u, I32(sign))))
    change = b.or_(ascii_letter, latin)
    return b.select(change, b.add(c, I8(shift & 0xFF)), c)


def ascii_lower(k, c: ir.Value) -> ir.Value:
    upper = k.b.and_(k.b.icmp_unsigned(">=", c, I8(ord("A"))), k.b.icmp_unsigned("<=", c, I8(ord("Z"))))
    return k.b.select(upper, k.b.add(c, I8(32)), c)


def is_space(k, c: ir.Value) -> ir.Value:
    hit = ir.Constant(I1, 0)
    for w in WHITESPACE:
        hit = k.b.or_(hit, k.b.icmp_unsigned("==", c, I8(w)))
    return hit


@contextmanager
def loop_while(k, cond: Callable[[], ir.Value]):
    """while cond(): body (cond builds its i1 in the loop header)."""
    b = k.b
    header, body, done = (k.fn.append_basic_block(n) for n in ("while", "while_body", "while_done"))
    b.branch(header)
    b.position_at_end(header)
    b.cbranch(cond(), body, done)
    b.position_at_end(body)
    k.loop_depth += 1
    try:
        yield
    finally:
        k.loop_depth -= 1
    b.branch(header)
    b.position_at_end(done)


def split_parts(k, text: ir.Value, n: ir.Value, delimiter: ir.Value | None, delimiter_len: int, maxsplit: int,
                on_part: Callable[[ir.Value, ir.Value], None]) -> None:
    """Python's str.split(delimiter, maxsplit) over the n bytes at `text`: on_part(start, length) per part, in order
    (i64 values). delimiter None: runs of ASCII whitespace (WHITESPACE), no empty parts; maxsplit < 0: no limit."""
    b = k.b
    pos, parts = k.local(I64, I64(0)), k.local(I64, I64(0))

    def at(p):
        return b.load(b.gep(text, [size_t(k, p)]))

    def under_limit():
        return ir.Constant(I1, 1) if maxsplit < 0 else b.icmp_signed("<", b.load(parts), I64(maxsplit))

    def part(start, end):
        on_part(start, b.sub(end, start))
        b.store(b.add(b.load(parts), I64(1)), parts)
    if delimiter is not None:
        start = k.local(I64, I64(0))
        with loop_while(k, lambda: b.and_(b.icmp_signed("<=", b.add(b.load(pos), I64(delimiter_len)), n), under_limit())):
            p = b.load(pos)
            hit = bytes_equal(k, b.gep(text, [size_t(k, p)]), I64(delimiter_len), delimiter, I64(delimiter_len))
            with b.if_else(hit) as (found, other):
                with found:
                    part(b.load(start), p)
                    b.store(b.add(p, I64(delimiter_len)), pos)
                    b.store(b.load(pos), start)
                with other:
                    b.store(b.add(p, I64(1)), pos)
        part(b.load(start), n)
        return
    going = k.local(I1, ir.Constant(I1, 1))
    with loop_while(k, lambda: b.load(going)):
        with loop_while(k, lambda: b.and_(b.icmp_signed("<", b.load(pos), n), is_space(k, at(b.load(pos))))):
            b.store(b.add(b.load(pos), I64(1)), pos)
        p = b.load(pos)
        with b.if_else(b.icmp_signed("==", p, n)) as (end, more):
            with end:
                b.store(ir.Constant(I1, 0), going)
            with more:
                with b.if_else(under_limit()) as (word, rest):
                    with word:
                        with loop_while(k, lambda: b.and_(b.icmp_signed("<", b.load(pos), n), b.not_(is_space(k, at(b.load(pos)))))):
                            b.store(b.add(b.load(pos), I64(1)), pos)
                        part(p, b.load(pos))
                    with rest:
                        part(p, n)
                        b.store(ir.Constant(I1, 0), going)
