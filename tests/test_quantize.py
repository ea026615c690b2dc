"""`fluidml-xc quantize`: a small CNN and a small transformer encoder built here, quantized by
onnxruntime.quantization with generated calibration data, built and run for x86_64 (and rpi4 under
qemu); the int8 artifact's outputs against ONNX Runtime on the same int8 model, the report's figures
against numpy on the same outputs, and the bad-input errors."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from modelrun import cli, graph_model, one_line_error, require_emulator

ROOT = Path(__file__).resolve().parent.parent
rng = np.random.default_rng(16)


def _w(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def small_cnn() -> onnx.ModelProto:
    """Conv-Relu, Conv + residual Add, Relu, GlobalAveragePool, Flatten, Gemm: image [1,3,12,12] -> logits [1,10]."""
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="pool"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="classifier", transB=1),
    ]
    consts = {"w1": _w(8, 3, 3, 3), "b1": _w(8, scale=0.1), "w2": _w(8, 8, 3, 3, scale=0.15), "b2": _w(8, scale=0.1),
              "wf": _w(10, 8, scale=0.5), "bf": _w(10, scale=0.1)}
    return graph_model(nodes, {"image": np.zeros((1, 3, 12, 12), np.float32)}, ["logits"], consts, opset=17, infer=True)


def small_encoder() -> onnx.ModelProto:
    """One transformer encoder layer: x [1,8,16] -> self-attention (one head) + residual, LayerNorm, FFN (Relu) + residual, LayerNorm."""
    d, f = 16, 32
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="query"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="key"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="value"),
        helper.make_node("Transpose", ["k"], ["kt"], name="key_t", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        helper.make_node("Mul", ["scores", "inv_sqrt_d"], ["scaled"], name="scale"),
        helper.make_node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="context"),
        helper.make_node("MatMul", ["ctx", "wo"], ["attn"], name="attn_out"),
        helper.make_node("Add", ["attn", "x"], ["res1"], name="res1"),
        helper.make_node("LayerNormalization", ["res1", "g1", "be1"], ["h"], name="ln1", axis=-1),
        helper.make_node("MatMul", ["h", "w1"], ["u"], name="ffn_in"),
        helper.make_node("Add", ["u", "bu"], ["ub"], name="ffn_bias"),
        helper.make_node("Relu", ["ub"], ["ur"], name="ffn_relu"),
        helper.make_node("MatMul", ["ur", "w2"], ["o"], name="ffn_out"),
        helper.make_node("Add", ["o", "h"], ["res2"], name="res2"),
        helper.make_node("LayerNormalization", ["res2", "g2", "be2"], ["y"], name="ln2", axis=-1),
    ]
    consts = {"wq": _w(d, d), "wk": _w(d, d), "wv": _w(d, d), "wo": _w(d, d), "inv_sqrt_d": np.array(0.25, np.float32),
              "g1": np.ones(d, np.float32), "be1": np.zeros(d, np.float32), "w1": _w(d, f), "bu": _w(f, scale=0.1),
              "w2": _w(f, d, scale=0.2), "g2": (1 + _w(d, scale=0.1)), "be2": _w(d, scale=0.1)}
    return graph_model(nodes, {"x": np.zeros((1, 8, d), np.float32)}, ["y"], consts, opset=17, infer=True)


def write_samples(directory: Path, name: str, shape: tuple[int, ...], count: int, seed: int) -> Path:
    gen = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        np.savez(directory / f"sample{i:03d}.npz", **{name: gen.standard_normal(shape).astype(np.float32)})
    return directory


def load_dir(directory: Path) -> list[dict[str, np.ndarray]]:
    out = []
    for path in sorted(directory.glob("*.npz")):
        with np.load(path) as npz:
            out.append({k: npz[k] for k in npz.files})
    return out


def ort_run(path: Path, feeds: list[dict], fused: bool = True) -> list[dict[str, np.ndarray]]:
    """ONNX Runtime, one thread; fused=False: no graph optimizations (QDQ models run as written, no QLinear* kernels)."""
    import onnxruntime as ort
    from fluidml_xc.reference import ort_session
    if fused:
        session = ort_session(path)
    else:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(names, feed))) for feed in feeds]


def output_steps(model: onnx.ModelProto) -> dict[str, float]:
    """Graph output -> the quantization step of the DequantizeLinear that produces it (QDQ models)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    steps = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] in {o.name for o in model.graph.output}:
            steps[node.output[0]] = float(np.max(inits[node.input[1]]))
    return steps


