"""RegexFullMatch's pattern compiled at build time (issue #29): RE2 syntax (kernels/regex_syntax.py) -> a Thompson NFA
over UTF-8 bytes -> a DFA by subset construction over byte classes -> minimized -> an LLVM function
`i1 NAME(i8* bytes, i64 len)` that walks constant tables: no regex engine at run time, the same IR on every target.

Empty-width assertions (^ $ \\A \\z \\b \\B, (?m) ^ $) are decided while the DFA is built: a DFA state records what
the assertions ask of the previous byte (start of text, a word byte, a newline) and each transition knows its byte,
so an assertion is resolved as the transition that crosses it is made; the end of the text is the accepting test.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from llvmlite import ir

from ..errors import InputError
from .regex_syntax import WORD, Alt, AnyByte, Assert, Chars, Concat, Repeat, parse

MAX_DFA_STATES = 10000
"""Largest DFA built (before minimization); its table is states x byte classes entries."""
MAX_NFA_STATES = 200000
"""Largest NFA built (bounded repetitions are copies: (?:a{100}){100} is 10,000 of them)."""
UTF8_LENGTHS = ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, 0x10FFFF))
WORD_BYTES = frozenset(b for lo, hi in WORD for b in range(lo, hi + 1))
NEWLINE = 10


def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """Byte-range sequences whose strings are exactly the UTF-8 encodings of code points lo..hi (surrogates are
    never given); ranges split until every byte position is a plain range."""
    out = []
    for a, b in UTF8_LENGTHS:
        stack = [(max(lo, a), min(hi, b))] if max(lo, a) <= min(hi, b) else []
        while stack:
            x, y = stack.pop()
            for i in (1, 2, 3):
                m = (1 << 6 * i) - 1
                if x & ~m != y & ~m:
                    if x & m:
                        stack += [((x | m) + 1, y), (x, x | m)]
                        break
                    if y & m != m:
                        stack += [(y & ~m, y), (x, (y & ~m) - 1)]
                        break
            else:
                out.append(tuple(zip(chr(x).encode(), chr(y).encode())))
    return sorted(out)


class Nfa:
    """Thompson's construction: per state its epsilon moves, assertion moves (kind, target) and byte moves
    (lo, hi, target); one start, one match state."""

    def __init__(self, tree, where: str):
        self.eps: list[list[int]] = []
        self.asserts: list[list[tuple[str, int]]] = []
        self.edges: list[list[tuple[int, int, int]]] = []
        self.where = where
        self.start, self.match = self.state(), self.state()
        self.build(tree, self.start, self.match)

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise InputError(f"{self.where}: the pattern expands to more than {MAX_NFA_STATES} automaton states "
                             "(MAX_NFA_STATES); use smaller repetition counts")
        for table in (self.eps, self.asserts, self.edges):
            table.append([])
        return len(self.eps) - 1

    def build(self, node, s: int, e: int) -> None:
        """Moves from s to e that read exactly the strings of `node`."""
        if isinstance(node, Chars):
            for seq in (seq for lo, hi in node.ranges for seq in utf8_sequences(lo, hi)):
                at = s
                for k, (lo, hi) in enumerate(seq):
                    to = e if k == len(seq) - 1 else self.state()
                    self.edges[at].append((lo, hi, to))
                    at = to
        elif isinstance(node, AnyByte):
            self.edges[s].append((0, 255, e))
        elif isinstance(node, Assert):
            self.asserts[s].append((node.kind, e))
        elif isinstance(node, Alt):
            for item in node.items:
                self.build(item, s, e)
        elif isinstance(node, Concat):
            at = s
            for item in node.items[:-1]:
                to = self.state()
                self.build(item, at, to)
                at = to
            self.build(node.items[-1], at, e) if node.items else self.eps[s].append(e)
        else:
            self.repeat(node, s, e)

    def repeat(self, node: Repeat, s: int, e: int) -> None:
        at = s
        for _ in range(node.min):
            to = self.state()
            self.build(node.item, at, to)
            at = to
        if node.max is None:
            loop = self.state()  # a fresh state, so the loop joins nothing else
            self.eps[at].append(loop)
            self.build(node.item, loop, loop)
            self.eps[loop].append(e)
            return
        for _ in range(node.max - node.min):
            self.eps[at].append(e)
            to = self.state()
            self.build(node.item, at, to)
            at = to
        self.eps[at].append(e)

    @cached_property
    def kinds(self) -> set[str]:
        return {kind for moves in self.asserts for kind, _ in moves}


def holds(kind: str, ctx: tuple[bool, bool, bool, bool, bool, bool]) -> bool:
    """Does the assertion hold at a position whose context is (at the start, previous byte a word byte, previous
    byte a newline, at the end, next byte a word byte, next byte a newline)?"""
    at_start, prev_word, prev_nl, at_end, next_word, next_nl = ctx
    if kind == "begin_text":
        return at_start
    if kind == "end_text":
        return at_end
    if kind == "begin_line":
        return at_start or prev_nl
    if kind == "end_line":
        return at_end or next_nl
    return (prev_word != next_word) == (kind == "word_boundary")


def closure(nfa: Nfa, states, ctx: tuple) -> frozenset[int]:
    seen, stack = set(states), list(states)
    eps, asserts = nfa.eps, nfa.asserts
    while stack:
        s = stack.pop()
        for t in [*eps[s], *(t for kind, t in asserts[s] if holds(kind, ctx))] if asserts[s] else eps[s]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return frozenset(seen)


def byte_classes(nfa: Nfa) -> np.ndarray:
    """byte -> class: bytes no move and no assertion tells apart share a class."""
    cuts = {0, 256}
    for moves in nfa.edges:
        for lo, hi, _ in moves:
            cuts |= {lo, hi + 1}
    if nfa.kinds & {"word_boundary", "not_word_boundary"}:
        cuts |= {c for lo, hi in WORD for c in (lo, hi + 1)}
    if nfa.kinds & {"begin_line", "end_line"}:
        cuts |= {NEWLINE, NEWLINE + 1}
    return np.cumsum(np.isin(np.arange(256), sorted(cuts - {0}))).astype(np.int64)


@dataclass(frozen=True)
class Dfa:
    """The minimized automaton: `classes[byte]` -> class, `table[state, class]` -> state; states below `accepting`
    accept at the end of the text; `dead` (the last state, or None) never accepts again."""
    classes: np.ndarray
    table: np.ndarray
    start: int
    accepting: int
    dead: int | None

    @property
    def states(self) -> int:
        return self.table.shape[0]

    def fullmatch(self, data: bytes) -> bool:
        s = self.start
        for byte in data:
            s = int(self.table[s, self.classes[byte]])
            if s == self.dead:
                return False
        return s < self.accepting


def subset_dfa(nfa: Nfa, classes: np.ndarray, max_states: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(table, accepting flags, dead state) of the DFA whose states are (NFA states before their closure, flags of
    the previous byte); state 0 is the start, state 1 the empty set."""
    n_classes = int(classes.max()) + 1
    reps = [int(np.argmax(classes == c)) for c in range(n_classes)]
    word_flag = bool(nfa.kinds & {"word_boundary", "not_word_boundary"})
    line_flag = "begin_line" in nfa.kinds
    class_edges = [[(int(classes[lo]), int(classes[hi]), t) for lo, hi, t in moves] for moves in nfa.edges]
    start, dead = (frozenset([nfa.start]), True, False, False), (frozenset(), False, False, False)
    index = {start: 0, dead: 1}
    order, rows, accept = [start, dead], [], []
    queue = deque(order)
    while queue:
        core, at_start, prev_word, prev_nl = queue.popleft()
        end = (at_start, prev_word, prev_nl, True, False, False)
        accept.append(nfa.match in closure(nfa, core, end))
        row, moves = [1] * n_classes, {}
        for c, b in enumerate(reps):
            ctx = (at_start, prev_word, prev_nl, False, b in WORD_BYTES, b == NEWLINE)
            if ctx not in moves:
                moves[ctx] = step_sets(closure(nfa, core, ctx), class_edges, n_classes)
            targets = moves[ctx][c]
            if not targets:
                continue
            new = (frozenset(targets), False, word_flag and b in WORD_BYTES, line_flag and b == NEWLINE)
            if new not in index:
                if len(index) >= max_states:
                    raise InputError(f"{nfa.where}: the pattern's DFA has more than {max_states} states "
                                     "(MAX_DFA_STATES): a bounded repetition multiplies the states of what it "
                                     "repeats (a Unicode class like \\pL{1,64}, or [ab]*a[ab]{20}); use * or + or a "
                                     "smaller count")
                index[new] = len(order)
                order.append(new)
                queue.append(new)
            row[c] = index[new]
        rows.append(row)
    return np.array(rows, np.int64), np.array(accept, bool), 1


