"""Row-wise and data-movement kernels with run-time extents against the same kernels built static at each size (#26).

For each op (shapes of a BERT-style encoder layer with sequence length W), one dynamic build over W in 1..MAX (JIT,
this host) and, per size W, a static build at W; both run on the same data and must agree. Prints per size the
dynamic build's time divided by the static one's (benchmarks/ab_timing.py: the least of --repeat alternating rounds
of --number calls each), and the geometric mean and worst ratio.

    python benchmarks/dynamic_rows.py --sizes 16 32 64 128 --max 128
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dynamic_elementwise import _feeds, arguments, compare_ops  # noqa: E402

HEADS, HIDDEN = 4, 256


def _softmax(case, w):
    x = case.input("x", np.float32, (HEADS, w, w))
    case.node("Softmax", [x], [(np.float32, (HEADS, w, w))], {"axis": -1})


def _layer_norm(case, w):
    x = case.input("x", np.float32, (w, HIDDEN))
    s, b = case.const("s", np.linspace(0.5, 1.5, HIDDEN, dtype=np.float32)), case.const("b", np.zeros(HIDDEN, np.float32))
    case.node("LayerNormalization", [x, s, b], [(np.float32, (w, HIDDEN))], {"axis": -1})


def _reduce_mean_seq(case, w):
    x = case.input("x", np.float32, (1, w, HIDDEN))
    case.node("ReduceMean", [x, case.const("a", np.array([1], np.int64))], [(np.float32, (1, 1, HIDDEN))])


def _heads_transpose(case, w):
    x = case.input("x", np.float32, (1, w, HEADS, HIDDEN // HEADS))
    case.node("Transpose", [x], [(np.float32, (1, HEADS, w, HIDDEN // HEADS))], {"perm": [0, 2, 1, 3]})


def _concat(case, w):
    a, b = case.input("a", np.float32, (w, HIDDEN)), case.input("b", np.float32, (w, HIDDEN))
    case.node("Concat", [a, b], [(np.float32, (w * 2, HIDDEN))], {"axis": 0})


def _gather_rows(case, w):
    table = case.const("table", np.random.default_rng(1).standard_normal((1000, HIDDEN)).astype(np.float32))
    ids = case.input("ids", np.int64, (w,))
    case.node("Gather", [table, ids], [(np.float32, (w, HIDDEN))])


OPS = {"Softmax [4, W, W]": _softmax, "LayerNorm [W, 256]": _layer_norm, "ReduceMean seq [1, W, 256]": _reduce_mean_seq,
       "Transpose heads [1, W, 4, 64]": _heads_transpose, "Concat [2W, 256]": _concat, "Gather [W] of [1000, 256]": _gather_rows}


def _feeds_rows(case, env, w):
    rng = np.random.default_rng(w)
    return {n: (rng.integers(0, 1000, v.shape) if v.dtype == np.int64 else v) for n, v in _feeds(case, env, rng).items()}


def main() -> int:
    compare_ops(OPS, arguments(__doc__, [16, 32, 64, 128], 128, 50), _feeds_rows, rtol=1e-5, atol=1e-6)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
