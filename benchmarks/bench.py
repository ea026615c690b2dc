#!/usr/bin/env python3
"""Benchmark fluidml-xc against ONNX Runtime side by side at the same thread count, per --opt mode.

    python benchmarks/bench.py                          # the example models
    python benchmarks/bench.py M.onnx ...               # your models (<name>.inputs.npz beside one is its feed)
    python benchmarks/bench.py --light                  # + onnx's light model-zoo models (slow)

Table: latency ratio (ours / ORT, median after warm-up) per mode, planned arena against the lower
bound, the live peak and the no-reuse size, runner peak RSS against ORT's process RSS growth
(VmHWM/VmRSS after creating the session and one run, minus the same after importing onnxruntime, in a
fresh subprocess). A model argument that names an example (e.g. tiny_transformer) builds that example; one
that names a model of onnx's light model zoo (e.g. light_resnet50) takes it from the onnx package.

--threads 1,2: each model is built for the largest count (build --threads) and run at every count given
(runner --threads T) against ONNX Runtime with intra_op_num_threads=T; the table has one ratio column per
mode and count, and the scaling of the best mode from the smallest count to each larger one
(ms at the smallest / ms at T), ORT's scaling beside it. Default 1 (one thread, as before multi-core
execution). --single-build (with --threads 1,N): also a --threads 1 build (no tiles: the code before
multi-core execution) of the best mode, timed in the same rounds; the column `@1 / 1-thread build` is the
N-thread build run on one thread over it (median of per-round ratios).

--rounds R (for a loaded machine): every mode is built first, then R rounds each time ONNX Runtime and
every mode's runner (`--runs` runs each, order rotating per round); a ratio is the median over
rounds of that round's ratio, so load that changes between rounds cancels. Built artifacts are
deleted after each model.
"""
from __future__ import annotations

import argparse
import glob
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from fluidml_xc.reference import median_latency_ms  # noqa: E402

from fluidml_xc.progress import track  # noqa: E402
from example_models import light_model  # noqa: E402

MODES = ("plain", "greedy", "fluid")

_ORT_RSS = r"""
import json, sys
import numpy as np
feeds = dict(np.load(sys.argv[2]))
import onnxruntime as ort

def status(key):  # VmHWM (peak) / VmRSS (current) of this process in bytes
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

before, before_rss = status("VmHWM"), status("VmRSS")
o = ort.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
s.run(None, feeds)
after, after_rss = status("VmHWM"), status("VmRSS")
print(json.dumps({"before": before, "after": after, "before_rss": before_rss, "after_rss": after_rss}))
"""


def light_models() -> list[Path]:
    return sorted(light_model("*").parent.glob("*.onnx"))


def model_cases(paths: list[str], light: bool) -> list[tuple[str, Path, dict]]:
    from fluidml_xc.examples import EXAMPLES, example_feeds
    cases = []
    tmp = Path(tempfile.mkdtemp(prefix="fxc-bench-"))

    def example(name: str) -> tuple[str, Path, dict]:
        model = EXAMPLES[name]()
        path = tmp / f"{name}.onnx"
        onnx.save(model, str(path))
        return name, path, example_feeds(model)
    if not paths:
        cases += [example(name) for name in sorted(EXAMPLES)]
    for pattern in paths:
        if pattern in EXAMPLES and not Path(pattern).exists():
            cases.append(example(pattern))
            continue
        for p in sorted(glob.glob(pattern)) or [pattern]:
            path = Path(p)
            if not path.exists() and light_model(path.stem).is_file():  # a light model by name: light_resnet50[.onnx]
                path = light_model(path.stem)
            npz = path.with_name(path.stem + ".inputs.npz")
            feeds = dict(np.load(npz)) if npz.is_file() else example_feeds(onnx.load(str(path), load_external_data=False))
            cases.append((path.stem, path, feeds))
    if light:
        for path in light_models():
            cases.append((path.stem, path, example_feeds(onnx.load(str(path)))))
    return cases


def ort_latency_ms(session, feeds: dict, runs: int, warmup: int, stat: str) -> float:
    """ORT's latency over `runs` runs after `warmup`: their median, or their minimum (--stat min)."""
    import time

    if stat == "median":
        return median_latency_ms(session, feeds, runs, warmup)
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return float(min(times))


