"""Models as exporters other than torch.onnx write them, small enough to build here, each compared with
ONNX Runtime: tf2onnx (NHWC Transpose sandwiches around Conv, a 1-D conv written as 2-D with W = 1 and
k x 1 kernels, tanh-form GELU, folded batch norm as Mul/Add), paddle2onnx (Pad with a pads input and
constant value, Slice with INT_MAX ends and negative steps, Shape/Gather/Concat reshapes, hard_swish as
HardSigmoid * x), skl2onnx (ai.onnx.ml column selection and Binarizer around standard ops), and models
written with onnxscript (script functions with Python control flow becoming an If on a run-time value)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import pytest
from onnx import TensorProto as TP, helper, numpy_helper
from onnxscript import FLOAT, script
from onnxscript import opset18 as op

from modelrun import build, proto_model, require_emulator, run

RNG = np.random.default_rng(7)
INT_MAX = np.iinfo(np.int64).max


def _c(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _w(*shape, scale=0.2):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs, outputs, inits, opsets=(("", 13),), ir_version=7):
    return proto_model(nodes, inputs, outputs, inits, opsets, ir_version, name="exported", check="full",
                       producer_name="test")


def _check(model, feeds, tmp_path, board="x86_64", rtol=1e-4, atol=1e-5, **options):
    require_emulator(board)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    artifact = build(model, tmp_path, board, **options)
    got = run(artifact, feeds)
    for vi, ref in zip(model.graph.output, want):
        assert got[vi.name].shape == ref.shape, vi.name
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(got[vi.name], ref, rtol=rtol, atol=atol, err_msg=vi.name)
        else:
            np.testing.assert_array_equal(got[vi.name], ref, err_msg=vi.name)
    return artifact


# ------------------------------------------------------------------------------------------------ tf2onnx
def _tf_gelu(nodes, x, tag):
    """tf.nn.gelu(approximate=True) as tf2onnx writes it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    nodes += [helper.make_node("Pow", [x, "three"], [f"{tag}_cube"]),
              helper.make_node("Mul", [f"{tag}_cube", "c044715"], [f"{tag}_a"]),
              helper.make_node("Add", [x, f"{tag}_a"], [f"{tag}_b"]),
              helper.make_node("Mul", [f"{tag}_b", "sqrt2pi"], [f"{tag}_c"]),
              helper.make_node("Tanh", [f"{tag}_c"], [f"{tag}_t"]),
              helper.make_node("Add", [f"{tag}_t", "onef"], [f"{tag}_d"]),
              helper.make_node("Mul", [x, f"{tag}_d"], [f"{tag}_e"]),
              helper.make_node("Mul", [f"{tag}_e", "half"], [f"{tag}_out"])]
    return f"{tag}_out"


