"""Channel-vector and flat 1x1 Conv tiles at the widths where their blocking changes (ops/conv/): rows whose
border columns join interior blocks and whose last columns split into balanced blocks (widths 13 and 57),
channel counts that leave a partial block, and a wide flat 1x1 on the 6-channel row-vector tile; flat 1x1 convs
over small NCHW images with their input packed on the stack, in one group or several (x86_64, aarch64, armv7);
against ONNX Runtime, and bit-identical across thread counts. Pointwise pixel tiles of 1x1 convs with end pads."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from modelrun import build, compile_and_run, graph_model, run


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


def _pointwise_model():
    """Flat 1x1 convs over small NCHW images (TargetForms.packs_input): two images at 7x7 with a partial channel
    block, a fused residual and Relu; a grouped 14x14 one."""
    rng = np.random.default_rng(11)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Add", ["c1", "r"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["y1"]),
        helper.make_node("Conv", ["x2", "w2", "b2"], ["y2"], group=2),
    ]
    consts = {"w1": w(72, 80, 1, 1), "b1": w(72), "w2": w(64, 48, 1, 1), "b2": w(64)}
    feeds = {"x": rng.standard_normal((2, 80, 7, 7)).astype(np.float32), "r": rng.standard_normal((2, 72, 7, 7)).astype(np.float32),
             "x2": rng.standard_normal((1, 96, 14, 14)).astype(np.float32)}
    return graph_model(nodes, feeds, ["y1", "y2"], consts, opset=13), feeds


@pytest.mark.parametrize("board,pack_bytes", [("x86_64", None), ("x86_64", 16384), ("qemu-aarch64", 16384), ("qemu-armv7", None)])
def test_packed_pointwise_convs_match_ort_at_any_thread_count(tmp_path, patched_compiler, board, pack_bytes):
    """The packed input, in one group (before the parallel region) or several (pack_bytes: a stack budget of 16 KiB,
    so each group is a parallel tile packing its own pixels); the cost model sees the same groups."""
    from fluidml_xc.fluid.costs import Costs
    from fluidml_xc.fluid.geometry import conv_geometry
    from fluidml_xc.kernels import conv_geometry as forms
    from fluidml_xc.ops.conv import conv2d as conv
    from modelrun import require_emulator
    require_emulator(board)
    if pack_bytes is not None:
        patched_compiler.setattr(forms, "PACK_MAX_BYTES", pack_bytes)
    seen = []
    emit = conv.emit_conv

    def record(c):
        k = c.k
        strides = {op.name: op.strides for op in (*k.inputs, *k.outputs) if op is not None}
        forms_ = Costs(k.graph, k.spec, threads=2 if k.tile_range is not None else 1).model.forms  # what the optimizer priced
        geo = conv_geometry(k.graph, k.node, strides.get, k.vector_bits, forms_)
        seen.append((c.plan.blocking.pack_groups, geo.pack_groups))
        emit(c)
    patched_compiler.setattr(conv, "emit_conv", record)
    model, feeds = _pointwise_model()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    runs = [compile_and_run(model, feeds, tmp_path / f"t{threads}", board, threads=threads) for threads in ((1, 2, 4) if board == "x86_64" else (1, 2))]
    for name, expected in zip(("y1", "y2"), want):
        np.testing.assert_allclose(runs[0][name], expected, rtol=1e-4, atol=1e-4)
        for other in runs[1:]:
            np.testing.assert_array_equal(runs[0][name], other[name])
    assert seen and all(ours == model_sees for ours, model_sees in seen)
    # x86_64 emits v4, v3 and v2: v4's two-vector blocks run 12 pixels, so a 16 KiB budget holds fewer of them
    several = {3, 5, 6} if board == "x86_64" else {3, 5}
    assert {ours for ours, _ in seen} == ({1} if pack_bytes is None else several)


def _shuffle_unit():
    """ShuffleNet's unit at 14x14: a grouped 1x1 conv whose output the depthwise 3x3 after it reads channels-last
    (NCHW -> NHWC under --opt fluid), the depthwise conv, a grouped 1x1 conv back to NCHW, a residual Add; and a
    grouped 1x1 conv of the input to a graph output (NCHW -> NCHW)."""
    rng = np.random.default_rng(12)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], group=4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], group=136, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"], group=4),
        helper.make_node("Add", ["c3", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
        helper.make_node("Conv", ["x", "w4"], ["y2"], group=4),
    ]
    consts = {"w1": w(136, 34, 1, 1), "b1": w(136), "w2": w(136, 1, 3, 3), "b2": w(136), "w3": w(136, 34, 1, 1),
              "b3": w(136), "w4": w(272, 34, 1, 1)}
    feeds = {"x": rng.standard_normal((1, 136, 14, 14)).astype(np.float32)}
    return graph_model(nodes, feeds, ["y", "y2"], consts, opset=13), feeds


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64"])
def test_threaded_packed_convs_pack_once(tmp_path, patched_compiler, board):
    """The pool runs a tile per call, so an input packed before the parallel region was packed again by every
    tile: a threaded build packs per tile only what the tile reads. A packed conv whose output stores channels
    innermost splits over its pixel groups (its tiles write whole pixels, not parts of the same cache lines); a
    grouped one with NCHW output packs its own group's channels in each tile. The cost model sees the same
    groups; outputs match ONNX Runtime and are bit-identical at 1, 2 and 3 threads."""
    from fluidml_xc.fluid.costs import Costs
    from fluidml_xc.fluid.geometry import conv_geometry
    from fluidml_xc.ops.conv import channels, conv2d as conv
    from modelrun import require_emulator
    require_emulator(board)
    seen, packs = [], []
    emit, pack = conv.emit_conv, channels.ChannelVectors.pack_input

    def record(c):
        k = c.k
        strides = {op.name: op.strides for op in (*k.inputs, *k.outputs) if op is not None}
        parallel = k.tile_range is not None
        forms_ = Costs(k.graph, k.spec, threads=3 if parallel else 1).model.forms  # what the optimizer priced
        geo = conv_geometry(k.graph, k.node, strides.get, k.vector_bits, forms_)
        if c.plan.blocking.packs_input:
            seen.append((parallel, c.plan.shape.os[1] == 1, c.plan.blocking.pack_groups, geo.pack_groups))
        emit(c)

    def record_pack(self, runs, chunk=8, image=None, group=None):
        packs.append((self.k.tile_range is not None, self.k._in_region, group is not None))
        pack(self, runs, chunk, image, group)
    patched_compiler.setattr(conv, "emit_conv", record)
    patched_compiler.setattr(channels.ChannelVectors, "pack_input", record_pack)
    model, feeds = _shuffle_unit()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    serial = compile_and_run(model, feeds, tmp_path / "t1", board, threads=1)
    artifact = build(model, tmp_path / "t3", board, threads=3)
    for name, expected in zip(("y", "y2"), want):
        np.testing.assert_allclose(serial[name], expected, rtol=1e-4, atol=1e-4)
    for threads in (1, 2, 3):
        got = run(artifact, feeds, threads=threads)
        for name in ("y", "y2"):
            np.testing.assert_array_equal(got[name], serial[name])
    assert all(ours == model_sees for *_, ours, model_sees in seen)
    nhwc = {(parallel, groups > 1) for parallel, inner, groups, _ in seen if inner}
    assert nhwc == {(False, False), (True, True)}, seen
    threaded = {(in_region, own_group) for parallel, in_region, own_group in packs if parallel}
    assert threaded == {(True, False), (True, True)}, packs  # pixel groups, own conv group: always inside a tile


@pytest.mark.parametrize("pads,strides", [([0, 0, 1, 1], [1, 1]), ([0, 0, 2, 1], [2, 2]), ([0, 0, 0, 0], [2, 2])])
def test_pointwise_tiles_with_end_pads_match_ort(pads, strides):
    """Unpadded-at-the-start 1x1 convs over small outputs run pixel tiles across row ends; with end pads the last
    row and column are bias-only pixels that read no input (they once read past the input)."""
    from fluidml_xc.run.backend import compile_model

    rng = np.random.default_rng(11)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=pads, strides=strides)
    consts = {"w": rng.standard_normal((16, 16, 1, 1)).astype(np.float32), "b": rng.standard_normal(16).astype(np.float32)}
    feeds = {"x": rng.standard_normal((1, 16, 6, 6)).astype(np.float32)}
    model = graph_model([node], feeds, ["y"], consts, opset=13)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(compile_model(model)(feeds)[0], want, rtol=1e-5, atol=1e-5)


def test_avx512_conv_tiles_take_twice_the_pixels():
    """At 512-bit vectors (32 zmm) a two-vector channel tile runs 12 pixels (24 accumulators; docs/CNN_OPS.md),
    AVX2 and SSE keep 6; one-vector tiles keep 12 everywhere."""
    from fluidml_xc.kernels.conv_geometry import TargetForms
    from fluidml_xc.kernels.conv_plan import conv_shape, plan_conv
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    def nhwc(n, c, h, w):
        return (n, c, h, w), (h * w * c, 1, w * c, c)
    for board, pixels in (("x86_64-v4", 12), ("x86_64-v3", 6), ("x86_64-v2", 6), ("rpi5", 6)):
        spec = machine_spec(get_board(board))
        V = spec.vector_bits // 32
        for oc, vectors, want in ((2 * V, 2, pixels), (V, 1, 12)):
            shape = conv_shape(nhwc(1, 64, 56, 56), nhwc(1, oc, 56, 56), ((oc, 64, 1, 1), (64, 1, 1, 1)), None,
                               [1, 1], [1, 1], [0, 0], 1)
            plan = plan_conv(shape, TargetForms(spec.triple, spec.conv_accumulators), dtype="float32", V=V, pack_V=V,
                             w_const=True, finite=True, bias_const=True)
            assert (plan.blocking.kind, plan.blocking.R // V, plan.blocking.P) == ("channels", vectors, want), (board, oc)


def test_avx512_conv_tiles_match_ort(tmp_path):
    """A bottleneck (1x1, 3x3, strided 1x1 shortcut, residual Add + Relu) built for x86_64-v4: against ONNX Runtime
    and bit-identical at 1 and 2 threads. Needs an AVX-512 host (qemu-x86_64 has no AVX-512)."""
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.host import host_can_run

    if not host_can_run(get_board("x86_64-v4").target.triple, "x86-64-v4"):
        pytest.skip("this host cannot run x86-64-v4 (AVX-512) code")
    rng = np.random.default_rng(8)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]), helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
             helper.make_node("Conv", ["x", "w4", "b4"], ["s"], strides=[2, 2]),
             helper.make_node("Add", ["c3", "s"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    consts = {"w1": w(48, 40, 1, 1), "b1": w(48), "w2": w(48, 48, 3, 3), "b2": w(48), "w3": w(160, 48, 1, 1),
              "b3": w(160), "w4": w(160, 40, 1, 1), "b4": w(160)}
    feeds = {"x": rng.standard_normal((1, 40, 30, 30)).astype(np.float32)}
    model = graph_model(nodes, feeds, ["y", "c1"], consts, opset=13)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    runs = [compile_and_run(model, feeds, tmp_path / f"t{t}", "x86_64-v4", threads=t) for t in (1, 2)]
    for name, expected in zip(("y", "c1"), want):
        np.testing.assert_allclose(runs[0][name], expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(runs[0][name], runs[1][name])


def test_taps_outermost_conv_matches_ort_at_any_thread_count(tmp_path, patched_compiler):
    """A 3x3 stride-2 conv over 512 channels-last channels (ResNet-50's 512@14, smaller): 21 lines of an input
    channel's taps in one L1 set, so the x86 variants up to AVX2 run the taps outermost (TargetForms.taps_outer)."""
    from fluidml_xc.ops.conv import conv2d as conv
    rng = np.random.default_rng(8)
    w = lambda *s: (rng.standard_normal(s) * 0.1).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]), helper.make_node("Conv", ["r2", "w3"], ["y"])]
    consts = {"w1": w(512, 32, 1, 1), "b1": w(512), "w2": w(40, 512, 3, 3), "b2": w(40), "w3": w(16, 40, 1, 1)}
    feeds = {"x": rng.standard_normal((1, 32, 9, 11)).astype(np.float32)}
    model = graph_model(nodes, feeds, ["y"], consts, opset=13)
    seen = []
    emit = conv.emit_conv
    patched_compiler.setattr(conv, "emit_conv", lambda c: (seen.append((c.plan.V, c.plan.taps_outer)), emit(c))[1])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    runs = [compile_and_run(model, feeds, tmp_path / f"t{threads}", "x86_64", opt="fluid", threads=threads) for threads in (1, 2)]
    assert {(8, True), (4, True), (16, False)} <= set(seen), seen
    np.testing.assert_allclose(runs[0]["y"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(runs[0]["y"], runs[1]["y"])
