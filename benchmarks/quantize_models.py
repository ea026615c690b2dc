#!/usr/bin/env python3
"""`fluidml-xc quantize` with generated calibration data: accuracy of the int8 builds against the float
builds, int8/float latency at one thread, the same int8 models under ONNX Runtime side by side
(docs/QUANTIZE.md, "Measured").

    python benchmarks/quantize_models.py [--workdir build/quantize-bench] [--rounds 7]
    python benchmarks/quantize_models.py --models DIR     # DIR holding mobilenetv2.onnx and bert_tiny.onnx

Without --models: the repository's example models (fluidml_xc/examples.py), tiny_cnn (QDQ per-channel,
QOperator) and tiny_transformer (dynamic, QDQ), 40 samples each from `example_feeds` (seeds 0-39).
With --models DIR (your own exports of MobileNetV2 and a 2-layer BERT, as docs/QUANTIZE.md measured):
MobileNetV2 40 smooth random images [1,3,224,224] (8x8 blocks of normal noise plus fine noise),
bert_tiny 40 sequences of 16-128 random token ids (CLS first, SEP last, the rest masked). One
generator, seed 0.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def mobilenet_samples(path: Path, rng: np.random.Generator, count: int = 40) -> Path:
    imgs = []
    for _ in range(count):
        up = np.kron(rng.standard_normal((1, 3, 28, 28)).astype(np.float32), np.ones((1, 1, 8, 8), np.float32))
        imgs.append((up + 0.3 * rng.standard_normal(up.shape)).astype(np.float32))
    np.savez(path, input=np.stack(imgs))
    return path


def bert_samples(path: Path, rng: np.random.Generator, count: int = 40, seq: int = 128) -> Path:
    ids, mask = np.zeros((count, 1, seq), np.int64), np.zeros((count, 1, seq), np.int64)
    for i in range(count):
        n = int(rng.integers(16, seq + 1))
        ids[i, 0, :n] = rng.integers(1000, 30000, n)
        ids[i, 0, 0], ids[i, 0, n - 1] = 101, 102
        mask[i, 0, :n] = 1
    np.savez(path, input_ids=ids, attention_mask=mask)
    return path


def example_cases(work: Path) -> list[tuple[Path, Path, str, list[str]]]:
    """The example models written into WORK with 40 samples each (a leading sample axis)."""
    import onnx

    sys.path.insert(0, str(ROOT / "toolkit"))
    from fluidml_xc.examples import EXAMPLES, example_feeds

    cases = []
    for name, variants in (("tiny_cnn", [("int8", ["--per-channel", "--explain", "8"]),
                                         ("qop", ["--per-channel", "--format", "qoperator"])]),
                           ("tiny_transformer", [("int8", ["--dynamic", "--explain", "8"]),
                                                 ("qdq", ["--per-channel", "--explain", "8"])])):
        model = EXAMPLES[name]()
        path = work / f"{name}.onnx"
        onnx.save(model, str(path))
        feeds = [example_feeds(model, seed) for seed in range(40)]
        data = work / f"{name}_samples.npz"
        np.savez(data, **{key: np.stack([f[key] for f in feeds]) for key in feeds[0]})
        cases += [(path, data, f"{name}.{suffix}.onnx", extra) for suffix, extra in variants]
    return cases


def exported_cases(models: Path, work: Path) -> list[tuple[Path, Path, str, list[str]]]:
    """mobilenetv2.onnx and bert_tiny.onnx from MODELS with generated samples."""
    rng = np.random.default_rng(0)
    mnv2 = mobilenet_samples(work / "mobilenetv2_samples.npz", rng)
    bert = bert_samples(work / "bert_tiny_samples.npz", rng)
    return [
        (models / "mobilenetv2.onnx", mnv2, "mobilenetv2.int8.onnx", ["--per-channel", "--explain", "8"]),
        (models / "mobilenetv2.onnx", mnv2, "mobilenetv2.qop.onnx", ["--per-channel", "--format", "qoperator"]),
        (models / "bert_tiny.onnx", bert, "bert_tiny.int8.onnx", ["--dynamic", "--explain", "8"]),
        (models / "bert_tiny.onnx", bert, "bert_tiny.qdq.onnx", ["--per-channel", "--explain", "8"]),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, help="a folder with mobilenetv2.onnx and bert_tiny.onnx "
                                                     "(default: the repository's example models)")
    parser.add_argument("--workdir", type=Path, default=Path("build") / "quantize-bench")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    timing = ["--runs", str(args.runs), "--rounds", str(args.rounds), "--threads", "1", "--build-dir", str(work), "--force"]
    cases = exported_cases(args.models, work) if args.models else example_cases(work)
    for model, data, out, extra in cases:
        command = [sys.executable, "-m", "fluidml_xc.cli", "quantize", str(model), "--calibration", str(data),
                   "-o", str(work / out), *extra, *timing]
        print("$ fluidml-xc " + " ".join(command[3:]), flush=True)
        proc = subprocess.run(command)
        if proc.returncode:
            return proc.returncode
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