def numpy_figures(reference: list[np.ndarray], test: list[np.ndarray]) -> dict:
    """The report's definitions, written out again with numpy."""
    ref = np.stack(reference).astype(np.float64)
    got = np.stack(test).astype(np.float64)
    diff = np.abs(got - ref)
    cos = [float(np.sum(r * t) / (np.linalg.norm(r) * np.linalg.norm(t))) for r, t in zip(ref.reshape(len(ref), -1), got.reshape(len(got), -1))]
    figures = {"max_abs_err": diff.max(), "mean_abs_err": diff.mean(), "cosine": float(np.mean(cos))}
    if ref.shape[-1] >= 2 and ref.ndim <= 3:
        r2, g2 = ref.reshape(-1, ref.shape[-1]), got.reshape(-1, got.shape[-1])
        figures["top1_agreement"] = float(np.mean(r2.argmax(1) == g2.argmax(1)))
        top5 = np.argsort(-g2, axis=1)[:, :5]
        figures["top5_agreement"] = float(np.mean([r2.argmax(1)[i] in top5[i] for i in range(len(r2))]))
    return figures


def reference_run(path: Path, feeds: list[dict]) -> list[dict[str, np.ndarray]]:
    import onnx.version_converter
    from onnx.reference import ReferenceEvaluator

    from fluidml_xc.cast_rules import REFERENCE_OPS
    model = onnx.load(str(path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 19:  # onnx.reference implements QuantizeLinear/DequantizeLinear from opset 19 on
        model = onnx.version_converter.convert_version(model, 19)
    evaluator = ReferenceEvaluator(model, new_ops=REFERENCE_OPS)
    names = [o.name for o in model.graph.output]
    return [dict(zip(names, evaluator.run(None, feed))) for feed in feeds]


def quantize_and_check(tmp_path: Path, model: onnx.ModelProto, input_name: str, shape, board: str, extra: list[str],
                       steps_tolerance: float = 1.0, abs_tolerance: float = 1e-5, runs: str = "3") -> dict:
    """Quantize, build and run through the CLI; outputs a DequantizeLinear produces must be within
    `steps_tolerance` quantization steps of onnx.reference, float outputs within `abs_tolerance`."""
    model_path = tmp_path / "model.onnx"
    onnx.save(model, str(model_path))
    calib = write_samples(tmp_path / "calib", input_name, shape, 6, seed=1)
    held = write_samples(tmp_path / "held", input_name, shape, 3, seed=2)
    proc = cli("quantize", str(model_path), "--calibration", str(calib), "--eval", str(held), "-o", "model.int8.onnx", "--board", board,
               "--runs", runs, "--rounds", "1", "--warmup", "1", "--json", *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert proc.stderr.strip() == ""  # no progress bar when stderr is not a terminal
    int8_path = tmp_path / "model.int8.onnx"
    int8 = onnx.load(str(int8_path))
    assert report["board"] == board and report["calibration_samples"] == 6 and report["eval_samples"] == 3

    from fluidml_xc.run.execute import run_artifact
    feeds = load_dir(held)
    ours_float = [run_artifact(report["float_figures"]["artifact"], f).outputs for f in feeds]
    ours_int8 = [run_artifact(report["int8_figures"]["artifact"], f).outputs for f in feeds]
    ort_int8 = ort_run(int8_path, feeds)  # ORT's fused QLinear* kernels (all graph optimizations)
    ort_plain = ort_run(int8_path, feeds, fused=False)  # ORT running the model's QDQ arithmetic as written
    exact = reference_run(int8_path, feeds)  # the model's integer arithmetic as the ONNX spec defines it
    ort_float = ort_run(model_path, feeds)
    names = [o.name for o in model.graph.output]
    steps = output_steps(int8)
    for name in names:
        got, fused, plain, want = (np.stack([o[name] for o in outs]).astype(np.float64)
                                   for outs in (ours_int8, ort_int8, ort_plain, exact))
        tol = steps_tolerance * steps[name] if name in steps else abs_tolerance
        # The oracle is onnx.reference, not ORT: on x86-64 without VNNI, ORT's u8s8 integer kernels (fused or not)
        # saturate 16-bit pair sums, tenths off on these models. We must be within one step of the spec's arithmetic,
        # and no farther from ORT's fused kernels than they are from it.
        ort_self = float(np.max(np.abs(fused - plain)))
        ort_off = float(np.max(np.abs(fused - want)))
        assert np.max(np.abs(got - want)) <= tol * (1 + 1e-6), (name, np.max(np.abs(got - want)), tol)
        assert np.max(np.abs(got - fused)) <= (ort_off + tol) * (1 + 1e-6), (name, np.max(np.abs(got - fused)), ort_off, tol)
        assert report["vs_ort_int8"][name] == pytest.approx(np.max(np.abs(got - fused)), abs=1e-12)
        assert report["vs_ort_int8_unfused"][name] == pytest.approx(np.max(np.abs(got - plain)), abs=1e-12)
        assert report["ort_fused_vs_unfused"][name] == pytest.approx(ort_self, abs=1e-12)
    # the float build matches ONNX Runtime's float model
    for ours, ort in zip(ours_float, ort_float):
        for name in names:
            np.testing.assert_allclose(ours[name], ort[name], rtol=1e-4, atol=1e-4)
    # the report's figures: numpy on the same outputs
    for entry in report["accuracy"]:
        name = entry["name"]
        want = numpy_figures([o[name] for o in ours_float], [o[name] for o in ours_int8])
        for key, value in want.items():
            assert entry[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, key)
    for entry in report["ort_accuracy"]:
        want = numpy_figures([o[entry["name"]] for o in ort_float], [o[entry["name"]] for o in ort_int8])
        for key, value in want.items():
            assert entry[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (entry["name"], key)
    for kind in ("float_figures", "int8_figures"):
        fig = report[kind]
        manifest = json.loads((Path(fig["artifact"]) / "manifest.json").read_text())
        assert fig["arena_bytes"] == manifest["memory"]["arena_bytes"] and fig["weights_bytes"] == manifest["weights_bytes"]
        assert fig["median_ms"] > 0 and fig["peak_rss_bytes"] > 0
    assert report["int8_figures"]["weights_bytes"] < report["float_figures"]["weights_bytes"]
    return report


def test_cnn_static_qdq_x86_64(tmp_path):
    report = quantize_and_check(tmp_path, small_cnn(), "image", (1, 3, 12, 12), "x86_64", ["--per-channel"])
    logits = report["accuracy"][0]
    assert logits["top1_agreement"] is not None and logits["top5_agreement"] is not None
    assert logits["cosine"] > 0.99
    assert report["config"]["format"] == "qdq" and report["config"]["per_channel"]
    assert report["float_figures"]["ort_median_ms"] > 0  # this machine: ONNX Runtime side by side
    # passes/qdq_fusion.py: DequantizeLinear -> Conv -> QuantizeLinear ran as QLinearConv (int8 kernels)
    ops = json.loads((Path(report["int8_figures"]["artifact"]) / "manifest.json").read_text())["op_counts"]
    assert ops.get("QLinearConv") == 2 and "Conv" not in ops, ops


def test_cnn_static_qoperator_x86_64(tmp_path):
    """QOperator: QLinearConv (standard ONNX) quantized; Add, GlobalAveragePool, Gemm (contrib QLinear* ops in ORT) stay float."""
    report = quantize_and_check(tmp_path, small_cnn(), "image", (1, 3, 12, 12), "x86_64", ["--format", "qoperator"])
    assert "logits" not in output_steps(onnx.load(str(tmp_path / "model.int8.onnx")))  # float Gemm: within abs_tolerance
    model = onnx.load(str(tmp_path / "model.int8.onnx"))
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
    assert sum(n.op_type == "QLinearConv" for n in model.graph.node) == 2
    ops = json.loads((Path(report["int8_figures"]["artifact"]) / "manifest.json").read_text())["op_counts"]
    assert ops.get("QLinearConv") == 2, ops


def test_encoder_static_qdq_x86_64(tmp_path):
    report = quantize_and_check(tmp_path, small_encoder(), "x", (1, 8, 16), "x86_64", ["--per-channel"])
    ops = json.loads((Path(report["int8_figures"]["artifact"]) / "manifest.json").read_text())["op_counts"]
    assert ops.get("QLinearMatMul", 0) >= 4, ops  # query, key, value, attn_out, ffn_in, ffn_out with constant weights


def test_encoder_dynamic_x86_64(tmp_path):
    # the integer MatMuls match; the float ops after them (Softmax, LayerNorm) may round differently from ORT's
    report = quantize_and_check(tmp_path, small_encoder(), "x", (1, 8, 16), "x86_64", ["--dynamic"])
    int8 = onnx.load(str(tmp_path / "model.int8.onnx"))
    ops = {n.op_type for n in int8.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    entry = report["accuracy"][0]
    assert entry["top1_agreement"] is None  # [1, 8, 16] is not classifier-shaped
    assert entry["cosine"] > 0.99


@pytest.mark.qemu
@pytest.mark.parametrize("case", ["cnn-qdq", "encoder-dynamic"])
def test_rpi4_under_qemu(case, tmp_path):
    require_emulator("rpi4")
    model, name, shape, extra = {"cnn-qdq": (small_cnn(), "image", (1, 3, 12, 12), ["--per-channel"]),
                                 "encoder-dynamic": (small_encoder(), "x", (1, 8, 16), ["--dynamic"])}[case]
    report = quantize_and_check(tmp_path, model, name, shape, "rpi4", extra, runs="1")
    assert report["emulated"] is True
    assert report["float_figures"]["ort_median_ms"] is None  # no ORT timing beside an emulated board


def test_explain_lists_nodes_and_exclude_leaves_them_float(tmp_path):
    from fluidml_xc.quantize import QuantConfig, QuantizeOptions, run_quantize

    model_path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(model_path))
    calib = write_samples(tmp_path / "calib", "image", (1, 3, 12, 12), 4, seed=3)
    options = QuantizeOptions(model=model_path, calibration=calib, output=tmp_path / "a.onnx", build=False, explain=20, progress=False)
    report = run_quantize(options)
    rows = {r.node: r for r in report.explain}
    assert {"conv1", "conv2", "classifier"} <= set(rows), sorted(rows)
    assert report.eval_from.startswith("all 4 calibration samples")
    for r in report.explain:
        assert r.rel_err >= 0 and np.isfinite(r.added_err)
    # per-node error, recomputed here: the classifier's output in the QDQ model against the float model
    float_model, quant = onnx.load(str(model_path)), onnx.load(str(tmp_path / "a.onnx"))
    name = rows["conv2"].output
    counterpart = name + "_DequantizeLinear_Output"
    for m in (float_model, quant):
        m.graph.output.append(helper.make_empty_tensor_value_info(name if m is float_model else counterpart))
    (tmp_path / "f_out.onnx").write_bytes(float_model.SerializeToString())
    (tmp_path / "q_out.onnx").write_bytes(quant.SerializeToString())
    feeds = load_dir(calib)
    f = np.stack([o[name] for o in ort_run(tmp_path / "f_out.onnx", feeds)]).astype(np.float64)
    q = np.stack([o[counterpart] for o in ort_run(tmp_path / "q_out.onnx", feeds)]).astype(np.float64)
    assert rows["conv2"].rel_err == pytest.approx(np.sqrt(np.sum((q - f) ** 2) / np.sum(f ** 2)), rel=1e-9)

    excluded = run_quantize(QuantizeOptions(model=model_path, calibration=calib, output=tmp_path / "b.onnx", build=False,
                                            config=QuantConfig(exclude=("classifier", "GlobalAveragePool")), progress=False))
    model = onnx.load(str(tmp_path / "b.onnx"))
    producers = {o: n for n in model.graph.node for o in n.output}
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    assert producers["logits"] is gemm  # no QuantizeLinear/DequantizeLinear after the excluded Gemm
    assert all(producers.get(i) is None or producers[i].op_type != "DequantizeLinear" for i in gemm.input[1:])  # float weights
    assert excluded.config["exclude"] == ("classifier", "GlobalAveragePool")


def test_qoperator_and_methods_quantize(tmp_path):
    from fluidml_xc.quantize import QuantConfig, QuantizeOptions, run_quantize

    model_path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(model_path))
    calib = write_samples(tmp_path / "calib", "image", (1, 3, 12, 12), 4, seed=4)
    for k, (fmt, method) in enumerate([("qoperator", "minmax"), ("qdq", "entropy"), ("qdq", "percentile")]):
        out = tmp_path / f"m{k}.onnx"
        report = run_quantize(QuantizeOptions(model=model_path, calibration=calib, output=out, build=False, progress=False,
                                              config=QuantConfig(format=fmt, method=method), explain=20))
        ops = {n.op_type for n in onnx.load(str(out)).graph.node}
        assert ("QLinearConv" in ops) == (fmt == "qoperator") and ("QuantizeLinear" in ops)
        assert report.ort_accuracy[0].cosine > 0.9
        # a Relu folded into QLinearConv: its quantized output is matched with the Relu's output, not the Conv's
        rows = {r.node: r for r in report.explain}
        assert rows["conv1"].op_type == "Conv+Relu" and rows["conv1"].rel_err < 0.1, (fmt, report.explain)


# ---- bad input: one line, exit code 2, nothing written ----

def input_error(proc: subprocess.CompletedProcess) -> str:
    """modelrun.one_line_error of a run refused as bad input (errors.InputError: exit code 2)."""
    assert proc.returncode == 2, proc.stderr
    return one_line_error(proc)


@pytest.fixture
def cnn_dir(tmp_path):
    onnx.save(small_cnn(), str(tmp_path / "cnn.onnx"))
    return tmp_path


def _bad(cnn_dir: Path, data, *extra: str) -> str:
    line = input_error(cli("quantize", "cnn.onnx", "--calibration", str(data), "-o", "out.onnx", "--no-build", *extra, cwd=cnn_dir))
    assert not (cnn_dir / "out.onnx").exists()
    assert not list(cnn_dir.glob(".out.onnx*"))
    return line


def test_bad_calibration_data(cnn_dir):
    good = np.zeros((1, 3, 12, 12), np.float32)
    (cnn_dir / "names").mkdir()
    np.savez(cnn_dir / "names" / "s0.npz", input=good)
    assert "unknown 'input'; missing 'image'" in _bad(cnn_dir, "names")
    np.savez(cnn_dir / "shape.npz", image=np.zeros((4, 1, 3, 10, 12), np.float32))
    assert "shape 1x3x10x12, the model takes 1x3x12x12" in _bad(cnn_dir, "shape.npz")
    np.savez(cnn_dir / "dtype.npz", image=np.zeros((4, 1, 3, 12, 12), np.float64))
    assert "dtype float64, the model takes float32" in _bad(cnn_dir, "dtype.npz")
    (cnn_dir / "empty").mkdir()
    assert "holds no .npz files" in _bad(cnn_dir, "empty")
    assert "no such file or directory" in _bad(cnn_dir, "nowhere")
    (cnn_dir / "corrupt.npz").write_bytes(b"not a zip")
    assert "not a valid .npz" in _bad(cnn_dir, "corrupt.npz")
    (cnn_dir / "zero.npz").write_bytes(b"")
    assert "not a valid .npz" in _bad(cnn_dir, "zero.npz")
    (cnn_dir / "mixed").mkdir()
    np.savez(cnn_dir / "mixed" / "a.npz", image=good)
    np.savez(cnn_dir / "mixed" / "b.npz", image=good.astype(np.float16))
    assert "b.npz: input 'image' has dtype float16" in _bad(cnn_dir, "mixed")


def test_bad_model_and_options(cnn_dir):
    np.savez(cnn_dir / "calib.npz", image=np.zeros((2, 1, 3, 12, 12), np.float32))
    quantized = _quantized(cnn_dir)
    assert "q.onnx is already quantized (it has DequantizeLinear, QuantizeLinear)" in input_error(
        cli("quantize", quantized, "-c", "calib.npz", "-o", "q2.onnx", "--no-build", cwd=cnn_dir))
    assert "missing.onnx: no such model file" in input_error(cli("quantize", "missing.onnx", "-c", "calib.npz", "-o", "x.onnx", cwd=cnn_dir))
    assert "--exclude 'nope'" in _bad(cnn_dir, "calib.npz", "--exclude", "nope")
    (cnn_dir / "out.onnx").write_bytes(b"user data")
    line = input_error(cli("quantize", "cnn.onnx", "-c", "calib.npz", "-o", "out.onnx", "--no-build", cwd=cnn_dir))
    assert "already exists; pass --force" in line
    assert (cnn_dir / "out.onnx").read_bytes() == b"user data"


def _quantized(cnn_dir: Path) -> str:
    from fluidml_xc.quantize import QuantizeOptions, run_quantize
    run_quantize(QuantizeOptions(model=cnn_dir / "cnn.onnx", calibration=cnn_dir / "calib.npz", output=cnn_dir / "q.onnx",
                                 build=False, progress=False))
    return "q.onnx"


# ---- passes/qdq_fusion.py on hand-written QDQ graphs ----

def _qdq_conv_model(bias_scale_factor: float = 1.0, depthwise: bool = False, extra_reader: bool = False) -> onnx.ModelProto:
    c, m = (4, 4) if depthwise else (3, 5)
    group = 4 if depthwise else 1
    gen = np.random.default_rng(7)
    w_s = gen.uniform(0.01, 0.03, m).astype(np.float32)
    consts = {"x_s": np.array(0.05, np.float32), "x_z": np.array(3, np.int8),
              "w_q": gen.integers(-127, 128, (m, c // group, 3, 3)).astype(np.int8), "w_s": w_s, "w_z": np.zeros(m, np.int8),
              "b_q": gen.integers(-500, 500, m).astype(np.int32), "b_s": (np.float32(0.05) * w_s * np.float32(bias_scale_factor)),
              "b_z": np.zeros(m, np.int32), "y_s": np.array(0.2, np.float32), "y_z": np.array(-4, np.int8),
              "mw_q": gen.integers(-127, 128, (8, 6)).astype(np.int8), "mw_s": np.array(0.02, np.float32), "mw_z": np.array(0, np.int8),
              "o_s": np.array(0.3, np.float32), "o_z": np.array(1, np.int8)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wf"], axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_z"], ["bf"], axis=0),
        helper.make_node("Conv", ["xf", "wf", "bf"], ["y"], name="conv", pads=[1, 1, 1, 1], group=group),
        helper.make_node("QuantizeLinear", ["y", "y_s", "y_z"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_s", "y_z"], ["yf"]),
        helper.make_node("Reshape", ["yf", "shape"], ["flat"]),
        helper.make_node("QuantizeLinear", ["flat", "y_s", "y_z"], ["fq"]),
        helper.make_node("DequantizeLinear", ["fq", "y_s", "y_z"], ["ff"]),
        helper.make_node("DequantizeLinear", ["mw_q", "mw_s", "mw_z"], ["mwf"]),
        helper.make_node("MatMul", ["ff", "mwf"], ["o"], name="matmul"),
        helper.make_node("QuantizeLinear", ["o", "o_s", "o_z"], ["oq"]),
        helper.make_node("DequantizeLinear", ["oq", "o_s", "o_z"], ["out"]),
    ]
    outputs = ["out"] + (["y"] if extra_reader else [])
    consts["shape"] = np.array([-1, 8], np.int64)
    return graph_model(nodes, {"x": np.zeros((1, c, 4, 4), np.float32)}, outputs, consts, opset=17, infer=True)


def _fused_ops(model: onnx.ModelProto) -> dict[str, int]:
    from collections import Counter
    from fluidml_xc.frontend.importer import FrontendOptions, import_model
    from fluidml_xc.passes import run_passes
    graph = import_model(model, FrontendOptions(), name="m")
    run_passes(graph)
    return dict(Counter(n.op_type for n in graph.nodes))


def test_qdq_fusion_matches_ort_running_the_model_as_written(tmp_path):
    from modelrun import compile_and_run
    model = _qdq_conv_model()
    ops = _fused_ops(model)
    assert ops.get("QLinearConv") == 1 and ops.get("QLinearMatMul") == 1 and "Conv" not in ops and "MatMul" not in ops, ops
    onnx.save(model, str(tmp_path / "qdq.onnx"))
    feeds = [{"x": np.random.default_rng(k).standard_normal((1, 3, 4, 4)).astype(np.float32) * 2} for k in range(3)]
    want = ort_run(tmp_path / "qdq.onnx", feeds, fused=False)
    for k, feed in enumerate(feeds):
        got = compile_and_run(model, feed, tmp_path / f"b{k}")
        np.testing.assert_array_equal(got["out"], want[k]["out"])


@pytest.mark.parametrize(("why", "kwargs"), [("bias scale is not x_scale * w_scale", {"bias_scale_factor": 1.5}),
                                             ("depthwise: the int8 kernel's plain loops", {"depthwise": True}),
                                             ("the float result has another reader", {"extra_reader": True})])
def test_qdq_fusion_leaves_conv_float(why, kwargs):
    ops = _fused_ops(_qdq_conv_model(**kwargs))
    assert "Conv" in ops and "QLinearConv" not in ops, (why, ops)
    assert ops.get("QLinearMatMul") == 1


def test_dynamic_evaluates_every_sample(tmp_path):
    from fluidml_xc.quantize import QuantConfig, QuantizeOptions, run_quantize

    model_path = tmp_path / "enc.onnx"
    onnx.save(small_encoder(), str(model_path))
    data = write_samples(tmp_path / "data", "x", (1, 8, 16), 9, seed=5)
    report = run_quantize(QuantizeOptions(model=model_path, calibration=data, output=tmp_path / "d.onnx", build=False,
                                          progress=False, config=QuantConfig(dynamic=True)))
    assert report.eval_samples == 9 and "dynamic quantization calibrates nothing" in report.eval_from
    assert report.ort_accuracy[0].cosine > 0.99


def test_qdq_gather_dequantizes_only_the_rows_it_reads(tmp_path):
    from modelrun import compile_and_run
    gen = np.random.default_rng(11)
    consts = {"table_q": gen.integers(-128, 128, (500, 16)).astype(np.int8), "t_s": np.array(0.01, np.float32),
              "t_z": np.array(5, np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["table_q", "t_s", "t_z"], ["table"]),
             helper.make_node("Gather", ["table", "ids"], ["emb"], name="embed", axis=0),
             helper.make_node("Relu", ["emb"], ["out"])]
    ids = np.array([[0, 499, 7, 7, 250]], np.int64)
    model = graph_model(nodes, {"ids": ids}, ["out"], consts, opset=17, infer=True)
    ops = _fused_ops(model)
    assert ops.get("Gather") == 1 and ops.get("DequantizeLinear") == 1, ops
    from fluidml_xc.frontend.importer import FrontendOptions, import_model
    from fluidml_xc.passes import run_passes
    graph = import_model(model, FrontendOptions(), name="m")
    run_passes(graph)
    gather = next(n for n in graph.nodes if n.op_type == "Gather")
    assert graph.tensors[gather.inputs[0]].dtype == np.int8 and graph.tensors[gather.outputs[0]].shape == (1, 5, 16)
    onnx.save(model, str(tmp_path / "g.onnx"))
    want = ort_run(tmp_path / "g.onnx", [{"ids": ids}], fused=False)[0]["out"]
    np.testing.assert_array_equal(compile_and_run(model, {"ids": ids}, tmp_path / "b")["out"], want)


def test_dynamic_dims_fixed_to_the_samples(tmp_path):
    from fluidml_xc.quantize import QuantizeOptions, run_quantize

    model = small_cnn()
    for vi in (model.graph.input[0], model.graph.output[0]):
        dim = vi.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "N"
    del model.graph.value_info[:]
    onnx.save(model, str(tmp_path / "dyn.onnx"))
    np.savez(tmp_path / "s.npz", image=np.random.default_rng(0).standard_normal((3, 2, 3, 12, 12)).astype(np.float32))
    report = run_quantize(QuantizeOptions(model=tmp_path / "dyn.onnx", calibration=tmp_path / "s.npz", output=tmp_path / "q.onnx",
                                          build=False, progress=False))
    dims = [d.dim_value for d in onnx.load(str(tmp_path / "q.onnx")).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 12, 12]
    assert report.ort_accuracy[0].shape == (2, 10) and report.ort_accuracy[0].top1 is not None


def test_progress_bar_over_calibration_samples_when_asked(tmp_path, capsys):
    from fluidml_xc.quantize import QuantizeOptions, run_quantize

    onnx.save(small_cnn(), str(tmp_path / "cnn.onnx"))
    calib = write_samples(tmp_path / "calib", "image", (1, 3, 12, 12), 3, seed=6)
    run_quantize(QuantizeOptions(model=tmp_path / "cnn.onnx", calibration=calib, output=tmp_path / "q.onnx", build=False, progress=True))
    err = capsys.readouterr().err
    assert "calibrating (minmax)" in err and "/3 [" in err
    run_quantize(QuantizeOptions(model=tmp_path / "cnn.onnx", calibration=calib, output=tmp_path / "q2.onnx", build=False, progress=False))
    assert capsys.readouterr().err == ""


def test_reduce_range_weights_run_avx2_pair_sums(tmp_path):
    """--reduce-range: 7-bit weights (within +-64), which x86_64-v3 (AVX2, no VNNI) runs as exact vpmaddubsw pair
    sums (kernels/qgemm.py Config.pairs); the build matches onnx.reference."""
    from onnx import version_converter
    from onnx.reference import ReferenceEvaluator

    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.quantize import QuantConfig, QuantizeOptions, run_quantize
    from fluidml_xc.run.backend import compile_model
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    model_path, out = tmp_path / "cnn.onnx", tmp_path / "q.onnx"
    onnx.save(small_cnn(), str(model_path))
    calib = write_samples(tmp_path / "calib", "image", (1, 3, 12, 12), 4, seed=5)
    report = run_quantize(QuantizeOptions(model=model_path, calibration=calib, output=out, build=False, progress=False,
                                          config=QuantConfig(format="qoperator", per_channel=True, reduce_range=True)))
    assert "7-bit weights" in report.table()
    model = onnx.load(str(out))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    weights = [inits[n.input[3]] for n in model.graph.node if n.op_type == "QLinearConv"]
    assert weights and all(w.dtype == np.int8 and np.abs(w.astype(int)).max() <= 64 for w in weights)
    assert "llvm.x86.avx2.pmadd.ub.sw" in lower(import_graph(model), machine_spec(get_board("x86_64-v3")), LowerOptions()).ir_text
    feeds = {"image": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
    reference = ReferenceEvaluator(version_converter.convert_version(model, 21))  # its QLinear ops' oldest kernels
    np.testing.assert_allclose(compile_model(model, "x86_64-v3")(feeds)[0], reference.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
