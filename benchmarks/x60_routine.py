"""The X60's channels-last depthwise routine (kernels/rvv_depthwise.py) on paper: for each stride, band height and activation,
the loop's cycles per iteration by llvm-mca-22 (-mcpu=spacemit-x60, e32 m1 instruments) and by the routine's own
issue model (`Machine`, which orders it), the multiply-adds per iteration and the fraction of the FMA peak (16 FLOP
per cycle: one 8-lane `vfmacc.vv` per cycle), and the whole routine's issued cycles per output pixel of 8 channels
for a few row widths (prologue, head and tail columns included: the cost model's price).

    python benchmarks/x60_routine.py [--mca llvm-mca-22]
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))

from fluidml_xc.kernels import rvv_depthwise as rv  # noqa: E402

FMAS = ("vfmacc.vv", "vfmadd.vv")


def loop_of(band: rv.Band) -> list:
    code = rv.program(band)
    end = next(i for i, insn in enumerate(code) if insn[0] == "bne")
    return code[code[end][3]:end + 1]


def mca_cycles(body: list, mca: str, iterations: int = 100) -> float:
    asm = "# LLVM-MCA-RISCV-LMUL M1\n# LLVM-MCA-RISCV-SEW E32\n" + rv.text(body)
    with tempfile.NamedTemporaryFile("w", suffix=".s") as fh:
        fh.write(asm)
        fh.flush()
        out = subprocess.run([mca, "-mtriple=riscv64", "-mcpu=spacemit-x60", f"-iterations={iterations}", fh.name],
                             capture_output=True, text=True, check=True).stdout
    return int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / iterations


def model_cycles(body: list) -> int:
    """Cycles of the third iteration in a row by the routine's issue model."""
    machine, starts = rv.Machine(), []
    for _ in range(3):
        starts.append(machine.cycle)
        for insn in body:
            machine.place(rv.dataflow(insn))
    return starts[2] - starts[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mca", default="llvm-mca-22")
    args = ap.parse_args()
    print("| stride | rows | activation | columns per iteration | vfmacc | llvm-mca-22 cycles | issue model | % of peak |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for stride, top in rv.ROWS.items():
        for rows in range(max(1, top - 2), top + 1):
            for act in ("clip", "relu", "none"):
                band = rv.Band(rows, 112, 1, 1 if stride == 1 else 0, act, stride)
                body = loop_of(band)
                fmas = sum(insn[0] in FMAS for insn in body)
                cycles = mca_cycles(body, args.mca)
                print(f"| {stride} | {rows} | {act} | {band.period} | {fmas} | {cycles:.1f} | {model_cycles(body)} | "
                      f"{100 * fmas / cycles:.1f}% |")
    print("\n| stride | input width | rows | routine cycles (Clip) | per output pixel (8 channels) |")
    print("|---:|---:|---:|---:|---:|")
    for stride, rows in rv.ROWS.items():
        for width in (7, 14, 28, 56, 112):
            band = rv.Band(rows, width, 1, 1 - (width % 2 == 0 and stride == 2), "clip", stride)
            print(f"| {stride} | {width} | {rows} | {rv.cycles(band)} | "
                  f"{rv.cycles(band) / (band.rows * band.out_width):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
