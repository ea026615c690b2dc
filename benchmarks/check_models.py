"""Developer check: models against a reference output on several boards.

    python benchmarks/check_models.py --boards x86_64,rpi4,rpi3          # the example models
    python benchmarks/check_models.py M.onnx ... --boards x86_64,rpi4,rpi3

Without models: the repository's example models (fluidml_xc/examples.py) on their `example_feeds`, the
reference from ONNX Runtime. For each model M.onnx given, it reads M.inputs.npz and M.ref.npz beside it
when they are there (else: `example_feeds` and ONNX Runtime). Builds for each board, runs (foreign
boards under qemu-user), and prints the max relative error against the reference.
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
    parser.add_argument("models", nargs="*", type=Path, help="ONNX models (default: the example models)")
    parser.add_argument("--boards", default="x86_64,rpi4,rpi3")
    parser.add_argument("--opt", default="fluid")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    print(f"{'model':<14} {'board':<8} {'max rel err':>12} {'build s':>8} {'run s':>7}  status")
    boards = args.boards.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        models = args.models or examples(Path(tmp))
        with progress_bar(len(models) * len(boards), "check", unit="build") as bar:
            failures = check(models, boards, args, Path(tmp), bar)
    return 1 if failures else 0


def examples(folder: Path) -> list[Path]:
    import onnx
    from fluidml_xc.examples import EXAMPLES

    paths = []
    for name in sorted(EXAMPLES):
        paths.append(folder / f"{name}.onnx")
        onnx.save(EXAMPLES[name](), str(paths[-1]))
    return paths


def feeds_and_reference(model: Path) -> tuple[dict, dict]:
    """M.inputs.npz and M.ref.npz beside MODEL, or example feeds and ONNX Runtime's outputs."""
    inputs, ref = model.with_suffix(".inputs.npz"), model.with_suffix(".ref.npz")
    if inputs.is_file() and ref.is_file():
        return dict(np.load(inputs)), dict(np.load(ref))
    import onnx
    import onnxruntime as ort
    from fluidml_xc.examples import example_feeds

    feeds = example_feeds(onnx.load(str(model)))
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return feeds, dict(zip(names, session.run(None, feeds)))


def check(models: list[Path], boards: list[str], args, tmp: Path, bar) -> int:
    failures = 0
    for model in models:
        feeds, ref = feeds_and_reference(model)
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
    return failures


if __name__ == "__main__":
    sys.exit(main())
