"""Channel-vector and flat 1x1 Conv tiles at the widths where their blocking changes (ops/conv.py): rows whose
border columns join interior blocks and whose last columns split into balanced blocks (widths 13 and 57),
channel counts that leave a partial block, and a wide flat 1x1 on the 6-channel row-vector tile; against
ONNX Runtime, and bit-identical at 1 and 2 threads."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from modelrun import compile_and_run, graph_model


def _model(width: int):
    rng = np.random.default_rng(5)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[1, 2]),
        helper.make_node("Conv", ["x", "w3"], ["c3"]),
        helper.make_node("Conv", ["c3", "w4", "b4"], ["y"], pads=[0, 1, 0, 1], kernel_shape=[1, 3]),
    ]
    consts = {"w1": w(24, 8, 3, 3), "b1": w(24), "w2": w(40, 24, 3, 3), "b2": w(40), "w3": w(10, 8, 1, 1),
              "w4": w(16, 10, 1, 3), "b4": w(16)}
    feeds = {"x": rng.standard_normal((1, 8, 24 if width > 24 else 5, width)).astype(np.float32)}
    return graph_model(nodes, feeds, ["c2", "y"], consts, opset=13), feeds


@pytest.mark.parametrize("opt,width", [("greedy", 57), ("fluid", 57), ("fluid", 13)])
def test_conv_tiles_match_ort_at_any_thread_count(tmp_path, opt, width):
    model, feeds = _model(width)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    runs = [compile_and_run(model, feeds, tmp_path / f"t{threads}", "x86_64", opt=opt, threads=threads) for threads in (1, 2)]
    for name, expected in zip(("c2", "y"), want):
        np.testing.assert_allclose(runs[0][name], expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(runs[0][name], runs[1][name])
