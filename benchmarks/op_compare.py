#!/usr/bin/env python3
"""Where a model loses its time against ONNX Runtime, per op kind: our profiling runner beside ORT's node profile.

    python benchmarks/op_compare.py light_squeezenet light_resnet50 mobilenetv2.onnx [--rounds 7] [--runs 20]

Each model gets a name on every node (`<OpType>_<index>` where the exporter left it empty), is built once
(`build`, the board's default variant, one thread) and then, per round, our `runner_prof --profile` (`--runs`
single runs, each after `--warmup` ones; per op the least) and a fresh ONNX Runtime session with
`enable_profiling` (one intra-op thread, the same number of runs; per node the least of its `*_kernel_time`
events) run one after the other. The least of a few runs, not their median: on a loaded machine an op's median
wall time catches other processes' time slices (a 2-core host at load 12 puts a third of a run's wall time into
ops at random). ORT renames the nodes
it rewrites (NCHWc `rN_nchwc`, fusions), so the two sides are matched by what an op computes, not by name:
the signature (op type, first input's shape, weight shape, output shape; channels rounded up to 16 on both sides, as ORT's NCHWc pads them); ORT's FusedConv/FusedGemm count as
Conv/Gemm, and an epilogue (Relu, Clip, Add, ...) is timed inside the kernel it is fused into on both sides.
A kind groups signatures by op geometry (`Conv 1x1 s1`, `Conv 3x3 s1 dw`, ...) and output size (`@56` = 56x56 or
more spatial positions per side).

Table per model: kind, nodes (ours/ORT), ms (ours, ORT: medians over rounds of the kind's total of least times), ratio (median of
per-round ratios, so that load changing between rounds cancels), share of our total; then the signatures
with the most ms lost. `--json` writes everything. ORT-only nodes (ReorderInput/ReorderOutput of its NCHWc
layout) are their own kinds; ops we elide (Concat written in place, Reshape) show 0 nodes on our side.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))
sys.path.insert(0, str(Path(__file__).parent))

from example_models import model_file  # noqa: E402

FUSED_TYPES = {"FusedConv": "Conv", "FusedGemm": "Gemm", "FusedMatMul": "MatMul", "NchwcConv": "Conv"}
WEIGHTED = {"Conv", "ConvTranspose", "Gemm", "MatMul", "QLinearConv"}


def named_copy(src: Path, out: Path) -> onnx.ModelProto:
    """SRC with every unnamed node named `<OpType>_<index>`, saved to OUT (shape-inferred)."""
    model = onnx.load(str(src))
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"
    onnx.save(model, str(out))
    return onnx.shape_inference.infer_shapes(model)


def _shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    g = model.graph
    shapes = {i.name: list(i.dims) for i in g.initializer}
    for v in [*g.input, *g.value_info, *g.output]:
        dims = v.type.tensor_type.shape.dim
        shapes[v.name] = [d.dim_value if d.HasField("dim_value") else -1 for d in dims]
    return shapes


def _blocked(shape, dims: tuple[int, ...]) -> tuple:
    """SHAPE with DIMS rounded up to 16: ORT's NCHWc layout pads channels to its block (8 or 16)."""
    return tuple(-(-d // 16) * 16 if k in dims and d > 1 and len(shape) == 4 else d for k, d in enumerate(shape))


def signature(op: str, inputs: list[list[int]], output: list[int]) -> tuple:
    op = FUSED_TYPES.get(op, op)
    # ORT prepacks a Gemm/MatMul's constant B and leaves it out of the node's input shapes: no weight for those
    weight = _blocked(inputs[1], (0, 1)) if op in WEIGHTED - {"Gemm", "MatMul"} and len(inputs) > 1 else ()
    first = _blocked(inputs[0], (1,)) if inputs else ()
    return op, first, weight, _blocked(output, (1,))


def kind(sig: tuple) -> str:
    op, first, weight, out = sig
    size = f" @{out[-1]}" if len(out) == 4 else ""
    if op == "Conv" and len(weight) == 4 and len(first) == 4 and len(out) == 4:
        stride = max(1, round(first[-1] / max(out[-1], 1)))
        dw = " dw" if weight[1] == 1 and first[1] > 1 else ""
        return f"Conv {weight[2]}x{weight[3]} s{stride}{dw}{size}"
    if op in ("MaxPool", "AveragePool") and len(first) == 4 and len(out) == 4:
        return f"{op} s{max(1, round(first[-1] / max(out[-1], 1)))}{size}"
    return op + size


def our_signatures(model: onnx.ModelProto) -> dict[str, tuple]:
    shapes = _shapes(model)
    return {n.name: signature(n.op_type, [shapes.get(i, []) for i in n.input if i],
                              shapes.get(n.output[0], [])) for n in model.graph.node}


def ours_round(artifact: Path, inputs: list[str], runs: int, warmup: int) -> dict[str, float]:
    """Per op, the least of `runs` single profiled runs (each its own process after `warmup` runs): the least
    excludes the time slices other processes take on a loaded machine, as ORT's side does."""
    args = [a for f in inputs for a in ("-i", f)]
    best: dict[str, float] = {}
    for _ in range(runs):
        out = subprocess.run([str(artifact / "runner_prof"), *args, "--bench", "1", "--warmup", str(warmup),
                              "--profile", "--threads", "1"], check=True, capture_output=True, text=True, timeout=3600)
        for op in json.loads(out.stdout)["ops"]:
            best[op["name"]] = min(best.get(op["name"], float("inf")), op["ms"])
    return best


def ort_round(path: Path, feeds: dict, runs: int, warmup: int, work: Path) -> list[tuple[tuple, float]]:
    """[(signature, least ms over the timed runs)] per ORT node, in ORT's execution order."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    o.enable_profiling = True
    o.profile_file_prefix = str(work / "ort")
    s = ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
    for _ in range(warmup + runs):
        s.run(None, feeds)
    profile = Path(s.end_profiling())
    events = json.loads(profile.read_text())
    profile.unlink()
    per_node: dict[str, list] = defaultdict(list)
    sig = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        a = e["args"]
        ins = [next(iter(t.values())) for t in a.get("input_type_shape", [])]
        outs = [next(iter(t.values())) for t in a.get("output_type_shape", [])]
        sig[e["name"]] = signature(a["op_name"], ins, outs[0] if outs else [])
        per_node[e["name"]].append(e["dur"] / 1e3)
    return [(sig[n], min(t[warmup:] or t)) for n, t in per_node.items()]


def compare(name: str, src: Path, feeds: dict, rounds: int, runs: int, warmup: int, board: str | None) -> dict:
    from fluidml_xc.build import BuildOptions, build_model

    work = Path(tempfile.mkdtemp(prefix="fxc-opcmp-"))
    path = work / f"{name}.onnx"
    model = named_copy(src, path)
    sigs = our_signatures(model)
    artifact = work / "artifact"
    build_model(path, BuildOptions(board=board, out_dir=artifact, threads=1))
    manifest = json.loads((artifact / "manifest.json").read_text())
    inputs = []
    for k, spec in enumerate(manifest["inputs"]):
        f = str(work / f"in{k}.npy")
        np.save(f, np.asarray(feeds[spec["name"]]).astype(spec["dtype"]).reshape(spec["shape"]))
        inputs.append(f)
    per_round = []
    for r in range(rounds):
        ours = ours_round(artifact, inputs, runs, warmup)
        theirs = ort_round(path, feeds, runs, warmup, work)
        rows: dict[str, dict] = defaultdict(lambda: {"ours": 0.0, "ort": 0.0, "n_ours": 0, "n_ort": 0})
        by_sig: dict[tuple, dict] = defaultdict(lambda: {"ours": 0.0, "ort": 0.0})
        for op, ms in ours.items():
            sig = sigs.get(op, (op,) + ((),) * 3)
            rows[kind(sig)]["ours"] += ms
            rows[kind(sig)]["n_ours"] += 1
            by_sig[sig]["ours"] += ms
        for sig, ms in theirs:
            rows[kind(sig)]["ort"] += ms
            rows[kind(sig)]["n_ort"] += 1
            by_sig[sig]["ort"] += ms
        per_round.append((dict(rows), dict(by_sig)))
        print(f"  {name} round {r + 1}/{rounds}: ours {sum(ours.values()):.2f} ms, "
              f"ORT {sum(ms for _, ms in theirs):.2f} ms", file=sys.stderr)
    return summarize(name, per_round)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf") if a > 0 else 1.0


def summarize(name: str, per_round: list) -> dict:
    kinds = sorted({k for rows, _ in per_round for k in rows})
    table = []
    for k in kinds:
        got = [rows.get(k, {"ours": 0.0, "ort": 0.0, "n_ours": 0, "n_ort": 0}) for rows, _ in per_round]
        table.append({"kind": k, "n_ours": got[0]["n_ours"], "n_ort": got[0]["n_ort"],
                      "ours_ms": statistics.median(g["ours"] for g in got),
                      "ort_ms": statistics.median(g["ort"] for g in got),
                      "ratio": statistics.median(_ratio(g["ours"], g["ort"]) for g in got)})
    sigs = sorted({s for _, by in per_round for s in by}, key=str)
    lost = []
    for s in sigs:
        got = [by.get(s, {"ours": 0.0, "ort": 0.0}) for _, by in per_round]
        ours, ort = statistics.median(g["ours"] for g in got), statistics.median(g["ort"] for g in got)
        lost.append({"signature": [s[0], *map(list, s[1:])], "kind": kind(s), "ours_ms": ours, "ort_ms": ort,
                     "lost_ms": ours - ort})
    lost.sort(key=lambda r: -r["lost_ms"])
    totals = [(sum(r["ours"] for r in rows.values()), sum(r["ort"] for r in rows.values())) for rows, _ in per_round]
    return {"model": name, "rounds": len(per_round), "kinds": table, "signatures": lost,
            "ours_ms": statistics.median(t[0] for t in totals), "ort_ms": statistics.median(t[1] for t in totals),
            "ratio": statistics.median(_ratio(*t) for t in totals)}


def print_result(res: dict, top: int) -> None:
    print(f"\n## {res['model']}: ops sum ours {res['ours_ms']:.2f} ms, ORT {res['ort_ms']:.2f} ms, "
          f"ratio {res['ratio']:.2f} (median of {res['rounds']} rounds)\n")
    print("| kind | nodes ours/ORT | ours ms | ORT ms | ours/ORT | share of ours |")
    print("|---|---|---|---|---|---|")
    for r in sorted(res["kinds"], key=lambda r: -max(r["ours_ms"], r["ort_ms"])):
        share = r["ours_ms"] / res["ours_ms"] if res["ours_ms"] else 0.0
        print(f"| {r['kind']} | {r['n_ours']}/{r['n_ort']} | {r['ours_ms']:.3f} | {r['ort_ms']:.3f} | "
              f"{r['ratio']:.2f} | {share:.0%} |")
    print("\nmost ms lost (signature: op, input, weight, output):")
    for r in res["signatures"][:top]:
        print(f"  {r['lost_ms']:+.3f} ms  {r['kind']:<22} {r['signature']}  ours {r['ours_ms']:.3f} ORT {r['ort_ms']:.3f}")


def main() -> int:
    from fluidml_xc.examples import example_feeds

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="ONNX files, light model names (light_resnet50) or example names")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10, help="timed runs per side and round")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--board", default=None, help="default: the host's default board (x86_64: v2/v3/v4 at init)")
    ap.add_argument("--top", type=int, default=8, help="signatures listed per model")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", file=sys.stderr)
    results = []
    for arg in args.models:
        path = model_file(arg)
        npz = path.with_name(path.stem + ".inputs.npz")
        feeds = dict(np.load(npz)) if npz.is_file() else example_feeds(onnx.load(str(path)))
        res = compare(path.stem, path, feeds, args.rounds, args.runs, args.warmup, args.board)
        print_result(res, args.top)
        results.append(res)
    if args.json:
        args.json.write_text(json.dumps({"load": os.getloadavg()[0], "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
