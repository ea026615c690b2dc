"""`fluidml-xc build --bind NAME=VALUE` / `NAME=FILE.npy`: a graph input frozen to a build-time constant.
The output's shape depends on the bound values (Reshape target, Slice end, Range limit); the artifact
runs natively and on rpi4 under qemu and matches ONNX Runtime fed the same values; the input leaves the
C API and the manifest records the values; `verify` feeds them to ONNX Runtime; bad binds are one line."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from modelrun import cli, one_line_error, require_emulator, run


def bind_model() -> onnx.ModelProto:
    """y = (Reshape(x, [rows, -1])[:, :length] + Range(0, length)) * gain."""
    nodes = [
        helper.make_node("Concat", ["rows", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Slice", ["r", "zero", "length", "one"], ["s"]),
        helper.make_node("Squeeze", ["length"], ["n"]),
        helper.make_node("Cast", ["n"], ["nf"], to=TP.FLOAT),
        helper.make_node("Range", ["fzero", "nf", "fone"], ["ramp"]),
        helper.make_node("Add", ["s", "ramp"], ["a"]),
        helper.make_node("Mul", ["a", "gain"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.float32), "fzero"),
             numpy_helper.from_array(np.array(1, np.float32), "fone")]
    graph = helper.make_graph(nodes, "bindme", [helper.make_tensor_value_info("x", TP.FLOAT, [4, 24]),
                                                helper.make_tensor_value_info("rows", TP.INT64, [1]),
                                                helper.make_tensor_value_info("length", TP.INT64, [1]),
                                                helper.make_tensor_value_info("gain", TP.FLOAT, ["G"])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, ["R", "L"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("board", ["x86_64", pytest.param("rpi4", marks=pytest.mark.qemu)])
def test_bound_values_decide_the_output_shape_and_match_ort(board, tmp_path):
    require_emulator(board)
    model = bind_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    gain = np.linspace(0.5, 2.0, 7).astype(np.float32)
    np.save(tmp_path / "gain.npy", gain)
    x = np.random.default_rng(0).standard_normal((4, 24)).astype(np.float32)
    for rows, length, out in ((8, 7, "a"), (12, 7, "b")):
        proc = cli("build", str(path), "--board", board, "--bind", f"rows={rows}", "--bind", f"length={length}",
                   "--bind", "gain=gain.npy", "-o", str(tmp_path / out), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        manifest = json.loads((tmp_path / out / "manifest.json").read_text())
        assert [i["name"] for i in manifest["inputs"]] == ["x"]
        assert manifest["outputs"][0]["shape"] == [rows, length]
        assert manifest["bound"]["rows"] == {"dtype": "int64", "shape": [1], "value": [rows]}
        assert manifest["bound"]["gain"]["value"] == pytest.approx(gain.tolist())
        header = (tmp_path / out / "model.h").read_text()
        assert "FXC_NUM_INPUTS 1" in header and '"rows"' not in header and '"gain"' not in header
        want = _ort(model, {"x": x, "rows": np.array([rows], np.int64), "length": np.array([length], np.int64), "gain": gain})
        got = run(tmp_path / out, {"x": x})["y"]
        assert got.shape == want.shape == (rows, length)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_large_bound_value_recorded_by_sha256_and_verify_feeds_it(tmp_path):
    model = bind_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    gain = np.random.default_rng(3).standard_normal(96).astype(np.float32)
    np.save(tmp_path / "gain.npy", gain)
    proc = cli("build", str(path), "--bind", "rows=1", "--bind", "length=96", "--bind", "gain=gain.npy", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads((tmp_path / "out" / "manifest.json").read_text())["bound"]["gain"]
    import hashlib
    assert entry["sha256"] == hashlib.sha256(gain.tobytes()).hexdigest() and "value" not in entry
    assert entry["file"] == "../gain.npy" and entry["shape"] == [96]
    ok = cli("verify", "out", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "ok" in ok.stdout
    np.save(tmp_path / "gain.npy", gain * 2)  # changed after the build: verify refuses to guess
    assert "changed since the artifact was built" in one_line_error(cli("verify", "out", cwd=tmp_path))


def test_int_input_scalar_and_bool_bind(tmp_path):
    """A scalar int input becomes a 0-d constant; a bool flag parses true/false; both fold away."""
    nodes = [helper.make_node("Cast", ["n"], ["nf"], to=TP.FLOAT),
             helper.make_node("Mul", ["x", "nf"], ["scaled"]),
             helper.make_node("Where", ["flag", "scaled", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [3]),
                                           helper.make_tensor_value_info("n", TP.INT32, []),
                                           helper.make_tensor_value_info("flag", TP.BOOL, [])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    x = np.array([1.0, -2.0, 3.5], np.float32)
    for flag, n in (("true", -3), ("false", 5)):
        out = tmp_path / f"o{flag}"
        proc = cli("build", "m.onnx", "--bind", f"n={n}", "--bind", f"flag={flag}", "-o", str(out), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        want = _ort(model, {"x": x, "n": np.array(n, np.int32), "flag": np.array(flag == "true")})
        np.testing.assert_array_equal(run(out, {"x": x})["y"], want)


@pytest.mark.parametrize("bind, expected", [
    (["nope=1"], "--bind names 'nope', which is not an input of the model; inputs: x, rows, length, gain"),
    (["rows=1.5"], "'1.5' is not a value of the input's dtype int64"),
    (["rows=1,2"], "the input's shape is 1 (1 values) but 2 are given"),
    (["gain=missing.npy"], "--bind gain=missing.npy: no such file"),
    (["gain=g64.npy"], "the file holds float64 values but the input's dtype is float32"),
    (["gain=g2d.npy"], "the file's shape is 1x5 but the input's is ?"),
    (["length=99999999999999999999"], "out of range for the input's dtype int64"),
    (["rows"], "bad --bind 'rows': write NAME=VALUE"),
    (["rows=2", "rows=3"], "--bind rows is given twice"),
])
def test_bad_binds_are_one_line_and_write_nothing(tmp_path, bind, expected):
    onnx.save(bind_model(), str(tmp_path / "m.onnx"))
    np.save(tmp_path / "g64.npy", np.arange(5.0))
    np.save(tmp_path / "g2d.npy", np.ones((1, 5), np.float32))
    args = [a for b in bind for a in ("--bind", b)]
    proc = cli("build", "m.onnx", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert expected in one_line_error(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g2d.npy", "g64.npy", "m.onnx"]
