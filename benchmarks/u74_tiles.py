#!/usr/bin/env python3
"""Hand-scheduled scalar GEMM tiles for the SiFive U74 through llvm-mca: the bound docs/RISCV_KERNELS.md derives,
and the loop of the tile the compiler ships (kernels/scalar_tile.py).

    python benchmarks/u74_tiles.py [--mca llvm-mca-19,llvm-mca-22] [--asm-dir DIR]

Each loop is one register tile of m x n fp32 accumulators (fmadd.s) over K steps per iteration, A and B read by flw:

* "first": every load of a step before its multiply-adds (m + n loads, m x n + m + n FP registers), 1 step;
* "piped": B software-pipelined through two registers (the next column's flw right before this column's m
  multiply-adds, m x n + m + 2 registers), the m A loads after the step's last column, K steps per iteration
  (the pointer increments and the branch once);
* "depthwise band": kernels/depthwise_tile.py's column loop, R output rows: each input column's R + 2 flw feed
  9 R fmadd.s (m = 3 R, n = 3: the fmadd.s of 3 columns per iteration), and the stores (sw after the Clip's
  fmax.s / fmin.s / feq.s / fmv.x.w and the NaN's bits ORed in, fsw without; "checked": fsw after fmax.s / fmin.s
  in place, a check multiply-add per 3 columns not counted, 6 columns per iteration channels-last);
* "stride 2" (a second table): kernels/depthwise_stride2.py's loop (2 output columns of 3 rows per iteration,
  54 fmadd.s) in MobileNetV2's layouts, with the Clip, a Relu and no activation, and the whole routine's cycles per
  output pixel by its issue model;
* "routine": kernels/scalar_tile.py's loop, 5 x 5 as "piped" but A from five row pointers (a MatMul's rows), each
  advanced beside its own load in the iteration's last step; "B reg": B's K stride in a register (a 1x1 conv's
  input planes), two B pointers taking turns, each moved on beside the A loads.

llvm-mca's in-order pipeline issues an instruction only when it would write back no earlier than the one issued
before it (InOrderIssueStage::canExecute, findFirstWriteBackCycle; the SiFive7 model sets no RetireOOO), so a flw
(3 cycles in LLVM 22, 2 in LLVM 19) right after an fmadd.s (5 cycles) waits 2 (3) cycles, and every load costs a
cycle of its own: cycles per step >= m x n + m + n. % of peak = m x n x K / cycles (one fmadd.s per cycle).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))

STEP = 256
"""Bytes between two K steps of B (a row of a 64-column panel)."""


def first(m: int, n: int) -> list[str]:
    acc = [f"f{i}" for i in range(m + n, m + n + m * n)]
    lines = [f"flw f{i}, {4 * i}(a0)" for i in range(m)] + [f"flw f{m + j}, {4 * j}(a1)" for j in range(n)]
    lines += ["addi a0, a0, 64", f"addi a1, a1, {STEP}"]
    lines += [f"fmadd.s {acc[i * n + j]}, f{i}, f{m + j}, {acc[i * n + j]}" for i in range(m) for j in range(n)]
    return lines + ["bne a0, a2, .Lhot"]


def piped(m: int, n: int, steps: int) -> list[str]:
    b, acc = [f"f{m}", f"f{m + 1}"], [f"f{i}" for i in range(m + 2, m + 2 + m * n)]
    lines, col = [], 0
    for k in range(steps):
        for j in range(n):
            nxt = STEP * k + 4 * (j + 1) if j < n - 1 else STEP * (k + 1)  # the next column, or the next step's first
            lines.append(f"flw {b[(col + 1) % 2]}, {nxt}(a1)")
            lines += [f"fmadd.s {acc[i * n + j]}, f{i}, {b[col % 2]}, {acc[i * n + j]}" for i in range(m)]
            col += 1
        for i in range(m):
            lines.append(f"flw f{i}, {64 * (k + 1) + 4 * i}(a0)")  # the next step's A column
            if k == steps - 1 and i == 0:
                lines.append(f"addi a1, a1, {STEP * steps}")
    return lines + [f"addi a0, a0, {64 * steps}", "bne a0, a2, .Lhot"]


def routine(steps: int, b_step: int) -> list[str]:
    """The loop of kernels/scalar_tile.py's 5 x 5 routine at `steps` K steps per iteration (A rows 1 float apart per
    step, B's steps b_step floats apart: 5, a packed panel; 3136, a 56 x 56 plane, in a register)."""
    from fluidml_xc.kernels.scalar_tile import ScalarTile, program, text

    lines = text(program(ScalarTile(5, 5, steps), 8 * steps + 1, 1, b_step)).splitlines()
    top = next(i for i, line in enumerate(lines) if line.endswith(":"))
    end = next(i for i, line in enumerate(lines) if line.startswith("bne"))
    return [*lines[top + 1:end], lines[end].rsplit(",", 1)[0] + ", .Lhot"]


