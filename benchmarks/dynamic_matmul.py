"""Latency of the MatMul / LSTM kernels built once for a range of sizes (#26, run-time extents) against a build at
each size, JIT-compiled for this host, one thread: the kernel alone (fxc_model_run on prepared buffers, the fastest
single call of 15 alternating rounds, benchmarks/ab_timing.py), so the ratio is what the run-time trip counts and capacity strides cost.

    python benchmarks/dynamic_matmul.py [--max 128] [--sizes 16 32 64 128]

Cases: proj [1, S, 128] @ W[128, 128]; qk [4, S, 32] @ [4, 32, S] (M and N vary); sv [4, S, S] @ [4, S, 32] (M and
K vary); lstm: LSTM hidden 32 over S steps.
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
from fluidml_xc.symbolic import Sym, SymRange  # noqa: E402

S = Sym("S")
RNG = np.random.default_rng(0)


def build(kind: str, size: int | None, cap: int):
    """The case at one static size, or over S in 1..cap (size None)."""
    dim = S if size is None else size
    case = DynamicCase({"S": SymRange("S", 1, cap, cap // 2)} if size is None else {})
    if kind == "proj":
        x = case.input("x", np.float32, (1, dim, 128))
        case.node("MatMul", [x, case.const("w", RNG.standard_normal((128, 128)).astype(np.float32))], [(np.float32, (1, dim, 128))])
    elif kind == "qk":
        q, kt = case.input("q", np.float32, (4, dim, 32)), case.input("kt", np.float32, (4, 32, dim))
        case.node("MatMul", [q, kt], [(np.float32, (4, dim, dim))])
    elif kind == "sv":
        p, v = case.input("p", np.float32, (4, dim, dim)), case.input("v", np.float32, (4, dim, 32))
        case.node("MatMul", [p, v], [(np.float32, (4, dim, 32))])
    else:
        x = case.input("x", np.float32, (dim, 1, 32))
        w = case.const("w", (RNG.standard_normal((1, 128, 32)) * 0.2).astype(np.float32))
        r = case.const("r", (RNG.standard_normal((1, 128, 32)) * 0.2).astype(np.float32))
        case.node("LSTM", [x, w, r], [(np.float32, (dim, 1, 1, 32))], {"hidden_size": 32})
    return case.compile(parallel=False)


def _caller(run, env: dict[str, int]):
    """A no-argument call of fxc_model_run at symbol values `env`, inputs random, buffers prepared once."""
    g = run.case.graph
    keep = [RNG.standard_normal(max(g.tensors[n].size, 1)).astype(g.tensors[n].dtype) for n in g.inputs]
    outs = [np.zeros(max(g.tensors[n].size, 1), g.tensors[n].dtype) for n in g.outputs]
    arena = np.zeros(run.arena_bytes + run.alignment, np.uint8)
    base = arena.ctypes.data + (-arena.ctypes.data) % run.alignment
    syms = (ctypes.c_int64 * max(len(g.symbols), 1))(*[int(env[s]) for s in g.symbols])
    in_ptrs = (ctypes.c_void_p * max(len(keep), 1))(*[b.ctypes.data for b in keep])
    out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[b.ctypes.data for b in outs])
    fn_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))
    fn = fn_t(run.engine.get_function_address("fxc_model_run"))
    args = (ctypes.addressof(in_ptrs), ctypes.addressof(out_ptrs), base, syms)

    def call():
        fn(*args)
    call.buffers = (keep, outs, arena, syms, in_ptrs, out_ptrs)
    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max", type=int, default=128, help="the range's maximum (the dynamic build's capacity)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[16, 32, 64, 128])
    args = parser.parse_args(argv)
    ratios = []
    print(f"{'case':6s} {'S':>5s} {'dynamic us':>11s} {'static us':>10s} {'ratio':>6s}")
    for kind in ("proj", "qk", "sv", "lstm"):
        dynamic = build(kind, None, args.max)
        for size in args.sizes:
            static = build(kind, size, args.max)
            t_dyn, t_static = least_times([_caller(dynamic, {"S": size}), _caller(static, {})], 15, reps=200)
            ratios.append(t_dyn / t_static)
            print(f"{kind:6s} {size:5d} {t_dyn * 1e6:11.2f} {t_static * 1e6:10.2f} {ratios[-1]:6.3f}", flush=True)
    print(summary(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
