"""Verify a runner's outputs (on the board or here) against ONNX Runtime on the host."""
from __future__ import annotations

import io
import posixpath
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import paramiko

from ..errors import InputError, RemoteError, RunError
from .artifact import Artifact, sha256_file
from .deploy import Deployment
from .runner import DEFAULT_RUN_TIMEOUT, run_runner
from .ssh import Connection


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-4
    atol: float = 1e-5


@dataclass(frozen=True)
class OutputCheck:
    """One output against the reference: passes when |out - ref| <= atol + rtol * |ref| everywhere."""

    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    mismatched: int
    ok: bool


@dataclass(frozen=True)
class VerifyReport:
    where: str
    tolerance: Tolerance
    outputs: tuple[OutputCheck, ...]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    def table(self) -> str:
        width = max(6, *(len(o.name) for o in self.outputs))
        lines = [f"verify    against ONNX Runtime, run at {self.where} (rtol {self.tolerance.rtol:g}, "
                 f"atol {self.tolerance.atol:g})",
                 f"{'output':<{width}}  {'shape':<16}  {'max abs err':>12}  {'max rel err':>12}  result"]
        for o in self.outputs:
            shape = "x".join(map(str, o.shape)) or "scalar"
            verdict = "ok" if o.ok else f"FAIL ({o.mismatched} elements out of tolerance)"
            lines.append(f"{o.name:<{width}}  {shape:<16}  {o.max_abs:12.3e}  {o.max_rel:12.3e}  {verdict}")
        return "\n".join(lines)


def make_feeds(artifact: Artifact, inputs: Path | None) -> dict[str, np.ndarray]:
    """Feeds from an .npz (checked against the model's inputs) or the runner's deterministic inputs."""
    from ..execute import check_feeds, load_feeds, random_feeds

    manifest = artifact.manifest
    feeds = load_feeds(inputs) if inputs else random_feeds(manifest)
    arrays = check_feeds(manifest, feeds)
    return {spec["name"]: arr for spec, arr in zip(manifest["inputs"], arrays)}


def with_bound(artifact: Artifact, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`feeds` plus the inputs bound at build time (--bind), as the original model needs them."""
    from ..binding import recorded_values

    return {**feeds, **recorded_values(artifact.manifest, artifact.path)}


def model_path(artifact: Artifact, override: Path | None = None) -> Path:
    """The ONNX model to compare with: `override` as given, else the recorded path, checked by sha256."""
    if override:
        if not override.is_file():
            raise InputError(f"--model {override}: no such file")
        return override
    from .artifact import recorded_model_path

    recorded = artifact.manifest.get("model") or {}
    path = recorded_model_path(artifact.manifest, artifact.path)
    if path is None or not path.is_file():
        raise InputError(f"the model the artifact was built from ({path or 'not recorded'}) is not "
                         f"here: pass --model MODEL.onnx")
    expected = recorded.get("sha256")
    if expected and sha256_file(path) != expected:
        raise InputError(f"{path} changed since the artifact was built (sha256 differs): rebuild, or pass --model "
                         f"to compare with it anyway")
    return path


def reference_outputs(path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ONNX Runtime (CPU) on this host: the oracle."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise InputError("verify needs onnxruntime on this machine: pip install onnxruntime") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(feeds))))
    except Exception as exc:  # onnxruntime raises its own exception types
        raise InputError(f"ONNX Runtime cannot run {path}: {str(exc).splitlines()[0]}") from None


def compare(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], tol: Tolerance) -> list[OutputCheck]:
    checks = []
    for name, ref in reference.items():
        if name not in outputs:
            raise RunError(f"the runner produced no output named {name!r}")
        out, ref = np.asarray(outputs[name]), np.asarray(ref)
        if out.shape != ref.shape:
            checks.append(OutputCheck(name, ref.shape, float("inf"), float("inf"), int(ref.size), False))
            continue
        if ref.dtype.kind in "fc":
            a, b = out.astype(np.float64), ref.astype(np.float64)
            both_nan = np.isnan(a) & np.isnan(b)
            diff = np.where(both_nan, 0.0, np.abs(a - b))
            diff = np.where(np.isnan(diff), np.inf, diff)
            bad = diff > tol.atol + tol.rtol * np.abs(np.nan_to_num(b))
            scale = np.abs(b)
            rel = np.where(scale > tol.atol, diff / np.where(scale > tol.atol, scale, 1.0), 0.0)
        else:
            diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
            bad = out != ref
            rel = np.zeros_like(diff)
        checks.append(OutputCheck(name, ref.shape, float(diff.max(initial=0.0)), float(rel.max(initial=0.0)),
                                  int(bad.sum()), not bool(bad.any())))
    return checks


def run_remote(conn: Connection, deployment: Deployment, artifact: Artifact, feeds: Mapping[str, np.ndarray],
               timeout: float = DEFAULT_RUN_TIMEOUT, threads: int | None = None) -> dict[str, np.ndarray]:
    """Upload feeds, run the runner on the board, download its outputs; the scratch directory is removed."""
    scratch = posixpath.join(deployment.base_dir, f".run-{secrets.token_hex(4)}")
    specs = artifact.manifest["inputs"], artifact.manifest["outputs"]
    args: list[str] = []
    try:
        conn.run(["mkdir", "-p", "--", scratch])
        sftp = conn.sftp()
        for i, spec in enumerate(specs[0]):
            path = posixpath.join(scratch, f"in{i}.npy")
            buffer = io.BytesIO()
            np.save(buffer, feeds[spec["name"]], allow_pickle=False)
            sftp.putfo(io.BytesIO(buffer.getvalue()), path)
            args += ["-i", path]
        for i in range(len(specs[1])):
            args += ["-o", posixpath.join(scratch, f"out{i}.npy")]
        if threads is not None:
            args += ["--threads", str(threads)]
        run_runner(conn, deployment, artifact, args, timeout=timeout)
        outputs = {}
        for i, spec in enumerate(specs[1]):
            buffer = io.BytesIO()
            sftp.getfo(posixpath.join(scratch, f"out{i}.npy"), buffer)
            buffer.seek(0)
            outputs[spec["name"]] = np.load(buffer, allow_pickle=False)
        return outputs
    except (OSError, EOFError, paramiko.SSHException, ValueError) as exc:
        if not conn.alive:
            raise conn.lost("verifying") from None
        raise RemoteError(f"moving inputs/outputs to or from {conn.label} failed: {exc}") from None
    finally:
        if conn.alive:
            try:
                conn.run(["rm", "-rf", "--", scratch])
            except RemoteError:
                pass


def run_local(artifact: Artifact, feeds: Mapping[str, np.ndarray], timeout: float = DEFAULT_RUN_TIMEOUT,
              threads: int | None = None) -> dict:
    from ..execute import run_artifact

    return run_artifact(artifact.path, feeds=feeds, timeout=timeout, threads=threads).outputs
