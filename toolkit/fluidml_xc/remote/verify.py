"""Verify a runner's outputs (on the board or here) against an oracle on the host: ONNX Runtime, or onnx.reference
for quantized models."""
from __future__ import annotations

import io
import posixpath
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
import onnx.numpy_helper
import paramiko

from ..errors import InputError, RemoteError, RunError
from ..ir import is_onnx_domain
from ..artifact import sha256_file
from ..strings import as_text
from ..frontend.zipmap import labels_of
from ..reference import reason
from .artifact import Artifact
from .deploy import Deployment
from .runner import DEFAULT_RUN_TIMEOUT, run_runner, upload_feeds
from .ssh import Connection


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-4
    atol: float = 1e-5


@dataclass(frozen=True)
class OutputCheck:
    """One output against the reference: passes when |out - ref| <= ALLOWED everywhere (`compare` decides ALLOWED:
    atol + rtol * |ref| for floats, plus the quantization step of an output a Q/DQ node writes; the step alone for
    integers). WORST: the largest |out - ref| / ALLOWED over the elements (ok when <= 1)."""

    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    mismatched: int
    ok: bool
    allowed: str = ""
    worst: float = 0.0
    got_shape: tuple[int, ...] | None = None
    """The output's shape when it differs from the reference's `shape` (then nothing else is compared)."""

    @property
    def verdict(self) -> str:
        if self.got_shape is not None:
            return f"FAIL (shape {_shape_text(self.got_shape)}, expected {_shape_text(self.shape)})"
        return "ok" if self.ok else f"FAIL ({self.mismatched} elements out of tolerance)"

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "max_abs_err": _finite(self.max_abs),
                "max_rel_err": _finite(self.max_rel), "allowed": self.allowed, "worst_over_allowed": _finite(self.worst),
                "mismatched": self.mismatched, "ok": self.ok,
                **({"got_shape": list(self.got_shape)} if self.got_shape is not None else {})}


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _finite(value: float) -> float | str:
    return value if np.isfinite(value) else str(value)


@dataclass(frozen=True)
class VerifyReport:
    where: str
    tolerance: Tolerance
    outputs: tuple[OutputCheck, ...]
    oracle: str = "ort"
    steps: float = 0.0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    def table(self) -> str:
        width = max(6, *(len(o.name) for o in self.outputs))
        allowed = max(14, *(len(o.allowed) for o in self.outputs))
        lines = [f"verify    against {ORACLE_LABELS[self.oracle]}, run at {self.where}",
                 f"criterion every element |out - ref| <= allowed (rtol {self.tolerance.rtol:g}, atol "
                 f"{self.tolerance.atol:g}" + (f", {self.steps:g} quantization step(s) for outputs a "
                                              f"QuantizeLinear/DequantizeLinear writes" if self.steps else "")
                 + "); rel err over elements with |ref| > atol",
                 f"{'output':<{width}}  {'shape':<16}  {'max abs err':>12}  {'max rel err':>12}  "
                 f"{'allowed':<{allowed}}  {'worst/allowed':>13}  result"]
        for o in self.outputs:
            lines.append(f"{o.name:<{width}}  {_shape_text(o.shape):<16}  {o.max_abs:12.3e}  {o.max_rel:12.3e}  "
                         f"{o.allowed:<{allowed}}  {o.worst:13.3g}  {o.verdict}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"where": self.where, "oracle": self.oracle, "rtol": self.tolerance.rtol, "atol": self.tolerance.atol,
                "quant_steps": self.steps, "ok": self.ok, "outputs": [o.to_dict() for o in self.outputs]}

    @classmethod
    def of(cls, where: str, tolerance: Tolerance, outputs: Mapping[str, np.ndarray], reference: Reference) -> "VerifyReport":
        checks = tuple(compare(outputs, reference, tolerance))
        return cls(where, tolerance, checks, reference.oracle, reference.quant_steps if reference.steps else 0.0)

    def failure(self) -> str:
        failed = [o for o in self.outputs if not o.ok]
        shaped = [o for o in failed if o.got_shape is not None]
        if shaped:
            o = shaped[0]
            return (f"{len(failed)} of {len(self.outputs)} outputs differ from {ORACLE_LABELS[self.oracle]}: {o.name!r} has "
                    f"shape {_shape_text(o.got_shape)} where the reference has {_shape_text(o.shape)}")
        worst = max(failed, key=lambda o: o.max_abs)
        return (f"{len(failed)} of {len(self.outputs)} outputs differ from {ORACLE_LABELS[self.oracle]} beyond "
                f"tolerance (worst: {worst.name!r}, max abs err {worst.max_abs:.3e}, allowed {worst.allowed})")


