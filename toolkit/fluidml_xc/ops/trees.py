"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor/Classifier v1-3, TreeEnsemble v5) compiled from their constant
trees, in one of two forms chosen per model (docs/CLASSIC_ML.md has the measurements):

- a table walk (`_Walk`): the nodes as (feature, threshold, true child) records, false child next to the true one,
  walked a fixed depth without branches (i = true[i] + not cond), LANES trees at a time so their loads overlap;
  for float32 SUM/AVERAGE forests whose branches share one comparison, of WALK_MIN_LEAVES leaves or more;
- branch code (`_Row`): per tree nested compare-and-branch blocks whose leaves meet in one block, where a phi per
  target picks the leaf's weight; every mode (MEMBER sets too), aggregate and dtype.

The scores are aggregated in registers, then base values, the post transform and a classifier's label follow ONNX
Runtime (kernels/forest.py reads the attributes). Rows are split into tiles over the threads.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.forest import (Branch, Forest, Leaf, NodeTables, classifier, ensemble_v5, node_tables, regressor, tree_depth,
                              tree_presence, walk_form)
from ..kernels.scalar import const
from ..opspec import register

ML = "ai.onnx.ml"
IDENTITY = {"SUM": 0.0, "AVERAGE": 0.0, "MIN": math.inf, "MAX": -math.inf}
LANES = 8
"""Trees the table walk steps together (independent loads the core overlaps)."""
WALK_MIN_LEAVES = 64
"""Forests with fewer leaves stay branch code (measured: docs/CLASSIC_ML.md)."""
COMPARE = {"BRANCH_LEQ": "<=", "BRANCH_LT": "<", "BRANCH_GTE": ">=", "BRANCH_GT": ">", "BRANCH_EQ": "=="}


