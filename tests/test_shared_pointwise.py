"""ops/conv/shared_pointwise.py: x86's and aarch64's 1x1 convs over channels-last pixels (on x86 also channel
planes) as one kernel per tile and epilogue, its extents read at run time (issue #27): the same bits as the per-layer
kernel it replaces, ONNX Runtime's outputs, every thread count alike, and layers of different shapes sharing one
compiled object per code variant."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from fluidml_xc.ops.conv import conv2d
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import (assert_same_bits_at_thread_counts, build_uncached as built, float_model, rand, reference,
                      require_emulator, run, unit_texts)

BLOCKS = [(64, 32, False), (96, 32, True), (128, 40, False), (102, 40, True), (192, 24, False)]
"""(expand channels, output channels, residual) of MobileNetV2-like blocks: channel counts that are and are not
multiples of the vectors and blocks, residual Adds; the last project conv writes the NCHW graph output."""


def blocks_model(hw: tuple[int, int] = (20, 20), batch: int = 1, bias: bool = True, spec=BLOCKS):
    """1x1 expand + Clip, 3x3 depthwise + Clip, 1x1 project (+ residual) blocks: between the depthwise convs the
    optimizer keeps the 1x1 convs channels-last."""
    inits, nodes, prev, c_prev = {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}, [], "x", 16
    for i, (mid, co, res) in enumerate(spec):
        inits[f"e{i}"], inits[f"d{i}"] = rand(mid, c_prev, 1, 1, seed=i) * 0.3, rand(mid, 1, 3, 3, seed=20 + i)
        inits[f"p{i}"] = rand(co, mid, 1, 1, seed=40 + i) * 0.2
        eb, pb = ([f"eb{i}"], [f"pb{i}"]) if bias else ([], [])
        if bias:
            inits[f"eb{i}"], inits[f"pb{i}"] = rand(mid, seed=10 + i), rand(co, seed=50 + i)
        nodes += [helper.make_node("Conv", [prev, f"e{i}", *eb], [f"ec{i}"], name=f"expand{i}"),
                  helper.make_node("Clip", [f"ec{i}", "lo", "hi"], [f"ey{i}"]),
                  helper.make_node("Conv", [f"ey{i}", f"d{i}"], [f"dc{i}"], group=mid, pads=[1, 1, 1, 1]),
                  helper.make_node("Clip", [f"dc{i}", "lo", "hi"], [f"dy{i}"]),
                  helper.make_node("Conv", [f"dy{i}", f"p{i}", *pb], [f"pc{i}"], name=f"project{i}")]
        out = f"pc{i}"
        if res:
            nodes.append(helper.make_node("Add", [out, prev], [f"a{i}"]))
            out = f"a{i}"
        prev, c_prev = out, co
    feeds = {"x": rand(batch, 16, *hw, seed=7)}
    return float_model(nodes, inits, feeds, [prev]), feeds


WIDE = [(320, 112, False), (64, 32, False)]
"""A 320 -> 112 project conv over 28 pixels: walk.py's split asks for 7 channel x 4 pixel chunks on x86-64-v3, more
than the kernel's 24 tiles (shared_chunks)."""


@pytest.mark.parametrize("board,hw,batch,bias,spec", [
    ("x86_64", (20, 20), 1, True, BLOCKS), ("x86_64", (20, 20), 2, False, BLOCKS), ("x86_64", (7, 7), 2, True, BLOCKS),
    ("x86_64", (4, 7), 1, True, WIDE), ("rpi4", (20, 20), 2, True, BLOCKS), ("rpi5", (20, 20), 1, False, BLOCKS),
    ("rpi4", (7, 7), 1, True, BLOCKS)])
def test_same_bits_as_the_per_layer_kernel_and_ort(tmp_path, monkeypatch, board, hw, batch, bias, spec):
    if board != "x86_64":
        require_emulator(board)
    model, feeds = blocks_model(hw, batch, bias, spec)
    shared = built(model, tmp_path / "shared", board)
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_pointwise", lambda c: False)
        per_layer = built(model, tmp_path / "per_layer", board)
    if spec is BLOCKS:  # the expand convs 32 -> 96 and 32 -> 128 (Clip) share one object per code variant
        assert per_layer.timings.kernels.compiled - shared.timings.kernels.compiled >= (len(shared.manifest.cpu_variants) or 1)
    got, want = run(shared.artifact, feeds), run(per_layer.artifact, feeds)
    ref = reference(model, feeds)
    for name in ref:
        assert got[name].tobytes() == want[name].tobytes()
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-3)


