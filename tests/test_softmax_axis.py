"""Softmax / LogSoftmax over a non-last axis as reductions + elementwise (passes/softmax_axis.py) vs ORT."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fluidml_xc.run.backend import compile_model
from fluidml_xc.pipeline import import_graph


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_any_axis_matches_ort(op, axis):
    x = (np.random.default_rng(axis + 5).standard_normal((3, 7, 9, 5)) * 4).astype(np.float32)
    x[1, 2, 3, 4] = np.nan
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=axis)], "s",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert (op in [n.op_type for n in import_graph(model).nodes]) == (axis == -1)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = compile_model(model)({"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