class _Row:
    """Emits one row's evaluation: the trees, then the aggregated scores with their has-score flags."""

    def __init__(self, k, forest: Forest, dt, x_acc, row):
        self.k, self.b, self.f, self.dt = k, k.b, forest, dt
        self.x_acc, self.row, self.x_dt = x_acc, row, x_acc.dtype
        self.presence = forest.target_presence()

    def feature(self, j: int) -> ir.Value:
        idx = [self.row, self.k.index(j)] if len(self.x_acc.strides) == 2 else [self.k.index(j)]
        return self.k.s.cast(self.x_dt, self.dt, self.k.load(self.x_acc, idx))

    def condition(self, node: Branch) -> ir.Value:
        b, x = self.b, self.feature(node.feature)
        if node.mode == "BRANCH_NEQ":
            return b.fcmp_unordered("!=", x, const(self.dt, node.value))
        if node.mode == "BRANCH_MEMBER":
            cond = self.member(x, node.members)
        else:
            cond = b.fcmp_ordered(COMPARE[node.mode], x, const(self.dt, node.value))
        if node.missing_true:
            cond = b.or_(cond, b.fcmp_unordered("uno", x, x))
        return cond

    def member(self, x: ir.Value, members: tuple[float, ...]) -> ir.Value:
        """x equal to one of the set's values (the ONNX specification; ONNX Runtime takes integer members only and
        tests them its own way, docs/CLASSIC_ML.md)."""
        hit = ir.Constant(ir.IntType(1), 0)
        for v in sorted(set(members)):
            hit = self.b.or_(hit, self.b.fcmp_ordered("==", x, const(self.dt, v)))
        return hit

    def tree(self, root: Branch | Leaf) -> list[tuple[ir.Block, Leaf]]:
        """Blocks for every node of the tree; returns (leaf block, leaf) with the builder at the join block."""
        fn, b = self.k.fn, self.b
        join = fn.append_basic_block("tree_end")
        if isinstance(root, Leaf):
            pred = b.block
            b.branch(join)
            b.position_at_end(join)
            return [(pred, root)]
        leaves, stack = [], [(b.block, root)]
        while stack:
            block, node = stack.pop()
            b.position_at_end(block)
            if isinstance(node, Leaf):
                b.branch(join)
                leaves.append((block, node))
                continue
            cond = self.condition(node)
            yes, no = fn.append_basic_block("t"), fn.append_basic_block("f")
            b.cbranch(cond, yes, no)
            stack += [(no, node.false), (yes, node.true)]
        b.position_at_end(join)
        return leaves

    def scores(self) -> tuple[list[ir.Value], list]:
        f, b = self.f, self.b
        ident = IDENTITY[f.aggregate]
        acc = [const(self.dt, ident) for _ in range(f.targets)]
        dynamic = [p == "sometimes" for p in self.presence]
        has: list = [p == "always" for p in self.presence]
        for c, d in enumerate(dynamic):
            if d:
                has[c] = ir.Constant(ir.IntType(1), 0)
        for root in f.trees:
            leaves = self.tree(root)
            picked = []
            for c in range(f.targets):
                kind = tree_presence(root, c)
                if kind == "never":
                    continue
                phi = b.phi(llvm_dt(self.dt))
                flag = b.phi(ir.IntType(1)) if dynamic[c] and kind == "sometimes" else None
                for block, leaf in leaves:
                    ws = [w for t, w in leaf.weights if t == c]
                    phi.add_incoming(const(self.dt, _combine(f.aggregate, ws, ident)), block)
                    if flag is not None:
                        flag.add_incoming(ir.Constant(ir.IntType(1), int(bool(ws))), block)
                picked.append((c, phi, flag))
            for c, phi, flag in picked:
                acc[c] = self._aggregate(acc[c], phi)
                if dynamic[c]:
                    has[c] = b.or_(has[c], flag if flag is not None else ir.Constant(ir.IntType(1), 1))
        if f.aggregate in ("MIN", "MAX"):
            acc = [pick(b, h, a, const(self.dt, 0)) for h, a in zip(has, acc)]
        return acc, has

    def _aggregate(self, acc: ir.Value, w: ir.Value) -> ir.Value:
        b = self.b
        if self.f.aggregate in ("SUM", "AVERAGE"):
            return b.fadd(acc, w)
        return b.select(b.fcmp_ordered("<" if self.f.aggregate == "MIN" else ">", w, acc), w, acc)


class _Walk:
    """Emits one row's evaluation as a fixed-depth walk of the node tables (kernels/forest.py NodeTables), LANES
    trees at a time so their independent steps overlap; for SUM/AVERAGE forests of one comparison kind, float32."""

    def __init__(self, k, forest: Forest, dt, x_acc, row, tables: NodeTables):
        self.k, self.b, self.f, self.dt, self.t = k, k.b, forest, dt, tables
        self.x_acc, self.row = x_acc, row
        self.records = k.constant_array(tables.records.reshape(-1))
        self.roots = k.constant_array(tables.roots)
        self.weights = k.constant_array(tables.weights.reshape(-1))

    def step(self, i: ir.Value) -> ir.Value:
        k, b = self.k, self.b
        at = b.mul(b.sext(i, k.idx_t), k.index(4))
        feature = k.load_ptr(self.records, np.int32, at)
        bits = k.load_ptr(self.records, np.int32, b.add(at, k.index(1)))
        yes = k.load_ptr(self.records, np.int32, b.add(at, k.index(2)))
        idx = [self.row, b.sext(feature, k.idx_t)] if len(self.x_acc.strides) == 2 else [b.sext(feature, k.idx_t)]
        x = k.s.cast(self.x_acc.dtype, self.dt, k.load(self.x_acc, idx))
        op = COMPARE[self.t.mode]
        threshold = b.bitcast(bits, ir.FloatType())
        cond = b.fcmp_unordered(op, x, threshold) if self.t.missing_true else b.fcmp_ordered(op, x, threshold)
        return b.add(yes, b.zext(b.not_(cond), ir.IntType(32)))

    def scores(self) -> tuple[list[ir.Value], list]:
        k, b, f, T = self.k, self.b, self.f, self.f.targets
        slots = [k.local(ir.FloatType(), const(np.float32, 0)) for _ in range(T)]
        groups = len(self.t.roots) // LANES
        with k.for_range(groups) as g:
            base = b.mul(g, k.index(LANES))
            lanes = [k.load_ptr(self.roots, np.int32, b.add(base, k.index(j))) for j in range(LANES)]
            for _ in range(self.t.depth):
                lanes = [self.step(i) for i in lanes]
            for c in range(T):
                total = b.load(slots[c])
                for i in lanes:
                    at = b.add(b.mul(b.sext(i, k.idx_t), k.index(T)), k.index(c))
                    total = b.fadd(total, k.load_ptr(self.weights, np.float32, at))
                b.store(total, slots[c])
        return [b.load(s) for s in slots], [p == "always" for p in f.target_presence()]


