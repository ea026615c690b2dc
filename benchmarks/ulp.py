#!/usr/bin/env python3
"""Worst error of our float32 unary activations over every float32 input, against numpy in float64.

    python benchmarks/ulp.py [--board x86_64-v3] [OP ...]     (default: Sigmoid Tanh; about 2 minutes per op)

The model is JIT-compiled for --board (an x86 board: it runs here) on 2^24 inputs and called 256 times over all
2^32 bit patterns. Printed per op: the most ulps (of the float32 nearest the exact value) where that value is a
normal float, the largest relative error there, and the largest absolute error where the exact value is subnormal.
NaN inputs must give NaN.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

CHUNK = 1 << 24
REFERENCE = {"Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh, "Exp": np.exp}


def compiled(op: str, board: str):
    from fluidml_xc.run.backend import compile_model
    node = helper.make_node(op, ["x"], ["y"])
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [CHUNK])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [CHUNK])])
    return compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), board)


def sweep(op: str, board: str) -> tuple[float, float, float, float, float]:
    """(max ulps, its x, max relative error, its x, max absolute error at subnormal results)."""
    fn, ref = compiled(op, board), REFERENCE[op]
    worst_ulp = worst_rel = sub = 0.0
    at_ulp = at_rel = 0.0
    for start in range(0, 1 << 32, CHUNK):
        x = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32).view(np.float32)
        got = fn({"x": x})[0].astype(np.float64)
        with np.errstate(all="ignore"):
            want = ref(x.astype(np.float64))
        nan = np.isnan(want)
        if not np.isnan(got[nan]).all():
            raise SystemExit(f"{op}: a NaN input gave a number")
        x, got, want = x[~nan], got[~nan], want[~nan]
        nearest = want.astype(np.float32)
        normal = np.abs(nearest) >= np.finfo(np.float32).tiny
        err = np.abs(got - want)
        ulps = np.where(normal, err / np.spacing(np.abs(nearest)).astype(np.float64), 0.0)
        rel = np.where(normal, err / np.maximum(np.abs(want), 1e-300), 0.0)
        if (~normal).any():
            sub = max(sub, float(err[~normal].max()))
        i, j = int(np.argmax(ulps)), int(np.argmax(rel))
        if ulps[i] > worst_ulp:
            worst_ulp, at_ulp = float(ulps[i]), float(x[i])
        if rel[j] > worst_rel:
            worst_rel, at_rel = float(rel[j]), float(x[j])
    return worst_ulp, at_ulp, worst_rel, at_rel, sub


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ops", nargs="*", help=f"of {', '.join(sorted(REFERENCE))} (default: Sigmoid Tanh)")
    ap.add_argument("--board", default="x86_64-v3")
    args = ap.parse_args()
    unknown = [op for op in args.ops if op not in REFERENCE]
    if unknown:
        ap.error(f"no float64 reference for {', '.join(unknown)}: choose from {', '.join(sorted(REFERENCE))}")
    for op in args.ops or ["Sigmoid", "Tanh"]:
        u, xu, r, xr, s = sweep(op, args.board)
        print(f"{op} ({args.board}): max {u:.2f} ulp at x = {xu:.9g}; max relative error {r:.3g} at x = {xr:.9g}; "
              f"absolute error where the exact value is subnormal <= {s:.3g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
