"""The X60's cost model prices the channels-last depthwise block against the NCHW column strips as llvm-mca-22 has
them (fluid/depthwise_costs.py rvv_channels_last_factor; docs/RISCV_KERNELS.md "The X60 in the cost model")."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from fluidml_xc.fluid.costs import Costs
from fluidml_xc.fluid.optimize import channels_last, optimize
from fluidml_xc.pipeline import import_graph
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import graph_model

NHWC = channels_last(4)


def mobilenet_stage(size: int = 56, channels: int = 144, width: int = 24):
    """MobileNetV2's stage 2 at size x size: the block that halves the image (1x1 expand from 16 channels to 96, Clip6,
    depthwise 3x3 at stride 2, Clip6, 1x1 project to `width`), the stride-1 block (1x1 expand to `channels`, Clip6,
    depthwise 3x3 with a bias, Clip6, 1x1 project, the residual Add), then the next stage's first block (1x1 expand,
    Clip6, depthwise 3x3 at stride 2, Clip6, 1x1 project to 32), as in MobileNetV2 (whose stride-2 depthwise convs
    run channels-last on every board)."""
    rng = np.random.default_rng(5)
    f = lambda *shape: (0.2 * rng.standard_normal(shape)).astype(np.float32)
    N = helper.make_node
    nodes = [N("Conv", ["x", "w0", "b0"], ["a"]), N("Clip", ["a", "lo", "hi"], ["a6"]),
             N("Conv", ["a6", "ws", "bs"], ["s"], pads=[1] * 4, strides=[2, 2], group=96), N("Clip", ["s", "lo", "hi"], ["s6"]),
             N("Conv", ["s6", "w1", "b1"], ["t"]),
             N("Conv", ["t", "we", "be"], ["e"]), N("Clip", ["e", "lo", "hi"], ["e6"]),
             N("Conv", ["e6", "wd", "bd"], ["d"], pads=[1] * 4, group=channels, name="depthwise"),
             N("Clip", ["d", "lo", "hi"], ["d6"]), N("Conv", ["d6", "wp", "bp"], ["p"]), N("Add", ["p", "t"], ["r"]),
             N("Conv", ["r", "wf", "bf"], ["g"]), N("Clip", ["g", "lo", "hi"], ["g6"]),
             N("Conv", ["g6", "wh", "bh"], ["h"], pads=[1] * 4, strides=[2, 2], group=channels), N("Clip", ["h", "lo", "hi"], ["h6"]),
             N("Conv", ["h6", "wo", "bo"], ["y"])]
    consts = {"w0": f(96, 16, 1, 1), "b0": f(96), "ws": f(96, 1, 3, 3), "bs": f(96), "w1": f(width, 96, 1, 1), "b1": f(width),
              "we": f(channels, width, 1, 1), "be": f(channels), "wd": f(channels, 1, 3, 3), "bd": f(channels),
              "wp": f(width, channels, 1, 1), "bp": f(width), "wf": f(channels, width, 1, 1), "bf": f(channels),
              "wh": f(channels, 1, 3, 3), "bh": f(channels), "wo": f(32, channels, 1, 1), "bo": f(32), "lo": np.float32(0), "hi": np.float32(6)}
    return import_graph(graph_model(nodes, {"x": f(1, 16, 2 * size, 2 * size)}, ["y"], consts, 13))


def depthwise(graph):
    return next(n for n in graph.nodes if n.op_type == "Conv" and n.attrs.get("group", 1) > 1 and n.attrs.get("strides", [1])[0] == 1)


@pytest.mark.parametrize("board, threads, layouts", [("bpi-f3", 8, "NCHW -> NCHW"), ("bpi-f3", 1, "NCHW -> NCHW"),
                                                     ("x86_64-v3", 1, "NHWC -> NHWC"), ("x86_64-v4", 1, "NCHW -> NCHW"),
                                                     ("rpi4", 4, "NHWC -> NHWC"), ("visionfive2", 1, "NHWC -> NCHW")])
def test_56x56_block_depthwise_layout(board, threads, layouts):
    """On the bpi-f3 the 56x56 block runs NCHW at 8 threads (the build's default) too: the X60's channels-last routine
    takes 0.93x the NCHW strips' llvm-mca-22 cycles at 56x56, but the block's 1x1 convs, most of its work, run
    77-81% of peak as NCHW row vectors against 65-70% channels-last over more than 256 pixels (docs/RISCV_KERNELS.md,
    "Every form the boards run"); x86_64 (AVX2 and AVX-512, named: the host's level decides plain `x86_64`), the Pi 4
    and the U74 keep their choices."""
    graph = mobilenet_stage(56)
    decisions = optimize(graph, machine_spec(get_board(board)), "fluid", threads=threads)
    assert decisions.kernel_layouts[depthwise(graph).name] == layouts


ROUTINE = 406 / 270 * 9 * 2 / (128 / 5)
"""The X60's channels-last routine (kernels/rvv_depthwise.py) over the strips per 16 output floats by llvm-mca-22:
406 cycles per 270 `vfmacc.vv` of 8 lanes against 128 per 5 strip steps of 16 (docs/RISCV_KERNELS.md)."""


@pytest.mark.parametrize("size, mca", [(112, ROUTINE), (56, ROUTINE * 56 / 64), (28, ROUTINE * 28 / 32)])
def test_channels_last_over_strips_within_15_percent_of_llvm_mca(size, mca):
    """One thread: the channels-last depthwise (the X60's routine) over the NCHW strips, as the model prices them,
    against llvm-mca-22's cycles of their loops (the strips compute whole vectors of 16 columns, 64 of a 56-column
    row, which the routine does not)."""
    graph = mobilenet_stage(size)
    node = depthwise(graph)
    x, d = node.inputs[0], node.outputs[0]
    model = Costs(graph, machine_spec(get_board("bpi-f3"))).model
    ratio = model.cost(node, {x: NHWC, d: NHWC}) / model.cost(node, {})
    assert abs(ratio / mca - 1) < 0.15, (ratio, mca)


def test_other_targets_price_the_depthwise_as_before():
    """The X60's count applies to RVV only: x86_64 and the Pi 4 price the channels-last depthwise below the NCHW one."""
    graph = mobilenet_stage(56)
    node = depthwise(graph)
    x, d = node.inputs[0], node.outputs[0]
    for board in ("x86_64", "rpi4"):
        model = Costs(graph, machine_spec(get_board(board))).model
        assert model.cost(node, {x: NHWC, d: NHWC}) < model.cost(node, {}), board
