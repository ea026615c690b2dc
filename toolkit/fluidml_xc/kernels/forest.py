"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor/Classifier v1-3, TreeEnsemble v5) read from their attributes
into one form the code generator walks: per tree a root of `Branch` and `Leaf` objects, the leaves' weights per
target, the aggregate, base values and post transform, with ONNX Runtime's semantics (docs/CLASSIC_ML.md).
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
V5_MODES = dict(enumerate(MODES))
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
V5_POST = dict(enumerate(POST_TRANSFORMS))
MAX_DEPTH = 256
"""Deepest tree read (the readers recurse; scikit-learn's deepest trees stay far below)."""


@dataclass(frozen=True)
class Leaf:
    weights: tuple[tuple[int, float], ...]
    """(target or class index, weight) in attribute order; a target may repeat (its weights add)."""


@dataclass(frozen=True)
class Branch:
    feature: int
    mode: str
    value: float
    members: tuple[float, ...]
    """BRANCH_MEMBER's set (v5)."""
    missing_true: bool
    true: "Branch | Leaf"
    false: "Branch | Leaf"


@dataclass(frozen=True)
class Forest:
    trees: tuple[Branch | Leaf, ...]
    targets: int
    aggregate: str
    post_transform: str
    base_values: tuple[float, ...]
    features: int = 0
    """1 + the largest feature index a branch reads."""
    labels: tuple[int, ...] = ()
    """classlabels_int64s of a classifier (empty for a regressor)."""
    binary: bool = False
    """ONNX Runtime's binary case: two labels and the weights of a single class."""
    all_positive: bool = True
    leaves: int = field(default=0)

    def target_presence(self) -> list[str]:
        """Per target over all rows: "always" (some tree has it on every leaf), "never" (no leaf) or "sometimes"
        (whether a row reaches a leaf with it depends on the data)."""
        out = []
        for t in range(self.targets):
            kinds = {tree_presence(tree, t) for tree in self.trees}
            out.append("always" if "always" in kinds else "never" if kinds <= {"never"} else "sometimes")
        return out


def tree_leaves(node: Branch | Leaf) -> list[Leaf]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Leaf):
            out.append(n)
        else:
            stack += [n.false, n.true]
    return out


def tree_presence(tree: Branch | Leaf, target: int) -> str:
    has = [any(t == target for t, _ in leaf.weights) for leaf in tree_leaves(tree)]
    return "always" if all(has) else "sometimes" if any(has) else "never"


def tree_depth(node: Branch | Leaf) -> int:
    return 0 if isinstance(node, Leaf) else 1 + max(tree_depth(node.true), tree_depth(node.false))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _floats(attrs: dict, name: str) -> np.ndarray | None:
    for key in (f"{name}_as_tensor", name):
        value = attrs.get(key)
        if value is not None and len(np.asarray(value).reshape(-1)):
            return np.asarray(value, np.float64).reshape(-1)
    return None


def _ints(attrs: dict, name: str) -> list[int]:
    return [int(v) for v in np.asarray(attrs.get(name) if attrs.get(name) is not None else [], np.int64).reshape(-1)]


class _Builder:
    """Trees from the v1-3 parallel node arrays (tree id, node id) and the leaf weight lists."""

    def __init__(self, where: str, attrs: dict, prefix: str):
        self.where = where
        tree_ids, node_ids = _ints(attrs, "nodes_treeids"), _ints(attrs, "nodes_nodeids")
        n = len(tree_ids)
        cols = {name: _ints(attrs, f"nodes_{name}") for name in ("featureids", "truenodeids", "falsenodeids",
                                                                  "missing_value_tracks_true")}
        values = _floats(attrs, "nodes_values")
        modes = [_text(m) for m in attrs.get("nodes_modes") or []]
        if len(node_ids) != n or len(modes) != n or any(len(cols[c]) != n for c in ("featureids", "truenodeids", "falsenodeids")):
            raise InputError(f"{where}: the nodes_* attributes have different lengths: export the model again")
        self.values = values if values is not None else np.zeros(n)
        self.index = {(t, i): j for j, (t, i) in enumerate(zip(tree_ids, node_ids))}
        self.cols, self.modes, self.tree_ids, self.node_ids = cols, modes, tree_ids, node_ids
        self.weights: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
        self.seen: set[int] = set()
        w = _floats(attrs, f"{prefix}_weights")
        for t, i, c, v in zip(_ints(attrs, f"{prefix}_treeids"), _ints(attrs, f"{prefix}_nodeids"),
                              _ints(attrs, f"{prefix}_ids"), w if w is not None else []):
            self.weights[(t, i)].append((c, float(v)))

    def node(self, tree: int, node_id: int, depth: int = 0) -> Branch | Leaf:
        j = self.index.get((tree, node_id))
        if j is None:
            raise InputError(f"{self.where}: tree {tree} refers to node {node_id}, which it does not define")
        if depth > MAX_DEPTH:
            raise InputError(f"{self.where}: tree {tree} is deeper than {MAX_DEPTH} levels or has a cycle; "
                             "deeper trees are not supported")
        mode = self.modes[j]
        if mode == "LEAF":
            return Leaf(tuple(self.weights.get((tree, node_id), ())))
        if mode not in MODES[:6]:
            raise InputError(f"{self.where}: node mode {mode!r} is not one of {', '.join(MODES[:6])} or LEAF")
        if j in self.seen:
            raise InputError(f"{self.where}: tree {tree} reaches node {node_id} twice (a cycle or a shared subtree): "
                             "export the model again")
        self.seen.add(j)
        missing = self.cols["missing_value_tracks_true"]
        return Branch(self.cols["featureids"][j], mode, float(self.values[j]), (),
                      bool(missing[j]) if j < len(missing) else False,
                      self.node(tree, self.cols["truenodeids"][j], depth + 1),
                      self.node(tree, self.cols["falsenodeids"][j], depth + 1))

    def trees(self) -> tuple[Branch | Leaf, ...]:
        roots = {}
        for t, i in zip(self.tree_ids, self.node_ids):
            roots[t] = min(roots.get(t, i), i)
        return tuple(self.node(t, roots[t]) for t in sorted(roots))


