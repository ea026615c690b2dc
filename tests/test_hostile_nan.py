"""Issue 11 regressions: NaN and infinities go through activations, Max/Min/Clip, pooling and reductions as
ONNX Runtime gives them. Where ORT's result depends on where the NaN sits (ReduceMax/ReduceMin, GlobalMaxPool
keep or drop it by position), onnx.reference is the oracle: NaN propagates. Windowed MaxPool follows ORT,
which ignores NaN. Every target: x86_64 here, aarch64 and armv7 under qemu."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fluidml_xc.run.backend import compile_model
from modelrun import build, require_emulator, run

X = np.array([np.nan, -1.0, 2.0, np.inf, -np.inf, 0.5, -0.0, np.nan], np.float32)
SPECIAL = X.reshape(2, 4)


def _model(op: str, attrs: dict | None = None, extra: dict | None = None, shape=(8,), opset: int = 17) -> tuple:
    extra = extra or {}
    node = helper.make_node(op, ["x", *extra], ["y"], **(attrs or {}))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in extra.items()]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, {"x": X.reshape(shape), **extra}


def _ort(model, feeds):
    import onnxruntime as ort
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


ZEROS = np.zeros(8, np.float32)
CASES = {
    "Relu": ("Relu", None, None, (8,), 17),
    "LeakyRelu": ("LeakyRelu", {"alpha": 0.1}, None, (8,), 17),
    "HardSigmoid": ("HardSigmoid", None, None, (8,), 17),
    "HardSwish": ("HardSwish", None, None, (8,), 17),
    "Celu": ("Celu", None, None, (8,), 17),
    "Sign": ("Sign", None, None, (8,), 17),
    "Clip no bounds": ("Clip", None, None, (8,), 17),
    "Clip bounds": ("Clip", None, {"lo": np.array(-0.5, np.float32), "hi": np.array(1.0, np.float32)}, (8,), 17),
    "Clip opset 6": ("Clip", {"min": -0.5, "max": 1.0}, None, (8,), 6),
    "Max": ("Max", None, {"z": ZEROS}, (8,), 17),
    "Min": ("Min", None, {"z": ZEROS}, (8,), 17),
    "Max NaN second": ("Max", None, {"z": np.full(8, np.nan, np.float32)}, (8,), 17),
    "Elu": ("Elu", None, None, (8,), 17),
    "Selu": ("Selu", None, None, (8,), 17),
    "Softplus": ("Softplus", None, None, (8,), 17),
    "Tanh": ("Tanh", None, None, (8,), 17),
    "Sigmoid": ("Sigmoid", None, None, (8,), 17),
    "Gelu": ("Gelu", None, None, (8,), 20),
    "Mish": ("Mish", None, None, (8,), 18),
    "PRelu": ("PRelu", None, {"s": np.full(8, 0.1, np.float32)}, (8,), 17),
    "MaxPool": ("MaxPool", {"kernel_shape": [2]}, None, (1, 1, 8), 17),
    "AveragePool": ("AveragePool", {"kernel_shape": [2]}, None, (1, 1, 8), 17),
    "GlobalAveragePool": ("GlobalAveragePool", None, None, (1, 2, 4), 17),
    "ReduceMax": ("ReduceMax", {"keepdims": 0, "axes": [1]}, None, (2, 4), 17),
    "ReduceMin": ("ReduceMin", {"keepdims": 0, "axes": [1]}, None, (2, 4), 17),
    "ReduceMax all": ("ReduceMax", {"keepdims": 0}, None, (4, 2), 17),
    "ReduceMin all": ("ReduceMin", {"keepdims": 0}, None, (8,), 17),
    "Softmax": ("Softmax", None, None, (2, 4), 17),
}


POSITIONAL_IN_ORT = {"ReduceMax", "ReduceMin"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_nan_and_inf_as_onnxruntime(case):
    op, attrs, extra, shape, opset = CASES[case]
    model, feeds = _model(op, attrs, extra, shape, opset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if op in POSITIONAL_IN_ORT:
            from onnx.reference import ReferenceEvaluator
            want = np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])
        else:
            want = _ort(model, feeds)
        got = np.asarray(compile_model(model)(feeds)[0])
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{case}: NaN at {np.isnan(want)}, got {got}"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_global_max_pool_propagates_nan_as_onnx_defines_it():
    """ORT's GlobalMaxPool keeps or drops a NaN depending on where it is; ONNX (and we) propagate it."""
    model, feeds = _model("GlobalMaxPool", None, None, (1, 2, 4))
    got = np.asarray(compile_model(model)(feeds)[0]).ravel()
    assert np.isnan(got).all()


def _chain_model() -> onnx.ModelProto:
    """Relu, Clip, Max, Min, HardSigmoid, ReduceMax in one model (fused elementwise chain + a reduction)."""
    lo, hi = (helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in (("lo", -0.5), ("hi", 1.0)))
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
             helper.make_node("Max", ["x", "z"], ["mx"]), helper.make_node("Min", ["x", "z"], ["mn"]),
             helper.make_node("HardSigmoid", ["x"], ["hs"]), helper.make_node("ReduceMax", ["x"], ["rm"], axes=[1], keepdims=0),
             helper.make_node("Sign", ["x"], ["sg"])]
    outs = ["r", "c", "mx", "mn", "hs", "rm", "sg"]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], [lo, hi])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("board", ["x86_64", "rpi4", "rpi3"])
def test_nan_propagates_on_every_target(board, tmp_path):
    require_emulator(board)
    model = _chain_model()
    feeds = {"x": SPECIAL, "z": np.zeros((2, 4), np.float32)}
    from onnx.reference import ReferenceEvaluator
    want = ReferenceEvaluator(model).run(None, feeds)  # every op here propagates NaN in onnx.reference and in ORT but ReduceMax
    got = run(build(model, tmp_path, board, profile_runner=False), feeds)
    for out, ref in zip(["r", "c", "mx", "mn", "hs", "rm", "sg"], want):
        assert np.array_equal(np.isnan(got[out]), np.isnan(ref)), (board, out, got[out], ref)
        np.testing.assert_allclose(got[out], ref, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("shape,kernel", [((1, 2, 4, 4), [2, 2]), ((1, 1, 8), [2]), ((1, 16, 4, 4), [2, 2])])
def test_maxpool_windows_with_nan_as_onnxruntime(shape, kernel):
    """ORT's MaxPool: 2-D (MLAS) gives NaN when a window's last value is NaN, 1-D skips NaN and gives the lowest
    float for a window of NaN only (a NaN bias before a MaxPool, found by the fuzz test)."""
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7 - 1
    x.reshape(-1)[::3] = np.nan
    x[0, 0] = np.nan  # channel 0: every window NaN
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    want = _ort(model, {"x": x})
    got = np.asarray(compile_model(model)({"x": x})[0])
    assert np.isnan(want).any() == (len(shape) == 4), "ORT: NaN out of 2-D windows only"
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    np.testing.assert_allclose(got, want, equal_nan=True)