def _combine(aggregate: str, weights: list[float], identity: float) -> float:
    if not weights:
        return identity
    if aggregate in ("SUM", "AVERAGE"):
        return float(np.sum(np.asarray(weights, np.float64)))
    return min(weights) if aggregate == "MIN" else max(weights)


def llvm_dt(dt) -> ir.Type:
    return ir.DoubleType() if np.dtype(dt) == np.float64 else ir.FloatType()


def pick(b, cond, yes: ir.Value, no: ir.Value) -> ir.Value:
    """select() where the condition may be a build-time bool."""
    if isinstance(cond, bool):
        return yes if cond else no
    return b.select(cond, yes, no)


class _Post:
    """ONNX Runtime's post transforms (ml_common.h) in the scores' dtype."""

    def __init__(self, k, dt):
        self.k, self.b, self.dt = k, k.b, dt

    def c(self, v) -> ir.Constant:
        return const(self.dt, v)

    def logistic(self, v):
        b, s = self.b, self.k.s
        e = b.fdiv(self.c(1), b.fadd(self.c(1), s.intrinsic("llvm.exp", b.fneg(s.intrinsic("llvm.fabs", v)))))
        return b.select(b.fcmp_ordered("<", v, self.c(0)), b.fsub(self.c(1), e), e)

    def probit(self, v):
        """sqrt(2) * ErfInv(2v - 1) with ONNX Runtime's closed-form ErfInv approximation."""
        b, s, c = self.b, self.k.s, self.c
        x = b.fsub(b.fmul(c(2), v), c(1))
        sgn = b.select(b.fcmp_ordered("<", x, c(0)), c(-1), c(1))
        lg = s.libm("log", self.dt, b.fmul(b.fsub(c(1), x), b.fadd(c(1), x)))
        f = np.float32
        v1 = b.fadd(c(f(2) / (f(np.pi) * f(0.147))), b.fmul(c(0.5), lg))
        v2 = b.fmul(c(f(1) / f(0.147)), lg)
        v3 = b.fsub(s.intrinsic("llvm.sqrt", b.fsub(b.fmul(v1, v1), v2)), v1)
        return b.fmul(c(np.float32(1.41421356)), b.fmul(sgn, s.intrinsic("llvm.sqrt", v3)))

    def softmax(self, vals, zero: bool = False):
        b, s, c = self.b, self.k.s, self.c
        top = c(-np.finfo(np.float32 if llvm_dt(self.dt) == ir.FloatType() else np.float64).max)
        for v in vals:
            top = b.select(b.fcmp_ordered(">", v, top), v, top)
        exps, total = [], c(0)
        scale = s.intrinsic("llvm.exp", b.fneg(top)) if zero else None
        for v in vals:
            e = s.intrinsic("llvm.exp", b.fsub(v, top))
            if zero:
                big = b.fcmp_ordered(">", s.intrinsic("llvm.fabs", v), c(1e-7))
                e = b.select(big, e, b.fmul(v, scale))
                total = b.fadd(total, b.select(big, e, c(0)))
            else:
                total = b.fadd(total, e)
            exps.append(e)
        return [b.fdiv(e, total) for e in exps]

    def apply(self, name: str, vals):
        if name == "LOGISTIC":
            return [self.logistic(v) for v in vals]
        if name == "PROBIT":
            return [self.probit(v) for v in vals]
        if name in ("SOFTMAX", "SOFTMAX_ZERO"):
            return self.softmax(vals, name == "SOFTMAX_ZERO")
        return list(vals)


