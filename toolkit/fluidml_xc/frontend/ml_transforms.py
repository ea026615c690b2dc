"""The post transforms and label rules of the ai.onnx.ml classifiers as ONNX Runtime 1.32 applies them
(ml_common.h, batched_update_scores_inplace), written as standard ops by the import-time expansions of
LinearClassifier (ml_ops.py) and SVMClassifier (ml_svm.py):

- two or more score columns: NONE, LOGISTIC (Sigmoid), SOFTMAX (Softmax), SOFTMAX_ZERO (exp(s - max) for the
  scores with |s| > 1e-7, s * exp(-max) for the others, over the sum of the former; the max starts at -FLT_MAX),
  PROBIT (sqrt(2) ErfInv(2s - 1) with ONNX Runtime's closed-form ErfInv, in float32);
- one score column widened to two (ONNX Runtime's `add_second_class`): [1 - s, s] (s through LOGISTIC when asked),
  or [-s, s] and after LOGISTIC [logistic(-s), logistic(s)]; PROBIT writes probit(s) alone (the other values stay
  unset: 0 here).

A class label is the label list gathered at a class index: a `Gather` of the int64 labels, or of a string constant
for `classlabels_strings` (string tensors are fixed slots, docs/STRINGS.md).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .builder import NodeBuilder

F32 = np.float32
ERFINV_A = F32(0.147)


def _c(bld: NodeBuilder, value, hint: str = "c") -> str:
    return bld.constant(np.asarray(value, F32), hint)


def _reduce(bld: NodeBuilder, op: str, x: str) -> str:
    """op over the last axis, kept (axes an input from ReduceSum 13 / ReduceMax 18 on)."""
    if bld.opset >= (13 if op == "ReduceSum" else 18):
        return bld.add(op, [x, bld.constant(np.array([-1], np.int64), "axes")], keepdims=1)[0]
    return bld.add(op, [x], axes=[-1], keepdims=1)[0]


def probit(bld: NodeBuilder, s: str, out: str | None = None) -> str:
    """sqrt(2) * ErfInv(2s - 1), ErfInv(x) = sgn(x) sqrt(sqrt(v^2 - ln(1 - x^2) / a) - v), v = 2 / (pi a) + ln(1 - x^2) / 2."""
    x = bld.add("Sub", [bld.add("Mul", [s, _c(bld, 2.0, "two")])[0], _c(bld, 1.0, "one")])[0]
    sign = bld.add("Where", [bld.add("Less", [x, _c(bld, 0.0, "zero")])[0], _c(bld, -1.0, "minus_one"), _c(bld, 1.0, "one")])[0]
    one = _c(bld, 1.0, "one")
    lg = bld.add("Log", [bld.add("Mul", [bld.add("Sub", [one, x])[0], bld.add("Add", [one, x])[0]])[0]])[0]
    v = bld.add("Add", [_c(bld, F32(2) / (F32(np.pi) * ERFINV_A), "two_over_pi_a"),
                        bld.add("Mul", [_c(bld, 0.5, "half"), lg])[0]])[0]
    v2 = bld.add("Mul", [_c(bld, F32(1) / ERFINV_A, "one_over_a"), lg])[0]
    v3 = bld.add("Sub", [bld.add("Sqrt", [bld.add("Sub", [bld.add("Mul", [v, v])[0], v2])[0]])[0], v])[0]
    root = bld.add("Mul", [sign, bld.add("Sqrt", [v3])[0]])[0]
    return bld.add("Mul", [_c(bld, F32(1.41421356), "sqrt2"), root], [out] if out else None)[0]


def softmax_zero(bld: NodeBuilder, s: str, out: str | None = None) -> str:
    top = bld.add("Max", [_reduce(bld, "ReduceMax", s), _c(bld, -np.finfo(F32).max, "lowest")])[0]
    big = bld.add("Greater", [bld.add("Abs", [s])[0], _c(bld, 1e-7, "tiny")])[0]
    exps = bld.add("Exp", [bld.add("Sub", [s, top])[0]])[0]
    scaled = bld.add("Mul", [s, bld.add("Exp", [bld.add("Neg", [top])[0]])[0]])[0]
    e = bld.add("Where", [big, exps, scaled])[0]
    total = _reduce(bld, "ReduceSum", bld.add("Where", [big, e, _c(bld, 0.0, "zero")])[0])
    return bld.add("Div", [e, total], [out] if out else None)[0]


POST_TRANSFORMS: dict[str, Callable[[NodeBuilder, str, str | None], str]] = {
    "NONE": lambda bld, s, out: bld.add("Identity", [s], [out] if out else None)[0],
    "LOGISTIC": lambda bld, s, out: bld.add("Sigmoid", [s], [out] if out else None)[0],
    "SOFTMAX": lambda bld, s, out: bld.add("Softmax", [s], [out] if out else None, axis=-1)[0],
    "SOFTMAX_ZERO": softmax_zero,
    "PROBIT": probit,
}
"""Post transform name -> its ops over [rows, columns >= 2] scores."""


def second_class(bld: NodeBuilder, s: str, rows: int, post: str, mixed: bool, packed: bool, out: str | None) -> str:
    """One score column [rows, 1] widened to two, ONNX Runtime's `add_second_class`: `mixed` (its cases 2 and 3)
    [-s, s], or after LOGISTIC [logistic(-s), logistic(s)]; else [1 - s, s] (s through LOGISTIC first). PROBIT: [probit(s), unset] per row,
    or (`packed`, LinearClassifier's buffer) probit(s) in the first `rows` values, then the unset ones (0 here)."""
    if post == "PROBIT" and packed:
        flat = bld.add("Reshape", [probit(bld, s), bld.constant(np.array([-1], np.int64), "flat")])[0]
        both = bld.add("Concat", [flat, bld.constant(np.zeros(rows, F32), "unset")], axis=0)[0]
        return bld.add("Reshape", [both, bld.constant(np.array([-1, 2], np.int64), "pairs")], [out] if out else None)[0]
    if post == "PROBIT":
        return bld.add("Concat", [probit(bld, s), bld.constant(np.zeros((rows, 1), F32), "unset")], [out] if out else None,
                       axis=1)[0]
    if mixed:
        first = bld.add("Neg", [s])[0]
        if post == "LOGISTIC":
            first, s = bld.add("Sigmoid", [first])[0], bld.add("Sigmoid", [s])[0]
    else:
        s = bld.add("Sigmoid", [s])[0] if post == "LOGISTIC" else s
        first = bld.add("Sub", [_c(bld, 1.0, "one"), s])[0]
    return bld.add("Concat", [first, s], [out] if out else None, axis=1)[0]


def class_labels(where: str, ints, strings) -> np.ndarray | None:
    """The classifier's labels as a constant array: int64, or an object array of str for `classlabels_strings`
    (its label output is then a string tensor, gathered from them); None when it has none."""
    if strings:
        return np.array([s.decode() if isinstance(s, bytes) else str(s) for s in strings], dtype=object)
    return np.asarray(ints, np.int64) if ints else None


def gather_label(bld: NodeBuilder, labels: np.ndarray, index: str, out: str) -> str:
    """labels[index] per row (index int64 [rows])."""
    return bld.add("Gather", [bld.constant(labels, "classlabels"), index], [out], axis=0)[0]
