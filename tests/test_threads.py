"""Multi-core execution (runtime_c/pool.c, emit/emitter.py tiles): outputs bit-identical at 1, 2, 3 and 4
threads for a CNN, a transformer block, an int8 graph and LRN, natively and under qemu-user (aarch64, armv7),
and equal to ONNX's reference; the C API's thread calls from an application thread and with the
application's own parallel-for."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from modelrun import build, graph_model, lrn_numpy, reference, require_emulator, run

C_DIR = Path(__file__).resolve().parent / "c"
BOARDS = ["x86_64", "qemu-aarch64", "qemu-armv7"]


def _w(rng, shape, scale=0.2):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def cnn() -> tuple[onnx.ModelProto, dict]:
    """3x3 (padded, strided), depthwise, 1x1 and grouped convs with fused epilogues, a fused elementwise
    chain, pools, Gemm, Softmax."""
    rng = np.random.default_rng(1)
    consts = {"w1": _w(rng, (24, 3, 3, 3)), "b1": _w(rng, (24,)), "w2": _w(rng, (24, 1, 3, 3)), "w3": _w(rng, (40, 24, 1, 1)),
              "b3": _w(rng, (40,)), "w4": _w(rng, (40, 10, 3, 3), 0.1), "w5": _w(rng, (64, 40, 3, 3), 0.05),
              "fc": _w(rng, (10, 64)), "fcb": _w(rng, (10,)), "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=24),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
        helper.make_node("Conv", ["c3", "w4"], ["c4"], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Add", ["c4", "c3"], ["a4"]),
        helper.make_node("Tanh", ["a4"], ["s4"]),
        helper.make_node("Mul", ["s4", "hi"], ["e4"]),
        helper.make_node("MaxPool", ["e4"], ["p4"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p4", "w5"], ["c5"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c5"], ["r5"]),
        helper.make_node("GlobalAveragePool", ["r5"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["l"], transB=1),
        helper.make_node("Softmax", ["l"], ["y"], axis=-1),
    ]
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    return graph_model(nodes, {"x": x}, ["y", "c3"], consts), {"x": x}


def transformer() -> tuple[onnx.ModelProto, dict]:
    """One encoder block: LayerNorm, Q/K/V projections, 4 heads of batched attention, Softmax, GELU MLP."""
    rng = np.random.default_rng(2)
    seq, hidden, heads, ff = 64, 128, 4, 256
    hd = hidden // heads
    consts = {"wq": _w(rng, (hidden, hidden)), "wk": _w(rng, (hidden, hidden)), "wv": _w(rng, (hidden, hidden)),
              "wo": _w(rng, (hidden, hidden)), "w1": _w(rng, (hidden, ff)), "b1": _w(rng, (ff,)), "w2": _w(rng, (ff, hidden)),
              "g": np.ones(hidden, np.float32), "bt": np.zeros(hidden, np.float32),
              "shape": np.array([1, seq, heads, hd], np.int64), "back": np.array([1, seq, hidden], np.int64),
              "scale": np.array(1.0 / np.sqrt(hd), np.float32), "half": np.array(0.5, np.float32),
              "one": np.array(1.0, np.float32), "rs2": np.array(1 / np.sqrt(2), np.float32)}
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "bt"], ["xn"], axis=-1)]
    for n in "qkv":
        nodes += [helper.make_node("MatMul", ["xn", f"w{n}"], [f"{n}0"]),
                  helper.make_node("Reshape", [f"{n}0", "shape"], [f"{n}1"]),
                  helper.make_node("Transpose", [f"{n}1"], [f"{n}h"], perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    nodes += [
        helper.make_node("MatMul", ["qh", "kh"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "back"], ["oc"]),
        helper.make_node("MatMul", ["oc", "wo"], ["proj"]),
        helper.make_node("Add", ["x", "proj"], ["h"]),
        helper.make_node("LayerNormalization", ["h", "g", "bt"], ["hn"], axis=-1),
        helper.make_node("MatMul", ["hn", "w1"], ["m0"]),
        helper.make_node("Add", ["m0", "b1"], ["m1"]),
        helper.make_node("Mul", ["m1", "rs2"], ["e0"]),
        helper.make_node("Erf", ["e0"], ["e1"]),
        helper.make_node("Add", ["e1", "one"], ["e2"]),
        helper.make_node("Mul", ["m1", "e2"], ["e3"]),
        helper.make_node("Mul", ["e3", "half"], ["gl"]),
        helper.make_node("MatMul", ["gl", "w2"], ["m2"]),
        helper.make_node("Add", ["h", "m2"], ["y"]),
    ]
    x = rng.standard_normal((1, seq, hidden)).astype(np.float32)
    return graph_model(nodes, {"x": x}, ["y"], consts), {"x": x}


def int8_graph() -> tuple[onnx.ModelProto, dict]:
    """QuantizeLinear -> QLinearConv (3x3, then 1x1) -> QLinearMatMul (constant B) and MatMulInteger
    (run-time B, batched) -> DequantizeLinear."""
    rng = np.random.default_rng(3)
    q = lambda shape, dt: rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, shape).astype(dt)  # noqa: E731
    f = lambda v: np.array(v, np.float32)  # noqa: E731
    consts = {"xs": f(0.05), "xz": np.array(128, np.uint8), "w1": q((32, 16, 3, 3), np.int8), "ws1": f(0.01),
              "wz1": np.array(0, np.int8), "ys1": f(0.4), "yz1": np.array(120, np.uint8),
              "w2": q((24, 32, 1, 1), np.int8), "ws2": f(0.02), "wz2": np.array(0, np.int8), "ys2": f(0.5),
              "yz2": np.array(130, np.uint8), "shape": np.array([24, 32, 32], np.int64),
              "bm": q((32, 48), np.int8), "bs": f(0.03), "bz": np.array(1, np.int8), "ms": f(0.6), "mz": np.array(125, np.uint8),
              "mt": np.array([0, 2, 1], np.int64)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "xs", "xz", "w1", "ws1", "wz1", "ys1", "yz1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("QLinearConv", ["c1", "ys1", "yz1", "w2", "ws2", "wz2", "ys2", "yz2"], ["c2"]),
        helper.make_node("Reshape", ["c2", "shape"], ["r"]),
        helper.make_node("QLinearMatMul", ["r", "ys2", "yz2", "bm", "bs", "bz", "ms", "mz"], ["m"]),
        helper.make_node("Transpose", ["r"], ["rt"], perm=[0, 2, 1]),
        helper.make_node("MatMulInteger", ["r", "rt", "yz2", "yz2"], ["mi"]),
        helper.make_node("DequantizeLinear", ["m", "ms", "mz"], ["y"]),
    ]
    x = rng.uniform(-3, 3, (1, 16, 32, 32)).astype(np.float32)
    return graph_model(nodes, {"x": x}, ["y", "mi"], consts, opset=19), {"x": x}


def lrn() -> tuple[onnx.ModelProto, dict]:
    """LRN (AlexNet's, GoogLeNet's, ZFNet's: beta 0.75, and a beta that takes the pow call) over 2 images, and a
    MaxPool whose 6-column rows are narrower than an AVX2 vector (4-lane column vectors, kernels/vectors.py
    column_lanes: too little work to split, but bit-identical whatever the thread count)."""
    x = np.random.default_rng(5).standard_normal((2, 48, 20, 20)).astype(np.float32)
    nodes = [helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-2),
             helper.make_node("LRN", ["x"], ["z"], size=4, alpha=1e-2, beta=0.6, bias=1.5),
             helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[5, 5], strides=[3, 3])]
    return graph_model(nodes, {"x": x}, ["y", "z", "p"], {}), {"x": x}


def lrn_reference(model: onnx.ModelProto, feeds: dict) -> dict:
    x = feeds["x"]
    pool = np.lib.stride_tricks.sliding_window_view(x, (5, 5), axis=(2, 3))[:, :, ::3, ::3].max(axis=(4, 5))
    return {"y": lrn_numpy(x, 5, 1e-2), "z": lrn_numpy(x, 4, 1e-2, 0.6, 1.5), "p": pool}


def unshared() -> tuple[onnx.ModelProto, dict]:
    """ShuffleNet's 272-channel depthwise 3x3 over 14x14 (480K multiply-adds) and mlp's one-row Gemm 784 -> 512 (401K):
    under PARALLEL_MIN_WORK as plain multiply-adds, so they ran on the calling thread; counted at UNSHARED_MAC_WORK
    they split, the depthwise conv's 272 groups in chunks (not a tile per group)."""
    rng = np.random.default_rng(6)
    consts = {"wd": _w(rng, (272, 1, 3, 3)), "bd": _w(rng, (272,)), "fc": _w(rng, (512, 784), 0.05), "fcb": _w(rng, (512,))}
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["c"], pads=[1, 1, 1, 1], group=272),
             helper.make_node("Relu", ["c"], ["y"]),
             helper.make_node("Gemm", ["v", "fc", "fcb"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["z"])]
    feeds = {"x": rng.standard_normal((1, 272, 14, 14)).astype(np.float32), "v": rng.standard_normal((1, 784)).astype(np.float32)}
    return graph_model(nodes, feeds, ["y", "z"], consts), feeds


