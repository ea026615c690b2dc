"""Elementwise kernels with run-time extents against the same kernels built static at each size (#26).

For each op, one dynamic build over W in 1..MAX (JIT, this host) and, per size W, a static build at W; both run
on the same data. Prints per size the dynamic build's time divided by the static one's (benchmarks/ab_timing.py:
the least of --repeat alternating rounds of --number calls each), and the geometric mean and worst ratio.

    python benchmarks/dynamic_elementwise.py --sizes 16 64 100 256 --max 256
"""
from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_timing import least_times, summary  # noqa: E402
from dynamic_harness import DynamicCase  # noqa: E402
from fluidml_xc.passes.elementwise_fusion import fuse_groups  # noqa: E402
from fluidml_xc.symbolic import Sym, SymRange, at  # noqa: E402

COLS = 4096


def _relu(case, w):
    x = case.input("x", np.float32, (w, COLS))
    case.node("Relu", [x], [(np.float32, (w, COLS))])


def _add_row(case, w):
    x, y = case.input("x", np.float32, (w, COLS)), case.input("y", np.float32, (COLS,))
    case.node("Add", [x, y], [(np.float32, (w, COLS))])


def _sigmoid_inner(case, w):
    x = case.input("x", np.float32, (8, 16, w))
    case.node("Sigmoid", [x], [(np.float32, (8, 16, w))])


def _fused(case, w):
    x, y = case.input("x", np.float32, (w, COLS)), case.input("y", np.float32, (COLS,))
    a, = case.node("Add", [x, y], [(np.float32, (w, COLS))], output=False)
    m, = case.node("Mul", [a, case.const("k", np.array(0.5, np.float32))], [(np.float32, (w, COLS))], output=False)
    case.node("Tanh", [m], [(np.float32, (w, COLS))])
    fuse_groups(case.graph)


OPS = {"Relu [W, 4096]": _relu, "Add row [W, 4096]": _add_row, "Sigmoid [8, 16, W]": _sigmoid_inner,
       "Add-Mul-Tanh fused [W, 4096]": _fused}


def _feeds(case, env, rng):
    g = case.graph
    return {n: rng.standard_normal(at(g.tensors[n].dyn or g.tensors[n].shape, env)).astype(g.tensors[n].dtype)
            for n in g.inputs}


def _native(run, env, feeds):
    """A call of the compiled fxc_model_run alone, on buffers prepared once (capacity-sized, feeds at the start)."""
    g = run.case.graph
    bufs = []
    for name in g.inputs:
        t = g.tensors[name]
        buf = np.zeros(t.shape, t.dtype)
        buf[tuple(slice(0, d) for d in at(t.dyn or t.shape, env))] = feeds[name]
        bufs.append(buf)
    outs = [np.zeros(g.tensors[n].shape, g.tensors[n].dtype) for n in g.outputs]
    raw = np.zeros(run.arena_bytes + run.alignment, np.uint8)
    arena = raw.ctypes.data + (-raw.ctypes.data) % run.alignment
    syms = (ctypes.c_int64 * max(len(g.symbols), 1))(*[int(env[s]) for s in g.symbols])
    ins = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    outp = (ctypes.c_void_p * len(outs))(*[b.ctypes.data for b in outs])
    keep = (bufs, outs, raw, syms, ins, outp)
    return lambda: run._fn(ctypes.addressof(keep[4]), ctypes.addressof(keep[5]), arena, keep[3])


def compare_ops(ops: dict, args, feeds=lambda case, env, w: _feeds(case, env, np.random.default_rng(0)), rtol=1e-6,
                atol=0.0) -> None:
    """Per op of `ops` (label -> build(case, W)): one dynamic build over W in 1..args.max, one static build per size
    in args.sizes, checked equal on the same feeds, then timed A/B (ab_timing.least_times); prints a row per size and
    the summary."""
    ratios = []
    width = max(map(len, ops)) + 2
    print(f"{'op':{width}} {'W':>5} {'static us':>10} {'dynamic us':>11} {'ratio':>6}")
    for label, build in ops.items():
        dyn = DynamicCase({"W": SymRange("W", 1, args.max, args.max)})
        build(dyn, Sym("W"))
        dyn_run = dyn.compile(parallel=args.parallel)
        for w in args.sizes:
            static = DynamicCase({})
            build(static, w)
            static_run = static.compile(parallel=args.parallel)
            env = {"W": w}
            given = feeds(dyn, env, w)
            np.testing.assert_allclose(dyn_run(env, given)[0], static_run({}, given)[0], rtol=rtol, atol=atol)
            t_static, t_dyn = least_times([_native(static_run, {}, given), _native(dyn_run, env, given)], args.repeat,
                                          number=args.number)
            ratios.append(t_dyn / t_static)
            print(f"{label:{width}} {w:>5} {t_static * 1e6:>10.1f} {t_dyn * 1e6:>11.1f} {t_dyn / t_static:>6.3f}")
    print(f"{summary(ratios)} (op, size)")


def arguments(doc: str, sizes: list[int], most: int, number: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=sizes)
    parser.add_argument("--max", type=int, default=most)
    parser.add_argument("--number", type=int, default=number)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--parallel", action="store_true", help="tile-capable builds (the JIT runs tiles serially)")
    return parser.parse_args()


def main() -> int:
    compare_ops(OPS, arguments(__doc__, [16, 64, 100, 256], 256, 20))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
