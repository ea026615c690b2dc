"""Conv3d with constant weights as one 2-D Conv per output depth plane (passes/conv3d_slices.py) vs ORT:
strides, pads, dilations, groups, bias, auto_pad, planes that see only padding, and models of opsets before
Slice-10 (PyTorch's opset-6 exports), whose graphs still get the pass's input-form Slice nodes."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.run.backend import compile_model
from fluidml_xc.pipeline import import_graph

CASES = [  # x shape, Cout, kernel, attrs
    ((1, 4, 6, 8, 8), 6, (3, 3, 3), {"pads": [1] * 6}),
    ((2, 4, 7, 6, 5), 4, (3, 2, 3), {"strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]}),
    ((1, 6, 9, 5, 5), 6, (3, 3, 3), {"dilations": [2, 1, 1], "pads": [2, 1, 1, 2, 1, 1], "group": 3}),
    ((1, 3, 5, 6, 6), 2, (2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2, 2]}),
    ((1, 3, 4, 5, 5), 2, (3, 1, 1), {"pads": [3, 0, 0, 3, 0, 0]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_conv3d_planes_match_ort(case, bias):
    _check(case, bias, 13)


@pytest.mark.parametrize("opset", [6, 9])
@pytest.mark.parametrize("case", [1, 2])
def test_conv3d_planes_before_opset_10(case, opset):
    """Slice took starts/ends/axes as attributes before opset 10: the pass's Slice (inputs, with a step for a
    dilated depth) must lower the same in such a graph (every PyTorch opset-6 Conv3d failed to build)."""
    _check(case, True, opset)


def _check(case: int, bias: bool, opset: int) -> None:
    x_shape, cout, kernel, attrs = CASES[case]
    rng = np.random.default_rng(case)
    w = (rng.standard_normal((cout, x_shape[1] // attrs.get("group", 1), *kernel)) * 0.3).astype(np.float32)
    inits, names = [numpy_helper.from_array(w, "w")], ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"))
        names.append("b")
    graph = helper.make_graph([helper.make_node("Conv", names, ["y"], **attrs)], "c3",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset >= 13 else 3
    x = rng.standard_normal(x_shape).astype(np.float32)
    ops = [n.op_type for n in import_graph(model).nodes]
    assert "Concat" in ops and ops.count("Conv") >= 1
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = compile_model(model)({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