def _finish(trees, targets, attrs, where, aggregate, post, labels=(), binary=False, all_positive=True) -> Forest:
    if post not in POST_TRANSFORMS:
        raise InputError(f"{where}: post_transform {post!r} is not one of {', '.join(POST_TRANSFORMS)}")
    if aggregate not in AGGREGATES:
        raise InputError(f"{where}: aggregate_function {aggregate!r} is not one of {', '.join(AGGREGATES)}")
    base = _floats(attrs, "base_values")
    features = 0
    for tree in trees:
        stack = [tree]
        while stack:
            n = stack.pop()
            if isinstance(n, Branch):
                features = max(features, n.feature + 1)
                stack += [n.true, n.false]
            elif any(not 0 <= t < targets for t, _ in n.weights):
                raise InputError(f"{where}: a leaf weight names target/class {max(t for t, _ in n.weights)} "
                                 f"outside 0..{targets - 1}")
    return Forest(tuple(trees), targets, aggregate, post, tuple(base.tolist()) if base is not None else (),
                  features, tuple(labels), binary, all_positive, sum(len(tree_leaves(t)) for t in trees))


def regressor(attrs: dict, where: str) -> Forest:
    b = _Builder(where, attrs, "target")
    return _finish(b.trees(), int(attrs.get("n_targets", 1)), attrs, where,
                   _text(attrs.get("aggregate_function", "SUM")), _text(attrs.get("post_transform", "NONE")))


def classifier(attrs: dict, where: str) -> Forest:
    if attrs.get("classlabels_strings"):
        raise InputError(f"{where}: string class labels reach the forest as their indices (the importer's "
                         "frontend/string_labels.py rewrites the node); this node was not rewritten")
    labels = _ints(attrs, "classlabels_int64s")
    if not labels:
        raise InputError(f"{where}: classlabels_int64s is empty: a classifier needs its class labels")
    b = _Builder(where, attrs, "class")
    class_ids = set(_ints(attrs, "class_ids"))
    weights = _floats(attrs, "class_weights")
    all_positive = weights is None or bool(np.all(weights >= 0))
    return _finish(b.trees(), len(labels), attrs, where, "SUM", _text(attrs.get("post_transform", "NONE")),
                   labels, len(labels) == 2 and len(class_ids) == 1, all_positive)


