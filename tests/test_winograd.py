"""Winograd convolution (issue #28, docs/WINOGRAD.md): F(2x2), F(4x4) and F(6x6) (3x3) kernels against ONNX Runtime
natively (NCHW and channels-last, pads, odd channel counts, bias, fused residual + Relu) and under qemu (aarch64,
armv7 NEON), the same bits at every thread count, the cost model's choice per layer, --conv-algo direct giving the
direct kernels, and the weight budget."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelrun import build, require_emulator, require_program

RTOL = 1e-4
"""max |ours - ORT| / max |ORT|: F(4x4) measures 6e-6..2e-5, F(6x6) 1e-5..3e-5 on 64..512 channels (docs/WINOGRAD.md)."""


def conv_model(c: int, oc: int, h: int, w: int, pads=(1, 1, 1, 1), bias: bool = True, residual_relu: bool = False,
               seed: int = 0, group: int = 1, batch: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((oc, c // group, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), "b"))
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["y"], pads=list(pads), group=group, name="conv")]
    out = "y"
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    if residual_relu:
        inits.append(numpy_helper.from_array(rng.standard_normal((batch, oc, oh, ow)).astype(np.float32), "r"))
        nodes += [helper.make_node("Add", ["y", "r"], ["s"]), helper.make_node("Relu", ["s"], ["z"])]
        out = "z"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, h, w])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, oc, oh, ow])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime

    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def rel_error(got, want) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def force(monkeypatch, order: str | None) -> None:
    """Every Conv's loop order forced to `order` (pipeline.optimize patched)."""
    import fluidml_xc.pipeline as pipeline
    from fluidml_xc.fluid.optimize import optimize

    def forced(graph, spec, *args, **kwargs):
        decisions = optimize(graph, spec, *args, **kwargs)
        for node in graph.nodes:
            if node.op_type == "Conv" and order:
                decisions.loop_orders[node.name] = order
        return decisions
    monkeypatch.setattr(pipeline, "optimize", forced)


def jit_conv(model, order: str, channels_last: bool):
    from fluidml_xc.pipeline import import_graph
    from modelrun import jit_node

    graph = import_graph(model)
    node = next(n for n in graph.nodes if n.op_type == "Conv")
    layouts = {name: (0, 2, 3, 1) for name in (node.inputs[0], node.outputs[0])} if channels_last else {}
    logical, out = jit_node(graph, node, layouts, order)
    return logical[node.inputs[0]], out


@pytest.mark.parametrize("order", ["wino2", "wino4", "wino6"])
@pytest.mark.parametrize("c, oc, h, w, pads, channels_last", [
    (16, 16, 12, 12, (1, 1, 1, 1), False),
    (3, 17, 7, 5, (2, 1, 0, 2), False),     # odd channels, uneven pads, partial tiles on both edges
    (24, 40, 9, 11, (0, 0, 0, 0), True),    # no padding, channels-last input and output
    (64, 10, 14, 14, (1, 1, 1, 1), True),
    (8, 8, 30, 30, (1, 1, 1, 1), False),    # several blocks of tiles
])
def test_kernel_matches_ort(order, c, oc, h, w, pads, channels_last):
    from fluidml_xc.kernels.winograd import ORDERS, reference

    model = conv_model(c, oc, h, w, pads)
    x, got = jit_conv(model, order, channels_last)
    want = ort(model, x)
    assert rel_error(got, want) < RTOL
    bias = numpy_helper.to_array(model.graph.initializer[1]).reshape(1, -1, 1, 1)
    ours = reference(x, numpy_helper.to_array(model.graph.initializer[0]), pads[:2], ORDERS[order], want.shape[2:]) + bias
    assert rel_error(got, ours) < 1e-5  # the transforms' own arithmetic, not a direct conv


