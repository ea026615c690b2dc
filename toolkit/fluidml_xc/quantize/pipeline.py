"""`fluidml-xc quantize`: float model + samples -> int8 model (ONNX Runtime's quantizer) -> float and int8
builds for a board -> accuracy, latency and memory of both, side by side with ONNX Runtime."""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from ..errors import InputError
from .accuracy import OutputAccuracy, accuracy
from .data import Samples, load_samples, split_samples
from .explain import NodeError, explain
from .inputs import check_loads, clean, fix_to_samples, prepare
from .ortq import QuantConfig, check_not_quantized, preprocess, quantize


@dataclass(frozen=True)
class QuantizeOptions:
    model: Path
    calibration: Path
    output: Path
    config: QuantConfig = QuantConfig()
    eval: Path | None = None
    board: str | None = None
    build: bool = True
    build_dir: Path = Path("build")
    runs: int = 50
    """timed runs per round"""
    rounds: int = 3
    """interleaved timing rounds (float, int8, float, ...); the latency is the median of the rounds' medians"""
    warmup: int = 5
    explain: int = 0
    """rows of the per-node error table (0: not computed)"""
    force: bool = False
    progress: bool | None = None
    """progress lines on stderr; None: when stderr is a terminal"""
    opt: str = "fluid"
    threads: int = 1
    """threads of both builds and of ONNX Runtime (the latency comparison is at one thread by default)"""
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """--input-shape: as build's (the samples must have these shapes; without, the samples' shapes are used)"""
    bind: dict[str, str] = field(default_factory=dict)
    """--bind: as build's; the input leaves the int8 model, the samples may omit it"""


@dataclass(frozen=True)
class Figures:
    """Latency and memory of one model: our build (median over runs) and ONNX Runtime (one thread, this machine)."""

    artifact: str
    median_ms: float
    arena_bytes: int
    weights_bytes: int
    peak_rss_bytes: int
    ort_median_ms: float | None


@dataclass
class QuantizeReport:
    model: str
    output: str
    board: str
    emulated: bool
    config: dict
    calibration_samples: int
    eval_samples: int
    eval_from: str
    accuracy: list[OutputAccuracy] = field(default_factory=list)
    """int8 build against float build"""
    ort_accuracy: list[OutputAccuracy] = field(default_factory=list)
    """ONNX Runtime: int8 model against float model, same samples"""
    vs_ort_int8: dict[str, float] = field(default_factory=dict)
    """per output: max abs difference between our int8 build and ONNX Runtime on the same int8 model"""
    vs_ort_int8_unfused: dict[str, float] = field(default_factory=dict)
    """the same against ONNX Runtime without graph optimizations (the model's QDQ arithmetic as written,
    no fused QLinear* kernels with their own rounding)"""
    ort_fused_vs_unfused: dict[str, float] = field(default_factory=dict)
    """how far ONNX Runtime's fused kernels are from its own unfused run of the same model"""
    float_figures: Figures | None = None
    int8_figures: Figures | None = None
    explain: list[NodeError] = field(default_factory=list)
    threads: int = 1

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("accuracy", "ort_accuracy", "explain")}
        out["accuracy"] = [a.as_dict() for a in self.accuracy]
        out["ort_accuracy"] = [a.as_dict() for a in self.ort_accuracy]
        out["explain"] = [e.as_dict() for e in self.explain]
        if self.float_figures and self.int8_figures:
            out["latency_ratio_int8_over_float"] = self.int8_figures.median_ms / self.float_figures.median_ms
            if self.float_figures.ort_median_ms and self.int8_figures.ort_median_ms:
                out["ort_latency_ratio_int8_over_float"] = self.int8_figures.ort_median_ms / self.float_figures.ort_median_ms
        return out

    def json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, allow_nan=False, default=_json_default)

    def table(self) -> str:
        from .report import render
        return render(self)


def _json_default(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(type(value).__name__)


def _load(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise InputError(f"{path}: no such model file")
    try:
        return onnx.load(str(path))
    except Exception as exc:
        raise InputError(f"{path} is not a readable ONNX model ({type(exc).__name__}); check the file") from None


def _ort_outputs(model_path: Path, samples: Samples, threads: int, fused: bool = True,
                 label: str = "the int8 model") -> tuple[list[dict[str, np.ndarray]], object]:
    import onnxruntime as ort

    from ..reference import ort_session
    try:
        if fused:
            session = ort_session(model_path, threads)
        else:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads, opts.graph_optimization_level = threads, ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            session = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise InputError(f"ONNX Runtime cannot load {label}: {clean(str(exc))}") from None
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(names, feed))) for feed in samples.feeds], session


