"""TopK: the stack-buffer partial selection (K <= 256) and the K-pass scan, against a stable numpy sort
(ties: lower index first; NaN ranks above every number, as ONNX Runtime orders it), on every axis, both directions, int and float."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.run.backend import compile_model
from fluidml_xc.ops.selection import PARTIAL_MAX


def _reference(x: np.ndarray, count: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    moved = np.moveaxis(x, axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    vals, idxs = [], []
    for row in flat:
        nan = np.isnan(row) if row.dtype.kind == "f" else np.zeros(row.shape, bool)
        key = np.where(nan, 0, -row if largest else row)
        order = np.lexsort((np.arange(row.size), key, ~nan if largest else nan))[:count]
        vals.append(row[order])
        idxs.append(order)
    shape = moved.shape[:-1] + (count,)
    return (np.moveaxis(np.array(vals).reshape(shape), -1, axis), np.moveaxis(np.array(idxs, np.int64).reshape(shape), -1, axis))


def _topk(x: np.ndarray, count: int, axis: int, largest: int):
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    dt = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "topk", [helper.make_tensor_value_info("x", dt, x.shape)],
                              [helper.make_tensor_value_info("v", dt, None), helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                              [numpy_helper.from_array(np.array([count], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return compile_model(model)({"x": x})


@pytest.mark.parametrize("count", [1, 5, PARTIAL_MAX, PARTIAL_MAX + 1, 300])
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_matches_stable_sort(count, largest):
    rng = np.random.default_rng(count * 2 + largest)
    x = rng.integers(-20, 20, (3, 300, 4)).astype(np.float32)  # many ties
    x[0, rng.integers(0, 300, 7), 1] = np.nan
    for axis in (1, -1, 0) if count <= 4 else (1,):
        c = min(count, x.shape[axis])
        got_v, got_i = _topk(x, c, axis, largest)
        want_v, want_i = _reference(x, c, axis % 3, bool(largest))
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_v, want_v)


def test_topk_integers_sorted_input_worst_case():
    x = np.arange(5000, dtype=np.int32).reshape(2, 2500)  # ascending: every element enters the buffer
    got_v, got_i = _topk(x, 100, 1, 1)
    want_v, want_i = _reference(x, 100, 1, True)
    np.testing.assert_array_equal(got_v, want_v)
    np.testing.assert_array_equal(got_i, want_i)


@pytest.mark.parametrize("count", [1, 10, PARTIAL_MAX])
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_contiguous_rows_vector_filter(count, largest):
    """Rows contiguous in memory take the vector pre-filter; NaN and ties still rank exactly."""
    rng = np.random.default_rng(count + largest)
    x = rng.integers(-50, 50, (4, 1003)).astype(np.float32)
    x[1, rng.integers(0, 1003, 40)] = np.nan
    x[2] = np.nan
    got_v, got_i = _topk(x, count, -1, largest)
    want_v, want_i = _reference(x, count, 1, bool(largest))
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_v, want_v)


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["x86_64", "rpi4", "rpi3"])
def test_topk_matches_ort_with_nan_on_every_target(board, tmp_path):
    import onnxruntime as ort

    from modelrun import compile_and_run, graph_model, require_emulator
    require_emulator(board)
    x = np.random.default_rng(0).integers(-30, 30, (3, 700)).astype(np.float32)
    x[1, [5, 600]] = np.nan
    for largest in (1, 0):
        for count in (7, 300):
            model = graph_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=largest)], {"x": x}, ["v", "i"],
                                {"k": np.array([count], np.int64)}, opset=18, infer=True)
            want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
            got = compile_and_run(model, {"x": x}, tmp_path / f"{largest}-{count}", board)
            np.testing.assert_array_equal(got["i"], want[1])
            np.testing.assert_array_equal(got["v"], want[0])