def make_feeds(artifact: Artifact, inputs: Path | None) -> dict[str, np.ndarray]:
    """Feeds from an .npz (checked against the model's inputs) or the runner's deterministic inputs."""
    from ..run.execute import check_feeds, load_feeds, random_feeds

    manifest = artifact.manifest
    feeds = load_feeds(inputs) if inputs else random_feeds(manifest)
    arrays = check_feeds(manifest, feeds)
    return {spec.name: as_text(arr) if arr.dtype.kind == "S" else arr for spec, arr in zip(manifest.inputs, arrays)}


def with_bound(artifact: Artifact, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`feeds` plus the inputs bound at build time (--bind), as the original model needs them."""
    from ..frontend.binding import recorded_values

    return {**feeds, **recorded_values(artifact.manifest.bound, artifact.path)}


def model_path(artifact: Artifact, override: Path | None = None) -> Path:
    """The ONNX model to compare with: `override` as given, else the recorded path, checked by sha256."""
    if override:
        if not override.is_file():
            raise InputError(f"--model {override}: no such file")
        return override
    path = artifact.manifest.model_path(artifact.path)
    if path is None or not path.is_file():
        raise InputError(f"the model the artifact was built from ({path or 'not recorded'}) is not "
                         f"here: pass --model MODEL.onnx")
    expected = artifact.manifest.model.sha256
    if expected and sha256_file(path) != expected:
        raise InputError(f"{path} changed since the artifact was built (sha256 differs): rebuild, or pass --model "
                         f"to compare with it anyway")
    return path


# ops whose integer arithmetic ONNX Runtime's fused CPU kernels do not follow exactly (on x86-64 without VNNI its
# u8 x s8 kernels saturate pair sums): their models are checked against the spec's arithmetic
QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                           "QLinearMatMul", "ConvInteger", "MatMulInteger"})
ORACLE_LABELS = {"ort": "ONNX Runtime", "spec": "onnx.reference (the ONNX spec's arithmetic)"}


@dataclass(frozen=True)
class Reference:
    """The oracle's outputs, which oracle gave them, and per output the quantization step it may differ by
    (`quant_steps` steps of that output's quantizer)."""

    outputs: dict[str, np.ndarray]
    oracle: str = "ort"
    steps: dict[str, float] = field(default_factory=dict)
    quant_steps: float = 0.0

    @property
    def label(self) -> str:
        return ORACLE_LABELS[self.oracle]


def choose_oracle(model: onnx.ModelProto, requested: str = "auto") -> str:
    """`requested`, or for "auto": the spec's arithmetic for models with quantized ops, else ONNX Runtime."""
    if requested != "auto":
        return requested
    return "spec" if any(n.op_type in QUANTIZED_OPS and is_onnx_domain(n.domain) for n in model.graph.node) else "ort"


def quantization_steps(model: onnx.ModelProto, quant_steps: float) -> dict[str, float]:
    """Graph outputs that a QuantizeLinear or DequantizeLinear writes: `quant_steps` of the output's step
    (1 for the integers QuantizeLinear writes, the largest constant scale for DequantizeLinear's floats)."""
    if quant_steps <= 0:
        return {}
    constants = {t.name: t for t in model.graph.initializer}
    constants.update({n.output[0]: a.t for n in model.graph.node if n.op_type == "Constant"
                      for a in n.attribute if a.name == "value"})
    producers = {o: n for n in model.graph.node for o in n.output}
    steps = {}
    for out in model.graph.output:
        node = producers.get(out.name)
        if node is None or not is_onnx_domain(node.domain):
            continue
        if node.op_type == "QuantizeLinear":
            steps[out.name] = quant_steps
        elif node.op_type == "DequantizeLinear" and len(node.input) > 1 and node.input[1] in constants:
            scale = np.abs(onnx.numpy_helper.to_array(constants[node.input[1]]).astype(np.float64))
            steps[out.name] = quant_steps * float(scale.max(initial=0.0))
    return steps


def _ort_outputs(path: Path, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    try:
        import onnxruntime as ort
    except ImportError:
        raise InputError("verify needs onnxruntime on this machine: pip install onnxruntime") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        zipmaps = {n.output[0]: labels_of(n) for n in model.graph.node if n.op_type == "ZipMap" and n.output}
        return {name: _zipmap_as_tensor(value, zipmaps.get(name, ())) for name, value in
                zip(names, session.run(names, dict(feeds)))}
    except Exception as exc:  # onnxruntime raises its own exception types
        hint = " (it has no ImageDecoder: --oracle spec compares with onnx.reference, docs/IMAGES.md)" \
            if any(n.op_type == "ImageDecoder" for n in model.graph.node) else ""
        raise InputError(f"ONNX Runtime cannot run {path}: {reason(exc)}{hint}") from None


def _zipmap_as_tensor(value, labels: tuple):
    """ONNX Runtime's ZipMap output (a list of {label: probability}, string keys sorted) as the build gives it:
    [rows, classes] float32, the columns in the ZipMap's label order."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return np.asarray([[row[label] for label in labels] if labels else list(row.values()) for row in value],
                          np.float32)
    return value


def _spec_outputs(path: Path, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnx.version_converter
    from onnx.reference import ReferenceEvaluator

    from ..cast_rules import REFERENCE_OPS

    try:
        opset = next((o.version for o in model.opset_import if is_onnx_domain(o.domain)), 19)
        if opset < 19:  # onnx.reference implements QuantizeLinear/DequantizeLinear from opset 19 on
            model = onnx.version_converter.convert_version(model, 19)
        evaluator = ReferenceEvaluator(model, new_ops=REFERENCE_OPS)
        names = [o.name for o in model.graph.output]
        return dict(zip(names, evaluator.run(None, dict(feeds))))
    except Exception as exc:  # onnx.reference and the version converter raise many types
        raise InputError(f"onnx.reference cannot run {path}: {reason(exc)}"
                         f" (pass --oracle ort to compare with ONNX Runtime)") from None


ORACLES = {"ort": _ort_outputs, "spec": _spec_outputs}


def reference_outputs(path: Path, feeds: Mapping[str, np.ndarray], oracle: str = "auto",
                      quant_steps: float = 1.0) -> Reference:
    """The oracle's outputs on this host: ONNX Runtime (CPU) for float models, onnx.reference for quantized ones
    ("auto"), or the one named."""
    try:
        model = onnx.load(str(path))
    except Exception as exc:
        raise InputError(f"{path} is not a readable ONNX model: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    chosen = choose_oracle(model, oracle)
    return Reference(ORACLES[chosen](path, model, feeds), chosen, quantization_steps(model, quant_steps), quant_steps)


def compare(outputs: Mapping[str, np.ndarray], reference: Reference, tol: Tolerance) -> list[OutputCheck]:
    """Each output against the oracle's within atol + rtol * |ref|; a quantized output also by its
    `reference.steps` allowance (rounding of the requantization multiply: one step at most for a correct build).
    Integer outputs: exact, or within that allowance. Each check records the criterion as applied (`allowed`)."""
    checks = []
    for name, ref in reference.outputs.items():
        if name not in outputs:
            raise RunError(f"the runner produced no output named {name!r}")
        out, ref = np.asarray(outputs[name]), np.asarray(ref)
        step = reference.steps.get(name, 0.0)
        if ref.dtype.kind in "OSU":
            allowed_text = "equal strings"
        elif ref.dtype.kind in "fc":
            allowed_text = f"{tol.atol:g} + {tol.rtol:g}*|ref|" + (f" + {step:.3g}" if step else "")
        else:
            allowed_text = f"{step:g}" if step else "0 (exact)"
        if out.shape != ref.shape:
            checks.append(OutputCheck(name, ref.shape, float("inf"), float("inf"), int(ref.size), False,
                                      allowed_text, float("inf"), tuple(out.shape)))
            continue
        if ref.dtype.kind in "OSU":  # strings: an element differs or not (max abs err counts differing elements)
            diff = (as_text(out).astype(object) != as_text(ref).astype(object)).astype(np.float64)
            allowed, rel = np.zeros_like(diff), np.zeros_like(diff)
        elif ref.dtype.kind in "fc":
            a, b = out.astype(np.float64), ref.astype(np.float64)
            both_nan = np.isnan(a) & np.isnan(b)
            diff = np.where(both_nan, 0.0, np.abs(a - b))
            diff = np.where(np.isnan(diff), np.inf, diff)
            allowed = tol.atol + tol.rtol * np.abs(np.nan_to_num(b)) + step
            scale = np.abs(b)
            rel = np.where(scale > tol.atol, diff / np.where(scale > tol.atol, scale, 1.0), 0.0)
        else:
            diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
            allowed = np.full(diff.shape, step)
            rel = np.zeros_like(diff)
        bad = diff > allowed
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diff == 0, 0.0, diff / np.where(allowed > 0, allowed, 0.0))
        checks.append(OutputCheck(name, ref.shape, float(diff.max(initial=0.0)), float(rel.max(initial=0.0)),
                                  int(bad.sum()), not bool(bad.any()), allowed_text, float(ratio.max(initial=0.0))))
    return checks


def run_remote(conn: Connection, deployment: Deployment, artifact: Artifact, feeds: Mapping[str, np.ndarray],
               timeout: float = DEFAULT_RUN_TIMEOUT, threads: int | None = None) -> dict[str, np.ndarray]:
    """Upload feeds, run the runner on the board, download its outputs; the scratch directory is removed."""
    scratch = posixpath.join(deployment.base_dir, f".run-{secrets.token_hex(4)}")
    specs = artifact.manifest.inputs, artifact.manifest.outputs
    args: list[str] = []
    try:
        args += upload_feeds(conn, scratch, specs[0], feeds)
        sftp = conn.sftp()
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
            outputs[spec.name] = np.load(buffer, allow_pickle=False)
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
    from ..run.execute import run_artifact

    return run_artifact(artifact.path, feeds=feeds, timeout=timeout, threads=threads).outputs
