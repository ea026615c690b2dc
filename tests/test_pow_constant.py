"""Pow by a constant scalar exponent as multiplications / sqrt / division, alone and inside a fused chain,
against numpy's power (float64) within a few ulps, with the special values."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.run.backend import compile_model
from fluidml_xc.pipeline import import_graph
from fluidml_xc.ops.elementwise import CONSTANT_POWERS


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("exponent", sorted(CONSTANT_POWERS) + [1.5])
def test_pow_by_constant(exponent, fused):
    x = np.concatenate([np.linspace(-6, 6, 2001), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-20, 3e12]]).astype(np.float32)
    nodes = [helper.make_node("Pow", ["x", "e"], ["p"])]
    nodes.append(helper.make_node("Add", ["p", "zero"], ["y"]) if fused else helper.make_node("Identity", ["p"], ["y"]))
    graph = helper.make_graph(nodes, "pow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
                              [numpy_helper.from_array(np.array(exponent, np.float32), "e"),
                               numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    if fused:
        assert [n.op_type for n in import_graph(model).nodes] == ["FusedElementwise"]
    got = compile_model(model)({"x": x})[0]
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), exponent).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=3e-7, atol=0)
