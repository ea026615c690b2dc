"""Channels-last convolution under --opt fluid: kernels under every layout, the layout DP's choice, all modes agree."""
from __future__ import annotations


import numpy as np
import pytest
from onnx import helper

from fluidml_xc.pipeline import import_graph
from modelrun import compile_and_run, conv_add_clip_model, float_model, jit_node, rand, reference, require_emulator

RTOL, ATOL = 1e-4, 1e-4
NHWC = (0, 2, 3, 1)


CASES = {  # weight shape, attributes, input shape
    "depthwise": ((40, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=40), (1, 40, 9, 30)),
    "depthwise_s2": ((37, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=37), (1, 37, 13, 13)),
    "depthwise_5x5": ((48, 1, 5, 5), dict(pads=[2, 2, 2, 2], group=48), (2, 48, 7, 7)),
    "conv1x1_wide": ((40, 24, 1, 1), {}, (1, 24, 24, 24)),
    "conv1x1_7x7": ((48, 24, 1, 1), {}, (1, 24, 7, 7)),  # 49 pixels flat: tiles, then balanced blocks (no lone pixel)
    "conv3x3": ((40, 12, 3, 3), dict(pads=[1, 1, 1, 1]), (1, 12, 11, 19)),
    "conv3x3_s2_512": ((24, 512, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), (1, 512, 9, 11)),  # taps outermost on x86
    "grouped": ((32, 8, 3, 3), dict(pads=[1, 1, 1, 1], group=2), (1, 16, 7, 9)),
}