MODELS = {"cnn": cnn, "transformer": transformer, "int8": int8_graph, "lrn": lrn, "unshared": unshared}
HEAVY = {"cnn": {"Conv", "MaxPool", "FusedElementwise"}, "transformer": {"MatMul"}, "int8": {"QLinearConv", "QLinearMatMul", "MatMulInteger"},
         "lrn": {"LRN"}, "unshared": {"Conv", "Gemm"}}
REFERENCES = {"lrn": lrn_reference}


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_bit_identical_across_threads(name, board, tmp_path):
    require_emulator(board)
    model, feeds = MODELS[name]()
    artifact = build(model, tmp_path, board, threads=4, profile_runner=False)
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["threads"] == 4
    types = {n.name: n.op_type for n in model.graph.node}
    split = {op["type"] for op in manifest["ops"] if op["name"] in manifest["parallel_ops"]}
    heavy = HEAVY[name]
    assert heavy <= split, f"heavy ops not split over threads: {heavy - split} (split: {split}, {types})"
    if name == "unshared":
        assert all(int(np.prod(tiles)) <= 24 for tiles in manifest["parallel_ops"].values()), manifest["parallel_ops"]
    results = {t: list(run(artifact, feeds, threads=t).values()) for t in (1, 2, 3, 4)}
    for t in (2, 3, 4):
        for one, other in zip(results[1], results[t]):
            assert one.dtype == other.dtype and one.shape == other.shape
            assert one.tobytes() == other.tobytes(), f"{t} threads differ from 1 thread"
    expected = REFERENCES.get(name, reference)(model, feeds)
    for (out_name, want), got in zip(expected.items(), results[1]):
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=out_name)
        else:
            assert np.abs(got.astype(np.int64) - want.astype(np.int64)).max() <= 1, out_name


