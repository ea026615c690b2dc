"""`If` on a run-time condition (speech models choose a path by a sample-rate input): both branches'
shapes are inferred inside them with the static input shapes, both are computed and the outputs
selected with Where; built and compared with ONNX Runtime for either condition, natively and on rpi4
under qemu. Where that cannot be done, one line names the reason and the input to --bind."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from modelrun import build, cli, one_line_error, require_emulator, run


def _c(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def speech_model(else_length: int | None = None, runtime_gather: bool = False) -> onnx.ModelProto:
    """audio [N, T] float, sample_rate int64 scalar. If sample_rate == 16000: a 5x1 Conv (a 1-D conv written
    in 2-D), Tanh, and a Reshape whose target comes from Shape/Slice inside the branch; else a 3x1 Conv
    gated by its Sigmoid (SiLU). The branches declare symbolic (then) or no (else) output shapes, as
    exporters write them. `else_length`: the else branch Slices its time axis to this length (shapes differ).
    `runtime_gather`: the else branch Gathers frames at indices computed from the sample rate."""
    rng = np.random.default_rng(0)
    then_nodes = [
        helper.make_node("Unsqueeze", ["audio", "axes13"], ["t_x4"]),
        helper.make_node("Conv", ["t_x4", "w_a", "b_a"], ["t_c"], pads=[2, 0, 2, 0]),
        helper.make_node("Tanh", ["t_c"], ["t_act"]),
        helper.make_node("Shape", ["t_act"], ["t_shape"]),
        helper.make_node("Slice", ["t_shape", "i0", "i3", "i0"], ["t_ncl"]),
        helper.make_node("Reshape", ["t_act", "t_ncl"], ["t_out"]),
    ]
    then_g = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t_out", TP.FLOAT, ["N", 8, "T"])],
                               [_c("w_a", rng.standard_normal((8, 1, 5, 1)).astype(np.float32) * 0.3),
                                _c("b_a", rng.standard_normal(8).astype(np.float32) * 0.1)])
    else_nodes = [
        helper.make_node("Unsqueeze", ["audio", "axes13"], ["e_x4"]),
        helper.make_node("Conv", ["e_x4", "w_b"], ["e_c"], pads=[1, 0, 1, 0]),
        helper.make_node("Sigmoid", ["e_c"], ["e_g"]),
        helper.make_node("Mul", ["e_c", "e_g"], ["e_m"]),
        helper.make_node("Squeeze", ["e_m", "axes3"], ["e_sq"]),
    ]
    last = "e_sq"
    if else_length is not None:
        else_nodes.append(helper.make_node("Slice", ["e_sq", "i0", "len", "i2"], ["e_cut"]))
        last = "e_cut"
    if runtime_gather:
        else_nodes += [helper.make_node("Div", ["sample_rate", "k4000"], ["e_idx"]),
                       helper.make_node("Gather", [last, "e_idx"], ["e_frame"], axis=2),
                       helper.make_node("Unsqueeze", ["e_frame", "i2"], ["e_f3"]),
                       helper.make_node("Add", [last, "e_f3"], ["e_gat"])]
        last = "e_gat"
    else_nodes.append(helper.make_node("Identity", [last], ["e_out"]))
    else_g = helper.make_graph(else_nodes, "else", [], [helper.make_empty_tensor_value_info("e_out")],
                               [_c("w_b", rng.standard_normal((8, 1, 3, 1)).astype(np.float32) * 0.3)])
    nodes = [
        helper.make_node("Equal", ["sample_rate", "sr16k"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["feat"], then_branch=then_g, else_branch=else_g, name="resample_if"),
        helper.make_node("ReduceMean", ["feat", "i2"], ["pooled"], keepdims=0),
        helper.make_node("MatMul", ["pooled", "proj"], ["y"]),
    ]
    inits = [_c("sr16k", np.array(16000, np.int64)), _c("axes13", np.array([1, 3], np.int64)),
             _c("axes3", np.array([3], np.int64)), _c("i2", np.array([2], np.int64)), _c("i0", np.array([0], np.int64)),
             _c("i3", np.array([3], np.int64)), _c("len", np.array([else_length or 1], np.int64)),
             _c("k4000", np.array(4000, np.int64)), _c("proj", rng.standard_normal((8, 4)).astype(np.float32))]
    graph = helper.make_graph(nodes, "speech", [helper.make_tensor_value_info("audio", TP.FLOAT, ["N", "T"]),
                                                helper.make_tensor_value_info("sample_rate", TP.INT64, [])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, ["N", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _ort(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("board", ["x86_64", pytest.param("rpi4", marks=pytest.mark.qemu)])
def test_if_on_runtime_sample_rate_matches_ort(board, tmp_path):
    require_emulator(board)
    model = speech_model()
    artifact = build(model, tmp_path, board, input_shapes={"audio": (2, 400)})
    audio = np.random.default_rng(1).standard_normal((2, 400)).astype(np.float32)
    results = {}
    for rate in (16000, 8000):
        feeds = {"audio": audio, "sample_rate": np.array(rate, np.int64)}
        ours = run(artifact, feeds)["y"]
        np.testing.assert_allclose(ours, _ort(model, feeds), rtol=1e-4, atol=1e-5)
        results[rate] = ours
    assert not np.allclose(results[16000], results[8000])  # the condition really selects


def test_an_if_that_expands_evaluates_no_bind_hint(monkeypatch):
    """The --bind suggestion runs onnx.reference on the condition: only for a refused If, never on the way to a build."""
    from fluidml_xc.frontend import subgraphs
    from fluidml_xc.frontend.importer import FrontendOptions, import_model

    def no_hint(*args, **kwargs):
        raise AssertionError("a hint was computed for an If that expands")
    monkeypatch.setattr(subgraphs, "bind_hint", no_hint)
    graph = import_model(speech_model(), FrontendOptions(input_shapes={"audio": (2, 400)}))
    assert "Where" in {n.op_type for n in graph.nodes}


def test_if_branch_shapes_differ_names_the_input_to_bind(tmp_path):
    path = tmp_path / "speech.onnx"
    model = speech_model(else_length=300)
    onnx.save(model, str(path))
    line = one_line_error(cli("build", str(path), "--input-shape", "audio=2x400", cwd=tmp_path))
    assert "'resample_if'" in line and "run time" in line and "different shapes" in line
    assert "then 2x8x400 float32, else 2x8x300 float32" in line and "--bind sample_rate=VALUE" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["speech.onnx"]
    # the fix it names: the condition is then known at build time and one branch is kept
    out = tmp_path / "bound"
    proc = cli("build", str(path), "--input-shape", "audio=2x400", "--bind", "sample_rate=8000", "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    audio = np.random.default_rng(2).standard_normal((2, 400)).astype(np.float32)
    np.testing.assert_allclose(run(out, {"audio": audio})["y"],
                               _ort(model, {"audio": audio, "sample_rate": np.array(8000, np.int64)}), rtol=1e-4, atol=1e-5)


def test_if_branch_indexing_at_runtime_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "speech.onnx"
    onnx.save(speech_model(runtime_gather=True), str(path))
    line = one_line_error(cli("build", str(path), "--input-shape", "audio=2x400", cwd=tmp_path))
    assert "indexes memory with run-time values (Gather node" in line and "--bind sample_rate=VALUE" in line