def _tf_conv1d(nodes, inits, x, c_in, c_out, k, tag, nwc_len):
    """Keras Conv1D(padding='same') through tf2onnx: ExpandDims to NHWC with W = 1, Transpose to NCHW, a
    k x 1 Conv, Transpose back, Squeeze."""
    inits += [_c(f"{tag}_w", _w(c_out, c_in, k, 1)), _c(f"{tag}_b", _w(c_out, scale=0.05))]
    nodes += [helper.make_node("Unsqueeze", [x, "axis2"], [f"{tag}_nhwc"]),
              helper.make_node("Transpose", [f"{tag}_nhwc"], [f"{tag}_nchw"], perm=[0, 3, 1, 2]),
              helper.make_node("Conv", [f"{tag}_nchw", f"{tag}_w", f"{tag}_b"], [f"{tag}_conv"],
                               kernel_shape=[k, 1], pads=[k // 2, 0, k // 2, 0], strides=[1, 1], dilations=[1, 1]),
              helper.make_node("Transpose", [f"{tag}_conv"], [f"{tag}_back"], perm=[0, 2, 3, 1]),
              helper.make_node("Squeeze", [f"{tag}_back", "axis2"], [f"{tag}_out"])]
    return f"{tag}_out"


def tf2onnx_cnn1d(length=64, channels=8) -> onnx.ModelProto:
    """A small Keras 1-D CNN (audio/keyword-spotting style) as tf2onnx exports it (opset 13, NWC input
    with a symbolic batch, 'unk__' dim names)."""
    nodes, inits = [], [_c("axis2", np.array([2], np.int64)), _c("three", np.array(3, np.float32)),
                        _c("c044715", np.array(0.044715, np.float32)), _c("sqrt2pi", np.array(np.sqrt(2 / np.pi), np.float32)),
                        _c("onef", np.array(1, np.float32)), _c("half", np.array(0.5, np.float32))]
    h = _tf_conv1d(nodes, inits, "input_1", 3, channels, 5, "conv1d", length)
    # BatchNormalization folded by tf2onnx's optimizer into Mul/Add on the channel-last axis
    inits += [_c("bn_scale", 1 + _w(channels, scale=0.1)), _c("bn_shift", _w(channels, scale=0.1))]
    nodes += [helper.make_node("Mul", [h, "bn_scale"], ["bn_mul"]), helper.make_node("Add", ["bn_mul", "bn_shift"], ["bn_out"])]
    h = _tf_gelu(nodes, "bn_out", "gelu1")
    h = _tf_conv1d(nodes, inits, h, channels, channels, 3, "conv1d_1", length)
    h = _tf_gelu(nodes, h, "gelu2")
    # GlobalAveragePooling1D over time, Dense + softmax
    inits += [_c("dense_w", _w(channels, 4)), _c("dense_b", _w(4, scale=0.05))]
    nodes += [helper.make_node("ReduceMean", [h], ["pooled"], axes=[1], keepdims=0),
              helper.make_node("MatMul", ["pooled", "dense_w"], ["logits0"]),
              helper.make_node("Add", ["logits0", "dense_b"], ["logits"]),
              helper.make_node("Softmax", ["logits"], ["dense"], axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("input_1", TP.FLOAT, ["unk__12", length, 3])],
                  [helper.make_tensor_value_info("dense", TP.FLOAT, ["unk__13", 4])], inits)


def tf2onnx_nhwc_cnn() -> onnx.ModelProto:
    """A Keras Conv2D/DepthwiseConv2D/MaxPool block with NHWC input: tf2onnx's Transpose sandwiches around
    each NCHW op (its optimizer leaves the ones it cannot cancel), Relu6 as Clip, a channel-last Add."""
    nodes, inits = [], [_c("w1", _w(8, 3, 3, 3)), _c("b1", _w(8, scale=0.05)), _c("dw", _w(8, 1, 3, 3)),
                        _c("db", _w(8, scale=0.05)), _c("zero", np.array(0, np.float32)), _c("six", np.array(6, np.float32)),
                        _c("chan_bias", _w(8, scale=0.1))]
    nodes += [helper.make_node("Transpose", ["image"], ["t0"], perm=[0, 3, 1, 2]),
              helper.make_node("Conv", ["t0", "w1", "b1"], ["c1"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]),
              helper.make_node("Clip", ["c1", "zero", "six"], ["r1"]),
              helper.make_node("Transpose", ["r1"], ["t1"], perm=[0, 2, 3, 1]),
              helper.make_node("Add", ["t1", "chan_bias"], ["a1"]),
              helper.make_node("Transpose", ["a1"], ["t2"], perm=[0, 3, 1, 2]),
              helper.make_node("Conv", ["t2", "dw", "db"], ["c2"], kernel_shape=[3, 3], group=8, pads=[1, 1, 1, 1]),
              helper.make_node("Clip", ["c2", "zero", "six"], ["r2"]),
              helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("Transpose", ["p2"], ["out"], perm=[0, 2, 3, 1])]
    return _model(nodes, [helper.make_tensor_value_info("image", TP.FLOAT, [1, 16, 16, 3])],
                  [helper.make_tensor_value_info("out", TP.FLOAT, [1, 4, 4, 8])], inits)


@pytest.mark.parametrize("board", ["x86_64", pytest.param("rpi4", marks=pytest.mark.qemu)])
def test_tf2onnx_1d_cnn_with_kx1_convs(board, tmp_path):
    x = RNG.standard_normal((2, 64, 3)).astype(np.float32)
    _check(tf2onnx_cnn1d(), {"input_1": x}, tmp_path, board, input_shapes={"input_1": (2, 64, 3)})


def test_tf2onnx_nhwc_transpose_sandwiches(tmp_path):
    x = RNG.standard_normal((1, 16, 16, 3)).astype(np.float32) * 3
    _check(tf2onnx_nhwc_cnn(), {"image": x}, tmp_path)


# ------------------------------------------------------------------------------------------------ paddle2onnx
def paddle2onnx_block() -> onnx.ModelProto:
    """paddle2onnx idioms (opset 11): Pad with pads/value inputs, Slice with INT_MAX ends and a negative step,
    a reshape target built from Shape/Gather/Concat, hard_swish as x * HardSigmoid(x) (alpha 1/6), and
    paddle's flatten + matmul_v2 with a transposed weight."""
    nodes, inits = [], [_c("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)), _c("pad_value", np.array(0.0, np.float32)),
                        _c("w", _w(6, 4, 3, 3)), _c("b", _w(6, scale=0.05)),
                        _c("s_start", np.array([0, -1], np.int64)), _c("s_end", np.array([INT_MAX, -INT_MAX], np.int64)),
                        _c("s_axes", np.array([1, 3], np.int64)), _c("s_steps", np.array([1, -1], np.int64)),
                        _c("i0", np.array([0], np.int64)), _c("minus1", np.array([-1], np.int64)),
                        _c("fc_w", _w(5, 6 * 8 * 8)), _c("fc_b", _w(5, scale=0.05))]
    nodes += [helper.make_node("Pad", ["x", "pads", "pad_value"], ["padded"], mode="constant"),
              helper.make_node("Conv", ["padded", "w", "b"], ["conv"], kernel_shape=[3, 3]),
              helper.make_node("HardSigmoid", ["conv"], ["hs"], alpha=1 / 6, beta=0.5),
              helper.make_node("Mul", ["conv", "hs"], ["hswish"]),
              helper.make_node("Slice", ["hswish", "s_start", "s_end", "s_axes", "s_steps"], ["flipped"]),
              helper.make_node("Shape", ["flipped"], ["shape"]),
              helper.make_node("Gather", ["shape", "i0"], ["batch"], axis=0),
              helper.make_node("Concat", ["batch", "minus1"], ["flat_shape"], axis=0),
              helper.make_node("Reshape", ["flipped", "flat_shape"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
              helper.make_node("Softmax", ["logits"], ["prob"], axis=1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [-1, 4, 8, 8])],
                  [helper.make_tensor_value_info("prob", TP.FLOAT, [-1, 5])], inits, opsets=(("", 11),), ir_version=6)


@pytest.mark.parametrize("board", ["x86_64", pytest.param("rpi4", marks=pytest.mark.qemu)])
def test_paddle2onnx_pad_slice_reshape_idioms(board, tmp_path):
    x = RNG.standard_normal((3, 4, 8, 8)).astype(np.float32)
    _check(paddle2onnx_block(), {"x": x}, tmp_path, board, input_shapes={"x": (3, 4, 8, 8)})


# ------------------------------------------------------------------------------------------------ skl2onnx
def skl2onnx_pipeline() -> onnx.ModelProto:
    """skl2onnx's ColumnTransformer + Binarizer + LinearRegression-through-standard-ops idiom: columns picked
    with ai.onnx.ml ArrayFeatureExtractor, a Binarizer on some, Concat, a StandardScaler as Sub/Div, and
    the linear model as MatMul + Add (skl2onnx's options for standard-domain output), cast to double."""
    nodes, inits = [], [_c("num_cols", np.array([0, 2, 3], np.int64)), _c("flag_cols", np.array([1, 4], np.int64)),
                        _c("mean", _w(1, 5, scale=1.0)), _c("std", (np.abs(_w(1, 5)) + 0.5).astype(np.float32)),
                        _c("coef", _w(5, 2, scale=1.0)), _c("intercept", _w(1, 2, scale=1.0))]
    nodes += [helper.make_node("ArrayFeatureExtractor", ["X", "num_cols"], ["num"], domain="ai.onnx.ml"),
              helper.make_node("ArrayFeatureExtractor", ["X", "flag_cols"], ["flags_raw"], domain="ai.onnx.ml"),
              helper.make_node("Binarizer", ["flags_raw"], ["flags"], domain="ai.onnx.ml", threshold=0.25),
              helper.make_node("Concat", ["num", "flags"], ["features"], axis=1),
              helper.make_node("Sub", ["features", "mean"], ["centered"]),
              helper.make_node("Div", ["centered", "std"], ["scaled"]),
              helper.make_node("MatMul", ["scaled", "coef"], ["mm"]),
              helper.make_node("Add", ["mm", "intercept"], ["variable"]),
              helper.make_node("ArgMax", ["variable"], ["label"], axis=1, keepdims=0)]
    return _model(nodes, [helper.make_tensor_value_info("X", TP.FLOAT, [None, 5])],
                  [helper.make_tensor_value_info("variable", TP.FLOAT, [None, 2]),
                   helper.make_tensor_value_info("label", TP.INT64, [None])],
                  inits, opsets=(("", 15), ("ai.onnx.ml", 1)), ir_version=8)


def test_skl2onnx_ml_ops_pipeline(tmp_path):
    x = RNG.standard_normal((7, 5)).astype(np.float32)
    _check(skl2onnx_pipeline(), {"X": x}, tmp_path, input_shapes={"X": (7, 5)})


def skl2onnx_linear(post_transform: str, classes: int) -> onnx.ModelProto:
    """StandardScaler + LogisticRegression as skl2onnx converts them: ai.onnx.ml Scaler, then LinearClassifier
    (binary: coefficients [-w, w], intercepts [-b, b]) giving the label and the probabilities (zipmap=False),
    beside a LinearRegressor on int64 features cast to float (ONNX Runtime's LinearRegressor takes float only)."""
    coef = _w(1 if classes == 2 else classes, 4, scale=1.0)
    bias = _w(coef.shape[0], scale=0.5)
    if classes == 2:
        coef, bias = np.vstack([-coef, coef]), np.concatenate([-bias, bias])
    nodes = [helper.make_node("Scaler", ["X"], ["scaled"], domain="ai.onnx.ml", offset=_w(4, scale=1.0).tolist(),
                              scale=(np.abs(_w(4)) + 0.5).tolist()),
             helper.make_node("LinearClassifier", ["scaled"], ["label", "probabilities"], domain="ai.onnx.ml",
                              coefficients=coef.ravel().tolist(), intercepts=bias.tolist(), multi_class=int(classes > 2),
                              classlabels_ints=[10 * k + 3 for k in range(classes)], post_transform=post_transform),
             helper.make_node("Cast", ["counts"], ["counts_f"], to=TP.FLOAT),
             helper.make_node("LinearRegressor", ["counts_f"], ["prediction"], domain="ai.onnx.ml",
                              coefficients=_w(2, 3, scale=1.0).ravel().tolist(), intercepts=[0.5, -1.0], targets=2)]
    return _model(nodes, [helper.make_tensor_value_info("X", TP.FLOAT, [None, 4]),
                          helper.make_tensor_value_info("counts", TP.INT64, [None, 3])],
                  [helper.make_tensor_value_info("label", TP.INT64, [None]),
                   helper.make_tensor_value_info("probabilities", TP.FLOAT, [None, classes]),
                   helper.make_tensor_value_info("prediction", TP.FLOAT, [None, 2])],
                  [], opsets=(("", 15), ("ai.onnx.ml", 1)), ir_version=8)


@pytest.mark.parametrize("post_transform, classes", [("LOGISTIC", 2), ("SOFTMAX", 3), ("NONE", 4)])
def test_skl2onnx_scaler_linear_classifier_regressor(tmp_path, post_transform, classes):
    feeds = {"X": RNG.standard_normal((9, 4)).astype(np.float32), "counts": RNG.integers(-5, 20, (9, 3)).astype(np.int64)}
    artifact = _check(skl2onnx_linear(post_transform, classes), feeds, tmp_path, input_shapes={"X": (9, 4), "counts": (9, 3)})
    import json
    ops = json.loads((artifact / "manifest.json").read_text())["op_counts"]
    assert not any(op in ops for op in ("Scaler", "LinearClassifier", "LinearRegressor"))  # expanded to standard ops


# ------------------------------------------------------------------------------------------------ onnxscript
def onnxscript_model() -> onnx.ModelProto:
    """A tiny encoder block written with onnxscript: LayerNormalization, a tanh GELU, a residual, and
    Python `if` on a tensor (an If node on a run-time value: the mean activation's sign)."""
    w1, w2 = _w(16, 32), _w(32, 16)
    gamma, beta = 1 + _w(16, scale=0.1), _w(16, scale=0.1)

    @script()
    def block(x: FLOAT[2, 10, 16]) -> FLOAT[2, 10, 16]:
        norm = op.LayerNormalization(x, op.Constant(value=onnx.numpy_helper.from_array(gamma)),
                                     op.Constant(value=onnx.numpy_helper.from_array(beta)), axis=-1)
        h = op.MatMul(norm, op.Constant(value=onnx.numpy_helper.from_array(w1)))
        g = 0.5 * h * (1.0 + op.Tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
        y = op.MatMul(g, op.Constant(value=onnx.numpy_helper.from_array(w2))) + x
        if op.ReduceMean(y) > 0.0:
            out = op.Relu(y)
        else:
            out = op.Neg(op.Relu(op.Neg(y)))
        return out

    assert onnxscript.__version__
    model = block.to_model_proto()
    onnx.checker.check_model(model, full_check=True)
    assert any(n.op_type == "If" for n in model.graph.node)
    return model


def test_onnxscript_block_with_python_if(tmp_path):
    model = onnxscript_model()
    for k, shift in enumerate((2.0, -2.0)):  # either branch taken
        x = (RNG.standard_normal((2, 10, 16)) + shift).astype(np.float32)
        _check(model, {"x": x}, tmp_path / str(k))
