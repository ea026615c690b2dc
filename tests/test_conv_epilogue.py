"""passes/epilogues.py: Conv + residual Add + activation fusion, pattern matching and results."""
from __future__ import annotations


import numpy as np
import pytest
from onnx import helper

from fluidml_xc.pipeline import import_graph
from modelrun import compile_and_run, conv_add_clip_model, float_model, jit_node, rand, reference, require_emulator

RTOL, ATOL = 1e-4, 1e-5


def fused(model):
    graph = import_graph(model)
    return graph, {n.name: n for n in graph.nodes}


def conv(x, w, out, name, **attrs):
    return helper.make_node("Conv", [x, w, "b"], [out], name=name, **attrs)


INITS = {"w": rand(8, 8, 3, 3, seed=1), "b": rand(8, seed=2), "lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32),
         "b4": rand(1, 1, 1, 11, seed=17)}
FEEDS = {"x": rand(1, 8, 9, 11, seed=3), "r": rand(1, 8, 9, 11, seed=4)}


# -- pattern matching ------------------------------------------------------------------------------
def test_conv_add_relu_fuses_in_order():
    nodes = [conv("x", "w", "c", "conv", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["r", "c"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph, by_name = fused(float_model(nodes, INITS, FEEDS, ["y"]))
    assert [n.op_type for n in graph.nodes] == ["Conv"]
    node = by_name["conv"]
    assert node.attrs["_epilogue"].residual and node.attrs["_epilogue"].activation == "relu"
    assert node.inputs[3] == "r" and node.outputs == ["y"]
    assert "c" not in graph.tensors and "s" not in graph.tensors


def test_clip_bounds_and_leaky_relu():
    nodes = [conv("x", "w", "c", "conv", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="clip"),
             conv("x", "w", "c2", "conv2", pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c2"], ["y2"], alpha=0.2, name="lrelu"),
             conv("x", "w", "c3", "conv3", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c3", "", "hi"], ["y3"], name="clip_hi")]
    graph, by_name = fused(float_model(nodes, INITS, FEEDS, ["y", "y2", "y3"]))
    assert [n.op_type for n in graph.nodes] == ["Conv"] * 3
    epi = by_name["conv"].attrs["_epilogue"]
    assert (epi.activation, *epi.bounds, epi.residual) == ("clip", -0.5, pytest.approx(0.7), False)
    assert by_name["conv2"].attrs["_epilogue"].alpha == pytest.approx(0.2)
    assert by_name["conv3"].attrs["_epilogue"].bounds[0] is None


def test_not_fused_when_shared_output_or_runtime_bounds():
    nodes = [conv("x", "w", "c", "conv", pads=[1, 1, 1, 1]),                 # two consumers
             helper.make_node("Relu", ["c"], ["y"], name="relu"),
             helper.make_node("Sigmoid", ["c"], ["y1"], name="sig"),
             conv("x", "w", "c2", "conv2", pads=[1, 1, 1, 1]),               # intermediate is a graph output
             helper.make_node("Relu", ["c2"], ["y2"], name="relu2"),
             conv("x", "w", "c3", "conv3", pads=[1, 1, 1, 1]),               # runtime clip bound
             helper.make_node("ReduceMin", ["r"], ["m"], keepdims=0, name="rmin"),
             helper.make_node("Clip", ["c3", "m"], ["y3"], name="clip"),
             conv("x", "w", "c4", "conv4", pads=[1, 1, 1, 1]),               # broadcasting add along W
             helper.make_node("Add", ["c4", "b4"], ["y4"], name="badd")]
    graph, by_name = fused(float_model(nodes, INITS, FEEDS, ["y", "y1", "c2", "y2", "y3", "y4"]))
    for name in ("conv", "conv2", "conv3", "conv4"):
        assert "_epilogue" not in by_name[name].attrs, name
    assert {"relu", "sig", "relu2", "clip", "badd"} <= set(by_name)


def test_add_shared_output_keeps_activation_separate():
    """Conv -> Add fuses; the Add's output has two consumers, so the Relu stays a node."""
    nodes = [conv("x", "w", "c", "conv", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "r"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu"),
             helper.make_node("Neg", ["s"], ["y1"], name="neg")]
    graph, by_name = fused(float_model(nodes, INITS, FEEDS, ["y", "y1"]))
    epi = by_name["conv"].attrs["_epilogue"]
    assert epi.residual and epi.activation is None and by_name["conv"].outputs == ["s"]
    assert "relu" in by_name and "add" not in by_name


def test_residual_produced_after_conv_moves_conv():
    nodes = [conv("x", "w", "c", "conv", pads=[1, 1, 1, 1]),
             helper.make_node("Neg", ["r"], ["nr"], name="neg"),
             helper.make_node("Add", ["c", "nr"], ["y"], name="add")]
    graph, _ = fused(float_model(nodes, INITS, FEEDS, ["y"]))
    assert [n.name for n in graph.nodes] == ["neg", "conv"]


def test_channel_affine_folds_then_sum_relu():
    """Conv -> Mul(c) -> Add(c) (an unfolded BN) folds into weights/bias; Sum of two is a residual add."""
    inits = dict(INITS, s=rand(8, 1, 1, seed=20), t=rand(1, 8, 1, 1, seed=21), s0=np.array(0.5, np.float32))
    nodes = [conv("x", "w", "c", "conv", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["s", "c"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "t"], ["a"], name="add"),
             helper.make_node("Mul", ["a", "s0"], ["m2"], name="mul_scalar"),
             helper.make_node("Sum", ["m2", "r"], ["sm"], name="sum"),
             helper.make_node("Relu", ["sm"], ["y"], name="relu")]
    model = float_model(nodes, inits, FEEDS, ["y"], opset=9)
    graph, by_name = fused(model)
    assert [n.op_type for n in graph.nodes] == ["Conv"]
    assert by_name["conv"].attrs["_epilogue"].residual and by_name["conv"].inputs[3] == "r"
    assert graph.tensors["w"].value is INITS["w"] or np.array_equal(graph.tensors["w"].value, INITS["w"])


def test_channel_affine_not_folded_when_spatial_or_shared():
    inits = dict(INITS, sp=rand(1, 1, 9, 11, seed=22), s=rand(8, 1, 1, seed=20))
    nodes = [conv("x", "w", "c", "conv", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "sp"], ["y"], name="mul_spatial"),
             conv("x", "w", "c2", "conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c2", "s"], ["y2"], name="mul"),
             helper.make_node("Relu", ["c2"], ["y3"], name="relu")]
    graph, by_name = fused(float_model(nodes, inits, FEEDS, ["y", "y2", "y3"]))
    assert {"mul_spatial", "mul", "relu"} <= set(by_name)


def test_batchnorm_relu_fuses():
    bn = {"bs": rand(8, seed=30), "bb": rand(8, seed=31), "bm": rand(8, seed=32), "bv": np.abs(rand(8, seed=33)) + 0.5}
    nodes = [helper.make_node("BatchNormalization", ["x", "bs", "bb", "bm", "bv"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    model = float_model(nodes, dict(INITS, **bn), {"x": FEEDS["x"]}, ["y"])
    graph, by_name = fused(model)
    assert [n.op_type for n in graph.nodes] == ["BatchNormalization"]
    assert by_name["bn"].attrs["_epilogue"].activation == "relu"


def test_add_of_two_convs_goes_to_the_later_one():
    """ResNet's projection shortcut: both Add operands are convs; the later one fuses, nothing moves."""
    nodes = [conv("x", "w", "p", "proj", pads=[1, 1, 1, 1]),
             conv("x", "w", "c", "branch", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["p", "c"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph, by_name = fused(float_model(nodes, INITS, FEEDS, ["y"]))
    assert [n.name for n in graph.nodes] == ["proj", "branch"]
    assert by_name["branch"].inputs[3] == "p" and "_epilogue" not in by_name["proj"].attrs


# -- results ---------------------------------------------------------------------------------------
def epilogue_net():
    """Fused convs of every kernel family (channel vectors, row vectors, flat 1x1, depthwise, 1D)."""
    inits = {"w3": rand(16, 8, 3, 3, seed=5), "w1": rand(8, 8, 1, 1, seed=6), "wd": rand(8, 1, 3, 3, seed=7),
             "b16": rand(16, seed=8), "b8": rand(8, seed=9), "ws2": rand(16, 8, 1, 1, seed=10),
             "w5": rand(5, 8, 3, 3, seed=11), "lo": np.array(0.0, np.float32), "hi": np.array(1.0, np.float32),
             "w1d": rand(8, 8, 3, seed=12)}
    feeds = {"x": rand(1, 8, 9, 11, seed=3), "r": rand(1, 8, 9, 11, seed=4), "r16": rand(1, 16, 5, 6, seed=13),
             "x1": rand(1, 8, 20, seed=14), "r1": rand(1, 8, 20, seed=15), "r5": rand(1, 5, 9, 11, seed=16)}
    N = helper.make_node
    nodes = [
        N("Conv", ["x", "w3", "b16"], ["a0"], pads=[1, 1, 1, 1], strides=[2, 2]),      # channel vectors
        N("Add", ["a0", "r16"], ["a1"]), N("Relu", ["a1"], ["y0"]),
        N("Conv", ["x", "w1", "b8"], ["b0"]),                                          # flat 1x1
        N("Add", ["r", "b0"], ["b1"]), N("Clip", ["b1", "lo", "hi"], ["y1"]),
        N("Conv", ["x", "wd"], ["d0"], group=8, pads=[1, 1, 1, 1]),                    # depthwise, no bias
        N("Add", ["d0", "r"], ["d1"]), N("LeakyRelu", ["d1"], ["y2"], alpha=0.1),
        N("Conv", ["x", "ws2", "b16"], ["e0"], strides=[2, 2]),                        # 1x1 stride 2
        N("Clip", ["e0", "lo"], ["y3"]),
        N("Conv", ["x", "w5"], ["f0"], pads=[1, 1, 1, 1]),                             # remainder channel block
        N("Add", ["f0", "r5"], ["y4"]),
        N("Conv", ["x1", "w1d", "b8"], ["g0"], pads=[1, 1]),                           # 1D
        N("Add", ["g0", "r1"], ["g1"]), N("Relu", ["g1"], ["y5"]),
        N("Conv", ["x", "w1", "b8"], ["h0"]),                                          # plain relu on a 1x1
        N("Relu", ["h0"], ["y6"]),
        N("Conv", ["x", "w1"], ["i0"], pads=[1, 1, 1, 1]),                             # unfolded BN, Sum
        N("Mul", ["i0", "sc"], ["i1"]), N("Add", ["sh", "i1"], ["i2"]),
        N("Sum", ["i2", "rp"], ["i3"]), N("Relu", ["i3"], ["y7"]),
        N("BatchNormalization", ["x", "bs", "bb", "bm", "bv"], ["j0"]),               # BN + Clip
        N("Clip", ["j0", "lo", "hi"], ["y8"]),
        N("Conv", ["x7", "ws2", "b16"], ["k0"], strides=[2, 2]),                       # 1x1 s2, tiles across rows
        N("Add", ["k0", "r7"], ["k1"]), N("Relu", ["k1"], ["y9"]),
    ]
    inits.update(sc=rand(8, 1, 1, seed=40), sh=rand(8, 1, 1, seed=41), bs=rand(8, seed=42), bb=rand(8, seed=43),
                 bm=rand(8, seed=44), bv=np.abs(rand(8, seed=45)) + 0.5)
    feeds["rp"] = rand(1, 8, 11, 13, seed=46)
    feeds["x7"], feeds["r7"] = rand(1, 8, 13, 13, seed=47), rand(1, 16, 7, 7, seed=48)
    outputs = ["y0", "y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9"]
    return float_model(nodes, inits, feeds, outputs), feeds


def check(model, feeds, tmp_path, board="x86_64"):
    got = compile_and_run(model, feeds, tmp_path, board=board)
    want = reference(model, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


def test_epilogue_net_fuses_everything():
    model, _ = epilogue_net()
    graph = import_graph(model)
    assert [n.op_type for n in graph.nodes] == ["Conv"] * 8 + ["BatchNormalization", "Conv"]


def test_epilogue_net_x86_64(tmp_path):
    model, feeds = epilogue_net()
    check(model, feeds, tmp_path)


@pytest.mark.parametrize("opt", ["plain", "greedy"])
def test_epilogue_net_other_modes(tmp_path, opt):
    model, feeds = epilogue_net()
    got = compile_and_run(model, feeds, tmp_path, opt=opt)
    want = reference(model, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


def test_epilogue_net_aarch64(tmp_path):
    require_emulator("qemu-aarch64")
    model, feeds = epilogue_net()
    check(model, feeds, tmp_path, board="qemu-aarch64")


# -- every layout (kernels JIT-run on buffers stored in permuted layouts) ----------------------------
LAYOUTS = [None, (0, 2, 3, 1), (0, 1, 3, 2), (2, 3, 0, 1)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", ["conv3x3_s2", "conv1x1", "conv1x1_s2", "depthwise"])
def test_fused_conv_every_layout(case, layout):
    w, attrs, x_shape = {"conv3x3_s2": ((16, 8, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), (1, 8, 9, 30)),
                         "conv1x1": ((16, 8, 1, 1), {}, (1, 8, 5, 30)),
                         "conv1x1_s2": ((16, 8, 1, 1), dict(strides=[2, 2]), (1, 8, 13, 13)),
                         "depthwise": ((8, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=8), (1, 8, 9, 30))}[case]
    model = conv_add_clip_model(w, attrs, x_shape)
    graph = import_graph(model)
    (node,) = graph.nodes
    layouts = {"x": layout, "r": layout, "y": layout} if layout else {}
    logical, got = jit_node(graph, node, layouts)
    feeds = {"x": logical["x"], "r": logical["r"]}
    want = reference(model, feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op,attrs", [("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                      ("MaxPool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
                                      ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
                                      ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1))])
def test_vector_pool_every_layout(op, attrs, layout):
    x_shape = (1, 12, 7, 41)
    model = float_model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)], {}, {"x": np.zeros(x_shape, np.float32)}, ["y"])
    graph = import_graph(model)
    (node,) = graph.nodes
    layouts = {"x": layout, "y": layout} if layout else {}
    logical, got = jit_node(graph, node, layouts)
    want = reference(model, {"x": logical["x"]})["y"]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