def _diagnose(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> None:
    """fluidml-xc's own error about a model ONNX Runtime cannot load at these shapes, if its frontend finds one
    (an If whose branch not taken does not fit them names the input to --bind)."""
    from ..frontend.importer import FrontendOptions, import_model

    try:
        import_model(model, FrontendOptions(input_shapes=dict(shapes)))
    except InputError:
        raise
    except Exception:  # the frontend's own failure is no better diagnosis than ONNX Runtime's
        return


def _max_diff(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Per output: the largest absolute difference over all samples."""
    return {name: float(max(np.max(np.abs(x[name].astype(np.float64) - y[name].astype(np.float64)), initial=0.0)
                            for x, y in zip(a, b))) for name in b[0]}


def _write_atomic(src: Path, dst: Path, force: bool) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() and not force:
        raise InputError(f"{dst} already exists; pass --force to overwrite it")
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _figures(results: dict, feeds: dict, options: QuantizeOptions, sessions: dict | None) -> dict[str, Figures]:
    """Latency of every build (and ONNX Runtime beside it): `rounds` interleaved rounds of `runs` timed runs
    each, float and int8 alternating, the median over the rounds' medians (a busy machine slows both alike)."""
    from ..run.execute import run_artifact
    from ..reference import median_latency_ms

    rounds, runs, warmup = options.rounds, options.runs, options.warmup
    if sessions is None:  # emulated: the times are qemu's, so one short round (the outputs were checked already)
        rounds, runs, warmup = 1, min(runs, 3), min(warmup, 1)
    ours: dict[str, list[float]] = {k: [] for k in results}
    ort: dict[str, list[float]] = {k: [] for k in results}
    rss: dict[str, int] = dict.fromkeys(results, 0)
    for _ in range(rounds):
        for kind, result in results.items():
            bench = run_artifact(result.artifact, feeds, bench=runs, warmup=warmup).bench
            ours[kind].append(float(bench["median_ms"]))
            rss[kind] = max(rss[kind], int(bench.get("peak_rss_bytes", 0)))
            if sessions is not None:
                ort[kind].append(median_latency_ms(sessions[kind], feeds, runs=runs, warmup=warmup))
    return {kind: Figures(str(Path(r.artifact).resolve()), float(np.median(ours[kind])), int(r.manifest.memory["arena_bytes"]),
                          r.manifest.weights_bytes, rss[kind], float(np.median(ort[kind])) if ort[kind] else None)
            for kind, r in results.items()}


def run_quantize(options: QuantizeOptions) -> QuantizeReport:
    from ..target.boards import get_board
    from ..emit.link import is_host_target

    model_path, output = Path(options.model), Path(options.output)
    if output.exists() and not options.force:
        raise InputError(f"{output} already exists; pass --force to overwrite it")
    if output.resolve() == model_path.resolve():
        raise InputError(f"-o {output} is the float model itself; write the int8 model to another file")
    if min(options.runs, options.rounds, options.threads) < 1 or options.warmup < 0 or options.explain < 0:
        raise InputError("--runs, --rounds and --threads must be >= 1, --warmup and --explain >= 0")

    board = get_board(options.board)
    model = _load(model_path)
    check_not_quantized(model, str(model_path))
    prepared = prepare(model, options.input_shapes, options.bind)
    samples = load_samples(options.calibration, prepared.model, "--calibration", prepared.bound)
    held = load_samples(options.eval, prepared.model, "--eval", prepared.bound) if options.eval else None
    if held is not None and held.shapes != samples.shapes:
        raise InputError(f"--eval samples have shapes {held.shapes}, the calibration samples {samples.shapes}; use the same shapes")
    if options.config.dynamic and held is None:  # nothing to calibrate: every sample evaluates
        calibration, evaluation, how = samples, samples, "every sample: dynamic quantization calibrates nothing"
    else:
        calibration, evaluation, how = split_samples(samples, held)
    static, changed = fix_to_samples(model, prepared, samples.shapes)
    report = QuantizeReport(str(model_path), str(output), board.name, not is_host_target(board.target), asdict(options.config),
                            len(calibration), len(evaluation), how, threads=options.threads)
    with tempfile.TemporaryDirectory(prefix="fxc-quantize-") as tmp:
        work = Path(tmp)
        float_path = model_path
        if changed:
            float_path = work / "float.onnx"
            onnx.save(static, str(float_path))
        label = f"{model_path.name} with inputs " + ", ".join(f"{k}={'x'.join(map(str, v)) or 'scalar'}" for k, v in samples.shapes.items())
        check_loads(float_path, label, lambda: _diagnose(static, samples.shapes))
        pre, quantized = work / "preprocessed.onnx", work / "int8.onnx"
        preprocess(float_path, pre)
        quantize(pre, quantized, options.config, calibration, options.progress)
        ort_float, float_session = _ort_outputs(float_path, evaluation, options.threads, label=label)
        ort_int8, int8_session = _ort_outputs(quantized, evaluation, options.threads)
        ort_int8_unfused, _ = _ort_outputs(quantized, evaluation, options.threads, fused=False)
        report.ort_fused_vs_unfused = _max_diff(ort_int8, ort_int8_unfused)
        report.ort_accuracy = accuracy(ort_float, ort_int8)
        if options.explain:
            report.explain = explain(pre, quantized, calibration, options.progress)[: options.explain]
        _write_atomic(quantized, output, options.force)
    if not options.build:
        return report
    from ..build import BuildOptions, build_model, default_out_dir
    from ..run.execute import run_artifact

    results = {}
    for kind, path, shapes, bind in (("float", model_path, samples.shapes, options.bind), ("int8", output, {}, {})):
        out_dir = Path(options.build_dir) / default_out_dir(path, board).name
        results[kind] = build_model(path, BuildOptions(board=board.name, out_dir=out_dir, input_shapes=shapes, opt=options.opt,
                                                       profile_runner=False, record_last=False, threads=options.threads,
                                                       bind=bind))
    outs = {kind: [run_artifact(r.artifact, feed).outputs for feed in evaluation.feeds] for kind, r in results.items()}
    report.accuracy = accuracy(outs["float"], outs["int8"])
    report.vs_ort_int8 = _max_diff(outs["int8"], ort_int8)
    report.vs_ort_int8_unfused = _max_diff(outs["int8"], ort_int8_unfused)
    sessions = None if report.emulated else {"float": float_session, "int8": int8_session}
    figures = _figures(results, evaluation.feeds[0], options, sessions)
    report.float_figures, report.int8_figures = figures["float"], figures["int8"]
    return report
