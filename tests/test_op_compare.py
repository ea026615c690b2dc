"""benchmarks/op_compare.py (issue #28): our per-op profile matched to ONNX Runtime's node profile by what each op
computes, across ORT's NCHWc renames and channel padding, on a small CNN built here."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "op_compare.py"


def _script():
    spec = importlib.util.spec_from_file_location("fxc_op_compare", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def _cnn(path: Path) -> None:
    """Unnamed nodes (as onnx's light models have them): a 3x3 Conv + Relu, a 1x1 stride-2 Conv with 20 output
    channels (ORT pads them to 32), a MaxPool and a Concat of two 1x1 branches."""
    rng = np.random.default_rng(3)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], strides=[2, 2]),
             helper.make_node("MaxPool", ["c1"], ["p1"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2"], ["a"]),
             helper.make_node("Conv", ["p1", "w3"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w("w0", 32, 16, 3, 3), w("w1", 20, 32, 1, 1), w("w2", 16, 20, 1, 1), w("w3", 16, 20, 1, 1)])
    from onnx import save
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_every_op_is_matched_to_its_ort_node(tmp_path):
    oc = _script()
    _cnn(tmp_path / "cnn.onnx")
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16, 32, 32)).astype(np.float32)}
    res = oc.compare("cnn", tmp_path / "cnn.onnx", feeds, rounds=1, runs=2, warmup=1, board=None)
    kinds = {r["kind"]: r for r in res["kinds"]}
    assert {"Conv 3x3 s1 @32", "Conv 1x1 s2 @16", "Conv 1x1 s1 @16", "MaxPool s1 @16", "Concat @16"} <= set(kinds)
    for name in ("Conv 3x3 s1 @32", "Conv 1x1 s2 @16", "Conv 1x1 s1 @16", "MaxPool s1 @16"):
        r = kinds[name]
        assert r["n_ours"] == r["n_ort"] >= 1 and r["ours_ms"] > 0 and r["ort_ms"] > 0, r
    for sig in res["signatures"]:
        if sig["kind"].startswith("Conv"):
            assert sig["ours_ms"] > 0 and sig["ort_ms"] > 0, sig  # no Conv left unmatched on either side
