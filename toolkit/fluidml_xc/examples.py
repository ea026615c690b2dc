"""Small example models built with onnx.helper and fixed seeds (for the demo, benchmarks and tests)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
EXAMPLES: dict[str, Callable[[], onnx.ModelProto]] = {}


def example(fn: Callable[[], onnx.ModelProto]) -> Callable[[], onnx.ModelProto]:
    EXAMPLES[fn.__name__] = fn
    return fn


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.1, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(dtype), name)


def _model(nodes, inputs, outputs, inits, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fluidml-xc examples")
    onnx.checker.check_model(model)
    return model


@example
def tiny_cnn() -> onnx.ModelProto:
    """Conv-BN-ReLU, depthwise conv, residual add, max pool, global pool, classifier: [1,3,32,32] -> [1,10]."""
    rng = np.random.default_rng(0)
    inits = [
        _init(rng, "c1_w", (16, 3, 3, 3), 0.3), _init(rng, "c1_b", (16,)),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "bn_s"), _init(rng, "bn_b", (16,)),
        _init(rng, "bn_m", (16,)), numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "bn_v"),
        _init(rng, "dw_w", (16, 1, 3, 3), 0.3), _init(rng, "pw_w", (16, 16, 1, 1), 0.3), _init(rng, "pw_b", (16,)),
        _init(rng, "fc_w", (10, 16), 0.3), _init(rng, "fc_b", (10,)),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], name="bn1"),
        helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "dw_w"], ["dw"], pads=[1, 1, 1, 1], group=16, name="depthwise"),
        helper.make_node("Clip", ["dw", "", ""], ["dwc"], name="clip"),
        helper.make_node("Conv", ["dwc", "pw_w", "pw_b"], ["pw"], name="pointwise"),
        helper.make_node("Add", ["pw", "r1"], ["res"], name="residual"),
        helper.make_node("MaxPool", ["res"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], name="maxpool"),
        helper.make_node("GlobalAveragePool", ["mp"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                  [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])], inits, "tiny_cnn")


@example
def tiny_mlp() -> onnx.ModelProto:
    """784-256-10 MLP with ReLU."""
    rng = np.random.default_rng(1)
    inits = [_init(rng, "w1", (256, 784), 0.05), _init(rng, "b1", (256,)), _init(rng, "w2", (10, 256), 0.05), _init(rng, "b2", (10,))]
    nodes = [
        helper.make_node("Gemm", ["input", "w1", "b1"], ["h"], transB=1, name="fc1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu"),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["output"], transB=1, name="fc2"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 784])],
                  [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], inits, "tiny_mlp")


@example
def tiny_transformer() -> onnx.ModelProto:
    """Embedding from int64 token ids, one pre-norm attention block with a GELU MLP: [1,16] ids -> [1,16,32]."""
    rng = np.random.default_rng(2)
    seq, hidden, vocab = 16, 32, 50
    inits = [
        _init(rng, "emb", (vocab, hidden), 0.5), _init(rng, "ln_s", (hidden,), 0.1), _init(rng, "ln_b", (hidden,)),
        _init(rng, "wq", (hidden, hidden), 0.2), _init(rng, "wk", (hidden, hidden), 0.2), _init(rng, "wv", (hidden, hidden), 0.2),
        _init(rng, "w1", (hidden, 64), 0.2), _init(rng, "w2", (64, hidden), 0.2),
        numpy_helper.from_array(np.array(1 / np.sqrt(hidden), np.float32), "scale"),
        numpy_helper.from_array(np.array(1 / np.sqrt(2), np.float32), "inv_sqrt2"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"), numpy_helper.from_array(np.array(1.0, np.float32), "one"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["x"], axis=0, name="embed"),
        helper.make_node("LayerNormalization", ["x", "ln_s", "ln_b"], ["xn"], axis=-1, name="ln"),
        helper.make_node("MatMul", ["xn", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["xn", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["xn", "wv"], ["v"], name="v"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="k_t"),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="scale"),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", "v"], ["att"], name="attend"),
        helper.make_node("Add", ["x", "att"], ["h"], name="residual1"),
        helper.make_node("MatMul", ["h", "w1"], ["m1"], name="mlp1"),
        helper.make_node("Mul", ["m1", "inv_sqrt2"], ["m1s"], name="gelu_scale"),
        helper.make_node("Erf", ["m1s"], ["m1e"], name="gelu_erf"),
        helper.make_node("Add", ["m1e", "one"], ["m1p"], name="gelu_add"),
        helper.make_node("Mul", ["m1", "m1p"], ["m1m"], name="gelu_mul"),
        helper.make_node("Mul", ["m1m", "half"], ["g"], name="gelu_half"),
        helper.make_node("MatMul", ["g", "w2"], ["m2"], name="mlp2"),
        helper.make_node("Add", ["h", "m2"], ["output"], name="residual2"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
                  [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, hidden])], inits, "tiny_transformer")


def example_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs: floats in [-1, 1), integer ids in [0, 10)."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if np.dtype(dtype).kind == "f":
            feeds[vi.name] = rng.uniform(-1, 1, shape).astype(dtype)
        elif np.dtype(dtype) == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[vi.name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds
