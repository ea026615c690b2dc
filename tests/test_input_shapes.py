"""A new user's first hour (#23): no silent wrong shapes. `--input-shape` must agree with the sizes the model
declares and give one size to every dimension name shared across inputs (else one line naming the input, the
dimension, its declared name and both sizes, exit 2, nothing written); the dynamic-shape error shows the declared
shape with its names; an If on a run-time input names that input and the `--bind` to try; inspect and the manifest
show the declared shapes; quantize takes --input-shape and --bind and reports ONNX Runtime's trouble in one line
of ours. Built artifacts are compared with ONNX Runtime."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from modelrun import cli, one_line_error, proto_model, run

rng = np.random.default_rng(23)


@pytest.fixture(autouse=True)
def _seeded_rng():
    """Every test draws the same weights and inputs whichever tests ran before it on its worker."""
    global rng
    rng = np.random.default_rng(23)


def _save(model: onnx.ModelProto, path) -> str:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    return proto_model(nodes, inputs, outputs, inits, ir_version=None)


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _refused(proc, tmp_path, out, *parts: str) -> str:
    """Exit 2, one line holding every part, no artifact directory and no build/ left behind."""
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    for part in parts:
        assert part in line, line
    assert not (tmp_path / out).exists() and not (tmp_path / "build").exists()
    return line


# ---- 1: a declared fixed dimension ----

def test_fixed_dimension_must_match_the_declared_size(tmp_path):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TP.FLOAT, [2, "N"])],
                   [helper.make_tensor_value_info("y", TP.FLOAT, [2, "N"])])
    path = _save(model, tmp_path / "relu.onnx")
    _refused(cli("build", path, "--input-shape", "x=3x4", "-o", "out", cwd=tmp_path), tmp_path, "out",
             "dimension 0 of input 'x' size 3", "declares it 2 (shape [2, N])", "pass --input-shape x=2x4")
    _refused(cli("build", path, "--input-shape", "x=2x4", "--input-shape", "x=2x5", "-o", "out", cwd=tmp_path), tmp_path,
             "out", "--input-shape gives input 'x' two shapes, 2x4 and 2x5: pass it once")
    ok = cli("build", path, "--input-shape", "x=2x5", "--input-shape", "x=2x5", "-o", "out", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    x = rng.standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_array_equal(run(tmp_path / "out", {"x": x})["y"], _ort(model, {"x": x})[0])
    assert cli("verify", "out", cwd=tmp_path).returncode == 0


# ---- 2: dimensions that share a name ----

def _lstm() -> onnx.ModelProto:
    w = numpy_helper.from_array((rng.standard_normal((1, 16, 3)) * 0.5).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((1, 16, 4)) * 0.5).astype(np.float32), "R")
    return _model([helper.make_node("LSTM", ["X", "W", "R", "", "", "h0"], ["Y", "Y_h"], hidden_size=4)],
                  [helper.make_tensor_value_info("X", TP.FLOAT, [1, "B", 3]), helper.make_tensor_value_info("h0", TP.FLOAT, [1, "B", 4])],
                  [helper.make_tensor_value_info("Y", TP.FLOAT, [1, 1, "B", 4]), helper.make_tensor_value_info("Y_h", TP.FLOAT, [1, "B", 4])],
                  [w, r])


def test_dimensions_sharing_a_name_take_one_size(tmp_path):
    model = _lstm()
    path = _save(model, tmp_path / "lstm.onnx")
    _refused(cli("build", path, "--input-shape", "X=1x2x3", "--input-shape", "h0=1x1x4", "-o", "out", cwd=tmp_path),
             tmp_path, "out", "dimension 1 of input 'h0' (declared 'B') size 1", "--input-shape X=1x2x3 gives 'B' size 2",
             "pass --input-shape h0=1x2x4")
    # a --bind value takes part: h0 bound to a 1x3x4 array while X says B=2
    np.save(tmp_path / "h0.npy", np.zeros((1, 3, 4), np.float32))
    _refused(cli("build", path, "--input-shape", "X=1x2x3", "--bind", "h0=h0.npy", "-o", "out", cwd=tmp_path),
             tmp_path, "out", "--bind h0 gives dimension 1 of input 'h0' (declared 'B') size 3")
    # h0 follows from X: B = 4 (the batch of the recurrent model)
    ok = cli("build", path, "--input-shape", "X=1x4x3", "-o", "out", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [(i["name"], i["shape"]) for i in manifest["inputs"]] == [("X", [1, 4, 3]), ("h0", [1, 4, 4])]
    feeds = {"X": rng.standard_normal((1, 4, 3)).astype(np.float32), "h0": rng.standard_normal((1, 4, 4)).astype(np.float32)}
    ours, want = run(tmp_path / "out", feeds), _ort(model, feeds)
    np.testing.assert_allclose(ours["Y_h"], want[1], rtol=1e-5, atol=1e-6)
    assert ours["Y_h"].shape == (1, 4, 4)


# ---- 7: the dynamic-shape error, the manifest and inspect show the declared names ----

def test_dynamic_shape_error_shows_the_declared_names_and_inspect_shows_them(tmp_path):
    model = _model([helper.make_node("Relu", ["input"], ["y"])],
                   [helper.make_tensor_value_info("input", TP.FLOAT, ["batch", "sequence", 80])],
                   [helper.make_tensor_value_info("y", TP.FLOAT, ["batch", "sequence", 80])])
    path = _save(model, tmp_path / "dyn.onnx")
    _refused(cli("build", path, "-o", "out", cwd=tmp_path), tmp_path, "out",
             "dynamic input shape: input 'input' has shape [batch, sequence, 80]: pass --input-shape input=1x<sequence>x80")
    lstm = _save(_lstm(), tmp_path / "lstm.onnx")
    _refused(cli("build", lstm, "-o", "out", cwd=tmp_path), tmp_path, "out",
             "input 'X' has shape [1, B, 3]: pass --input-shape X=1x1x3 ('h0' then follows")
    ok = cli("build", path, "--input-shape", "input=2x7x80", "-o", "out", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["declared_shapes"] == {"input": ["batch", "sequence", 80]}
    shown = cli("inspect", "out", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "input  [batch, sequence, 80] -> 2x7x80 float32" in shown.stdout


def test_inspect_a_model_without_inputs(tmp_path):
    const = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(2, 2) - 1.5)
    model = _model([helper.make_node("Constant", [], ["c"], value=const), helper.make_node("Relu", ["c"], ["y"])], [],
                   [helper.make_tensor_value_info("y", TP.FLOAT, [2, 2])])
    ok = cli("build", _save(model, tmp_path / "const.onnx"), "-o", "out", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    shown = cli("inspect", "out", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "inputs: none" in shown.stdout
    np.testing.assert_array_equal(run(tmp_path / "out", {})["y"], _ort(model, {})[0])


@pytest.mark.parametrize("text, expected", [
    ("x=1x3x48x16..1024", "has 4 dims but the model declares x as [2, N]"),
    ("x=2,5", "separate the sizes with 'x': x=2x5"),
    ("x=2x?", "every dimension must be a size"),
])
def test_bad_input_shape_text_is_one_line(tmp_path, text, expected):
    path = _save(_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TP.FLOAT, [2, "N"])],
                        [helper.make_tensor_value_info("y", TP.FLOAT, [2, "N"])]), tmp_path / "m.onnx")
    _refused(cli("build", path, "--input-shape", text, "-o", "out", cwd=tmp_path), tmp_path, "out", expected)


# ---- 6: an If on a sample-rate input ----

def vad_model(matmul: bool = False) -> onnx.ModelProto:
    """audio [1, T], sr scalar: if sr == 16000 the audio is cut into rows of 64, else of 48, each branch an LSTM
    over the rows (or, `matmul`, a projection MatMul and a mean): ORT runs either; at T = 512 only the 16 kHz
    branch fits, at T = 480 only the 8 kHz one."""
    def branch(tag: str, width: int) -> onnx.GraphProto:
        inits = [numpy_helper.from_array(np.array([-1, width] if matmul else [-1, 1, width], np.int64), f"{tag}_shape")]
        nodes = [helper.make_node("Reshape", ["audio", f"{tag}_shape"], [f"{tag}_x"])]
        if matmul:
            inits.append(numpy_helper.from_array((rng.standard_normal((width, 4)) * 0.2).astype(np.float32), f"{tag}_W"))
            nodes += [helper.make_node("MatMul", [f"{tag}_x", f"{tag}_W"], [f"{tag}_p"]),
                      helper.make_node("ReduceMean", [f"{tag}_p"], [f"{tag}_out"], axes=[0], keepdims=1)]
        else:
            inits += [numpy_helper.from_array((rng.standard_normal((1, 16, width)) * 0.2).astype(np.float32), f"{tag}_W"),
                      numpy_helper.from_array((rng.standard_normal((1, 16, 4)) * 0.2).astype(np.float32), f"{tag}_R")]
            nodes += [helper.make_node("LSTM", [f"{tag}_x", f"{tag}_W", f"{tag}_R"], ["", f"{tag}_h"], hidden_size=4),
                      helper.make_node("Squeeze", [f"{tag}_h", "ax0"], [f"{tag}_out"])]
        return helper.make_graph(nodes, tag, [], [helper.make_empty_tensor_value_info(f"{tag}_out")], inits)
    nodes = [helper.make_node("Equal", ["sr", "k16000"], ["Equal_0_C"]),
             helper.make_node("If", ["Equal_0_C"], ["feat"], then_branch=branch("t", 64), else_branch=branch("e", 48), name="If_1")]
    return _model(nodes, [helper.make_tensor_value_info("audio", TP.FLOAT, [1, "T"]), helper.make_tensor_value_info("sr", TP.INT64, [])],
                  [helper.make_tensor_value_info("feat", TP.FLOAT, [1, 4])],
                  [numpy_helper.from_array(np.array(16000, np.int64), "k16000"), numpy_helper.from_array(np.array([0], np.int64), "ax0")])


def test_if_on_an_input_names_it_and_the_bind_to_try(tmp_path):
    model = vad_model()
    path = _save(model, tmp_path / "vad.onnx")
    _refused(cli("build", path, "--input-shape", "audio=1x512", "-o", "out", cwd=tmp_path), tmp_path, "out",
             "its condition 'Equal_0_C' (from input 'sr') is computed at run time", "the else branch fails",
             "--bind sr=16000 keeps the then branch")
    _refused(cli("build", path, "--input-shape", "audio=1x480", "-o", "out", cwd=tmp_path), tmp_path, "out",
             "the then branch fails", "--bind sr=VALUE, values for which the condition is false")
    ok = cli("build", path, "--input-shape", "audio=1x512", "--bind", "sr=16000", "-o", "out", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    audio = rng.standard_normal((1, 512)).astype(np.float32)
    np.testing.assert_allclose(run(tmp_path / "out", {"audio": audio})["feat"],
                               _ort(model, {"audio": audio, "sr": np.array(16000, np.int64)})[0], rtol=1e-5, atol=1e-6)
    assert cli("verify", "out", cwd=tmp_path).returncode == 0
    assert "sr     bound at build time (--bind) to 16000" in cli("inspect", "out", cwd=tmp_path).stdout


# ---- 8: quantize --input-shape / --bind, errors of ours ----

def _samples(directory, count: int, width: int, sr: int | None):
    directory.mkdir()
    for i in range(count):
        feeds = {"audio": rng.standard_normal((1, width)).astype(np.float32)}
        if sr is not None:
            feeds["sr"] = np.array(sr, np.int64)
        np.savez(directory / f"s{i}.npz", **feeds)
    return directory


def test_quantize_takes_input_shape_and_bind_and_its_errors_are_one_line(tmp_path):
    model = vad_model(matmul=True)
    path = _save(model, tmp_path / "vad.onnx")
    _samples(tmp_path / "cal", 4, 512, 16000)
    proc = cli("quantize", path, "-c", "cal", "-o", "q.onnx", "--no-build", cwd=tmp_path)
    _refused(proc, tmp_path, "q.onnx", "(from input 'sr')", "--bind sr=16000 keeps the then branch")
    assert "float.onnx" not in proc.stderr and "skip_optimization" not in proc.stderr
    proc = cli("quantize", path, "-c", "cal", "-o", "q.onnx", "--input-shape", "audio=2x512", "--no-build", cwd=tmp_path)
    _refused(proc, tmp_path, "q.onnx", "dimension 0 of input 'audio' size 2, but the model declares it 1")
    proc = cli("quantize", path, "-c", "cal", "-o", "q.onnx", "--input-shape", "audio=1x256", "--bind", "sr=16000", cwd=tmp_path)
    _refused(proc, tmp_path, "q.onnx", "input 'audio' has shape 1x512, the model takes 1x256")
    proc = cli("quantize", path, "-c", "cal", "-o", "q.onnx", "--bind", "sr=8000", cwd=tmp_path)
    _refused(proc, tmp_path, "q.onnx", "input 'sr' is 16000 but --bind sr freezes it to 8000")
    # the fix: sr bound (the samples may hold it or not), the If folded before ONNX Runtime sees the model
    proc = cli("quantize", path, "-c", "cal", "-o", "q.onnx", "--input-shape", "audio=1x512", "--bind", "sr=16000",
               "--runs", "2", "--rounds", "1", "--warmup", "0", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    q = onnx.load(str(tmp_path / "q.onnx"))
    assert [i.name for i in q.graph.input] == ["audio"] and "If" not in {n.op_type for n in q.graph.node}
    assert "QuantizeLinear" in {n.op_type for n in q.graph.node}
    audio = rng.standard_normal((1, 512)).astype(np.float32)
    want = _ort(model, {"audio": audio, "sr": np.array(16000, np.int64)})[0]
    np.testing.assert_allclose(_ort(q, {"audio": audio})[0], want, atol=0.05)
    assert max(report["vs_ort_int8"].values()) < 1e-4
    assert report["accuracy"][0]["cosine"] > 0.99


def test_onnx_runtime_reasons_lose_status_prefix_temporary_names_and_traceback():
    import tempfile

    from fluidml_xc.quantize.inputs import clean
    tmp = tempfile.gettempdir()
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
            "onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : Load model from "
            f"{tmp}/fxc-quantize-ab12/float.onnx failed:Node (If_1) Op (If) [TypeInferenceError] bad; see {tmp}/ort.quant.x/augmented_model.onnx\n")
    assert clean(text) == "Node (If_1) Op (If) [TypeInferenceError] bad; see (temporary file)"
