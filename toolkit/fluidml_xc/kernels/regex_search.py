"""A pattern compiled for searching (the Tokenizer's `tokenexp`, ops/tokenizer.py): the longest match that starts
at a given byte, as RE2 finds it with `longest_match` (leftmost-longest), from the same NFA as RegexFullMatch's
automaton (kernels/regex_dfa.py, docs/REGEX.md).

A match may end anywhere, not only at the end of the text, so besides the end-of-text test a state carries, per
byte class, whether a match ends just before a byte of that class (an assertion such as `\\b` at the end of the
pattern reads that byte). A search may start anywhere, so there is one start state per context of the byte before
it: the start of the text, a word byte, a newline, any other byte. Emitted as an LLVM function
`i64 NAME(i8* bytes, i64 len, i64 at)`: the end of the longest match starting at `at`, or -1.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ..errors import InputError
from .regex_dfa import (MAX_DFA_STATES, NEWLINE, WORD_BYTES, Nfa, byte_classes, closure, constant_table, step_sets,
                        table_type, unique_columns)
from .regex_syntax import parse

CONTEXTS = ("text start", "other byte", "word byte", "newline")
"""The start states, by what precedes the search's first byte."""


def context_of(previous: int | None) -> int:
    """Index into CONTEXTS of the byte before a search start (None: the start of the text)."""
    if previous is None:
        return 0
    return 2 if previous in WORD_BYTES else 3 if previous == NEWLINE else 1


@dataclass(frozen=True)
class SearchDfa:
    """classes[byte] -> class; table[state, class] -> state; ends_before[state, class]: a match ends before a byte of
    that class; ends_at_end[state]: a match ends at the end of the text; starts[context]; dead: no match ahead."""
    classes: np.ndarray
    table: np.ndarray
    ends_before: np.ndarray
    ends_at_end: np.ndarray
    starts: tuple[int, ...]
    dead: int

    def longest(self, data: bytes, at: int) -> int:
        """End of the longest match starting at byte `at` of `data`, or -1 (the emitted function's reference)."""
        s = self.starts[context_of(data[at - 1] if at else None)]
        best = -1
        for i in range(at, len(data) + 1):
            if i == len(data):
                return i if self.ends_at_end[s] else best
            c = self.classes[data[i]]
            best = i if self.ends_before[s, c] else best
            s = int(self.table[s, c])
            if s == self.dead:
                return best
        return best

    def tokens(self, data: bytes, mincharnum: int = 1) -> list[bytes]:
        """ONNX Runtime's Tokenizer loop over `tokenexp` (the kernel's reference): the leftmost-longest match from
        the position; kept when it has mincharnum code points or more (the search goes on after it), else the
        search goes on one character after its start."""
        out, pos = [], 0
        while pos <= len(data):
            start = next((p for p in range(pos, len(data) + 1) if self.longest(data, p) >= 0), None)
            if start is None:
                break
            end = self.longest(data, start)
            if sum((c & 0xC0) != 0x80 for c in data[start:end]) >= mincharnum:
                out.append(data[start:end])
                pos = end
            else:
                pos = start + (utf8_width(data[start]) if start < len(data) else 1)
        return out


def utf8_width(lead: int) -> int:
    """Bytes of the UTF-8 sequence a byte leads (1 for ASCII and for a byte that leads none)."""
    return 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2 if lead >= 0xC0 else 1


def compile_search(pattern, where: str = "Tokenizer", max_states: int = MAX_DFA_STATES) -> SearchDfa:
    """The search automaton of an RE2 `pattern` (a string, or a tree of kernels/regex_syntax.py), by subset
    construction over byte classes, the classes no state tells apart merged."""
    nfa = Nfa(parse(pattern, where) if isinstance(pattern, str) else pattern, where)
    classes = byte_classes(nfa)
    n_classes = int(classes.max()) + 1
    reps = [int(np.argmax(classes == c)) for c in range(n_classes)]
    word_flag = bool(nfa.kinds & {"word_boundary", "not_word_boundary"})
    line_flag = "begin_line" in nfa.kinds
    class_edges = [[(int(classes[lo]), int(classes[hi]), t) for lo, hi, t in moves] for moves in nfa.edges]
    core = frozenset([nfa.start])
    keys = [(core, True, False, False), (core, False, False, False), (core, False, word_flag, False),
            (core, False, False, line_flag), (frozenset(), False, False, False)]
    index: dict = {}
    for key in keys:
        index.setdefault(key, len(index))
    order = list(index)
    queue = deque(order)
    rows, before, at_end = {}, {}, {}
    while queue:
        key = queue.popleft()
        states, at_start, prev_word, prev_nl = key
        at_end[key] = nfa.match in closure(nfa, states, (at_start, prev_word, prev_nl, True, False, False))
        row, ends, moves = [index[keys[-1]]] * n_classes, [False] * n_classes, {}
        for c, b in enumerate(reps):
            ctx = (at_start, prev_word, prev_nl, False, b in WORD_BYTES, b == NEWLINE)
            if ctx not in moves:
                reached = closure(nfa, states, ctx)
                moves[ctx] = (nfa.match in reached, step_sets(reached, class_edges, n_classes))
            ends[c], targets = moves[ctx][0], moves[ctx][1][c]
            new = (frozenset(targets), False, word_flag and b in WORD_BYTES, line_flag and b == NEWLINE) if targets else keys[-1]
            if new not in index:
                if len(index) >= max_states:
                    raise InputError(f"{where}: the pattern's search automaton has more than {max_states} states "
                                     "(MAX_DFA_STATES): use * or + or smaller repetition counts")
                index[new] = len(order)
                order.append(new)
                queue.append(new)
            row[c] = index[new]
        rows[key], before[key] = row, ends
    table = np.array([rows[k] for k in order], np.int64)
    ends_before = np.array([before[k] for k in order], bool)
    columns, group = unique_columns(np.vstack([table, ends_before.astype(np.int64)]))
    return SearchDfa(group[classes].astype(np.int64), columns[:len(order)], columns[len(order):].astype(bool),
                     np.array([at_end[k] for k in order], bool), tuple(index[k] for k in keys[:4]), index[keys[-1]])