def ensemble_v5(attrs: dict, where: str) -> Forest:
    """TreeEnsemble (v5): nodes by index, leaves in their own arrays, roots listed, MEMBER sets split by NaN."""
    feats, modes = _ints(attrs, "nodes_featureids"), _ints(attrs, "nodes_modes")
    splits = _floats(attrs, "nodes_splits")
    true_ids, false_ids = _ints(attrs, "nodes_truenodeids"), _ints(attrs, "nodes_falsenodeids")
    true_leaf, false_leaf = _ints(attrs, "nodes_trueleafs"), _ints(attrs, "nodes_falseleafs")
    missing = _ints(attrs, "nodes_missing_value_tracks_true")
    leaf_targets, leaf_weights = _ints(attrs, "leaf_targetids"), _floats(attrs, "leaf_weights")
    members = _floats(attrs, "membership_values")
    sets, current = [], []
    for v in members if members is not None else []:
        if np.isnan(v):
            sets.append(tuple(current))
            current = []
        else:
            current.append(float(v))
    member_of = {}
    for j, m in enumerate(modes):
        if V5_MODES.get(m) == "BRANCH_MEMBER":
            if len(member_of) >= len(sets):
                raise InputError(f"{where}: membership_values holds fewer NaN-ended sets than MEMBER nodes")
            member_of[j] = sets[len(member_of)]

    seen: set[int] = set()

    def leaf(i):
        if not 0 <= i < len(leaf_targets):
            raise InputError(f"{where}: leaf index {i} is outside leaf_targetids")
        return Leaf(((leaf_targets[i], float(leaf_weights[i])),))

    def node(j, depth=0):
        if not 0 <= j < len(feats) or depth > MAX_DEPTH:
            raise InputError(f"{where}: node index {j} is outside the nodes_* arrays, or a tree is deeper than "
                             f"{MAX_DEPTH} levels or has a cycle")
        mode = V5_MODES.get(modes[j])
        if mode is None:
            raise InputError(f"{where}: nodes_modes value {modes[j]} is not 0..6")
        if j in seen:
            raise InputError(f"{where}: node {j} is reached twice (a cycle or a shared subtree): export the model again")
        seen.add(j)
        sub = [leaf(i) if is_leaf else node(i, depth + 1) for i, is_leaf in ((true_ids[j], true_leaf[j]),
                                                                              (false_ids[j], false_leaf[j]))]
        return Branch(feats[j], mode, float(splits[j]) if splits is not None else 0.0, member_of.get(j, ()),
                      bool(missing[j]) if j < len(missing) else False, sub[0], sub[1])

    trees = []
    for r in _ints(attrs, "tree_roots"):
        degenerate = true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]
        trees.append(leaf(true_ids[r]) if degenerate else node(r))
    aggregate = AGGREGATES[int(attrs.get("aggregate_function", 1))]
    post = V5_POST.get(int(attrs.get("post_transform", 0)), "?")
    return _finish(trees, int(attrs.get("n_targets", 1)), attrs, where, aggregate, post)


ORDERED_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ")


@dataclass(frozen=True)
class NodeTables:
    """A forest laid out for a fixed-depth walk: node i is (feature, threshold bits, index of its true child) in
    `records` [nodes, 4] int32, its false child next to its true one, so one step is i = true[i] + (not cond).
    A leaf reads feature 0 against a NaN threshold, whose comparison is `leaf_cond` on every row, and steps to
    itself. Trees are padded with zero-weight leaves to a multiple of the lanes walked together."""

    records: np.ndarray
    roots: np.ndarray
    """int32 [trees rounded up to the lanes]."""
    weights: np.ndarray
    """float32 [nodes, targets]: a leaf's weights (summed per target), zeros elsewhere."""
    depth: int
    mode: str
    missing_true: bool


def walk_form(forest: Forest) -> tuple[str, bool] | None:
    """(mode, missing_true) when every branch shares one ordered comparison and one missing-value track (what
    the table walk evaluates), else None."""
    kinds = set()
    for tree in forest.trees:
        stack = [tree]
        while stack:
            n = stack.pop()
            if isinstance(n, Branch):
                kinds.add((n.mode, n.missing_true))
                stack += [n.true, n.false]
    if len(kinds) > 1 or (kinds and next(iter(kinds))[0] not in ORDERED_MODES):
        return None
    return next(iter(kinds)) if kinds else ("BRANCH_LEQ", False)


def node_tables(forest: Forest, lanes: int) -> NodeTables:
    mode, missing = walk_form(forest)
    leaf_cond = missing
    records, weights, roots = [], [], []
    nan_bits = int(np.array(np.nan, np.float32).view(np.int32))

    def add(node) -> int:
        records.append([0, 0, 0, 0])
        weights.append(np.zeros(forest.targets, np.float64))
        return len(records) - 1

    def fill(i: int, node) -> list:
        if isinstance(node, Leaf):
            records[i] = [0, nan_bits, i if leaf_cond else i - 1, 0]
            for t, w in node.weights:
                weights[i][t] += w
            return []
        yes = add(node.true)
        add(node.false)
        records[i] = [node.feature, int(np.array(node.value, np.float32).view(np.int32)), yes, 0]
        return [(yes, node.true), (yes + 1, node.false)]

    padded = list(forest.trees) + [Leaf(())] * (-len(forest.trees) % lanes)
    for tree in padded:
        root = add(tree)
        roots.append(root)
        queue = deque([(root, tree)])
        while queue:
            queue.extend(fill(*queue.popleft()))
    return NodeTables(np.asarray(records, np.int32), np.asarray(roots, np.int32),
                      np.asarray(weights, np.float64).astype(np.float32),
                      max(tree_depth(t) for t in forest.trees) if forest.trees else 0, mode, missing)
