"""Node names stay unique through function inlining: the optimizer's loop orders and the profile's rows are keyed
by node name, and an inlined body repeats its own node names once per call site."""
from __future__ import annotations

import collections
import warnings

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

from fluidml_xc.pipeline import LowerOptions, import_graph, lower
from fluidml_xc.run.backend import compile_model
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec


def _two_group_norms():
    x = helper.make_tensor_value_info("x", 1, [2, 8, 5, 5])
    y = helper.make_tensor_value_info("y", 1, [2, 8, 5, 5])
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], ["t"], num_groups=2),
             helper.make_node("Mish", ["t"], ["u"]),
             helper.make_node("GroupNormalization", ["u", "s", "b"], ["y"], num_groups=4)]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _repeats(names):
    return {name: n for name, n in collections.Counter(names).items() if n > 1}


def test_inlined_bodies_get_unique_node_names():
    model = _two_group_norms()
    graph = import_graph(model)
    assert not _repeats(n.name for n in graph.nodes)
    lowered = lower(graph, machine_spec(get_board("x86_64")), LowerOptions())
    assert not _repeats(n.name for n in lowered.graph.nodes)
    assert set(lowered.decisions.loop_orders) <= {n.name for n in lowered.graph.nodes}


def test_inlined_bodies_match_onnxruntime():
    model = _two_group_norms()
    x = np.random.default_rng(4).standard_normal((2, 8, 5, 5)).astype(np.float32)
    got = compile_model(model)({"x": x})[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
