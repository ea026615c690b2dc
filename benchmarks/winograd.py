#!/usr/bin/env python3
"""Winograd against direct convolution and ONNX Runtime on the 3x3 layers of VGG/ResNet (issue #28).

    python benchmarks/winograd.py [--threads 1,2] [--rounds 5] [--runs 20] [--board x86_64] [--cpu x86-64-v3]
                                  [--layers 64x56,128x28] [--variants direct,wino4,wimg4,auto] [--model]

Per layer (C in = C out, 3x3, pad 1, one image): builds the conv with --conv-algo direct, with the loop order forced
to each of --variants (wino2, wino4, wino6: the blocked form; wimg2, wimg4: the whole-image form), and with the cost
model's own choice (auto), all for the largest thread count; then
`--rounds` A/B rounds (benchmarks/ab_timing.py alternate: each round runs every build's runner `--runs` times and ORT
as many; a time is the least single run over all rounds, ours (the runner's min_ms) and ORT's alike) at each thread
count. Error: max |ours - ORT| / max |ORT| of each build.
--model: a ResNet-18-like model (built here, random weights, 1x3x224x224), auto against direct and ORT.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "toolkit"))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ab_timing import alternate  # noqa: E402
from bench import runner_bench  # noqa: E402

LAYERS = ((64, 56), (128, 28), (256, 14), (512, 7))


def conv_layer(c: int, hw: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((c, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32)
    b = (0.1 * rng.standard_normal(c)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="conv")
    graph = helper.make_graph([node], f"conv{c}x{hw}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def resnet18_like(seed: int = 0) -> onnx.ModelProto:
    """ResNet-18's layout (7x7/2 stem, max pool, 4 stages of 2 basic blocks, 1x1/2 projections, global pool, fc) with
    random weights and no batch norm (folded into the convs' biases in a real export)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv(x, cin, cout, k, stride, relu=True, residual=None):
        name = f"c{len(nodes)}"
        w = (rng.standard_normal((cout, cin, k, k)) * math.sqrt(2 / (cin * k * k))).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(np.zeros(cout, np.float32), name + "_b")])
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], pads=[k // 2] * 4, strides=[stride] * 2))
        out = name
        if residual is not None:
            nodes.append(helper.make_node("Add", [out, residual], [name + "_add"]))
            out = name + "_add"
        if relu:
            nodes.append(helper.make_node("Relu", [out], [name + "_r"]))
            out = name + "_r"
        return out
    x = conv("x", 3, 64, 7, 2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool", 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage and not block else 1
            short = conv(x, cin, cout, 1, stride, relu=False) if stride == 2 else x
            y = conv(x, cin, cout, 3, stride)
            x, cin = conv(y, cout, cout, 3, 1, residual=short), cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inits.append(numpy_helper.from_array((rng.standard_normal((1000, 512)) * 0.03).astype(np.float32), "fc_w"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "resnet18_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(model: onnx.ModelProto, out: Path, board: str, cpu: str | None, threads: int, order: str | None) -> Path:
    """The artifact of `model`; order: every Conv's loop order forced ("direct": --conv-algo direct), None: auto."""
    import fluidml_xc.pipeline as pipeline
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.fluid.optimize import optimize

    path = out.with_suffix(".onnx")
    onnx.save(model, path)
    real = pipeline.optimize

    def forced(graph, spec, *args, **kwargs):
        decisions = optimize(graph, spec, *args, **kwargs)
        for node in graph.nodes:
            if node.op_type == "Conv" and order not in (None, "direct"):
                decisions.loop_orders[node.name] = order
        return decisions
    pipeline.optimize = forced
    try:
        build_model(path, BuildOptions(board=board, cpu=cpu, out_dir=out, threads=threads, cache=False, record_last=False,
                                       conv_algo="direct" if order == "direct" else "auto"))
    finally:
        pipeline.optimize = real
    return out


def ort_session(model: onnx.ModelProto, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def compare(name: str, model: onnx.ModelProto, variants: list[str | None], args, tmp: Path) -> None:
    feeds = {"x": np.random.default_rng(1).standard_normal([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)}
    counts = [int(t) for t in args.threads.split(",")]
    arts = {v: build(model, tmp / f"{name}-{v or 'auto'}", args.board, args.cpu, max(counts), v) for v in variants}
    want = ort_session(model, 1).run(None, feeds)[0]
    errors = {}
    for v, art in arts.items():
        import subprocess
        np.save(tmp / "in.npy", feeds["x"])
        subprocess.run([str(art / "runner"), "-i", str(tmp / "in.npy"), "-o", str(tmp / "out.npy"), "--force"], check=True, capture_output=True)
        got = np.load(tmp / "out.npy")
        errors[v] = float(np.abs(got - want).max() / np.abs(want).max())
    for t in counts:
        sess = ort_session(model, t)

        def ort_measure():  # the least of `runs` runs, as the runner's min_ms
            sess.run(None, feeds)
            best = math.inf
            for _ in range(args.runs):
                start = time.perf_counter()
                sess.run(None, feeds)
                best = min(best, time.perf_counter() - start)
            return best * 1e3
        measures = [ort_measure] + [lambda art=art: float(runner_bench(art, feeds, args.runs, 2, t)["min_ms"])
                                    for art in arts.values()]
        best = alternate(measures, args.rounds)
        cells = "  ".join(f"{v or 'auto'} {ms:8.3f} ms ({ms / best[0]:.2f}x, err {errors[v]:.1e})"
                          for v, ms in zip(arts, best[1:]))
        print(f"{name:14s} T={t}  ORT {best[0]:8.3f} ms  {cells}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--board", default="x86_64")
    ap.add_argument("--cpu", default=None, help="an LLVM CPU (x86-64-v3: AVX2 only; ORT still uses what the host has)")
    ap.add_argument("--layers", default=",".join(f"{c}x{hw}" for c, hw in LAYERS))
    ap.add_argument("--model", action="store_true", help="also the ResNet-18-like model")
    ap.add_argument("--variants", default="direct,wino2,wino4,wino6,wimg2,wimg4,auto",
                    help="builds per layer: direct, a forced loop order (wino*: blocked, wimg*: whole image), auto")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for spec in filter(None, args.layers.split(",")):
            c, hw = (int(v) for v in spec.split("x"))
            variants = [None if v == "auto" else v for v in args.variants.split(",")]
            compare(f"conv{c}x{hw}", conv_layer(c, hw), variants, args, Path(tmp))
        if args.model:
            compare("resnet18_like", resnet18_like(), ["direct", None], args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
