"""The host oracle: ONNX Runtime (single thread), with onnx.reference as the fallback for what it cannot load."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

ORT_STATUS = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
"""The status prefix of ONNX Runtime's messages ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ")."""


def reason(exc: BaseException) -> str:
    """An oracle's error on one line: every line of its message joined (ONNX Runtime puts the details, such as
    the indices of a wrong dimension, on the lines after the first), without ORT's status prefix or a stack trace."""
    text = str(exc).split("Stacktrace:")[0]
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return ORT_STATUS.sub("", line) or type(exc).__name__


def ort_session(model_path: str | Path, threads: int = 1):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def reference_outputs(model_path: str | Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    try:
        session = ort_session(model_path)
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds)))
    except Exception:
        import onnx
        from onnx.reference import ReferenceEvaluator

        from .cast_rules import REFERENCE_OPS

        model = onnx.load(str(model_path))
        names = [o.name for o in model.graph.output]
        return dict(zip(names, ReferenceEvaluator(model, new_ops=REFERENCE_OPS).run(None, feeds)))


def compare(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """name -> (max absolute error, max relative error against the largest reference magnitude)."""
    errors = {}
    for name, ref in expected.items():
        got = np.asarray(actual[name])
        ref = np.asarray(ref)
        if got.shape != ref.shape:
            errors[name] = (float("inf"), float("inf"))
            continue
        if ref.dtype.kind in "fc":
            diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
            abs_err = float(np.nanmax(diff)) if diff.size else 0.0
            scale = float(np.max(np.abs(ref))) if ref.size else 0.0
            errors[name] = (abs_err, abs_err / scale if scale else abs_err)
        else:
            mismatch = float(np.sum(got != ref))
            errors[name] = (mismatch, mismatch / max(ref.size, 1))
    return errors


def median_latency_ms(session, feeds: dict[str, np.ndarray], runs: int = 50, warmup: int = 5) -> float:
    import time

    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))
