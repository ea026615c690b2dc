"""The x86_64 board's code variants against single-CPU builds: build time, model.o code size, latency.

    python benchmarks/cpu_variants.py MODEL.onnx [...] [--rounds 7] [--runs 200] [--threads 1]

Per model, four builds: the default board (x86-64-v4/-v3/-v2 variants chosen at init), --cpu native, and the
x86_64-v3 and x86_64-v2 boards (one variant each). Table 1: build seconds (the whole `build_model`), the
text bytes of model.o and the bytes of its weights blob. Table 2: each runner's median latency (runner --bench RUNS, median of its runs) over R
rounds in rotating order, and per round the ratio to --cpu native; a ratio is the median over rounds, so load
that changes between rounds cancels. `default@v3` and `default@v2` are the default build capped with
FXC_CPU_VARIANT (what a CPU without AVX-512, or without AVX, runs), compared with the single-level builds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))

BUILDS = {"default": {"board": "x86_64"}, "native": {"board": "x86_64", "cpu": "native"},
          "x86_64-v3": {"board": "x86_64-v3"}, "x86_64-v2": {"board": "x86_64-v2"}}
RUNS = {"default": ("default", None), "native": ("native", None), "default@v3": ("default", "x86-64-v3"),
        "x86_64-v3": ("x86_64-v3", None), "default@v2": ("default", "x86-64-v2"), "x86_64-v2": ("x86_64-v2", None)}


def section_bytes(obj: Path) -> tuple[int, int]:
    """(code, weights): the bytes of model.o's .text sections and of its weights blob's section."""
    from elftools.elf.elffile import ELFFile

    with open(obj, "rb") as fh:
        sections = [(s.name, s["sh_size"]) for s in ELFFile(fh).iter_sections()]
    return (sum(size for name, size in sections if name.startswith(".text")),
            sum(size for name, size in sections if name.startswith(".rodata.") and "_weights_" in name))


def latency(runner: Path, runs: int, threads: int, cap: str | None) -> float:
    env = {**os.environ, **({"FXC_CPU_VARIANT": cap} if cap else {})}
    out = subprocess.run([str(runner), "--bench", str(runs), "--threads", str(threads)], capture_output=True,
                         text=True, check=True, env=env).stdout
    return json.loads(out)["median_ms"]


def main() -> int:
    from fluidml_xc.build import BuildOptions, build_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    for model in map(Path, args.models):
        with tempfile.TemporaryDirectory(prefix="cpu-variants-") as tmp:
            artifacts, rows = {}, []
            for name, options in BUILDS.items():
                started = time.perf_counter()
                artifacts[name] = build_model(model, BuildOptions(out_dir=Path(tmp) / name, record_last=False,
                                                                  profile_runner=False, threads=args.threads, **options)).artifact
                rows.append((name, time.perf_counter() - started, *section_bytes(artifacts[name] / "model.o")))
            print(f"\n{model.stem}: build s, model.o text bytes, weights bytes")
            for name, seconds, size, weights in rows:
                print(f"  {name:12s} {seconds:7.1f} s  {size:>10,} B  {weights:>12,} B")
            times: dict[str, list[float]] = {name: [] for name in RUNS}
            for r in range(args.rounds):
                order = list(RUNS)[r % len(RUNS):] + list(RUNS)[:r % len(RUNS)]
                for name in order:
                    build, cap = RUNS[name]
                    times[name].append(latency(artifacts[build] / "runner", args.runs, args.threads, cap))
            print(f"{model.stem}: median ms over {args.rounds} rounds, ratio to native (median of per-round ratios)")
            for name in RUNS:
                ratio = statistics.median(a / b for a, b in zip(times[name], times["native"]))
                print(f"  {name:12s} {statistics.median(times[name]):9.3f} ms  x{ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
