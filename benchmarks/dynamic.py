"""Dynamic builds against static builds at the same size (issue #26), with ONNX Runtime beside them.

One dynamic build per model over its range; one static build per measured size; all run here, A/B in one run
(alternating rounds, the median of each runner's own bench loop per round, the least over rounds). Prints the
latency ratio dynamic / static per size, its geo-mean and worst, ORT at the same thread count, and both arenas.

    python benchmarks/dynamic.py --bert bert_tiny.onnx --mobilenet mobilenetv2.onnx [--threads 1] [--rounds 3]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
from ab_timing import alternate, summary  # noqa: E402
from dynamic_models import dynamic_sequence  # noqa: E402
from fluidml_xc.build import BuildOptions, build_model  # noqa: E402
from fluidml_xc.frontend.ranges import DimSpec, ShapeRanges  # noqa: E402
from fluidml_xc.run.execute import run_artifact  # noqa: E402


def _tests_module(name: str):
    """tests/NAME.py (tests/dynamic_models.py shares its module name with benchmarks/dynamic_models.py)."""
    spec = importlib.util.spec_from_file_location(f"tests_{name}", ROOT / "tests" / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fix_dims = _tests_module("dynamic_models").fix_dims


def _feeds(model: onnx.ModelProto, values: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [values.get(d.dim_param, d.dim_value) for d in vi.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        feeds[vi.name] = (rng.integers(0, 100, shape) if dtype.kind in "iu" else rng.standard_normal(shape)).astype(dtype)
        if "mask" in vi.name:
            feeds[vi.name] = np.ones(shape, dtype)
    return feeds


def _build(model: onnx.ModelProto, work: Path, tag: str, threads: int, ranges: ShapeRanges | None = None):
    path = work / f"{tag}.onnx"
    onnx.save(model, str(path))
    options = BuildOptions(board="x86_64", out_dir=work / tag, threads=threads, profile_runner=False, record_last=False,
                           **({"ranges": ranges} if ranges else {}))
    result = build_model(path, options)
    manifest = json.loads((result.artifact / "manifest.json").read_text())
    return result.artifact, manifest["memory"]["arena_bytes"]


def _latency(artifact: Path, feeds, bench: int, threads: int) -> float:
    result = run_artifact(artifact, feeds, bench=bench, threads=threads, timeout=900)
    return float(result.bench["median_ms"])


def _ort_ms(model: onnx.ModelProto, feeds, threads: int, runs: int) -> float:
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(5):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def compare(name: str, model: onnx.ModelProto, symbol: str, lo: int, hi: int, sizes: list[int], args, work: Path) -> list[float]:
    ranges = ShapeRanges(dims={symbol: DimSpec(lo, hi)})
    dyn, dyn_arena = _build(model, work, f"{name}_dyn", args.threads, ranges)
    static = {s: _build(fix_dims(model, {symbol: s}), work, f"{name}_{s}", args.threads) for s in sizes}
    rng = np.random.default_rng(0)
    ratios = []
    print(f"\n{name}: one build over {symbol}={lo}..{hi}; x86_64, {args.threads} thread(s)")
    print(f"{'size':>6} {'dynamic ms':>11} {'static ms':>10} {'dyn/static':>10} {'ORT ms':>8} {'dyn/ORT':>8}")
    for s in sizes:
        feeds = _feeds(model, {symbol: s}, rng)
        d, st = alternate([lambda: _latency(dyn, feeds, args.bench, args.threads),
                           lambda: _latency(static[s][0], feeds, args.bench, args.threads)], args.rounds)
        o = _ort_ms(fix_dims(model, {symbol: s}), feeds, args.threads, args.bench)
        ratios.append(d / st)
        print(f"{s:>6} {d:>11.3f} {st:>10.3f} {d / st:>10.3f} {o:>8.3f} {d / o:>8.3f}")
    print(f"dyn/static {summary(ratios)}; arena: dynamic {dyn_arena} B, static at {hi}: "
          f"{static[hi][1] if hi in static else 'not built'} B")
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bert", type=Path, help="bert_tiny.onnx (inputs [1, 128]): made dynamic over seq 8..128")
    ap.add_argument("--mobilenet", type=Path, help="mobilenetv2.onnx: made dynamic over batch 1..4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bench", type=int, default=50, help="runs per runner call")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fxc-dyn-") as tmp:
        work = Path(tmp)
        if args.bert:
            model = dynamic_sequence(onnx.load(str(args.bert)), dim=1, name="seq")
            compare("bert_tiny", model, "seq", 8, 128, [16, 32, 64, 128], args, work)
        if args.mobilenet:
            model = onnx.load(str(args.mobilenet))
            batch = model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # exported with a dynamic batch
            if not batch:  # batch 1 cannot be told apart from other 1s: name dim 0 of the inputs and outputs
                batch = "N"
                for vi in [*model.graph.input, *model.graph.output]:
                    vi.type.tensor_type.shape.dim[0].dim_param = batch
            compare("mobilenetv2", model, batch, 1, 4, [1, 2, 3, 4], args, work)


if __name__ == "__main__":
    main()
