#!/usr/bin/env python3
"""Classic machine learning (issue #29): scikit-learn models exported with skl2onnx, ours against ONNX Runtime at
one thread, batch 1 and 1,000 rows.

    python benchmarks/classic_ml.py [--only SUBSTR] [--runs 200] [--rounds 7] [--batches 1,1000] [--markdown]
                                    [--board x86_64] [--forms]

Models (20 features, 3 classes, trained on 5,000 rows of make_classification): a random forest of 100 trees of
depth 8, gradient boosting of 300 trees (depth 3), logistic regression, SVMs (RBF with probabilities, RBF and linear
with one-vs-one votes only: decision values, no coupling). Each is checked against ORT
first (labels equal, scores within 1e-4), then timed: ours = the JIT-compiled model called through ctypes into
caller-owned 64-byte aligned buffers (one thread: the JIT's serial tiles), ORT = InferenceSession.run with
intra_op_num_threads 1. `rounds` rounds of `runs` calls each, ours and ORT alternating call by call
(benchmarks/ops.py timed_pair); the ratio is the median over rounds of ours / ORT medians (below 1: we are faster).
A model we cannot build is a row saying why.

The text row ("text tfidf 1-2 grams + logistic"): Pipeline([TfidfVectorizer(ngram_range=(1, 2), max_features=5000),
LogisticRegression()]) trained on 2,000 synthetic newsgroup-like posts (4 topics with string labels, a vocabulary of
5,000 words drawn Zipf-like, 20-120 words per post, capitals, punctuation and accented words), exported with
skl2onnx's defaults (StringNormalizer, Tokenizer, TfIdfVectorizer, LinearClassifier, ZipMap); the queries are other
posts. Built with --max-string-bytes 1023 (a post's bytes); ours is called on string slots made once before the
timing, while ORT's run converts the numpy object array to its strings in every call (its share is small: 1,000
posts are ~0.5 MB).

--forms: the two tree-ensemble evaluators of ops/trees.py against each other instead (table walk / branch code,
A/B the same way) on random forests of growing size, with each one's JIT build time: what WALK_MIN_LEAVES rests on.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "toolkit"))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from ops import aligned, timed_pair  # noqa: E402

FEATURES, CLASSES = 20, 3


def models() -> list[tuple[str, object]]:
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC
    return [("random forest 100x8", RandomForestClassifier(100, max_depth=8, random_state=0)),
            ("gradient boosting 300", GradientBoostingClassifier(n_estimators=300, max_depth=3, random_state=0)),
            ("logistic regression", LogisticRegression(max_iter=500)),
            ("SVM rbf", SVC(kernel="rbf", probability=True, random_state=0)),
            ("SVM rbf votes", SVC(kernel="rbf", random_state=0)),
            ("SVM linear votes", SVC(kernel="linear", random_state=0))]


def export(estimator, x: np.ndarray, y: np.ndarray):
    from skl2onnx import to_onnx
    estimator.fit(x, y)
    return to_onnx(estimator, x[:1], options={id(estimator): {"zipmap": False}},
                   target_opset={"": 17, "ai.onnx.ml": 3})


def measure(name: str, model, x: np.ndarray, batch: int, args) -> tuple | str:
    import onnxruntime as ort

    rows = x[:batch].copy()
    try:
        ours, _, outs = _jit_call(model, rows, args.board)
    except Exception as exc:  # noqa: BLE001 - a model we cannot build is a row, not the end of the sweep
        return f"build failed: {str(exc).splitlines()[0][:100]}"
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {model.graph.input[0].name: rows}

    def theirs():
        sess.run(None, feeds)

    ours()
    want = sess.run(None, feeds)
    labels_equal = np.array_equal(outs[0], want[0])
    err = float(np.max(np.abs(outs[1].astype(np.float64) - want[1])))
    check = "ok" if labels_equal and err < 1e-4 else f"ERR labels {labels_equal} scores {err:.2g}"
    rounds = [timed_pair(ours, theirs, args.runs) for _ in range(args.rounds)]
    a, b = float(np.median([r[0] for r in rounds])), float(np.median([r[1] for r in rounds]))
    return a, b, float(np.median([r[0] / r[1] for r in rounds])), check


def _jit_call(model, rows: np.ndarray, board: str):
    from fluidml_xc.run.backend import compile_model
    started = time.perf_counter()
    jit = compile_model(model, board, input_shapes={model.graph.input[0].name: rows.shape})
    seconds = time.perf_counter() - started
    arrays = [aligned(rows, 64)]
    outs = [aligned(np.zeros(shape, dtype=dt), 64) for _, dt, shape in jit.output_specs]
    in_ptrs = (ctypes.c_void_p * 1)(arrays[0].ctypes.data)
    out_ptrs = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
    raw, arena = jit._arena()
    arena = ctypes.c_void_p(arena)

    def call(inputs=arrays, memory=raw):  # holds the input and arena buffers the raw addresses point into
        jit._fn(in_ptrs, out_ptrs, arena)
    return call, seconds, outs


TOPICS = ("comp.graphics", "rec.autos", "sci.space", "talk.politics")


def posts(count: int, seed: int) -> tuple[list[str], list[str]]:
    """Synthetic newsgroup posts: per topic a Zipf-weighted share of a 5,000-word vocabulary, plus common words."""
    rng = np.random.default_rng(0)
    letters = list("abcdefghijklmnopqrstuvwxyz") + ["é", "ü", "ñ"]
    words = sorted({"".join(rng.choice(letters, rng.integers(3, 10), p=[0.035] * 26 + [0.03] * 3)) for _ in range(5200)})[:5000]
    ranks = 1.0 / np.arange(1, len(words) + 1)
    topic_weights = [rng.permutation(ranks) + ranks for _ in TOPICS]
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(count):
        topic = int(rng.integers(len(TOPICS)))
        w = topic_weights[topic] / topic_weights[topic].sum()
        picked = rng.choice(words, int(rng.integers(20, 121)), p=w)
        text = " ".join(v.capitalize() if rng.random() < 0.1 else v for v in picked)
        for mark in (". ", ", ", "! ", "? "):
            text = text.replace(" ", mark, int(rng.integers(0, 4)))
        texts.append(text)
        labels.append(TOPICS[topic])
    return texts, labels


def text_row(batch: int, args) -> tuple | str:
    """The text pipeline, ours / ORT at one thread (see the module docstring)."""
    import onnxruntime as ort
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    from fluidml_xc.frontend.ranges import ShapeRanges
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.run.backend import JitModel
    from fluidml_xc.strings import from_slots, to_slots
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec
    train, labels = posts(2000, 1)
    queries = np.array(posts(batch, 2)[0], dtype=object).reshape(-1, 1)
    pipe = Pipeline([("tfidf", TfidfVectorizer(ngram_range=(1, 2), max_features=5000)),
                     ("classifier", LogisticRegression(max_iter=500))]).fit(train, labels)
    model = to_onnx(pipe, initial_types=[("text", StringTensorType([None, 1]))])
    for node in model.graph.node:  # ORT's StringNormalizer needs an installed locale; ours reads none
        if node.op_type == "StringNormalizer":
            node.attribute.append(__import__("onnx").helper.make_attribute("locale", "C.UTF-8"))
    graph = import_graph(model, {"text": queries.shape}, ranges=ShapeRanges(max_string_bytes=1023))
    jit = JitModel(lower(graph, machine_spec(get_board(args.board)), LowerOptions()))
    (_, in_dtype, _), specs = jit.input_specs[0], jit.output_specs
    slots = aligned(np.ascontiguousarray(to_slots(queries, in_dtype, "text")).reshape(-1), 64)
    outs = [aligned(np.zeros(int(np.prod(shape)), dtype=dt), 64) for _, dt, shape in specs]
    in_ptrs = (ctypes.c_void_p * 1)(slots.ctypes.data)
    out_ptrs = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
    raw, arena = jit._arena()

    def ours(keep=(slots, raw)):
        jit._fn(in_ptrs, out_ptrs, ctypes.c_void_p(arena))
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def theirs():
        sess.run(None, {"text": queries})
    ours()
    want = sess.run(None, {"text": queries})
    got_labels = from_slots(outs[0]).tolist()
    probabilities = np.array([[row[k] for k in sorted(row)] for row in want[1]], np.float32)
    err = float(np.max(np.abs(outs[1].reshape(probabilities.shape) - probabilities)))
    check = "ok" if got_labels == want[0].tolist() and err < 1e-4 else f"ERR labels {got_labels == want[0].tolist()} scores {err:.2g}"
    rounds = [timed_pair(ours, theirs, args.runs) for _ in range(args.rounds)]
    a, b = float(np.median([r[0] for r in rounds])), float(np.median([r[1] for r in rounds]))
    return a, b, float(np.median([r[0] / r[1] for r in rounds])), check


def forms(x: np.ndarray, y: np.ndarray, args) -> None:
    """Table walk against branch code per forest size and batch (ratio below 1: the walk is faster)."""
    from sklearn.ensemble import RandomForestClassifier

    from fluidml_xc.ops import trees
    print(f"{'forest':14s} {'leaves':>7s} {'batch':>6s} {'walk ms':>9s} {'branch ms':>10s} {'walk/branch':>11s} "
          f"{'build walk s':>12s} {'build branch s':>14s}")
    for count, depth in ((4, 3), (16, 4), (32, 6), (100, 8)):
        model = export(RandomForestClassifier(count, max_depth=depth, random_state=0), x, y)
        leaves = sum(1 for n in model.graph.node for a in n.attribute if a.name == "nodes_modes" for m in a.strings
                     if m == b"LEAF")
        for batch in [int(v) for v in args.batches.split(",")]:
            calls = []
            for threshold in (0, 1 << 30):
                trees.WALK_MIN_LEAVES = threshold
                calls.append(_jit_call(model, x[:batch].copy(), args.board))
            for a, b in zip(calls[0][2], calls[1][2]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
            rounds = [timed_pair(calls[0][0], calls[1][0], args.runs) for _ in range(args.rounds)]
            walk, branch = (float(np.median([r[j] for r in rounds])) for j in (0, 1))
            print(f"{count:>4d} x depth {depth:<2d} {leaves:>7d} {batch:>6d} {walk * 1e3:>9.4f} {branch * 1e3:>10.4f} "
                  f"{np.median([r[0] / r[1] for r in rounds]):>11.2f} {calls[0][1]:>12.1f} {calls[1][1]:>14.1f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="only models whose name contains this")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", default="1,1000")
    ap.add_argument("--board", default="x86_64")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--forms", action="store_true", help="time the two tree evaluators against each other")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from sklearn.datasets import make_classification
    x, y = make_classification(5000, FEATURES, n_informative=10, n_classes=CLASSES, random_state=0)
    x = x.astype(np.float32)
    if args.forms:
        forms(x, y, args)
        return 0
    header = ("model", "batch", "ours ms", "ORT ms", "ratio", "check")
    print(f"load average {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    text = "text tfidf 1-2 grams + logistic"
    for name, estimator in [*models(), (text, None)]:
        if args.only and args.only.lower() not in name.lower():
            continue
        model = export(estimator, x, y) if estimator is not None else None
        for batch in [int(v) for v in args.batches.split(",")]:
            result = measure(name, model, x, batch, args) if model is not None else text_row(batch, args)
            cells = (name, str(batch), "", "", "", result) if isinstance(result, str) else (
                name, str(batch), f"{result[0] * 1e3:.4f}", f"{result[1] * 1e3:.4f}", f"{result[2]:.2f}", result[3])
            print("| " + " | ".join(cells) + " |" if args.markdown else
                  f"{cells[0]:24s} {cells[1]:>6s} {cells[2]:>10s} {cells[3]:>10s} {cells[4]:>6s}  {cells[5]}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
