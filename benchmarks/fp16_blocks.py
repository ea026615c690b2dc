#!/usr/bin/env python3
"""The error of float16 dot products by accumulation block (kernels/half_blocks.py HALF_BLOCK, docs/FP16.md).

    python benchmarks/fp16_blocks.py [--k 1024] [--samples 400] [--seed 0]

Operands are float16 (N(0,1), and N(0,1) + 1 for a sum that grows: ReLU activations); each dot product of K terms
is computed as the kernels do: float16 fused multiply-adds (exact product and sum, one rounding to float16: float64
arithmetic rounded to float16 is that fma), the sum restarted every B steps and each block's sum added into float32;
B = K is float16 accumulation over the whole reduction, "f32" float32 fmas throughout (the --precision fp32 GEMM).
The error is |result - exact| / sum |a_i b_i| (the dot product's condition), the worst and the mean over samples,
before the result is stored (storing in float16 adds at most 2^-12 of |result|).
"""
from __future__ import annotations

import argparse

import numpy as np


def dot(a: np.ndarray, b: np.ndarray, block: int | None) -> np.ndarray:
    """Per row of a and b: block None accumulates in float32 fmas, else float16 fmas restarted every `block` steps."""
    rows, k = a.shape
    if block is None:
        acc = np.zeros(rows, np.float32)
        for i in range(k):
            acc = (acc.astype(np.float64) + a[:, i].astype(np.float64) * b[:, i]).astype(np.float32)
        return acc.astype(np.float64)
    wide = np.zeros(rows, np.float32)
    for lo in range(0, k, block):
        acc = np.zeros(rows, np.float16)
        for i in range(lo, min(lo + block, k)):
            acc = (acc.astype(np.float64) + a[:, i].astype(np.float64) * b[:, i]).astype(np.float16)
        wide = wide + acc.astype(np.float32)
    return wide.astype(np.float64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"K = {args.k}, {args.samples} dot products per row; error / sum|a*b| (worst, mean)")
    print("| operands | " + " | ".join(["f32"] + [f"B={b}" for b in (8, 16, 32, 64, 128, args.k)]) + " |")
    print("|---|" + "---:|" * 7)
    for label, shift in (("N(0,1) x N(0,1)", 0.0), ("(N(0,1)+1) x N(0,1)", 1.0)):
        a = (rng.standard_normal((args.samples, args.k)) + shift).astype(np.float16)
        b = rng.standard_normal((args.samples, args.k)).astype(np.float16)
        exact = np.sum(a.astype(np.float64) * b.astype(np.float64), axis=1)
        scale = np.sum(np.abs(a.astype(np.float64) * b.astype(np.float64)), axis=1)
        cells = []
        for block in (None, 8, 16, 32, 64, 128, args.k):
            err = np.abs(dot(a, b, block) - exact) / scale
            cells.append(f"{err.max():.2e} / {err.mean():.1e}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
