"""TopK whose K is computed at run time (issue #26): its outputs are data-dependent, bounded by the axis' length (or
--max-dim NODE=N), written dense at their actual dims per run, against ONNX Runtime; a K outside [0, bound] fails the
run in one line (RunCheckFailed from the JIT, the runner's exit status 3, FXC_ERR_RUN); a constant K above a
varying axis' minimum builds and fails only the runs whose axis is shorter. The JIT, a built x86_64 runner, the
CLI, and one run each under qemu-aarch64 and qemu-armv7."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.errors import InputError, RunCheckFailed


def _model(shape, axis=-1, largest=1, sorted_=1, dtype=TensorProto.FLOAT, k_const=None, opset=13) -> onnx.ModelProto:
    """TopK node 'topk' over x; K is the graph input 'k' (int64 [1]), or the constant `k_const`."""
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=axis, largest=largest, sorted=sorted_)
    inputs = [helper.make_tensor_value_info("x", dtype, list(shape))]
    inits = []
    if k_const is None:
        inputs.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
    else:
        inits.append(numpy_helper.from_array(np.array([k_const], np.int64), "k"))
    graph = helper.make_graph([node], "topk", inputs, [helper.make_tensor_value_info("v", dtype, None),
                                                       helper.make_tensor_value_info("i", TensorProto.INT64, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _same(got, want) -> None:
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


def _by_index(values, indices):
    order = np.argsort(indices, axis=-1, kind="stable")
    return [np.take_along_axis(values, order, -1), np.take_along_axis(indices, order, -1)]


def _jit(model: onnx.ModelProto, dims=(), max_dims=()):
    from fluidml_xc.frontend.ranges import parse_ranges
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.run.backend import JitModel
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    graph = import_graph(model, ranges=parse_ranges({}, list(dims), [], list(max_dims)))
    return JitModel(lower(graph, machine_spec(get_board(None)), LowerOptions()))


def _ties(shape, seed=0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).integers(-4, 4, shape).astype(dtype)  # few values: many ties


CASES = [((3, 10), -1, np.float32), ((4, 300), 1, np.float32), ((5, 7, 3), 1, np.float32), ((2, 9), 0, np.int32)]
"""(x shape, axis, dtype): the stack-buffer selection along a contiguous and a strided axis, the K-pass scan (a bound
of 300 > PARTIAL_MAX), integers along axis 0."""


@pytest.mark.parametrize("shape,axis,dtype", CASES)
@pytest.mark.parametrize("largest", [1, 0])
def test_k_from_an_input_matches_onnxruntime(shape, axis, dtype, largest):
    model = _model(shape, axis, largest, dtype=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    jit = _jit(model)
    x, n = _ties(shape, largest, dtype), shape[axis]
    for k in sorted({0, 1, min(3, n), n - 1, n}):
        feeds = {"x": x, "k": np.array([k], np.int64)}
        _same(jit(feeds), _ort(model, feeds))
    for bad in (-1, n + 1, 1 << 40):
        with pytest.raises(RunCheckFailed, match=rf"TopK node 'topk': K read in this run is negative or above the "
                                                 rf"length of axis {axis % len(shape)} \({n}\)"):
            jit({"x": x, "k": np.array([bad], np.int64)})


def test_unsorted_attribute_and_nan_and_a_k_that_is_computed():
    """sorted=0 (ORT returns them sorted too), NaN ranking first, and K = ReduceMax(m) computed in the model."""
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", sorted=0)
    kk = helper.make_node("ReduceMax", ["m"], ["k"], keepdims=1)
    graph = helper.make_graph([kk, node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 12]),
                                                helper.make_tensor_value_info("m", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    jit = _jit(model)
    x = _ties((2, 12), 3)
    x[1, 5] = np.nan
    for k in (0, 2, 12):
        feeds = {"x": x, "m": np.array([k], np.int64)}
        _same(*[_by_index(*outs) for outs in (jit(feeds), _ort(model, feeds))])  # sorted=0: any order


def test_max_dim_bounds_the_outputs():
    model = _model((3, 50))
    jit = _jit(model, max_dims=["topk=4"])
    assert [s for _, _, s in jit.output_specs] == [(3, 4), (3, 4)]
    x = _ties((3, 50), 7)
    for k in (0, 4):
        feeds = {"x": x, "k": np.array([k], np.int64)}
        _same(jit(feeds), _ort(model, feeds))
    with pytest.raises(RunCheckFailed, match=r"above the length of axis 1 \(50\) or its bound 4 \(a larger --max-dim topk=N"):
        jit({"x": x, "k": np.array([5], np.int64)})


def test_varying_axis_and_varying_rows_in_a_dynamic_build():
    """K from an input over an axis W in 2..40, and over a static axis whose rows vary (N in 1..6): the outputs are
    dense at their actual dims at every size."""
    model = _model((2, "W"))
    jit = _jit(model, dims=["W=2..40"])
    for w in (2, 3, 17, 40):
        x = _ties((2, w), w)
        for k in sorted({0, 1, w}):
            feeds = {"x": x, "k": np.array([k], np.int64)}
            _same(jit(feeds), _ort(model, feeds))
        with pytest.raises(RunCheckFailed, match=r"length of axis 1 \(W\)"):
            jit({"x": x, "k": np.array([w + 1], np.int64)})
    model = _model(("N", 9, 5), axis=1, largest=0)
    jit = _jit(model, dims=["N=1..6"])
    for n in (1, 4, 6):
        feeds = {"x": _ties((n, 9, 5), n), "k": np.array([4], np.int64)}
        _same(jit(feeds), _ort(model, feeds))


def test_constant_k_above_the_minimum_fails_only_the_short_runs():
    model = _model((2, "W"), k_const=5)
    jit = _jit(model, dims=["W=2..40"])
    for w in (5, 6, 40):
        x = _ties((2, w), w)
        _same(jit({"x": x}), _ort(model, {"x": x}))
    with pytest.raises(RunCheckFailed, match=r"K = 5 is above the length of axis 1 \(W\) in this run.*W is 5 or more"):
        jit({"x": _ties((2, 4))})


def test_consumers_of_the_outputs_are_refused_in_one_line():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")
    relu = helper.make_node("Relu", ["v"], ["y"], name="after")
    graph = helper.make_graph([node, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
                                                  helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(InputError, match=r"node 'after' \(Relu\) reads 'v', whose shape depends on the data \(TopK node"):
        _jit(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def test_static_build_with_a_constant_k_keeps_refusing_k_above_the_axis():
    with pytest.raises(InputError, match=r"K = 11 is outside \[0, 10\]"):
        _jit(_model((3, 10), k_const=11))


@pytest.fixture(scope="module")
def dynamic_artifact(tmp_path_factory):
    """x [2, W], W in 2..40, K from an input: built once for x86_64 through the CLI."""
    from fluidml_xc.cli import main

    work = tmp_path_factory.mktemp("topk")
    onnx.save(_model((2, "W")), str(work / "topk.onnx"))
    assert main(["build", str(work / "topk.onnx"), "-o", str(work / "art"), "--dim", "W=2..40", "--no-profile-runner"]) == 0
    return work


def test_built_runner_and_cli(dynamic_artifact, capsys):
    from fluidml_xc.cli import main
    from fluidml_xc.run.execute import run_artifact, save_npz

    work, model = dynamic_artifact, _model((2, "W"))
    header = (work / "art" / "model.h").read_text()
    assert "FXC_ERR_RUN = -7" in header
    for w, k in ((2, 0), (2, 2), (13, 5), (40, 40)):
        feeds = {"x": _ties((2, w), w), "k": np.array([k], np.int64)}
        _same(list(run_artifact(work / "art", feeds).slots), _ort(model, feeds))
    np.save(work / "x.npy", _ties((2, 7)))
    np.save(work / "k.npy", np.array([8], np.int64))
    proc = subprocess.run([str(work / "art" / "runner"), "-i", str(work / "x.npy"), "-i", str(work / "k.npy"),
                           "-o", str(work / "v.npy"), "-o", str(work / "i.npy")], capture_output=True, text=True)
    assert proc.returncode == 3 and proc.stderr.strip().splitlines() == [
        "runner: error: TopK node 'topk': K read in this run is negative or above the length of axis 1 (W); the "
        "outputs are not valid: feed a K in that range"]
    save_npz(work / "bad.npz", {"x": _ties((2, 7)), "k": np.array([8], np.int64)})
    capsys.readouterr()
    assert main(["run", str(work / "art"), "--inputs", str(work / "bad.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fluidml-xc: error: TopK node 'topk': K read in this run is negative")


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_one_run_under_qemu(board, board_runner, tmp_path):
    """64-bit and 32-bit index arithmetic (K is read as int64 and checked before it is narrowed)."""
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.frontend.ranges import parse_ranges
    from fluidml_xc.run.execute import run_artifact

    board = board_runner(board).board
    model = _model((3, "W"), largest=0)
    onnx.save(model, str(tmp_path / "topk.onnx"))
    result = build_model(tmp_path / "topk.onnx", BuildOptions(board=board, out_dir=tmp_path / "art", record_last=False,
                                                              profile_runner=False,
                                                              ranges=parse_ranges({}, ["W=2..64"], [], [])))
    feeds = {"x": _ties((3, 37), 5), "k": np.array([6], np.int64)}
    _same(list(run_artifact(result.artifact, feeds, timeout=300).slots), _ort(model, feeds))
    with pytest.raises(RunCheckFailed, match="TopK node 'topk'"):
        run_artifact(result.artifact, {"x": _ties((3, 5)), "k": np.array([6], np.int64)}, timeout=300)


@pytest.mark.ssh
def test_a_failed_check_on_a_board_is_one_line(dynamic_artifact, loopback_sshd, tmp_path, capsys):
    """Over SSH (a real sshd on 127.0.0.1): verify with a good K passes against ONNX Runtime; profiling with a K above
    the axis fails the run there (the runner's exit 3) and the command says the node's line, exit 2."""
    from fluidml_xc.cli import main
    from fluidml_xc.run.execute import save_npz

    work = dynamic_artifact
    common = [*loopback_sshd.args(), "--base-dir", str(tmp_path / "board")]
    save_npz(tmp_path / "good.npz", {"x": _ties((2, 11)), "k": np.array([4], np.int64)})
    save_npz(tmp_path / "bad.npz", {"x": _ties((2, 11)), "k": np.array([12], np.int64)})
    assert main(["verify", str(work / "art"), "--inputs", str(tmp_path / "good.npz"), "--oracle", "ort", *common]) == 0
    capsys.readouterr()
    assert main(["profile", str(work / "art"), "--inputs", str(tmp_path / "bad.npz"), "--runs", "2", *common]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "fluidml-xc: error: TopK node 'topk': K read in this run is negative or above the length of axis 1 (W); the "
        "outputs are not valid: feed a K in that range")
