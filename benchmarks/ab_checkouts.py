#!/usr/bin/env python3
"""The generated code of two checkouts of fluidml-xc, A/B: does a compiler change keep the models' speed and outputs?

Each model is built by both checkouts (`fluidml-xc build`, run from that checkout's toolkit/ in a fresh Python);
both runners then run in alternating rounds (the runner's own `--bench` loop, its median per round; the ratio of a
model is the median over rounds of after/before, so that load which changes between rounds cancels), and once
more each with the same feed to compare the outputs byte for byte.

    python benchmarks/ab_checkouts.py --before ../old-checkout mobilenetv2.onnx tiny_cnn [--threads 1] [--rounds 7]

A model argument is an ONNX file (with <name>.inputs.npz beside it as its feed, else random feeds), an example
model's name or a light model's name (benchmarks/example_models.py).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
from bench import model_cases, runner_bench  # noqa: E402


def build(checkout: Path, model: Path, out: Path, board: str, threads: int) -> Path:
    env = {**os.environ, "PYTHONPATH": str(checkout / "toolkit")}
    code = "import sys; from fluidml_xc.cli import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", code, "build", str(model), "--board", board, "--threads", str(threads),
                    "-o", str(out)], check=True, capture_output=True, text=True, env=env, cwd=out.parent, timeout=3600)
    return out


def outputs(artifact: Path, feeds: dict, work: Path) -> list[bytes]:
    """The runner's outputs for `feeds` (its .npy files' bytes, in order)."""
    import json

    manifest = json.loads((artifact / "manifest.json").read_text())
    args = []
    for k, spec in enumerate(manifest["inputs"]):
        path = work / f"in{k}.npy"
        np.save(path, np.asarray(feeds[spec["name"]]).astype(spec["dtype"]).reshape(spec["shape"]))
        args += ["-i", str(path)]
    outs = [work / f"{artifact.name}-out{k}.npy" for k in range(len(manifest["outputs"]))]
    subprocess.run([str(artifact / "runner"), *args, *[a for o in outs for a in ("-o", str(o))]], check=True,
                   capture_output=True, timeout=1800)
    return [o.read_bytes() for o in outs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--before", type=Path, required=True, help="the other checkout (its toolkit/ builds the 'before')")
    ap.add_argument("--after", type=Path, default=ROOT, help="default: this checkout")
    ap.add_argument("--board", default="x86_64")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=30, help="runs per runner per round (their median is the round's)")
    args = ap.parse_args()
    print(f"after {args.after} / before {args.before}, board {args.board}, {args.threads} thread(s), "
          f"{args.rounds} rounds x {args.runs} runs (median per round, median of per-round ratios)")
    print(f"{'model':<22} {'before ms':>10} {'after ms':>10} {'after/before':>13}  outputs")
    ratios = []
    for name, path, feeds in model_cases(args.models, False):
        with tempfile.TemporaryDirectory(prefix="fxc-ab-") as tmp:
            work = Path(tmp)
            built = [build(checkout, path, work / tag, args.board, args.threads)
                     for tag, checkout in (("before", args.before), ("after", args.after))]
            same = outputs(built[0], feeds, work) == outputs(built[1], feeds, work)
            rounds = []
            for r in range(args.rounds):
                order = built if r % 2 == 0 else built[::-1]
                ms = {a: runner_bench(a, feeds, args.runs, 3, args.threads)["median_ms"] for a in order}
                rounds.append((ms[built[0]], ms[built[1]]))
        ratio = statistics.median(a / b for b, a in rounds)
        ratios.append(ratio)
        print(f"{name:<22} {statistics.median(b for b, _ in rounds):>10.3f} {statistics.median(a for _, a in rounds):>10.3f} "
              f"{ratio:>13.3f}  {'identical' if same else 'DIFFER'}", flush=True)
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"geo-mean {geo:.3f}, worst {max(ratios):.3f} over {len(ratios)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
