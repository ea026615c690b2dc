"""`fluidml-xc demo`: build a bundled example for this machine and an emulated aarch64 board, run, compare, time."""
from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from ..target.boards import default_board_name, get_board
from ..build import BuildOptions, build_model
from ..examples import EXAMPLES, example_feeds
from ..run.execute import run_artifact
from ..reference import compare, median_latency_ms, ort_session, reference_outputs

NAME = "demo"
HELP = "build a bundled example model for this machine and an emulated aarch64 board, run both, compare with ONNX Runtime"
ORDER = 5


def add_arguments(parser) -> None:
    parser.add_argument("--model", choices=sorted(EXAMPLES), default="tiny_cnn")
    parser.add_argument("--boards", default=f"{default_board_name()},qemu-aarch64", help="comma-separated boards")
    parser.add_argument("--workdir", type=Path, default=Path("build") / "demo")
    parser.add_argument("--runs", type=int, default=50)


def main(args) -> int:
    args.workdir.mkdir(parents=True, exist_ok=True)
    model = EXAMPLES[args.model]()
    model_path = args.workdir / f"{args.model}.onnx"
    onnx.save(model, str(model_path))
    feeds = example_feeds(model)
    expected = reference_outputs(model_path, feeds)
    ort_ms = median_latency_ms(ort_session(model_path), feeds, runs=args.runs)
    print(f"model {args.model}: {model_path}")
    header = f"{'board':<14} {'max abs err':>12} {'max rel err':>12} {'median ms':>10} {'vs ORT':>8} {'arena B':>9} {'text B':>9} {'rodata B':>10}"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for board in [b.strip() for b in args.boards.split(",") if b.strip()]:
        emulator = get_board(board).target.emulator
        if emulator and not shutil.which(emulator):
            print(f"{board:<14} skipped: {emulator} not found: install the Debian package qemu-user-static (apt-get install qemu-user-static)")
            continue
        result = build_model(model_path, BuildOptions(board=board, out_dir=args.workdir / f"{args.model}-{board}", record_last=False))
        outputs = run_artifact(result.artifact, feeds).outputs
        errors = compare(outputs, expected)
        abs_err = max(e[0] for e in errors.values())
        rel_err = max(e[1] for e in errors.values())
        worst = max(worst, rel_err)
        bench = run_artifact(result.artifact, feeds, bench=args.runs).bench
        m = result.manifest
        emulated = bool(m.emulator)
        ratio = "qemu" if emulated else f"{bench['median_ms'] / ort_ms:.2f}x"
        print(f"{board:<14} {abs_err:>12.2e} {rel_err:>12.2e} {bench['median_ms']:>10.3f} {ratio:>8} "
              f"{m.memory['arena_bytes']:>9,} {m.footprint['text']:>9,} {m.footprint['rodata']:>10,}")
    print(f"{'onnxruntime':<14} {'(oracle)':>12} {'':>12} {ort_ms:>10.3f} {'1.00x':>8}   single thread, same inputs")
    print("emulated boards run under qemu-user: their outputs are checked, their times are not board times.")
    if worst > 1e-4:
        print(f"FAILED: outputs differ from ONNX Runtime (max relative error {worst:.2e})")
        return 6
    print("OK: every board matches ONNX Runtime within 1e-4 relative error")
    return 0