def _regression(k, f: Forest, dt, scores, has):
    b, c = k.b, lambda v: const(dt, v)
    if f.aggregate == "AVERAGE":
        scores = [b.fdiv(s, c(len(f.trees))) for s in scores]
    if f.targets == 1:
        origin = f.base_values[0] if len(f.base_values) == 1 else 0.0
        out = b.fadd(scores[0], c(origin))
        return [_Post(k, dt).probit(out)] if f.post_transform == "PROBIT" else [out]
    if len(f.base_values) == f.targets:
        scores = [b.fadd(s, c(v)) for s, v in zip(scores, f.base_values)]
    return _Post(k, dt).apply(f.post_transform, scores)


def _classification(k, f: Forest, dt, p, has):
    """(label, scores) as ONNX Runtime's TreeAggregatorClassifier.FinalizeScores and write_scores."""
    b, c, post = k.b, lambda v: const(dt, v), _Post(k, dt)
    labels = [const(np.int64, v) for v in f.labels]
    if f.targets != 2:
        for j, v in enumerate(f.base_values[:f.targets]):
            p[j], has[j] = b.fadd(p[j], c(v)), True
        best, best_w, found = labels[0], c(0), ir.Constant(ir.IntType(1), 0)
        for j in range(f.targets):
            if has[j] is False:
                continue
            flag = has[j] if not isinstance(has[j], bool) else ir.Constant(ir.IntType(1), 1)
            take = b.and_(flag, b.or_(b.not_(found), b.fcmp_ordered(">", p[j], best_w)))
            best, best_w, found = b.select(take, labels[j], best), b.select(take, p[j], best_w), b.or_(found, take)
        return best, post.apply(f.post_transform, p)
    if isinstance(has[1], bool):
        return _two_classes(k, f, dt, list(p), has[1], has[0])
    (label1, z1), (label0, z0) = (_two_classes(k, f, dt, list(p), known, has[0]) for known in (True, False))
    return b.select(has[1], label1, label0), [b.select(has[1], u, v) for u, v in zip(z1, z0)]


def _two_classes(k, f: Forest, dt, p, has1: bool, has0):
    """Two labels, with class 1 scored (`has1`) or not: ONNX Runtime's binary rules (docs/CLASSIC_ML.md)."""
    b, c, post = k.b, lambda v: const(dt, v), _Post(k, dt)
    labels = [const(np.int64, v) for v in f.labels]
    wide, base, second = True, f.base_values, None
    if len(base) == 2:
        if has1:
            p[1] = b.fadd(c(base[1]), p[0])
            p[0] = b.fneg(p[1])
        else:
            p[0] = b.fadd(p[0], c(base[0]))
    elif len(base) == 1:
        p[0] = b.fadd(p[0], c(base[0]))
        wide = has1
    elif not base:
        wide, second = has1, "mixed"
    pos = p[1] if has1 else pick(b, has0, p[0], c(0))
    if f.binary:
        high = b.fcmp_ordered(">", pos, c(0.5 if f.all_positive else 0))
        label = b.select(high, labels[1], labels[0])
        second = "positive" if f.all_positive else "mixed"
    else:  # ONNX Runtime's positive_label_ / negative_label_: 1 and 0, not the class labels
        high = b.fcmp_ordered(">", pos, c(0))
        label = b.select(high, const(np.int64, 1), const(np.int64, 0))
    if wide:
        return label, post.apply(f.post_transform, p)
    s = p[0]
    if f.post_transform == "PROBIT" or second is None:
        return label, [post.probit(s) if f.post_transform == "PROBIT" else s, c(0)]
    if second == "positive":
        s = post.logistic(s) if f.post_transform == "LOGISTIC" else s
        return label, [b.fsub(c(1), s), s]
    if f.post_transform == "LOGISTIC":
        return label, [post.logistic(b.fneg(s)), post.logistic(s)]
    return label, [b.fneg(s), s]