def step_sets(states: frozenset[int], class_edges, n_classes: int) -> list[set[int]]:
    out: list[set[int]] = [set() for _ in range(n_classes)]
    for s in states:
        for c0, c1, t in class_edges[s]:
            for c in range(c0, c1 + 1):
                out[c].add(t)
    return out


def group_rows(matrix: np.ndarray) -> np.ndarray:
    """Per row a group number, equal rows alike, groups numbered in the rows' sorted order (np.unique's inverse,
    without its slow sort of whole rows)."""
    order = np.lexsort(matrix.T[::-1])
    rows = matrix[order]
    ids = np.concatenate([[0], np.cumsum(np.any(rows[1:] != rows[:-1], axis=1))])
    out = np.empty(len(ids), np.int64)
    out[order] = ids
    return out


def unique_columns(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct columns, each column's index among them)."""
    group = group_rows(table.T)
    first = np.zeros(int(group.max()) + 1, np.int64)
    first[group[::-1]] = np.arange(len(group))[::-1]
    return table[:, first], group


def minimize(table: np.ndarray, accept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Moore's partition refinement: (block of each state, the blocks' table)."""
    block = accept.astype(np.int64)
    count = len(set(block.tolist()))
    while True:
        new = group_rows(np.column_stack([block, block[table]]))
        if new.max() + 1 == count:
            break
        block, count = new, int(new.max()) + 1
    blocks = np.zeros((count, table.shape[1]), np.int64)
    blocks[block] = block[table]
    return block, blocks


def renumber(table: np.ndarray, accept: np.ndarray, start: int, dead: int) -> tuple[np.ndarray, int, int, int | None]:
    """States in breadth-first order from the start, then accepting ones first and the dead one last (so a test
    is one comparison); its table, start, accepting count and dead state (None when unreachable)."""
    seen, queue = {start: 0}, deque([start])
    while queue:
        s = queue.popleft()
        for t in table[s].tolist():
            if t not in seen:
                seen[t] = len(seen)
                queue.append(t)
    bfs = sorted(seen, key=seen.get)
    order = [s for s in bfs if accept[s]] + [s for s in bfs if not accept[s] and s != dead]
    has_dead = dead in seen
    order += [dead] if has_dead else []
    new = np.zeros(table.shape[0], np.int64)
    new[order] = np.arange(len(order))
    out = new[table[order]]
    return out, int(new[start]), int(accept[order].sum()), len(order) - 1 if has_dead else None


def compile_dfa(pattern: str, where: str = "RegexFullMatch", max_states: int = MAX_DFA_STATES) -> Dfa:
    """The minimized DFA that accepts exactly the byte strings `pattern` fully matches (RE2 semantics)."""
    nfa = Nfa(parse(pattern, where), where)
    classes = byte_classes(nfa)
    table, accept, dead = subset_dfa(nfa, classes, max_states)
    columns, merged = unique_columns(table)  # classes every state treats alike
    block, blocks = minimize(columns, accept)
    block_accept = np.zeros(len(blocks), bool)
    block_accept[block] = accept
    out, start, accepting, dead_state = renumber(blocks, block_accept, int(block[0]), int(block[dead]))
    out, final = unique_columns(out)  # classes only the merged-away states told apart
    classes = final[merged[classes]]
    return Dfa(classes.astype(np.int64), out, start, accepting, dead_state)


def table_type(largest: int) -> ir.IntType:
    """The smallest integer type that holds 0..largest."""
    return ir.IntType(8 if largest < 256 else 16 if largest < 65536 else 32)


def emit_matcher(module: ir.Module, name: str, dfa: Dfa, linkage: str = "") -> ir.Function:
    """`i1 name(i8* bytes, i64 len)`: does the DFA accept the `len` bytes? A walk of constant tables (byte -> class,
    state + class -> state; states are stored premultiplied by the class count, so a step is a load, an add and a
    load), leaving as soon as the dead state is reached; no target-specific IR."""
    i1, i8, i64 = ir.IntType(1), ir.IntType(8), ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(i1, [i8.as_pointer(), i64]), name)
    fn.return_value.add_attribute("zeroext")  # a C `bool` (the caller may read the whole register)
    if linkage:
        fn.linkage = linkage
    data, length = fn.args
    width = dfa.table.shape[1]
    cls_var = constant_table(module, f"{name}.classes", i8, dfa.classes)
    tab_var = constant_table(module, f"{name}.table", table_type(dfa.table.size - width), dfa.table.reshape(-1) * width)
    entry, head, body, done = (fn.append_basic_block(n) for n in ("entry", "head", "body", "done"))
    b = ir.IRBuilder(entry)
    b.branch(head)
    b.position_at_end(head)
    pos, state = b.phi(i64, "i"), b.phi(i64, "s")
    pos.add_incoming(ir.Constant(i64, 0), entry)
    state.add_incoming(ir.Constant(i64, dfa.start * width), entry)
    b.cbranch(b.icmp_unsigned("<", pos, length), body, done)
    b.position_at_end(body)
    byte = b.zext(b.load(b.gep(data, [pos])), i64)
    cls = b.zext(b.load(b.gep(cls_var, [ir.Constant(i64, 0), byte])), i64)
    nxt = b.zext(b.load(b.gep(tab_var, [ir.Constant(i64, 0), b.add(state, cls)])), i64)
    pos.add_incoming(b.add(pos, ir.Constant(i64, 1)), body)
    state.add_incoming(nxt, body)
    if dfa.dead is None:
        b.branch(head)
    else:
        fail = fn.append_basic_block("fail")
        b.cbranch(b.icmp_unsigned("==", nxt, ir.Constant(i64, dfa.dead * width)), fail, head)
        b.position_at_end(fail)
        b.ret(ir.Constant(i1, 0))
    b.position_at_end(done)
    b.ret(b.icmp_unsigned("<", state, ir.Constant(i64, dfa.accepting * width)))
    return fn


def constant_table(module: ir.Module, name: str, ty: ir.IntType, values: np.ndarray) -> ir.GlobalVariable:
    array = ir.ArrayType(ty, len(values))
    var = ir.GlobalVariable(module, array, name)
    var.global_constant = True
    var.linkage = "internal"
    var.unnamed_addr = True
    var.initializer = ir.Constant(array, [int(v) for v in values])
    return var
