#!/usr/bin/env python3
"""On-paper speedup of a model on a board with more cores than this machine (docs/THREADS.md).

    python benchmarks/threads_estimate.py [MODEL.onnx | EXAMPLE] [--boards rpi4,jetson-orin-nano] [--runs 200] [--rounds 3]

Measured here (x86_64, built for 2 threads, the profiling runner at 1 and 2 threads, interleaved rounds,
per-op minimum over rounds of the per-op medians): per-op times t_i at 1 thread, which ops are split, the
2-thread efficiency e of the split ops (ideal time with tiles dealt out whole / measured). Per board: the
model built for the board (its own tile counts n_i, since vector widths change the blocks). Estimate:
T(N) = serial + sum_i t_i * ceil(n_i / N) / n_i / e, speedup = T(1) / T(N); also printed: perfect
efficiency (e = 1) and the Amdahl bound (serial + parallel / N).
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))

from example_models import model_file  # noqa: E402


def main() -> int:
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.run.execute import run_artifact

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="light_squeezenet", type=model_file,
                    help="an ONNX file, an example model's name (fluidml_xc/examples.py) or a light model's "
                         "(onnx's light model zoo; default light_squeezenet)")
    ap.add_argument("--boards", default="rpi4,jetson-orin-nano")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fxc-estimate-"))
    here = build_model(args.model, BuildOptions(out_dir=work / "x86_64", threads=2, record_last=False))
    split_here = {k: math.prod(v) for k, v in here.manifest.parallel_ops.items()}
    per_op: dict[int, dict[str, list[float]]] = {1: {}, 2: {}}
    wall: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for t in (1, 2):
            bench = run_artifact(here.artifact, bench=args.runs, warmup=10, profile=True, threads=t).bench
            wall[t].append(bench["median_ms"])
            for op in bench["ops"]:
                per_op[t].setdefault(op["name"], []).append(op["ms"])
    t1 = {n: min(v) for n, v in per_op[1].items()}
    t2 = {n: min(v) for n, v in per_op[2].items()}
    total = sum(t1.values())
    serial = sum(ms for n, ms in t1.items() if n not in split_here)
    ideal2 = serial + sum(t1[n] * math.ceil(split_here[n] / 2) / split_here[n] for n in split_here)
    meas2 = sum(t2.values())
    par_ideal2 = ideal2 - serial
    par_meas2 = meas2 - sum(t2[n] for n in t2 if n not in split_here)
    eff = min(1.0, par_ideal2 / par_meas2) if par_meas2 > 0 else 1.0
    print(f"{args.model.stem} on this machine: ops {total:.3f} ms at 1 thread (run {min(wall[1]):.3f} ms), "
          f"split ops {total - serial:.3f} ms ({100 * (total - serial) / total:.1f}%), serial {serial:.3f} ms; "
          f"2 threads: ops {meas2:.3f} ms (run {min(wall[2]):.3f} ms, {min(wall[1]) / min(wall[2]):.2f}x), "
          f"efficiency of the split ops {eff:.2f}")
    for name in [b for b in args.boards.split(",") if b]:
        board = get_board(name)
        built = build_model(args.model, BuildOptions(board=name, out_dir=work / name, profile_runner=False, record_last=False))
        split = {k: math.prod(v) for k, v in built.manifest.parallel_ops.items()}
        ser = sum(ms for n, ms in t1.items() if n not in split)
        for n_threads in sorted({2, board.cores}):
            tiled = sum(t1[n] * math.ceil(split[n] / n_threads) / split[n] for n in split if n in t1)
            print(f"  {name} ({board.cores} cores) at {n_threads} threads: {total / (ser + tiled / eff):.2f}x "
                  f"(efficiency 1: {total / (ser + tiled):.2f}x, Amdahl bound {total / (ser + (total - ser) / n_threads):.2f}x; "
                  f"{len(split)} ops split, serial {100 * ser / total:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