@pytest.mark.parametrize("in_layout,out_layout", [(NHWC, NHWC), (None, NHWC), (NHWC, None)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_channels_last(case, in_layout, out_layout):
    w, attrs, x_shape = CASES[case]
    model = conv_add_clip_model(w, attrs, x_shape)
    graph = import_graph(model)
    (node,) = graph.nodes
    layouts = {k: v for k, v in {"x": in_layout, "r": out_layout, "y": out_layout}.items() if v}
    logical, got = jit_node(graph, node, layouts)
    want = reference(model, {"x": logical["x"], "r": logical["r"]})["y"]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# -- a small CNN: the DP's choice and every --opt mode against ONNX Runtime ---------------------------
def cnn(channels: int = 32):
    """Stem conv, depthwise + pointwise with a residual, max pool, two branches concatenated, global pool, Gemm."""
    c = channels
    inits = {"w0": rand(c, 3, 3, 3, seed=1) * 0.3, "b0": rand(c, seed=2),
             "wd": rand(c, 1, 3, 3, seed=3) * 0.3, "bd": rand(c, seed=4),
             "wp": rand(c, c, 1, 1, seed=5) * 0.2, "bp": rand(c, seed=6),
             "wa": rand(c, c, 1, 1, seed=7) * 0.2, "ba": rand(c, seed=8),
             "wb": rand(c, c, 3, 3, seed=9) * 0.1, "bb": rand(c, seed=10),
             "wf": rand(10, 2 * c, seed=11) * 0.2, "bf": rand(10, seed=12)}
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "wd", "bd"], ["cd"], pads=[1, 1, 1, 1], group=c),
        helper.make_node("Clip", ["cd", "lo", "hi"], ["rd"]),
        helper.make_node("Conv", ["rd", "wp", "bp"], ["cp"]),
        helper.make_node("Add", ["cp", "r0"], ["s"]),
        helper.make_node("MaxPool", ["s"], ["m0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["m0", "bn_s", "bn_b", "bn_m", "bn_v"], ["m"]),
        helper.make_node("Conv", ["m", "wa", "ba"], ["ca"]),
        helper.make_node("Relu", ["ca"], ["ra"]),
        helper.make_node("Conv", ["m", "wb", "bb"], ["cb"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["cb"], ["sb"]),
        helper.make_node("Concat", ["ra", "sb"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits.update({"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32),
                  "bn_s": rand(c, seed=13), "bn_b": rand(c, seed=14), "bn_m": rand(c, seed=15), "bn_v": np.abs(rand(c, seed=16)) + 0.5})
    model = float_model(nodes, inits, {"x": np.zeros((1, 3, 34, 34), np.float32)}, ["y", "cat"])
    return model, {"x": rand(1, 3, 34, 34, seed=20)}


def test_fluid_picks_channels_last_for_conv_chains():
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec
    from fluidml_xc.fluid.costs import Costs
    from fluidml_xc.fluid.optimize import build_problem, optimize

    model, _ = cnn()
    graph = import_graph(model)
    spec = machine_spec(get_board("x86_64"))
    decisions = optimize(graph, spec, "fluid")
    depthwise = next(n for n in graph.nodes if n.op_type == "Conv" and n.attrs.get("group", 1) > 1)
    # the depthwise conv reads and writes channels-last: the cost model says so, and the DP follows
    model_costs = Costs(graph, spec)
    io = [t for t in (depthwise.inputs[0], depthwise.outputs[0])]
    nhwc = {t: NHWC for t in io}
    assert model_costs.cost_and_order(depthwise, nhwc)[0] < model_costs.cost_and_order(depthwise, {})[0]
    for t in io:
        assert decisions.layouts.get(t) == NHWC, (t, decisions.layouts)
    assert decisions.predicted_ns < decisions.row_major_ns
    # graph inputs/outputs stay row-major; every Conv got a loop order
    assert not set(decisions.layouts) & (set(graph.inputs) | set(graph.outputs))
    assert {n.name for n in graph.nodes if n.op_type == "Conv"} <= set(decisions.loop_orders)
    problem = build_problem(graph, model_costs)[0]
    assert all(set(c) <= {(0, 1, 2, 3), NHWC} for t, c in problem.candidates.items() if len(graph.tensors[t].shape) == 4)


def test_fluid_keeps_row_major_without_predicted_gain():
    """One tiny 1x1 conv between graph input and output: no layout can win, fluid = greedy."""
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec
    from fluidml_xc.fluid.optimize import optimize

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"])]
    model = float_model(nodes, {"w": rand(4, 4, 1, 1), "b": rand(4)}, {"x": np.zeros((1, 4, 5, 5), np.float32)}, ["y"])
    graph = import_graph(model)
    decisions = optimize(graph, machine_spec(get_board("x86_64")), "fluid")
    assert decisions.layouts == {}


@pytest.mark.parametrize("opt", ["plain", "greedy", "fluid"])
def test_cnn_every_mode_x86_64(opt, tmp_path):
    model, feeds = cnn()
    want = reference(model, feeds)
    got = compile_and_run(model, feeds, tmp_path, opt=opt)
    for name in ("y", "cat"):
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL)


def test_cnn_fluid_aarch64(tmp_path):
    """NEON: 4 lanes, so the channel-vector paths (and their channel tails) differ from x86_64's."""
    require_emulator("qemu-aarch64")
    model, feeds = cnn(channels=18)
    want = reference(model, feeds)
    got = compile_and_run(model, feeds, tmp_path, board="qemu-aarch64", opt="fluid")
    for name in ("y", "cat"):
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("cpu,C,H,OC,order", [
    ("x86-64-v3", 128, 28, 512, "px>co"),  # input past half of L2: channel blocks outermost would re-read it
    ("x86-64-v4", 128, 28, 512, "co>px"),  # AVX-512 keeps its figures
    ("x86-64-v3", 64, 56, 256, "co>px"),   # a 64-tap reduction: pixel tiles outermost re-read the weights past L1
    ("x86-64-v4", 64, 56, 256, "px>co"),
])
def test_conv1x1_loop_order_on_avx2(cpu, C, H, OC, order):
    """Channels-last 1x1 convs with a residual as in ResNet-50 (TargetForms.input_kept, weights_kept): on
    AVX2 x86 the one whose input fills more than half of CACHE_BYTES runs pixel tiles outermost, the one with 64
    input channels and 64 KiB of weights channel blocks outermost (measured on Zen 3); AVX-512 keeps its choices."""
    from fluidml_xc.fluid.costs import CACHE_BYTES, Costs
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Add", ["c", "r"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    feeds = {"x": np.zeros((1, C, H, H), np.float32), "r": np.zeros((1, OC, H, H), np.float32)}
    graph = import_graph(float_model(nodes, {"w": rand(OC, C, 1, 1), "b": rand(OC)}, feeds, ["y"]))
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    nhwc = {t: NHWC for t in (*conv.inputs[:1], *conv.inputs[3:], *conv.outputs) if t}
    assert len(conv.inputs) > 3 and conv.inputs[3] in nhwc  # Add + Relu fused: the residual is read in the kernel
    assert C != 128 or CACHE_BYTES // 2 < C * H * H * 4 <= CACHE_BYTES
    assert Costs(graph, machine_spec(get_board("x86_64"), cpu)).cost_and_order(conv, nhwc)[1] == order
