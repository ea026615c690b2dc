"""Row-wise and data-movement kernels with run-time extents against the same kernels built static at each size (#26).

For each op (shapes of a BERT-style encoder layer with sequence length W), one dynamic build over W in 1..MAX (JIT,
this host) and, per size W, a static build at W; both run on the same data and must agree. Prints per size the
dynamic build's time divided by the static one's (best of --repeat batches of --number calls each, interleaved), and
the geometric mean and worst ratio.

    python benchmarks/dynamic_rows.py --sizes 16 32 64 128 --max 128
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dynamic_elementwise import _feeds, _native, _times  # noqa: E402
from dynamic_harness import DynamicCase  # noqa: E402
from fluidml_xc.symbolic import Sym, SymRange  # noqa: E402

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--max", type=int, default=128)
    parser.add_argument("--number", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--parallel", action="store_true", help="tile-capable builds (the JIT runs tiles serially)")
    args = parser.parse_args(argv)
    ratios = []
    print(f"{'op':32} {'W':>5} {'static us':>10} {'dynamic us':>11} {'ratio':>6}")
    for label, build in OPS.items():
        dyn = DynamicCase({"W": SymRange("W", 1, args.max, args.max)})
        build(dyn, Sym("W"))
        dyn_run = dyn.compile(parallel=args.parallel)
        for w in args.sizes:
            static = DynamicCase({})
            build(static, w)
            static_run = static.compile(parallel=args.parallel)
            env = {"W": w}
            rng = np.random.default_rng(w)
            feeds = {n: (rng.integers(0, 1000, v.shape) if v.dtype == np.int64 else v) for n, v in _feeds(dyn, env, rng).items()}
            np.testing.assert_allclose(dyn_run(env, feeds)[0], static_run({}, feeds)[0], rtol=1e-5, atol=1e-6)
            t_static, t_dyn = _times([_native(static_run, {}, feeds), _native(dyn_run, env, feeds)], args.number, args.repeat)
            ratios.append(t_dyn / t_static)
            print(f"{label:32} {w:>5} {t_static * 1e6:>10.1f} {t_dyn * 1e6:>11.1f} {t_dyn / t_static:>6.3f}")
    print(f"geo-mean {float(np.exp(np.mean(np.log(ratios)))):.3f}, worst {max(ratios):.3f} over {len(ratios)} (op, size)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
