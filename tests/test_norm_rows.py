"""InstanceNormalization over contiguous float32 spatial runs in explicit vectors (ops/norm.py): runs long enough
for the unrolled loop, whole vectors after it and a scalar tail, a NaN and an infinity in some channels, against
ONNX Runtime; every target."""
from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from fluidml_xc.run.backend import compile_model
from modelrun import build, graph_model, require_emulator, run

SPATIAL = (7, 11)  # 77: 2 x 32 in the loop (8 lanes x 4), one whole vector, 5 in the tail


def _model_and_feeds():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 5, *SPATIAL)) * 3 + 1).astype(np.float32)
    flat = x.reshape(10, -1)
    flat[1, 3] = np.nan
    flat[2, 70] = np.nan
    flat[3, 76] = np.nan
    flat[4, 40] = np.inf
    flat[6, :] = 2.5  # zero variance: y = bias
    consts = {"g": rng.standard_normal(5).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    node = helper.make_node("InstanceNormalization", ["x", "g", "b"], ["y"], epsilon=1e-5)
    return graph_model([node], {"x": x}, ["y"], consts=consts, opset=17, infer=True), x


def _ort(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _check(got, want):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_instance_norm_rows_match_ort():
    model, x = _model_and_feeds()
    want = _ort(model, x)
    assert np.isnan(want).any() and np.isfinite(want).any()
    _check(compile_model(model)({"x": x})[0], want)


@pytest.mark.parametrize("board", ["rpi4", "rpi3"])
def test_instance_norm_rows_on_arm(board, tmp_path):
    require_emulator(board)
    model, x = _model_and_feeds()
    _check(run(build(model, tmp_path, board, profile_runner=False), {"x": x})["y"], _ort(model, x))


@pytest.mark.parametrize("axes", [None, [2, 3], [1]])
def test_mean_variance_norm_over_a_million_elements_builds(axes):
    """onnx cannot infer MeanVarianceNormalization's function body and the input is too big to evaluate at build
    time: its output takes the input's shape (frontend SHAPE_OF_INPUT_0) instead of a data-dependent-shape error."""
    x = np.random.default_rng(6).standard_normal((4, 16, 130, 130)).astype(np.float32)
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **({} if axes is None else {"axes": axes}))
    model = graph_model([node], {"x": x}, ["y"], opset=17)
    np.testing.assert_allclose(compile_model(model, "x86_64")({"x": x})[0], _ort(model, x), rtol=1e-4, atol=1e-4)