def test_threads_out_of_range(tmp_path):
    model, feeds = MODELS["cnn"]()
    artifact = build(model, tmp_path, "x86_64", threads=2, profile_runner=False)
    proc = subprocess.run([str(artifact / "runner"), "--threads", "3"], capture_output=True, text=True)
    assert proc.returncode == 2 and "built for" in proc.stderr
    out = json.loads(subprocess.run([str(artifact / "runner"), "--bench", "3", "--threads", "1"], capture_output=True,
                                    text=True, check=True).stdout)
    assert out["threads"] == 1 and out["cpu_ms"] > 0


def test_one_thread_build_has_no_tiles(tmp_path):
    model, _ = MODELS["cnn"]()
    artifact = build(model, tmp_path, "x86_64", threads=1, profile_runner=False)
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["threads"] == 1 and manifest["parallel_ops"] == {}
    assert "#define FXC_THREADS 1" in (artifact / "model.h").read_text()


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64"])
@pytest.mark.parametrize("program", ["app_thread", "app_pfor"])
def test_c_api_threads(program, board, tmp_path):
    """An application calling fxc_run from its own thread, and one running the tiles on its own threads:
    outputs equal the runner's byte for byte."""
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.emit.link import compile_c_program

    require_emulator(board)
    model, feeds = MODELS["transformer"]()
    artifact = build(model, tmp_path, board, threads=4, profile_runner=False)
    expected = list(run(artifact, feeds, threads=4).values())
    target = get_board(board).target
    manifest = json.loads((artifact / "manifest.json").read_text())
    exe = compile_c_program(target, manifest["cpu"], [C_DIR / f"{program}.c"], [artifact, C_DIR],
                            [artifact / "libmodel.a", "-lpthread"], tmp_path / program)
    raw_in = tmp_path / "x.bin"
    raw_in.write_bytes(np.ascontiguousarray(feeds["x"]).tobytes())
    raw_out = tmp_path / "y.bin"
    emulator = [manifest["emulator"]] if manifest["emulator"] else []
    proc = subprocess.run(emulator + [str(exe), "3", str(raw_in), str(raw_out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert raw_out.read_bytes() == expected[0].tobytes()
    if program == "app_thread":
        assert proc.stdout.split() == ["threads", "3"]
    else:
        words = proc.stdout.split()
        calls, tiles = int(words[1]), int(words[3])
        assert calls == len(manifest["parallel_ops"]) and tiles >= 2 * calls and words[5] == "0"


def test_pool_home_shards(tmp_path):
    """Each thread starts a job with its own contiguous share of the tiles (runtime_c/pool.c), so consecutive jobs of
    the same op run the same tiles on the same core: the worker's first tile is the first of the second half
    (claiming tiles in turn would give it tile 1) in every job it takes part in (tests/c/pool_shards.c; a worker
    that starts after the first job was published sleeps through it: -1)."""
    import sys

    from fluidml_xc.resources import data_dir

    rt = data_dir("runtime_c")
    exe = tmp_path / "pool_shards"
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-musl", "-O1", "-std=c99", f"-I{rt}",
           str(C_DIR / "pool_shards.c"), str(rt / "pool.c"), "-lpthread", "-o", str(exe)]
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=600).returncode == 0
    for tiles in (8, 7):
        firsts = subprocess.run([str(exe), str(tiles), "5"], capture_output=True, text=True, timeout=60, check=True).stdout.split()
        assert firsts[1:] == [str(tiles // 2)] * 4 and firsts[0] in ("-1", str(tiles // 2)), firsts


def scores() -> tuple[onnx.ModelProto, dict]:
    """S = X Y^T (512 x 16, K = 64) where Y^T is a Transpose of the input Y."""
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((512, 64)).astype(np.float32), "y": rng.standard_normal((16, 64)).astype(np.float32)}
    nodes = [helper.make_node("Transpose", ["y"], ["yt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "yt"], ["s"])]
    return graph_model(nodes, feeds, ["s"], {}), feeds


def test_cost_model_knows_threads(tmp_path):
    """The FluidML cost model splits kernels as the emitter does and costs the busiest thread. With Y^T
    kept as a view of Y (K-contiguous B) the outer-product kernel gathers B panels and keeps the rows of
    its one 16-column panel together (one tile), the dot-product kernel splits its rows (4 tiles): one
    thread prefers the outer product, four the dot product. Over the whole graph one thread keeps the
    view (no copy), two and four threads copy Y^T row-major so the outer product splits its rows too.
    Builds at --threads 1 and 4 follow their decisions, split as costed, and compute S."""
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec
    from fluidml_xc.fluid.costs import AnalyticModel
    from fluidml_xc.kernels.matmul_geometry import matmul_geometry
    from fluidml_xc.frontend.importer import FrontendOptions, import_model
    from fluidml_xc.fluid.optimize import optimize
    from fluidml_xc.passes import run_passes

    model, feeds = scores()
    spec = machine_spec(get_board("x86_64-v3"))  # AVX2 widths whatever the host (the default board takes its widest)
    under_view, chosen, tiles = {}, {}, {}
    for t in (1, 2, 4):
        graph = import_model(model, FrontendOptions(), name="scores")
        run_passes(graph)
        mm = next(n for n in graph.nodes if n.op_type == "MatMul")
        analytic = AnalyticModel(graph, spec.vector_bits, t)
        view = matmul_geometry(graph, mm, lambda n: analytic.strides(n, {"yt": (1, 0)}))
        assert (analytic.matmul_tiles(view, "ikj"), analytic.matmul_tiles(view, "ijk")) == (1, 4)
        under_view[t] = analytic.cost_and_order(mm, {"yt": (1, 0)})[1]
        decisions = optimize(graph, spec, "fluid", threads=t)
        chosen[t] = (decisions.layouts.get("yt"), decisions.loop_orders[mm.name], decisions.threads)
        tiles[t] = analytic.matmul_tiles(matmul_geometry(graph, mm, lambda n: analytic.strides(n, decisions.layouts)),
                                         decisions.loop_orders[mm.name])
    assert under_view == {1: "ikj", 2: "ijk", 4: "ijk"}
    assert chosen == {1: ((1, 0), "ikj", 1), 2: (None, "ikj", 2), 4: (None, "ikj", 4)}
    for t in (1, 4):
        artifact = build(model, tmp_path / f"t{t}", "x86_64-v3", threads=t, profile_runner=False)
        manifest = json.loads((artifact / "manifest.json").read_text())
        assert manifest["optimizer"]["threads"] == t and ("yt" in manifest["optimizer"]["non_row_major"]) == (t == 1)
        assert int(np.prod(manifest["parallel_ops"].get(mm.name, [1]))) == (tiles[t] if t > 1 else 1)
        outs = [list(run(artifact, feeds, threads=n).values())[0] for n in range(1, t + 1)]
        assert all(o.tobytes() == outs[0].tobytes() for o in outs)
        np.testing.assert_allclose(outs[0], feeds["x"] @ feeds["y"].T, rtol=1e-4, atol=1e-4)


def _tsan_runner(name: str, tmp: Path, threads: int = 4) -> Path:
    """The model's runner with every function of the model and the runtime instrumented by ThreadSanitizer:
    the module for x86-64 with SSE2 (accesses of at most 16 bytes, which TSan checks; wider AVX vectors it
    skips), its IR re-read by llvmlite's LLVM (opaque pointers) and compiled by zig cc -fsanitize=thread
    for x86_64-linux-gnu (TSan needs glibc and a dynamic link; musl has no TSan runtime)."""
    import re
    import sys

    import llvmlite.binding as llvm

    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import MachineSpec
    from fluidml_xc.frontend.importer import FrontendOptions, import_model
    from fluidml_xc.passes import run_passes
    from fluidml_xc.pipeline import LowerOptions, lower
    from fluidml_xc.resources import data_dir
    from fluidml_xc.emit.capi import ModelSpec, TensorSpec, render_sources

    model, _ = MODELS[name]()
    graph = import_model(model, FrontendOptions(), name=name)
    run_passes(graph)
    target = get_board("x86_64").target
    spec = MachineSpec(target.triple, "x86-64", "+sse2", target.pointer_bits, 128, target.alignment)
    lowered = lower(graph, spec, LowerOptions(opt="fluid"))
    assert lowered.emitter.parallel, "nothing was split into tiles"
    llvm.initialize_native_target()
    text = str(llvm.parse_assembly(lowered.ir_text))
    text = re.sub(r"^(define [^\n]*?)\{$", lambda m: m.group(1) + " sanitize_thread {", text, flags=re.M)
    (tmp / "model.ll").write_text(text)
    tail = lowered.emitter.tail
    render_sources(ModelSpec(name, [TensorSpec(n, graph.tensors[n].shape, np.dtype(graph.tensors[n].dtype).name) for n in graph.inputs],
                             [TensorSpec(n, graph.tensors[n].shape, np.dtype(graph.tensors[n].dtype).name, s)
                              for n, s in zip(graph.outputs, tail.output_slots)],
                             tail.arena_bytes, spec.alignment, [(graph.nodes[i].name, graph.nodes[i].op_type) for i in lowered.plan.order],
                             threads=threads), tmp)
    rt = data_dir("runtime_c")
    sources = [rt / f for f in ("runner.c", "noprof.c", "npy.c", "timer.c", "rss.c", "pool.c")] + [tmp / "model_glue.c"]
    exe = tmp / "runner_tsan"
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-gnu", "-fsanitize=thread", "-g", "-O1", "-std=c99",
           f"-I{rt}", f"-I{tmp}", *map(str, sources), str(tmp / "model.ll"), "-lm", "-lpthread", "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return exe


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_thread_sanitizer(name, tmp_path):
    """No data race in the pool or the tiled kernels (ThreadSanitizer halts on the first report), and the
    instrumented runner's outputs agree across 1-4 threads."""
    import os
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("ThreadSanitizer build for x86_64-linux-gnu")
    exe = _tsan_runner(name, tmp_path)
    _, feeds = MODELS[name]()
    np.save(tmp_path / "x.npy", feeds["x"])
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1 exitcode=66 report_signal_unsafe=0"}
    outs = []
    for t in (1, 2, 3, 4):
        out = tmp_path / f"y{t}.npy"
        proc = subprocess.run([str(exe), "-i", str(tmp_path / "x.npy"), "-o", str(out), "--threads", str(t), "--bench", "3",
                               "--warmup", "1"], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0 and "ThreadSanitizer" not in proc.stderr, proc.stderr[-3000:]
        outs.append(np.load(out))
    assert all(o.tobytes() == outs[0].tobytes() for o in outs)