def band(rows: int, clip: bool, channels: int = 0, checked: bool = False) -> list[str]:
    """The column loop of kernels/depthwise_tile.py's 3x3 depthwise band (`rows` output rows, 28 columns, 3 columns
    per iteration), with the fused Clip(0, 6) or without an activation; NCHW rows, or channels-last with
    `channels` (a pointer per row); `checked`: the checked Clip form (6 columns per iteration with row pointers)."""
    from fluidml_xc.kernels.depthwise_tile import Band, program, text

    col = 4 * (channels or 1)
    lines = text(program(Band(rows, 28, 1, 1, frozenset(), 28 * col, 28 * col, col, col, clip, clip, clip), checked)).splitlines()
    top = next(i for i, line in enumerate(lines) if line.endswith(":"))
    end = next(i for i, line in enumerate(lines) if line.startswith("bne"))
    return [*lines[top + 1:end], lines[end].rsplit(",", 1)[0] + ", .Lhot"]


STRIDE2_LAYOUTS = (
    ("channels-last in, NCHW out, 96 channels 112x112", 112, 384, 4, 43008, 224),
    ("a plane walked transposed (mca.py's row)", 112, 43008, 21504, 384, 384),
    ("NCHW, 112 columns", 112, 4, 4, 448, 224),
    ("channels-last both sides, 192 channels 28x28", 28, 768, 768, 21504, 10752),
    ("576 channels 14x14", 14, 2304, 4, 32256, 28))
"""(name, input width, bytes between input columns, output columns, input rows, output rows)."""


def stride2_table(mca: str) -> None:
    from fluidml_xc.kernels import depthwise_stride2 as s2

    print(f"\n| stride-2 layout | Clip ({mca} cycles, %) | Relu | none | routine per pixel (Clip) |")
    print("|---|---:|---:|---:|---:|")
    for name, width, x_col, out_col, x_row, out_row in STRIDE2_LAYOUTS:
        row = []
        for act in ("clip", "relu", "none"):
            band = s2.Band(3, width, 1, 0, frozenset(), x_col, out_col, act != "none", act == "clip", act != "none",
                           x_row, out_row)
            lines = s2.text(s2.program(band)).splitlines()
            top = next(i for i, line in enumerate(lines) if line.endswith(":"))
            end = next(i for i, line in enumerate(lines) if line.startswith("bne"))
            c = cycles(mca, ".Lhot:\n" + "\n".join([*lines[top + 1:end], lines[end].rsplit(",", 1)[0] + ", .Lhot"]) + "\n")
            row.append(f"{c:.0f} ({100 * 54 / c:.1f}%)")
            if act == "clip":
                per_pixel = s2.cycles(band) / (3 * band.out_width)
        print(f"| {name} | " + " | ".join(row) + f" | {per_pixel:.1f} |")


def cycles(mca: str, asm: str) -> float:
    out = subprocess.run([mca, "-mtriple=riscv64", "-mcpu=sifive-u74", "-iterations=200"], input=asm,
                         capture_output=True, text=True, check=True).stdout
    return int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mca", default="llvm-mca-19,llvm-mca-22")
    ap.add_argument("--asm-dir", type=Path, help="write each loop here")
    args = ap.parse_args()
    loops = [(f"first {m}x{n}", m, n, 1, first(m, n)) for m, n in ((2, 8), (4, 4), (3, 7), (4, 5))]
    loops += [(f"piped {m}x{n} K{k}", m, n, k, piped(m, n, k)) for m, n in ((4, 5), (4, 6), (5, 5)) for k in (1, 3)]
    loops += [(f"routine 5x5 K{k}{' B reg' if b > 5 else ''}", 5, 5, k, routine(k, b)) for k, b in
              ((2, 5), (4, 5), (6, 5), (4, 3136))]
    loops += [(f"depthwise band {r} rows{' +Clip' if c else ''}", 3 * r, 3, 3, band(r, c)) for r in (1, 2, 3)
              for c in (False, True)]
    loops += [(f"depthwise band 3 rows channels-last{' +Clip' if c else ''}", 9, 3, 3, band(3, c, 96)) for c in (False, True)]
    loops += [(f"depthwise band {r} rows +Clip checked", 3 * r, 3, 3, band(r, True, 0, True)) for r in (1, 2, 3)]
    loops += [("depthwise band 3 rows channels-last +Clip checked", 9, 3, 6, band(3, True, 96, True))]
    mcas = args.mca.split(",")
    print("| loop | FP registers | fmadd.s | " + " | ".join(f"{t} cycles | %" for t in mcas) + " |")
    print("|---|---:|---:|" + "---:|---:|" * len(mcas))
    for name, m, n, k, lines in loops:
        asm = ".Lhot:\n" + "\n".join(lines) + "\n"
        if args.asm_dir:
            args.asm_dir.mkdir(parents=True, exist_ok=True)
            (args.asm_dir / f"u74-{name.replace(' ', '-')}.s").write_text(asm)
        rows = m // 3  # depthwise: 9 weights, 3 R sums, R + 2 inputs, zero, bias; Clip: 2 bounds + R clipped values,
        regs = (9 + 3 * rows + rows + 2 + 2 + (rows + 2) * name.endswith("Clip") + 3 * name.endswith("checked")
                if name.startswith("depthwise") else m * n + m + (n if name.startswith("first") else 2))  # checked: + check
        row = [f"{(c := cycles(t, asm)):.1f} | {100 * m * n * k / c:.1f}%" for t in mcas]
        print(f"| {name} | {regs} | {m * n * k} | " + " | ".join(row) + " |")
    stride2_table(mcas[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
