"""`build --precision fp16 --accuracy [DATA]`: the float16 build against the float32 build of the same model on the
same board, over sample inputs (foreign boards under qemu-user), as `quantize` reports its int8 build (docs/FP16.md)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..build import BuildOptions, BuildResult, build_model
from ..errors import InputError
from ..run.execute import random_feeds, run_artifact
from .accuracy import OutputAccuracy, output_accuracy
from .data import load_samples

SAMPLES = 4
"""Random samples when --accuracy names no data (run/execute.random_feeds, seeds 1..N)."""


@dataclass(frozen=True)
class HalfAccuracy:
    """One output: quantize's figures of the fp16 values against the fp32 build's, and the worst error relative to
    the largest fp32 value (max |fp16 - fp32| / max |fp32|)."""

    accuracy: OutputAccuracy
    rel_err: float

    def as_dict(self) -> dict:
        return {**self.accuracy.as_dict(), "rel_err": self.rel_err}


@dataclass(frozen=True)
class HalfReport:
    board: str
    samples: int
    source: str
    reference: str
    """The fp32 artifact compared against."""
    outputs: tuple[HalfAccuracy, ...]

    def as_dict(self) -> dict:
        return {"board": self.board, "samples": self.samples, "source": self.source, "reference": self.reference,
                "outputs": [o.as_dict() for o in self.outputs]}

    def table(self) -> str:
        lines = [f"accuracy on {self.board}: fp16 build against the fp32 build ({self.reference}), {self.samples} samples "
                 f"({self.source})",
                 f"  {'output':<28} {'shape':<14} {'max abs err':>12} {'rel err':>9} {'mean abs err':>13} {'cosine':>9} "
                 f"{'top-1':>7} {'top-5':>7}"]
        for o in self.outputs:
            a = o.accuracy
            pct = ["-" if v is None else f"{100 * v:.1f}%" for v in (a.top1, a.top5)]
            lines.append(f"  {a.name[-28:]:<28} {'x'.join(map(str, a.shape)):<14} {a.max_abs_err:>12.4g} {o.rel_err:>9.3g} "
                         f"{a.mean_abs_err:>13.4g} {a.cosine:>9.6f} {pct[0]:>7} {pct[1]:>7}")
        return "\n".join(lines)


@dataclass(frozen=True)
class AccuracyInputs:
    """What --accuracy runs, checked before the build: the samples of DATA, or `count` random ones (made once the
    artifact's manifest gives the inputs)."""

    count: int
    samples: tuple[dict, ...] = ()
    source: str = "random inputs: floats in [-1, 1), integers in [0, 10)"

    def feeds(self, artifact: Path) -> list[dict]:
        from ..artifact import read_manifest

        if self.samples:
            return list(self.samples)
        manifest = read_manifest(artifact)
        return [random_feeds(manifest, seed) for seed in range(1, self.count + 1)]


def accuracy_inputs(model_path: Path, data: str | None, count: int = SAMPLES) -> AccuracyInputs:
    """--accuracy [DATA] and --accuracy-samples N checked (one InputError line) before anything is built."""
    from ..frontend.importer import load_model

    if count < 1:
        raise InputError(f"--accuracy-samples {count}: give 1 or more samples")
    if data:
        samples = load_samples(data, load_model(Path(model_path)), "--accuracy")
        return AccuracyInputs(len(samples.feeds), tuple(samples.feeds), samples.source)
    return AccuracyInputs(count)


def half_accuracy(model_path: Path, half: BuildResult, options: BuildOptions, inputs: AccuracyInputs) -> HalfReport:
    """Build the fp32 reference next to the fp16 artifact (`<artifact>.fp32`: neither recorded as the last build nor
    given a profile runner), run both on the samples, compare."""
    feeds = inputs.feeds(half.artifact)
    reference = build_model(model_path, replace(options, precision="fp32", out_dir=Path(f"{half.artifact}.fp32"),
                                                progress=None, record_last=False, profile_runner=False))
    ref = [run_artifact(reference.artifact, f).outputs for f in feeds]
    got = [run_artifact(half.artifact, f).outputs for f in feeds]
    outputs = []
    for name in ref[0]:
        r, g = [x[name] for x in ref], [x[name] for x in got]
        if np.dtype(r[0].dtype).kind != "f":
            continue
        top = max(float(np.max(np.abs(x))) if x.size else 0.0 for x in r)
        acc = output_accuracy(name, r, g)
        outputs.append(HalfAccuracy(acc, acc.max_abs_err / top if top else 0.0))
    return HalfReport(half.manifest.board, len(feeds), inputs.source, str(reference.artifact), tuple(outputs))