def _lower(k, forest: Forest, op: str, classify: bool) -> None:
    x = k.inputs[0]
    where = f"node {k.node.name!r} ({op})"
    if x.rank not in (1, 2):
        raise InputError(f"{where}: input X has rank {x.rank}; give it as [rows, features]")
    columns = x.shape[-1]
    if forest.features > columns:
        raise InputError(f"{where}: the trees read feature {forest.features - 1} but X has {columns} columns")
    rows = x.shape[0] if x.rank == 2 else 1
    dt = np.float64 if np.dtype(x.dtype) == np.float64 else np.float32
    outs = [o for o in k.outputs]
    x_acc = x.identity_access()
    score_out = outs[1] if classify else outs[0]
    label_out = outs[0] if classify else None
    width = forest.targets
    nodes = sum(tree_depth(t) + 1 for t in forest.trees)
    tables = node_tables(forest, LANES) if _walks(forest, dt) else None

    def body(idx):
        row = idx[0]
        ev = _Row(k, forest, dt, x_acc, row) if tables is None else _Walk(k, forest, dt, x_acc, row, tables)
        scores, has = ev.scores()
        if classify:
            label, scores = _classification(k, forest, dt, scores, has)
            if label_out is not None:
                k.store(label_out.identity_access(), _at(k, label_out, row, None), label)
        else:
            scores = _regression(k, forest, dt, scores, has)
        if score_out is not None:
            acc = score_out.identity_access()
            for j, v in enumerate(scores[:width]):
                k.store(acc, _at(k, score_out, row, j), k.s.cast(dt, score_out.dtype, v))
    if rows:
        k.loops_tiled([rows], [0], [None], body, work=float(rows) * nodes * 8)


def _walks(forest: Forest, dt) -> bool:
    """The table walk evaluates this forest: float32, SUM/AVERAGE, one comparison kind, no target whose presence
    depends on the row, and enough leaves to pay for it (WALK_MIN_LEAVES)."""
    presence = forest.target_presence()
    return (np.dtype(dt) == np.float32 and forest.aggregate in ("SUM", "AVERAGE") and "sometimes" not in presence
            and walk_form(forest) is not None and forest.leaves >= WALK_MIN_LEAVES)


def _at(k, out, row, col):
    if out.rank == 1:
        return [row]
    return [row, k.index(col if col is not None else 0)]


@register("TreeEnsembleRegressor", domain=ML)
def lower_tree_ensemble_regressor(k):
    _lower(k, regressor(k.node.attrs, f"node {k.node.name!r} (TreeEnsembleRegressor)"), "TreeEnsembleRegressor", False)


@register("TreeEnsembleClassifier", domain=ML)
def lower_tree_ensemble_classifier(k):
    _lower(k, classifier(k.node.attrs, f"node {k.node.name!r} (TreeEnsembleClassifier)"), "TreeEnsembleClassifier", True)


@register("TreeEnsemble", domain=ML)
def lower_tree_ensemble(k):
    """ai.onnx.ml 5, its only version: registered from 1, since the emitter looks ops up at the default domain's
    version (a model importing only ai.onnx.ml 5 has no other)."""
    _lower(k, ensemble_v5(k.node.attrs, f"node {k.node.name!r} (TreeEnsemble)"), "TreeEnsemble", False)
