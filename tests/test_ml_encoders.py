"""ai.onnx.ml encoders expanded at import (frontend/ml_ops.py) against ONNX Runtime: LabelEncoder with numeric keys
and values (attribute lists and v4 tensors), OneHotEncoder with integer categories, Imputer (NaN and a value),
FeatureVectorizer (cut, padded, rank-1 inputs; ORT binds every input to one type), SVMRegressor (every kernel)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper

from fluidml_xc.run.backend import compile_model
from modelrun import proto_model

V = helper.make_tensor_value_info


def _check(node, inputs: dict, outputs, ml_opset: int, onnx_opset: int = 17):
    model = proto_model([node], [V(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
                        outputs, opsets=(("", onnx_opset), ("ai.onnx.ml", ml_opset)), check=True)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
    got = compile_model(model)(inputs)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("onnx_opset", [13, 21])
def test_label_encoder_int_to_float_and_float_to_int(onnx_opset):
    x = np.array([[3, 7, 1], [7, 9, 3]], np.int64)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_int64s=[3, 7, 9],
                            values_floats=[0.5, -1.0, 2.5], default_float=-7.0)
    _check(node, {"x": x}, [V("y", TP.FLOAT, [2, 3])], 2, onnx_opset)
    f = np.array([0.5, 2.0, -1.0, 0.25], np.float32)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_floats=[-1.0, 0.5, 0.25],
                            values_int64s=[10, 20, 30])
    _check(node, {"x": f}, [V("y", TP.INT64, [4])], 2, onnx_opset)


def test_label_encoder_tensors_v4():
    x = np.array([4, 1, 8, 4], np.int64)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_tensor=helper.make_tensor("k", TP.INT64, [3], [4, 8, 2]),
                            values_tensor=helper.make_tensor("v", TP.INT64, [3], [40, 80, 20]),
                            default_tensor=helper.make_tensor("d", TP.INT64, [1], [-5]))
    _check(node, {"x": x}, [V("y", TP.INT64, [4])], 4)


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64])
def test_one_hot_encoder_int_categories(dtype):
    x = np.array([[2, 5], [9, 2], [5, 0]], dtype)
    node = helper.make_node("OneHotEncoder", ["x"], ["y"], domain="ai.onnx.ml", cats_int64s=[0, 2, 5], zeros=1)
    _check(node, {"x": x}, [V("y", TP.FLOAT, [3, 2, 3])], 1)


@pytest.mark.parametrize("replaced", [float("nan"), -1.0])
def test_imputer_floats(replaced):
    x = np.array([[1.0, np.nan, -1.0], [np.nan, 2.0, 3.0]], np.float32)
    node = helper.make_node("Imputer", ["x"], ["y"], domain="ai.onnx.ml", imputed_value_floats=[9.0, 8.0, 7.0],
                            replaced_value_float=replaced)
    _check(node, {"x": x}, [V("y", TP.FLOAT, [2, 3])], 1)


def test_imputer_int64_one_value():
    x = np.array([[1, 0, 5], [0, 2, 0]], np.int64)
    node = helper.make_node("Imputer", ["x"], ["y"], domain="ai.onnx.ml", imputed_value_int64s=[42],
                            replaced_value_int64=0)
    _check(node, {"x": x}, [V("y", TP.INT64, [2, 3])], 1)


def test_feature_vectorizer_cuts_and_pads():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([[7, 8], [9, 10]], np.float32)
    c = np.array([[0.5], [-0.5]], np.float32)
    node = helper.make_node("FeatureVectorizer", ["a", "b", "c"], ["y"], domain="ai.onnx.ml",
                            inputdimensions=[2, 4, 1])
    _check(node, {"a": a, "b": b, "c": c}, [V("y", TP.FLOAT, [2, 7])], 1)
    node = helper.make_node("FeatureVectorizer", ["a", "c"], ["y"], domain="ai.onnx.ml", inputdimensions=[3, 2])
    _check(node, {"a": a[:1], "c": c[0]}, [V("y", TP.FLOAT, [1, 5])], 1)  # rank 1: one row


@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid"])
def test_svm_regressor_from_sklearn(kernel):
    """skl2onnx's SVR of each kernel against ORT (the kernel matrix by MatMul: |x - v|^2 as |x|^2 - 2 x.v + |v|^2)."""
    import warnings

    from sklearn.svm import SVR
    from skl2onnx import to_onnx
    rng = np.random.default_rng(3)
    x = rng.standard_normal((120, 5)).astype(np.float32)
    y = x[:, 0] * 1.5 - np.sin(x[:, 1]) + 0.1 * rng.standard_normal(120)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = to_onnx(SVR(kernel=kernel, degree=2, gamma=0.3, coef0=0.5).fit(x, y), x[:1],
                        target_opset={"": 17, "ai.onnx.ml": 3})
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_value = 9
    feeds = {model.graph.input[0].name: x[-9:]}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(compile_model(model)(feeds)[0], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,dtype", [((3, 4), np.float32), ((4,), np.float32), ((2, 3, 4), np.int64), ((3, 4), np.int32)])
@pytest.mark.parametrize("index_shape", [(2,), (1, 2)])
def test_array_feature_extractor_shapes(x_shape, dtype, index_shape):
    """The last axis picked at run-time indices: X's shape with the indices' count last ([1, count] for a rank-1 X);
    the shape comes from the indices' count, not their values (skl2onnx's one-vs-rest labels read it so)."""
    x = np.arange(int(np.prod(x_shape))).reshape(x_shape).astype(dtype)
    out_shape = [*x_shape[:-1], 2] if len(x_shape) > 1 else [1, 2]
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")
    _check(node, {"x": x, "i": np.array([3, 1], np.int64).reshape(index_shape)},
           [V("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), out_shape)], 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("size", [1, 3])
def test_scaler_any_input_dtype(dtype, size):
    """(x - offset) * scale in float32 from every input dtype ORT takes; one value or one per column."""
    x = np.array([[1, 2, 3], [4, 5, -6]], dtype)
    node = helper.make_node("Scaler", ["x"], ["y"], domain="ai.onnx.ml", offset=[0.5, 1.0, 2.0][:size],
                            scale=[2.0, 0.5, -1.5][:size])
    _check(node, {"x": x}, [V("y", TP.FLOAT, [2, 3])], 1)


def test_string_tfidf_expands_to_token_ids():
    """TfIdfVectorizer over strings becomes a CategoryMapper onto the pool's token ids and our TfIdfIds
    (frontend/tfidf.py, ops/tfidf_ids.py): compiled, ONNX Runtime's counts and weights, with skips, unknown and
    repeated tokens."""
    from fluidml_xc.frontend.expanders import Scope, expand_tensors
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TFIDF", min_gram_length=1, max_gram_length=2,
                            max_skip_count=1, ngram_counts=[0, 3], ngram_indexes=[0, 1, 2, 3, 4],
                            pool_strings=["a", "b", "c", "b", "c", "a", "a"], weights=[0.5, 1.0, 2.0, 1.5, 0.25])
    x = np.array([["a", "b", "z", "c", "a", "a"], ["b", "c", "b", "a", "q", "a"]], dtype=object)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)]
    inputs, outputs = [V("x", TP.STRING, [2, 6])], [V("y", TP.FLOAT, [2, 5])]
    original = helper.make_model(helper.make_graph([node], "g", inputs, outputs), opset_imports=opsets)
    replaced = expand_tensors(node, "tfidf", Scope({}, 17))
    assert [n.op_type for n in replaced] == ["CategoryMapper", "TfIdfIds"]
    assert not any(a.name == "pool_strings" for a in replaced[1].attribute)
    want = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert want.any()
    np.testing.assert_allclose(compile_model(original)({"x": x})[0], want, rtol=1e-6)
