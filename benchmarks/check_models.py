"""Developer check: models with an input feed and a reference output (e.g. ../shared/models) on several boards.

    python benchmarks/check_models.py ../shared/models/*.onnx --boards x86_64,rpi4,rpi3

For each model M.onnx it reads M.inputs.npz and M.ref.npz beside it, builds for each board, runs
(foreign boards under qemu-user), and prints the max relative error against the reference.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))

from fluidml_xc.build import BuildOptions, build_model  # noqa: E402
from fluidml_xc.run.execute import run_artifact  # noqa: E402
from fluidml_xc.progress import progress_bar  # noqa: E402
from fluidml_xc.reference import compare  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--boards", default="x86_64,rpi4,rpi3")
    parser.add_argument("--opt", default="fluid")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    failures = 0
    print(f"{'model':<14} {'board':<8} {'max rel err':>12} {'build s':>8} {'run s':>7}  status")
    boards = args.boards.split(",")
    with tempfile.TemporaryDirectory() as tmp, progress_bar(len(args.models) * len(boards), "check", unit="build") as bar:
        for model in args.models:
            feeds = dict(np.load(model.with_suffix(".inputs.npz")))
            ref = dict(np.load(model.with_suffix(".ref.npz")))
            for board in boards:
                bar.set_postfix_str(f"{model.stem} {board}")
                started = time.perf_counter()
                result = build_model(model, BuildOptions(board=board, out_dir=Path(tmp) / f"{model.stem}-{board}", opt=args.opt, record_last=False))
                built = time.perf_counter()
                outputs = run_artifact(result.artifact, feeds, timeout=3600).outputs
                ran = time.perf_counter()
                rel = max(err[1] for err in compare(outputs, ref).values())
                ok = rel <= args.tolerance
                failures += not ok
                bar.write(f"{model.stem:<14} {board:<8} {rel:>12.2e} {built - started:>8.1f} {ran - built:>7.1f}  "
                          f"{'ok' if ok else 'FAIL'}", file=sys.stdout)
                sys.stdout.flush()
                bar.update(1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