def test_a_bias_computed_at_run_time_takes_the_per_layer_kernel(tmp_path):
    """A bias that is not a constant (here a graph input) is read through its operand by the per-layer kernel."""
    model, feeds = blocks_model()
    bias = next(i for i in model.graph.initializer if i.name == "eb1")
    model.graph.initializer.remove(bias)
    model.graph.input.append(helper.make_tensor_value_info("eb1", onnx.TensorProto.FLOAT, [bias.dims[0]]))
    feeds["eb1"] = rand(bias.dims[0], seed=11)
    got, ref = run(built(model, tmp_path).artifact, feeds), reference(model, feeds)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-3)


def test_every_thread_count_gives_the_same_bits(tmp_path):
    model, feeds = blocks_model()
    assert_same_bits_at_thread_counts(built(model, tmp_path, threads=4).artifact, feeds)


def pointwise_units(model, spec) -> dict[str, str]:
    """The IR text of each 1x1 conv's unit, by node name."""
    return unit_texts(model, spec, lambda n: n.name.startswith(("expand", "project")))


def test_layers_of_other_shapes_share_one_unit(tmp_path, monkeypatch):
    """Expand convs (Clip) of other channel and pixel counts emit one IR text, as do the project convs (no
    activation) between depthwise convs; the per-layer kernels emit one each. The whole model matches ONNX Runtime."""
    model, feeds = blocks_model(spec=[(64, 32, False), (96, 64, False), (128, 96, False), (192, 24, False)])
    for board in ("x86_64-v3", "x86_64-v4", "rpi4"):
        spec = machine_spec(get_board(board))
        texts = pointwise_units(model, spec)
        assert len({texts[f"expand{i}"] for i in (1, 2, 3)}) == 1
        assert len({texts[f"project{i}"] for i in (0, 1, 2)}) == 1
        with monkeypatch.context() as m:
            m.setattr(conv2d, "shared_pointwise", lambda c: False)
            assert len(set(pointwise_units(model, spec).values())) == len(texts)
    got, ref = run(built(model, tmp_path, threads=2).artifact, feeds), reference(model, feeds)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-3)


def planes_model(hw: tuple[int, int] = (20, 20), chans=(32, 64, 48, 80)):
    """1x1 convs + Relu from the NCHW graph input to the NCHW graph output: the first reads channel planes, the last
    writes them (the optimizer keeps the ones between channels-last)."""
    inits, nodes, prev = {}, [], "x"
    for i in range(len(chans) - 1):
        inits[f"w{i}"], inits[f"b{i}"] = rand(chans[i + 1], chans[i], 1, 1, seed=i) * 0.3, rand(chans[i + 1], seed=10 + i)
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}"),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    feeds = {"x": rand(1, chans[0], *hw, seed=7)}
    return float_model(nodes, inits, feeds, [prev]), feeds


@pytest.mark.parametrize("hw,kinds", [((20, 20), {(True, False), (False, True)}), ((7, 9), {(False, True)}),
                                      ((3, 5), {(False, True)})])
def test_channel_planes_same_bits_as_the_per_layer_kernel_and_ort(tmp_path, monkeypatch, hw, kinds):
    """x86: a 1x1 conv reading the NCHW input and one writing the NCHW output (pixel rows transposed from the
    channel vectors; odd pixel counts leave a last pixel stored lane by lane) run the shared kernel, with the
    per-layer kernel's bits (the smaller images' first conv takes the packed form)."""
    model, feeds = planes_model(hw)
    taken = []
    original = conv2d.SharedPointwise

    def spy(c):
        kernel = original(c)
        taken.append((kernel.x_rows, kernel.out_rows))
        return kernel
    with monkeypatch.context() as m:
        m.setattr(conv2d, "SharedPointwise", spy)
        pointwise_units_of(model, machine_spec(get_board("x86_64-v3")))
    assert kinds <= set(taken)
    shared = built(model, tmp_path / "shared", "x86_64")
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_pointwise", lambda c: False)
        per_layer = built(model, tmp_path / "per_layer", "x86_64")
    got, want, ref = run(shared.artifact, feeds), run(per_layer.artifact, feeds), reference(model, feeds)
    for name in ref:
        assert got[name].tobytes() == want[name].tobytes()
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-3)
    assert_same_bits_at_thread_counts(built(model, tmp_path / "threads", "x86_64", threads=4).artifact, feeds)


def test_channel_plane_layers_of_other_shapes_share_one_unit():
    """The first and the last conv of two models of other sizes and channel counts emit one IR text each."""
    one, _ = planes_model((20, 20), (32, 64, 48, 80))
    other, _ = planes_model((16, 18), (24, 128, 56, 176))
    for board in ("x86_64-v3", "x86_64-v4"):
        spec = machine_spec(get_board(board))
        a, b = pointwise_units_of(one, spec), pointwise_units_of(other, spec)
        assert a["conv0"] == b["conv0"] and a["conv2"] == b["conv2"]
        assert len({a["conv0"], a["conv1"], a["conv2"]}) == 3


def pointwise_units_of(model, spec) -> dict[str, str]:
    return unit_texts(model, spec, lambda n: n.name.startswith("conv"))