@pytest.mark.parametrize("order", ["wino2", "wino4", "wino6"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_grouped_matches_ort(order, channels_last):
    """Two groups of 16 -> 20 channels (groups of at least 8 channels qualify; depthwise does not)."""
    from fluidml_xc.passes.winograd import eligible
    from fluidml_xc.pipeline import import_graph

    model = conv_model(32, 40, 11, 9, (1, 2, 0, 1), group=2)
    x, got = jit_conv(model, order, channels_last)
    assert rel_error(got, ort(model, x)) < RTOL
    graph = import_graph(model)
    assert eligible(graph, next(n for n in graph.nodes if n.op_type == "Conv"))
    depthwise = import_graph(conv_model(16, 16, 12, 12, group=16))
    assert not eligible(depthwise, depthwise.nodes[0])


@pytest.mark.parametrize("order", ["wino2", "wino4"])
def test_batch_of_three(order):
    model = conv_model(16, 24, 9, 13, group=2, batch=3)
    x, got = jit_conv(model, order, True)
    assert rel_error(got, ort(model, x)) < RTOL


def test_plan_marks_winograd_on_ir():
    """The forced order reaches ConvPlan.winograd (a direct kernel would match ORT as well)."""
    from fluidml_xc.kernels.conv_plan import conv_shape, plan_conv
    from fluidml_xc.kernels.conv_geometry import TargetForms

    s = conv_shape(((1, 16, 12, 12), (2304, 144, 12, 1)), ((1, 16, 12, 12), (2304, 144, 12, 1)),
                   ((16, 16, 3, 3), (144, 9, 3, 1)), None, [1, 1], [1, 1], [1, 1], 1)
    plan = plan_conv(s, TargetForms("x86_64-unknown-linux-gnu"), dtype="float32", V=8, w_const=True, finite=True, order="wino4")
    assert plan.winograd is not None and plan.winograd.m == 4 and plan.winograd.tiles == 9
    assert plan_conv(s, TargetForms(""), dtype="float32", V=8, w_const=True, finite=False, order="wino4").winograd is None


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
@pytest.mark.parametrize("order, group", [("wino2", 1), ("wino4", 1), ("wino4", 2), ("wino6", 1)])
def test_arm_under_qemu(board, order, group, tmp_path, patched_compiler):
    require_emulator(board)
    force(patched_compiler, order)
    model = conv_model(16, 20, 10, 9, (1, 0, 1, 2), residual_relu=True, group=group)
    x = np.random.default_rng(3).standard_normal((1, 16, 10, 9)).astype(np.float32)
    art = build(model, tmp_path, board)
    assert json.loads((art / "manifest.json").read_text())["optimizer"]["loop_orders"]["conv"] == order
    assert rel_error(run_runner(art, x), ort(model, x)) < RTOL


def run_runner(art, x, threads: int | None = None) -> np.ndarray:
    manifest = json.loads((art / "manifest.json").read_text())
    np.save(art / "in.npy", x)
    emulator = [require_program(manifest["emulator"])] if manifest["emulator"] else []
    extra = ["--threads", str(threads)] if threads else []
    subprocess.run([*emulator, str(art / "runner"), "-i", str(art / "in.npy"), "-o", str(art / "out.npy"), "--force", *extra],
                   check=True, capture_output=True, timeout=300)
    return np.load(art / "out.npy")


@pytest.mark.parametrize("order", ["wino2", "wino4"])
def test_same_bits_at_every_thread_count(order, tmp_path, patched_compiler):
    force(patched_compiler, order)
    model = conv_model(32, 32, 28, 28)
    x = np.random.default_rng(4).standard_normal((1, 32, 28, 28)).astype(np.float32)
    art = build(model, tmp_path / "t4", threads=4)
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["parallel_ops"]["conv"] and manifest["optimizer"]["loop_orders"]["conv"] == order
    one = run_runner(build(model, tmp_path / "t1", threads=1), x)
    for t in (1, 2, 4):
        assert np.array_equal(run_runner(art, x, t), one)
    assert rel_error(one, ort(model, x)) < RTOL


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64"])
def test_cost_model_picks_per_layer(board):
    """A big 3x3 layer runs as Winograd, a tiny one direct; the decision lands in Decisions.winograd."""
    from fluidml_xc.fluid.optimize import optimize
    from fluidml_xc.pipeline import import_graph
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    spec = machine_spec(get_board(board))
    big = optimize(import_graph(conv_model(64, 64, 56, 56)), spec, "fluid")
    assert big.loop_orders["conv"] in ("wino2", "wino4") and big.winograd["conv"]["m"] in (2, 4)
    tiny = optimize(import_graph(conv_model(4, 8, 8, 8)), spec, "fluid")
    assert not tiny.loop_orders["conv"].startswith("wino") and not tiny.winograd


def test_direct_switch_gives_the_direct_kernels():
    from fluidml_xc.kernels.winograd import ALLOWED_ATTR, WHOLE_ATTR
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    spec = machine_spec(get_board("x86_64-v3"))
    model = conv_model(64, 64, 56, 56)
    auto, direct = import_graph(model), import_graph(model, conv_algo="direct")
    assert auto.nodes[0].attrs.get(ALLOWED_ATTR) and ALLOWED_ATTR not in direct.nodes[0].attrs
    old = import_graph(model)
    old.nodes[0].attrs.pop(ALLOWED_ATTR)  # the graph as it was before Winograd existed
    old.nodes[0].attrs.pop(WHOLE_ATTR)
    lowered = lower(direct, spec, LowerOptions())
    assert not lowered.decisions.winograd and lowered.decisions.loop_orders["conv"] in ("co>px", "px>co")
    assert lowered.ir_text == lower(old, spec, LowerOptions()).ir_text
    assert lower(auto, spec, LowerOptions()).ir_text != lowered.ir_text


def test_weight_budget():
    from fluidml_xc.errors import InputError
    from fluidml_xc.passes.winograd import GROWTH_BUDGET, mark_winograd
    from fluidml_xc.pipeline import import_graph

    graph = import_graph(conv_model(64, 64, 28, 28, bias=False), conv_algo="direct")
    weights, activations = 64 * 64 * 9 * 4, 2 * 64 * 28 * 28 * 4
    assert mark_winograd(graph) == {"conv": 4} and GROWTH_BUDGET >= 3
    # F(4x4)'s 4x does not fit, F(2x2)'s 16/9 does
    assert mark_winograd(graph, max_bytes=weights * 2 + activations) == {"conv": 2}
    assert mark_winograd(graph, max_bytes=weights + activations + 1000) == {}  # no growth fits: direct only
    assert "_winograd" not in graph.nodes[0].attrs
    with pytest.raises(InputError, match="--conv-algo"):
        mark_winograd(graph, "fast")


def test_max_memory_build_falls_back_to_direct(tmp_path):
    """--max-memory with room for the model but not for transformed weights: the build runs the direct kernel."""
    model = conv_model(64, 64, 28, 28, bias=False)
    art = build(model, tmp_path, max_memory=64 * 64 * 9 * 4 + 2 * 64 * 28 * 28 * 4 + 50_000)
    manifest = json.loads((art / "manifest.json").read_text())
    assert "winograd" not in manifest["optimizer"] and not manifest["optimizer"]["loop_orders"]["conv"].startswith("wino")


def test_cli_conv_algo_and_inspect(tmp_path):
    """`build --conv-algo auto|direct` and `inspect`'s per-layer algorithm and weight growth."""
    from modelrun import cli

    path = tmp_path / "conv.onnx"
    onnx.save(conv_model(64, 64, 56, 56), path)
    for algo in ("auto", "direct"):
        proc = cli("build", str(path), "--conv-algo", algo, "-o", str(tmp_path / algo), "--no-profile-runner")
        assert proc.returncode == 0, proc.stderr
    shown = cli("inspect", str(tmp_path / "auto"))
    assert shown.returncode == 0 and "conv: F(4x4, 3x3)  weights 147,456 B (144.0 KiB) -> 589,824 B (576.0 KiB) (4.00x)" in shown.stdout
    assert "winograd:" not in cli("inspect", str(tmp_path / "direct")).stdout
    assert "invalid choice" in cli("build", str(path), "--conv-algo", "fast").stderr
