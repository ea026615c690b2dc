"""Softmax/LogSoftmax, ReduceMax/ReduceMin and the sum family (ReduceSum, Mean, SumSquare, L1, L2, LogSum, Prod)
over contiguous float32 rows in explicit vectors (ops/reduce.py): rows long enough for the unrolled loop, the
whole vectors after it and a scalar tail, with NaN and infinities in each part; and reductions over one middle
axis, accumulated as columns of the contiguous run after it. Softmax against ONNX Runtime, reductions against
onnx.reference (NaN propagates); every target."""
from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc.run.backend import compile_model
from modelrun import build, graph_model, require_emulator, run

ROW = 77  # 2 x 32 in the loop (8 lanes x 4), one whole vector, 5 in the tail; 4 lanes: 4 x 16, 3 vectors, 1 in the tail


def _rows(shape=(6, ROW)) -> np.ndarray:
    x = (np.random.default_rng(3).standard_normal(shape) * 4).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[1, 3] = np.nan         # inside the unrolled loop
    flat[2, 70] = np.nan        # the whole vector after it
    flat[3, ROW - 1] = np.nan   # the tail
    flat[4, 40] = np.inf
    flat[4, 41] = -np.inf
    flat[5, :] = -np.inf
    flat[5, ROW - 2] = 1.0      # the tail holds the maximum
    return x


def _check(got, want):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis,shape", [(18, -1, (6, ROW)), (11, 1, (6, 1, ROW)), (18, -1, (2, 3, 5))])
def test_softmax_rows_match_ort(op, opset, axis, shape):
    x = _rows(shape) if shape[-1] == ROW else np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    model = graph_model([helper.make_node(op, ["x"], ["y"], axis=axis)], {"x": x}, ["y"], opset=opset, infer=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    _check(compile_model(model)({"x": x})[0], want)


def _reduce_model(op: str, x: np.ndarray, axes, keepdims: int):
    consts = {"axes": np.array(axes, np.int64)}
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    return graph_model([node], {"x": x}, ["y"], consts=consts, opset=18, infer=True)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keepdims", [([-1], 1), ([-1], 0), ([1, 2], 0)])
def test_reduce_extreme_rows_propagate_nan(op, axes, keepdims):
    x = _rows((6, ROW)).reshape(6, 7, 11) if axes == [1, 2] else _rows((2, 3, ROW))
    model = _reduce_model(op, x, axes, keepdims)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    got = np.asarray(compile_model(model)({"x": x})[0])
    assert np.isnan(want).any() and got.shape == want.shape
    _check(got, want)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceProd"])
@pytest.mark.parametrize("axes", [[-1], [1, 2]])
def test_reduce_sum_family_rows(op, axes):
    x = np.random.default_rng(4).uniform(0.5, 1.5, (2, 7, 11) if axes == [1, 2] else (2, 3, ROW)).astype(np.float32)
    model = _reduce_model(op, x, axes, 1)
    want = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    np.testing.assert_allclose(compile_model(model)({"x": x})[0], want, rtol=1e-5, atol=1e-6)


def _check_on_board(model, x, outs, board, tmp_path):
    """The model's outputs built and run for `board` against onnx.reference."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = dict(zip(outs, ReferenceEvaluator(model).run(None, {"x": x})))
    got = run(build(model, tmp_path, board, profile_runner=False), {"x": x})
    for name, ref in want.items():
        _check(got[name], np.asarray(ref))


@pytest.mark.parametrize("board", ["rpi4", "rpi3"])
def test_vector_rows_on_arm(board, tmp_path):
    require_emulator(board)
    x = _rows()
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("LogSoftmax", ["x"], ["l"], axis=-1),
             helper.make_node("ReduceMax", ["x", "axes"], ["mx"], keepdims=0), helper.make_node("ReduceMin", ["x", "axes"], ["mn"], keepdims=0),
             helper.make_node("ReduceSumSquare", ["x", "axes"], ["sq"], keepdims=0)]
    outs = ["s", "l", "mx", "mn", "sq"]
    model = graph_model(nodes, {"x": x}, outs, consts={"axes": np.array([-1], np.int64)}, opset=18, infer=True)
    _check_on_board(model, x, outs, board, tmp_path)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1"])
@pytest.mark.parametrize("axis,keepdims", [(1, 1), (1, 0), (0, 1), (-2, 0)])
def test_reduce_middle_axis_columns(op, axis, keepdims):
    """One reduced axis before a contiguous inner run (kernels/rows.py column_fold): the run of 77 columns goes
    through the unrolled vector blocks, whole vectors and scalar columns; NaN in each part for Max/Min."""
    x = (np.random.default_rng(6).standard_normal((3, 5, ROW)) * 2).astype(np.float32)
    if op in ("ReduceMax", "ReduceMin"):
        x[0, 2, 3], x[1, 4, 70], x[2, 0, 76] = np.nan, np.nan, np.nan
    model = _reduce_model(op, x, [axis], keepdims)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    got = np.asarray(compile_model(model)({"x": x})[0])
    assert got.shape == want.shape
    _check(got, want)


@pytest.mark.parametrize("board", ["qemu-aarch64", "rpi3"])
def test_reduce_middle_axis_columns_on_arm(board, tmp_path):
    require_emulator(board)
    x = (np.random.default_rng(6).standard_normal((3, 5, ROW)) * 2).astype(np.float32)
    x[1, 4, 70] = np.nan
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["mx"], keepdims=1), helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0),
             helper.make_node("Softmax", ["x"], ["sm"], axis=1)]
    outs = ["mx", "s", "sm"]
    model = graph_model(nodes, {"x": x}, outs, consts={"axes": np.array([1], np.int64)}, opset=18, infer=True)
    _check_on_board(model, x, outs, board, tmp_path)
