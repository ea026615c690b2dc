"""Channels-last convolution under --opt fluid: kernels under every layout, the layout DP's choice, all modes agree."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.backend import import_graph
from modelrun import compile_and_run, reference

RTOL, ATOL = 1e-4, 1e-4
NHWC = (0, 2, 3, 1)


def rand(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def make_model(nodes, inits, inputs, outputs, opset=17):
    graph = helper.make_graph(
        nodes, "fluid_conv",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _jit_node(graph, node, layouts):
    import ctypes

    from fluidml_xc.boards import get_board
    from fluidml_xc.codegen.emit import EmitOptions, ModuleEmitter
    from fluidml_xc.codegen.machine import machine_spec
    from fluidml_xc.fluid.costs import jit_engine

    class NoPlan:
        alias_of, offsets = {}, {}
    spec = machine_spec(get_board(None))
    emitter = ModuleEmitter(graph, NoPlan(), spec, EmitOptions(layouts=layouts))
    fn = emitter.node_function(node, 0)
    fn.linkage = "external"
    engine = jit_engine(str(emitter.module), spec)
    names = emitter._arg_names(node)
    rng = np.random.default_rng(5)
    logical, stored = {}, []
    for name in names:
        value = rng.standard_normal(graph.tensors[name].shape).astype(np.float32)
        logical[name] = value
        perm = layouts.get(name)
        stored.append(np.ascontiguousarray(np.transpose(value, perm) if perm else value).copy())
    cfn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(names)))(engine.get_function_address(fn.name))
    cfn(*[ctypes.c_void_p(a.ctypes.data) for a in stored])
    perm = layouts.get(names[-1])
    return logical, (np.transpose(stored[-1], np.argsort(perm)) if perm else stored[-1])


CASES = {  # weight shape, attributes, input shape
    "depthwise": ((40, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=40), (1, 40, 9, 30)),
    "depthwise_s2": ((37, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=37), (1, 37, 13, 13)),
    "depthwise_5x5": ((48, 1, 5, 5), dict(pads=[2, 2, 2, 2], group=48), (2, 48, 7, 7)),
    "conv1x1_wide": ((40, 24, 1, 1), {}, (1, 24, 24, 24)),
    "conv3x3": ((40, 12, 3, 3), dict(pads=[1, 1, 1, 1]), (1, 12, 11, 19)),
    "grouped": ((32, 8, 3, 3), dict(pads=[1, 1, 1, 1], group=2), (1, 16, 7, 9)),
}


@pytest.mark.parametrize("in_layout,out_layout", [(NHWC, NHWC), (None, NHWC), (NHWC, None)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_channels_last(case, in_layout, out_layout):
    w, attrs, x_shape = CASES[case]
    inits = {"w": rand(*w, seed=50), "b": rand(w[0], seed=51), "lo": np.array(-0.3, np.float32), "hi": np.array(0.8, np.float32)}
    probe = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)], inits, {"x": np.zeros(x_shape, np.float32)}, ["c"])
    out_shape = import_graph(probe).tensors["c"].shape
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Clip", ["s", "lo", "hi"], ["y"])]
    model = make_model(nodes, inits, {"x": np.zeros(x_shape, np.float32), "r": np.zeros(out_shape, np.float32)}, ["y"])
    graph = import_graph(model)
    (node,) = graph.nodes
    layouts = {k: v for k, v in {"x": in_layout, "r": out_layout, "y": out_layout}.items() if v}
    logical, got = _jit_node(graph, node, layouts)
    want = reference(model, {"x": logical["x"], "r": logical["r"]})["y"]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
