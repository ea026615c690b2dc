#!/usr/bin/env python3
"""Hand-scheduled channels-last depthwise 3x3 rows for the SpacemiT X60 through llvm-mca-22: the bound
docs/RISCV_KERNELS.md derives for the 16 LMUL-2 register groups.

    python benchmarks/x60_depthwise.py [--mca llvm-mca-22] [--pixels 5] [--asm-dir DIR]

A rolling window over one output row of 16 channels (e32, LMUL 2): each input column is loaded once (its 3 kernel
rows, one `vle32.v` each) and feeds the 3 output pixels that use it (`vfmacc.vv` with the kernel column's weight);
the pixel the column completes is clipped to [0, 6] as kernels/epilogue.py does it (vfmax / vfmin, the NaN lanes
kept by a masked vfmin from `x + x` above 0xFF000000) and stored. Registers: 9 weights (v10-v26), the bias (v8,
the first tap's vfmadd adds it), the mask (v0) and 5 rotating groups: the column's first two rows, the pixel being
clipped (its group then takes the column's third row), and the two pixels still accumulating. The roles rotate by
one group per column, so a loop iteration is 5 columns (--pixels) with every pointer increment grouped at its top
(one add per load and store: RVV loads take no immediate offset).

Per pixel: 3 loads + 1 store (16 VLS cycles), 9 vfmacc (18 VFP) + the Clip (4 VFP, 8 VIEU); % of peak =
9 x 2 x pixels / cycles (the X60 issues one e32 LMUL-1 vfmacc, 8 lanes, per cycle: mca.py's riscv_peak).
"""
from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

FEATURES = "+m,+a,+f,+d,+c,+v,+zvl256b"
WEIGHT = {(kh, kw): f"v{10 + 2 * (3 * kh + kw)}" for kh in range(3) for kw in range(3)}


def rolling(pixels: int) -> list[str]:
    """The loop body: pixels columns, every group role rotated once per column."""
    free = [f"x{i}" for i in range(5, 32) if i not in (11, 16, 17)]  # a1: the end, a6: the NaN bound, a7: the step
    loads, stores = free[:3 * pixels], free[3 * pixels:4 * pixels]
    lines = [f"add {p}, {p}, a7" for p in loads + stores]
    x0, x1, done, a2, a1 = "v2", "v4", "v6", "v28", "v30"
    w = WEIGHT
    for j in range(pixels):
        row = loads[3 * j:3 * j + 3]
        lines += [f"vfmacc.vv {a2}, {w[0, 2]}, {x0}", f"vadd.vv v0, {done}, {done}",
                  f"vfmacc.vv {a1}, {w[0, 1]}, {x0}", f"vfmax.vf {done}, {done}, fa5",
                  f"vfmadd.vv {x0}, {w[0, 0]}, v8", "vmsltu.vx v0, v0, a6",
                  f"vfmacc.vv {a2}, {w[1, 2]}, {x1}", f"vfmin.vf {done}, {done}, fa4, v0.t",
                  f"vfmacc.vv {a1}, {w[1, 1]}, {x1}", f"vse32.v {done}, ({stores[j]})", f"vle32.v {done}, ({row[2]})",
                  f"vfmacc.vv {x0}, {w[1, 0]}, {x1}", f"vle32.v {x1}, ({row[0]})",
                  f"vfmacc.vv {a2}, {w[2, 2]}, {done}", f"vfmacc.vv {a1}, {w[2, 1]}, {done}",
                  f"vfmacc.vv {x0}, {w[2, 0]}, {done}", f"vle32.v {done}, ({row[1]})"]
        x0, x1, done, a2, a1 = x1, done, a2, a1, x0
    return lines + [f"bne {loads[0]}, a1, .Lhot"]


def mca(tool: str, body: list[str]) -> tuple[float, float]:
    asm = "# LLVM-MCA-RISCV-LMUL M2\n# LLVM-MCA-RISCV-SEW E32\n.Lhot:\n" + "\n".join(body) + "\n"
    out = subprocess.run([tool, "-mtriple=riscv64", "-mcpu=spacemit-x60", f"-mattr={FEATURES}", "-iterations=200"],
                         input=asm, capture_output=True, text=True, check=True).stdout
    return (int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200,
            float(re.search(r"Block RThroughput:\s+([\d.]+)", out).group(1)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mca", default="llvm-mca-22", help="an llvm-mca with the SpacemitX60 model (LLVM 21+)")
    ap.add_argument("--pixels", type=int, default=5, choices=(5,), help="columns per iteration (5: the roles' cycle)")
    ap.add_argument("--asm-dir", type=Path, help="write the loop here")
    args = ap.parse_args()
    body = rolling(args.pixels)
    if args.asm_dir:
        args.asm_dir.mkdir(parents=True, exist_ok=True)
        (args.asm_dir / f"x60-dw-rolling-{args.pixels}.s").write_text("\n".join(body) + "\n")
    cycles, rthr = mca(args.mca, body)
    useful = 9 * 2 * args.pixels
    print(f"rolling window, {args.pixels} pixels x 16 channels: {len(body)} instructions, {cycles:.1f} cycles "
          f"({useful / cycles:.1%} of peak), resource bound {rthr:.1f} ({useful / rthr:.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
