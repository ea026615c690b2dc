#!/usr/bin/env python3
"""`fluidml-xc quantize` on MobileNetV2 and bert_tiny with generated calibration data: accuracy of the
int8 builds against the float builds, int8/float latency at one thread, the same int8 models under
ONNX Runtime side by side (docs/QUANTIZE.md, "Measured").

    python benchmarks/quantize_models.py [--models ../shared/models] [--workdir build/quantize-bench] [--rounds 7]

Data: MobileNetV2 40 smooth random images [1,3,224,224] (8x8 blocks of normal noise plus fine noise,
roughly the range of mobilenetv2.inputs.npz), bert_tiny 40 sequences of 16-128 random token ids
(CLS first, SEP last, the rest masked). One generator, seed 0.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT.parent / "shared" / "models")
    parser.add_argument("--workdir", type=Path, default=Path("build") / "quantize-bench")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    mnv2 = mobilenet_samples(work / "mobilenetv2_samples.npz", rng)
    bert = bert_samples(work / "bert_tiny_samples.npz", rng)
    timing = ["--runs", str(args.runs), "--rounds", str(args.rounds), "--threads", "1", "--build-dir", str(work), "--force"]
    cases = [
        ("mobilenetv2.onnx", mnv2, "mobilenetv2.int8.onnx", ["--per-channel", "--explain", "8"]),
        ("mobilenetv2.onnx", mnv2, "mobilenetv2.qop.onnx", ["--per-channel", "--format", "qoperator"]),
        ("bert_tiny.onnx", bert, "bert_tiny.int8.onnx", ["--dynamic", "--explain", "8"]),
        ("bert_tiny.onnx", bert, "bert_tiny.qdq.onnx", ["--per-channel", "--explain", "8"]),
    ]
    for model, data, out, extra in cases:
        command = [sys.executable, "-m", "fluidml_xc.cli", "quantize", str(args.models / model), "--calibration", str(data),
                   "-o", str(work / out), *extra, *timing]
        print("$ fluidml-xc " + " ".join(command[3:]), flush=True)
        proc = subprocess.run(command)
        if proc.returncode:
            return proc.returncode
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