def emit_search(module: ir.Module, name: str, dfa: SearchDfa, linkage: str = "internal") -> ir.Function:
    """`i64 name(i8* bytes, i64 len, i64 at)`: the end of the longest match starting at `at` (0 <= at <= len), or -1.
    Constant tables: byte -> class, state + class -> next state (premultiplied by the class count) and the
    ends-before flags, per state the end-of-text flag, per context of the byte before `at` the start state."""
    i8, i64 = ir.IntType(8), ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(i64, [i8.as_pointer(), i64, i64]), name)
    fn.linkage = linkage
    data, length, at = fn.args
    width = dfa.table.shape[1]
    zero = ir.Constant(i64, 0)
    cls_var = constant_table(module, f"{name}.classes", i8, dfa.classes)
    tab_var = constant_table(module, f"{name}.table", table_type(dfa.table.size - width), dfa.table.reshape(-1) * width)
    ends_var = constant_table(module, f"{name}.ends", i8, dfa.ends_before.reshape(-1).astype(np.int64))
    last_var = constant_table(module, f"{name}.at_end", i8, np.repeat(dfa.ends_at_end.astype(np.int64), width))
    contexts = np.array([context_of(b) for b in range(256)], np.int64)
    ctx_var = constant_table(module, f"{name}.contexts", i8, contexts)
    starts_var = constant_table(module, f"{name}.starts", table_type(dfa.table.size), np.array(dfa.starts) * width)
    blocks = {n: fn.append_basic_block(n) for n in ("entry", "after", "head", "body", "step", "end", "done")}
    b = ir.IRBuilder(blocks["entry"])

    def load(var, index):
        return b.zext(b.load(b.gep(var, [zero, index])), i64)

    b.cbranch(b.icmp_unsigned("==", at, zero), blocks["head"], blocks["after"])
    b.position_at_end(blocks["after"])
    previous = b.zext(b.load(b.gep(data, [b.sub(at, ir.Constant(i64, 1))])), i64)
    after_start = load(starts_var, load(ctx_var, previous))
    b.branch(blocks["head"])
    b.position_at_end(blocks["head"])
    pos, state, best = b.phi(i64, "i"), b.phi(i64, "s"), b.phi(i64, "best")
    pos.add_incoming(at, blocks["entry"])
    pos.add_incoming(at, blocks["after"])
    state.add_incoming(ir.Constant(i64, dfa.starts[0] * width), blocks["entry"])
    state.add_incoming(after_start, blocks["after"])
    best.add_incoming(ir.Constant(i64, -1), blocks["entry"])
    best.add_incoming(ir.Constant(i64, -1), blocks["after"])
    b.cbranch(b.icmp_unsigned("<", pos, length), blocks["body"], blocks["end"])
    b.position_at_end(blocks["body"])
    entry = b.add(state, load(cls_var, b.zext(b.load(b.gep(data, [pos])), i64)))
    ends = b.icmp_unsigned("!=", load(ends_var, entry), zero)
    new_best = b.select(ends, pos, best)
    nxt = load(tab_var, entry)
    b.cbranch(b.icmp_unsigned("==", nxt, ir.Constant(i64, dfa.dead * width)), blocks["done"], blocks["step"])
    b.position_at_end(blocks["step"])
    pos.add_incoming(b.add(pos, ir.Constant(i64, 1)), blocks["step"])
    state.add_incoming(nxt, blocks["step"])
    best.add_incoming(new_best, blocks["step"])
    b.branch(blocks["head"])
    b.position_at_end(blocks["end"])
    b.ret(b.select(b.icmp_unsigned("!=", load(last_var, state), zero), pos, best))
    b.position_at_end(blocks["done"])
    result = b.phi(i64, "result")
    result.add_incoming(new_best, blocks["body"])
    b.ret(result)
    return fn
