"""Accuracy of the int8 build against the float build, per output over the evaluation samples."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_CLASSES = 2


@dataclass(frozen=True)
class OutputAccuracy:
    """One output over all samples: errors of the int8 values against the float values.

    cosine: the mean over samples of the cosine similarity of the flattened outputs (1.0 for two
    zero vectors). top1/top5: for classifier-shaped outputs ([C] or [B, C], C >= 2 floats), the
    fraction of rows whose int8 argmax is the float argmax / whose float argmax is among the int8
    top five (None otherwise; top-5 needs C > 5)."""

    name: str
    shape: tuple[int, ...]
    max_abs_err: float
    mean_abs_err: float
    cosine: float
    top1: float | None
    top5: float | None

    def as_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "max_abs_err": self.max_abs_err, "mean_abs_err": self.mean_abs_err,
                "cosine": self.cosine, "top1_agreement": self.top1, "top5_agreement": self.top5}


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def classifier_rows(shape: tuple[int, ...], dtype: np.dtype) -> bool:
    """[C] or [B, C] floats with C >= 2: one class-score row per batch item."""
    return np.dtype(dtype).kind == "f" and len(shape) in (1, 2) and shape[-1] >= MIN_CLASSES


def top_k_agreement(reference: list[np.ndarray], test: list[np.ndarray], k: int) -> float:
    """Fraction of rows whose reference argmax is among the test row's k largest."""
    hits = total = 0
    for ref, got in zip(reference, test):
        ref2 = ref.reshape(-1, ref.shape[-1]).astype(np.float64)
        got2 = got.reshape(-1, got.shape[-1]).astype(np.float64)
        want = np.argmax(ref2, axis=1)
        top = np.argsort(-got2, axis=1, kind="stable")[:, :k]
        hits += int(np.sum(np.any(top == want[:, None], axis=1)))
        total += ref2.shape[0]
    return hits / total if total else 0.0


def output_accuracy(name: str, reference: list[np.ndarray], test: list[np.ndarray]) -> OutputAccuracy:
    """`reference` (float build) and `test` (int8 build): one array per sample, same shapes."""
    diffs = [np.abs(t.astype(np.float64) - r.astype(np.float64)).ravel() for r, t in zip(reference, test)]
    flat = np.concatenate(diffs) if diffs else np.zeros(0)
    shape = tuple(reference[0].shape)
    classifier = classifier_rows(shape, reference[0].dtype)
    return OutputAccuracy(
        name, shape,
        max_abs_err=float(flat.max()) if flat.size else 0.0,
        mean_abs_err=float(flat.mean()) if flat.size else 0.0,
        cosine=float(np.mean([cosine_similarity(r, t) for r, t in zip(reference, test)])),
        top1=top_k_agreement(reference, test, 1) if classifier else None,
        top5=top_k_agreement(reference, test, 5) if classifier and shape[-1] > 5 else None)


def accuracy(reference: list[dict[str, np.ndarray]], test: list[dict[str, np.ndarray]]) -> list[OutputAccuracy]:
    """Per output, in the reference's output order, over samples (lists of {output name: array})."""
    names = list(reference[0])
    return [output_accuracy(n, [r[n] for r in reference], [t[n] for t in test]) for n in names]