def runner_bench(artifact: Path, feeds: dict, runs: int, warmup: int, threads: int | None = None) -> dict:
    manifest = json.loads((artifact / "manifest.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for k, spec in enumerate(manifest["inputs"]):
            f = f"{tmp}/in{k}.npy"
            np.save(f, np.asarray(feeds[spec["name"]]).astype(spec["dtype"]).reshape(spec["shape"]))
            args += ["-i", f]
        extra = ["--threads", str(threads)] if threads else []
        out = subprocess.run([str(artifact / "runner"), *args, "--bench", str(runs), "--warmup", str(warmup), *extra],
                             check=True, capture_output=True, text=True, timeout=1800)
    return json.loads(out.stdout)


def ort_rss_growth(path: Path, feeds: dict) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        npz = f"{tmp}/feeds.npz"
        np.savez(npz, **feeds)
        out = subprocess.run([sys.executable, "-c", _ORT_RSS, str(path), npz], check=True, capture_output=True, text=True, timeout=1800)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    # peak growth; the resident growth where importing onnxruntime left a higher transient peak
    return max(data["after"] - data["before"], data["after_rss"] - data["before_rss"])


def main() -> int:
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.reference import ort_session

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="ONNX files or globs (default: the example models)")
    ap.add_argument("--light", action="store_true", help="also onnx's light models (AlexNet, DenseNet-121, ...)")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--board", default=None)
    ap.add_argument("--costs", default="analytic", choices=("analytic", "measure"))
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds of ORT and every mode (median of per-round ratios)")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="per round: the median of the runs, or their minimum (a machine shared with other work)")
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated (e.g. 1,2): ours and ORT's intra_op_num_threads")
    ap.add_argument("--single-build", action="store_true",
                    help="with --threads 1,N: also time a --threads 1 build of the best mode (the code before multi-core "
                         "execution) against the N-thread build run on 1 thread")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    counts = sorted({int(t) for t in args.threads.split(",") if t.strip()})
    rows = []
    work = Path(tempfile.mkdtemp(prefix="fxc-bench-build-"))
    for name, path, feeds in track(model_cases(args.models, args.light), "bench", unit="model"):
        row = {"model": name, "threads": counts}
        sessions = {}
        try:
            sessions = {t: ort_session(path, t) for t in counts}
            row["ort_rss_growth"] = ort_rss_growth(path, feeds)
        except Exception as exc:  # noqa: BLE001
            row["ort_error"] = str(exc).splitlines()[0][:80]
        built = {}
        for mode in modes:
            try:
                res = build_model(path, BuildOptions(board=args.board, out_dir=work / f"{name}-{mode}", opt=mode, costs=args.costs,
                                                     profile_runner=False, record_last=False, threads=max(counts)))
                built[mode] = res
                mem = res.manifest.memory
                row[mode] = {"arena": mem["arena_bytes"],
                             "lb": mem["lower_bound_bytes"], "peak": mem["live_peak_bytes"], "naive": mem["naive_bytes"],
                             "strategy": mem["strategy"], "build_s": res.seconds,
                             "optimizer_s": res.manifest.optimizer.get("seconds", 0.0),
                             "non_row_major": len(res.manifest.optimizer.get("non_row_major", {})),
                             "parallel_ops": len(res.manifest.parallel_ops), "rounds_ms": {t: [] for t in counts}}
            except Exception as exc:  # noqa: BLE001
                row[mode] = {"error": str(exc).splitlines()[0][:100]}
        ort_rounds = {t: [] for t in counts}
        single = None
        if args.single_build and counts[0] == 1 and len(counts) > 1 and built:
            best_mode = "fluid" if "fluid" in built else list(built)[-1]
            try:
                single = build_model(path, BuildOptions(board=args.board, out_dir=work / f"{name}-single", opt=best_mode,
                                                        costs=args.costs, profile_runner=False, record_last=False, threads=1))
                row["single_build"] = {"mode": best_mode, "rounds_ms": []}
            except Exception as exc:  # noqa: BLE001
                row["single_build"] = {"error": str(exc).splitlines()[0][:100]}
        players = [("ort", t) for t in sessions] + [(mode, t) for mode in built for t in counts] + ([("single", 1)] if single else [])
        for r in range(max(1, args.rounds)):
            for who, t in players[r % len(players):] + players[:r % len(players)] if players else []:
                try:
                    if who == "ort":
                        ort_rounds[t].append(ort_latency_ms(sessions[t], feeds, args.runs, args.warmup, args.stat))
                    elif who == "single":
                        bench = runner_bench(single.artifact, feeds, args.runs, args.warmup)
                        row["single_build"]["rounds_ms"].append(bench["median_ms" if args.stat == "median" else "min_ms"])
                    elif who in built:
                        bench = runner_bench(built[who].artifact, feeds, args.runs, args.warmup, t)
                        row[who]["rounds_ms"][t].append(bench["median_ms" if args.stat == "median" else "min_ms"])
                        row[who]["rss"] = bench["peak_rss_bytes"]
                except Exception as exc:  # noqa: BLE001
                    if who == "ort":
                        row["ort_error"], sessions = str(exc).splitlines()[0][:80], {}
                        players = [p for p in players if p[0] != "ort"]
                    else:
                        row[who] = {"error": str(exc).splitlines()[0][:100]}
                        built.pop(who)
                        players = [p for p in players if p[0] != who]
        del sessions
        if all(ort_rounds[t] for t in counts):
            row["ort_ms_at"] = {t: float(np.median(ort_rounds[t])) for t in counts}
            row["ort_ms"] = row["ort_ms_at"][counts[0]]
        for mode in built:
            rounds = row[mode]["rounds_ms"]
            row[mode]["ms_at"] = {t: float(np.median(rounds[t])) for t in counts}
            row[mode]["ms"] = row[mode]["ms_at"][counts[0]]
            row[mode]["ratio_at"] = {t: float(np.median(np.array(rounds[t]) / np.array(ort_rounds[t])))
                                     for t in counts if len(ort_rounds[t]) == len(rounds[t])}
            if counts[0] in row[mode]["ratio_at"]:
                row[mode]["ratio"] = row[mode]["ratio_at"][counts[0]]
            row[mode]["scaling_at"] = {t: row[mode]["ms_at"][counts[0]] / row[mode]["ms_at"][t] for t in counts[1:]}
        one = row.get("single_build", {})
        if one.get("rounds_ms") and one["mode"] in built and len(one["rounds_ms"]) == len(row[one["mode"]]["rounds_ms"][1]):
            one["ms"] = float(np.median(one["rounds_ms"]))
            one["ratio"] = float(np.median(np.array(row[one["mode"]]["rounds_ms"][1]) / np.array(one["rounds_ms"])))
        shutil.rmtree(work, ignore_errors=True)
        rows.append(row)
        print_row(row, modes, counts, header=len(rows) == 1)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print_summary(rows, modes, counts)
    return 0


def print_summary(rows: list[dict], modes: list[str], counts: list[int]) -> None:
    """Geo-mean ratio against ORT per mode and thread count, and of the scaling, over the models that ran."""
    cells = []
    for m in modes:
        for t in counts:
            ratios = [r[m]["ratio_at"][t] for r in rows if t in r.get(m, {}).get("ratio_at", {})]
            if ratios:
                cells.append(f"{m}/ORT@{t} {float(np.exp(np.mean(np.log(ratios)))):.3f} ({len(ratios)} models)")
        for t in counts[1:]:
            sc = [r[m]["scaling_at"][t] for r in rows if t in r.get(m, {}).get("scaling_at", {})]
            if sc:
                cells.append(f"{m} scaling {counts[0]}->{t} geo-mean {float(np.exp(np.mean(np.log(sc)))):.3f}, min {min(sc):.3f}")
    single = [r["single_build"]["ratio"] for r in rows if "ratio" in r.get("single_build", {})]
    if single:
        cells.append(f"{counts[0]} thread / 1-thread build geo-mean {float(np.exp(np.mean(np.log(single)))):.3f}, max {max(single):.3f}")
    print("geo-mean: " + "; ".join(cells), flush=True)


def print_row(row: dict, modes: list[str], counts: list[int], header: bool) -> None:
    multi = len(counts) > 1
    if header:
        cols = ["model"]
        for t in counts:
            cols += [f"ORT ms@{t}" if multi else "ORT ms"] + [f"{m}/ORT@{t}" if multi else f"{m}/ORT" for m in modes]
        cols += [f"fluid ms@{t}" for t in counts] if multi else ["fluid ms"]
        cols += [f"scale {counts[0]}->{t}" for t in counts[1:]] + [f"ORT scale {counts[0]}->{t}" for t in counts[1:]]
        cols += ["arena KiB", "/lb", "/peak", "naive KiB", "strategy", "RSS KiB", "ORT dRSS KiB", "NRM"]
        cols += ["split ops", f"@{counts[0]} / 1-thread build"] if multi else []
        print(" | ".join(cols))
        print(" | ".join("---" for _ in cols))
    best = row.get("fluid") or row.get(modes[-1], {})
    cells = [row["model"]]
    for t in counts:
        ort = row.get("ort_ms_at", {}).get(t)
        cells.append(f"{ort:.3f}" if ort else row.get("ort_error", "-"))
        for m in modes:
            r = row.get(m, {})
            ratio = r.get("ratio_at", {}).get(t)
            cells.append(f"{ratio:.2f}" if ratio is not None else (f"{r['ms_at'][t] / ort:.2f}" if "ms_at" in r and ort else r.get("error", "-")[:40]))
    if "ms" in best:
        cells += [f"{best['ms_at'][t]:.3f}" for t in counts] if multi else []
        cells += [f"{best['scaling_at'][t]:.2f}" for t in counts[1:]]
    else:
        cells += ["-"] * ((len(counts) if multi else 0) + len(counts) - 1)
    ort_at = row.get("ort_ms_at", {})
    cells += [f"{ort_at[counts[0]] / ort_at[t]:.2f}" if t in ort_at else "-" for t in counts[1:]]
    if "ms" in best:
        cells += ([] if multi else [f"{best['ms']:.3f}"]) + [f"{best['arena'] / 1024:.1f}", f"{best['arena'] / max(best['lb'], 1):.3f}",
                  f"{best['arena'] / max(best['peak'], 1):.3f}", f"{best['naive'] / 1024:.1f}", best["strategy"],
                  f"{best['rss'] / 1024:.0f}", f"{row.get('ort_rss_growth', 0) / 1024:.0f}", str(best["non_row_major"])]
        one = row.get("single_build", {})
        cells += [str(best["parallel_ops"]), f"{one['ratio']:.3f}" if "ratio" in one else one.get("error", "-")[:40]] if multi else []
    print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    sys.exit(main())
