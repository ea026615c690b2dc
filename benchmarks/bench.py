#!/usr/bin/env python3
"""Benchmark fluidml-xc against ONNX Runtime (single thread) side by side, per --opt mode.

    python benchmarks/bench.py                          # the example models
    python benchmarks/bench.py ../shared/models/*.onnx  # with <name>.inputs.npz beside each model
    python benchmarks/bench.py --light                  # + onnx's light model-zoo models (slow)

Table: latency ratio (ours / ORT, median after warm-up) per mode, planned arena against the lower
bound, the live peak and the no-reuse size, runner peak RSS against ORT's process RSS growth
(VmHWM/VmRSS after creating the session and one run, minus the same after importing onnxruntime, in a
fresh subprocess). A model argument that names an example (e.g. tiny_transformer) builds that example.

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
    import onnx.backend.test as bt
    root = Path(bt.__file__).parent / "data" / "light"
    return sorted(root.glob("*.onnx"))


def model_cases(paths: list[str], light: bool) -> list[tuple[str, Path, dict]]:
    from fluidml_xc.examples import EXAMPLES, example_feeds
    cases = []
    tmp = Path(tempfile.mkdtemp(prefix="fxc-bench-"))
    if not paths:
        for name in sorted(EXAMPLES):
            model = EXAMPLES[name]()
            path = tmp / f"{name}.onnx"
            onnx.save(model, str(path))
            cases.append((name, path, example_feeds(model)))
    for pattern in paths:
        if pattern in EXAMPLES and not Path(pattern).exists():
            model = EXAMPLES[pattern]()
            path = tmp / f"{pattern}.onnx"
            onnx.save(model, str(path))
            cases.append((pattern, path, example_feeds(model)))
            continue
        for p in sorted(glob.glob(pattern)) or [pattern]:
            path = Path(p)
            npz = path.with_name(path.stem + ".inputs.npz")
            feeds = dict(np.load(npz)) if npz.is_file() else example_feeds(onnx.load(str(path), load_external_data=False))
            cases.append((path.stem, path, feeds))
    if light:
        for path in light_models():
            cases.append((path.stem, path, example_feeds(onnx.load(str(path)))))
    return cases


def runner_bench(artifact: Path, feeds: dict, runs: int, warmup: int) -> dict:
    manifest = json.loads((artifact / "manifest.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for k, spec in enumerate(manifest["inputs"]):
            f = f"{tmp}/in{k}.npy"
            np.save(f, np.asarray(feeds[spec["name"]]).astype(spec["dtype"]).reshape(spec["shape"]))
            args += ["-i", f]
        out = subprocess.run([str(artifact / "runner"), *args, "--bench", str(runs), "--warmup", str(warmup)],
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
    from fluidml_xc.reference import median_latency_ms, ort_session

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
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="fxc-bench-build-"))
    for name, path, feeds in model_cases(args.models, args.light):
        row = {"model": name}
        session = None
        try:
            session = ort_session(path)
            row["ort_rss_growth"] = ort_rss_growth(path, feeds)
        except Exception as exc:  # noqa: BLE001
            row["ort_error"] = str(exc).splitlines()[0][:80]
        built = {}
        for mode in modes:
            try:
                res = build_model(path, BuildOptions(board=args.board, out_dir=work / f"{name}-{mode}", opt=mode, costs=args.costs,
                                                     profile_runner=False, record_last=False))
                built[mode] = res
                mem = res.manifest["memory"]
                row[mode] = {"arena": mem["arena_bytes"],
                             "lb": mem["lower_bound_bytes"], "peak": mem["live_peak_bytes"], "naive": mem["naive_bytes"],
                             "strategy": mem["strategy"], "build_s": res.seconds,
                             "optimizer_s": res.manifest.get("optimizer", {}).get("seconds", 0.0),
                             "non_row_major": len(res.manifest.get("optimizer", {}).get("non_row_major", {})), "rounds_ms": []}
            except Exception as exc:  # noqa: BLE001
                row[mode] = {"error": str(exc).splitlines()[0][:100]}
        ort_rounds = []
        players = (["ort"] if session is not None else []) + list(built)
        for r in range(max(1, args.rounds)):
            for who in players[r % len(players):] + players[:r % len(players)] if players else []:
                try:
                    if who == "ort":
                        ort_rounds.append(median_latency_ms(session, feeds, args.runs, args.warmup))
                    else:
                        bench = runner_bench(built[who].artifact, feeds, args.runs, args.warmup)
                        row[who]["rounds_ms"].append(bench["median_ms"])
                        row[who]["rss"] = bench["peak_rss_bytes"]
                except Exception as exc:  # noqa: BLE001
                    if who == "ort":
                        row["ort_error"], session = str(exc).splitlines()[0][:80], None
                        players.remove("ort")
                    else:
                        row[who] = {"error": str(exc).splitlines()[0][:100]}
                        built.pop(who)
                        players.remove(who)
        del session
        if ort_rounds:
            row["ort_ms"] = float(np.median(ort_rounds))
        for mode in built:
            ms = row[mode]["rounds_ms"]
            row[mode]["ms"] = float(np.median(ms))
            if len(ort_rounds) == len(ms):
                row[mode]["ratio"] = float(np.median(np.array(ms) / np.array(ort_rounds)))
        shutil.rmtree(work, ignore_errors=True)
        rows.append(row)
        print_row(row, modes, header=len(rows) == 1)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


def print_row(row: dict, modes: list[str], header: bool) -> None:
    if header:
        cols = ["model", "ORT ms"] + [f"{m}/ORT" for m in modes] + ["fluid ms", "arena KiB", "/lb", "/peak", "naive KiB",
                                                                   "strategy", "RSS KiB", "ORT dRSS KiB", "NRM"]
        print(" | ".join(cols))
        print(" | ".join("---" for _ in cols))
    ort = row.get("ort_ms")
    cells = [row["model"], f"{ort:.3f}" if ort else row.get("ort_error", "-")]
    for m in modes:
        r = row.get(m, {})
        cells.append(f"{r.get('ratio', r['ms'] / ort):.2f}" if "ms" in r and ort else r.get("error", "-")[:40])
    best = row.get("fluid") or row.get(modes[-1], {})
    if "ms" in best:
        cells += [f"{best['ms']:.3f}", f"{best['arena'] / 1024:.1f}", f"{best['arena'] / max(best['lb'], 1):.3f}",
                  f"{best['arena'] / max(best['peak'], 1):.3f}", f"{best['naive'] / 1024:.1f}", best["strategy"],
                  f"{best['rss'] / 1024:.0f}", f"{row.get('ort_rss_growth', 0) / 1024:.0f}", str(best["non_row_major"])]
    print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    sys.exit(main())
