"""`verify` picks its oracle: ONNX Runtime for float models, onnx.reference (the ONNX spec's arithmetic) for
quantized ones, whose outputs may differ by a quantization step (requantization rounding)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from fluidml_xc.remote.verify import Reference, Tolerance, choose_oracle, compare, quantization_steps
from modelrun import cli, one_line_error

OUT_SCALE = 0.0625


def qdq_matmul(out_quantized: bool = False) -> onnx.ModelProto:
    """x -> Q/DQ (uint8) -> MatMul with int8 weights (DQ) -> Q -> DQ: ORT fuses it into a u8 x s8 QLinearMatMul."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, size=(64, 16)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "xs"), numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(np.array(OUT_SCALE, np.float32), "ys"), numpy_helper.from_array(np.array(120, np.uint8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"]),
             helper.make_node("MatMul", ["xf", "wf"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["yq"])]
    if not out_quantized:
        nodes.append(helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]))
    out = ("yq", TP.UINT8) if out_quantized else ("y", TP.FLOAT)
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TP.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info(out[0], out[1], [8, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def float_matmul() -> onnx.ModelProto:
    w = np.random.default_rng(4).standard_normal((64, 16)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "f",
                              [helper.make_tensor_value_info("x", TP.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [8, 16])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_steps_come_from_the_output_quantizers():
    assert quantization_steps(qdq_matmul(), 1.0) == {"y": pytest.approx(OUT_SCALE)}
    assert quantization_steps(qdq_matmul(), 2.0) == {"y": pytest.approx(2 * OUT_SCALE)}
    assert quantization_steps(qdq_matmul(out_quantized=True), 1.0) == {"yq": 1.0}
    assert quantization_steps(qdq_matmul(), 0.0) == {} and quantization_steps(float_matmul(), 1.0) == {}
    assert choose_oracle(qdq_matmul()) == "spec" and choose_oracle(float_matmul()) == "ort"
    assert choose_oracle(qdq_matmul(), "ort") == "ort"


def test_compare_allows_the_step_and_no_more():
    ref = np.arange(12, dtype=np.float32).reshape(3, 4) * np.float32(OUT_SCALE)
    reference = Reference({"y": ref}, "spec", {"y": OUT_SCALE})
    one_off, two_off = ref.copy(), ref.copy()
    one_off[1, 2] += OUT_SCALE
    two_off[1, 2] += 2 * OUT_SCALE
    assert compare({"y": one_off}, reference, Tolerance())[0].ok
    bad = compare({"y": two_off}, reference, Tolerance())[0]
    assert not bad.ok and bad.mismatched == 1
    assert not compare({"y": one_off}, Reference({"y": ref}), Tolerance())[0].ok  # no allowance without a step
    q = np.array([3, 200, 17], np.uint8)
    assert compare({"q": q + np.uint8(1)}, Reference({"q": q}, "spec", {"q": 1.0}), Tolerance())[0].ok
    assert not compare({"q": q + np.uint8(1)}, Reference({"q": q}, "spec", {}), Tolerance())[0].ok


@pytest.mark.parametrize("out_quantized", [False, True])
def test_quantized_build_verified_against_the_spec(tmp_path, out_quantized):
    onnx.save(qdq_matmul(out_quantized), str(tmp_path / "q.onnx"))
    assert cli("build", "q.onnx", "--board", "x86_64", "-o", "out", cwd=tmp_path).returncode == 0
    ok = cli("verify", "out", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "against onnx.reference (the ONNX spec's arithmetic)" in ok.stdout and "1 quantization step" in ok.stdout
    if not out_quantized:
        forced = cli("verify", "out", "--oracle", "ort", cwd=tmp_path)
        assert "against ONNX Runtime" in forced.stdout  # passes or not depending on this CPU's int8 kernels in ORT


def test_float_build_verified_against_ort(tmp_path):
    onnx.save(float_matmul(), str(tmp_path / "f.onnx"))
    assert cli("build", "f.onnx", "--board", "x86_64", "-o", "out", cwd=tmp_path).returncode == 0
    ok = cli("verify", "out", cwd=tmp_path)
    assert ok.returncode == 0 and "against ONNX Runtime, run at localhost\n" in ok.stdout
    assert "criterion every element |out - ref| <= allowed (rtol 0.0001, atol 1e-05)" in ok.stdout
    spec = cli("verify", "out", "--oracle", "spec", cwd=tmp_path)
    assert spec.returncode == 0 and "against onnx.reference" in spec.stdout
    bad = cli("verify", "out", "--quant-steps", "-1", cwd=tmp_path)
    assert bad.returncode == 2 and "--quant-steps must be >= 0" in one_line_error(bad)


def test_an_output_of_another_shape_is_reported_as_such():
    from fluidml_xc.remote.verify import VerifyReport

    ref = np.zeros((1, 2, 16), np.float32)
    report = VerifyReport.of("host", Tolerance(), {"y": np.zeros((1, 2, 13), np.float32)}, Reference({"y": ref}))
    check = report.outputs[0]
    assert not report.ok and check.got_shape == (1, 2, 13)
    assert "FAIL (shape 1x2x13, expected 1x2x16)" in report.table()
    assert report.failure().endswith("'y' has shape 1x2x13 where the reference has 1x2x16")
    assert report.to_dict()["outputs"][0]["got_shape"] == [1, 2, 13]
