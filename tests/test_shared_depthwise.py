"""ops/conv/shared_depthwise.py: x86's channels-last depthwise convs as one kernel per stride, kernel, padding, tile
width and epilogue, their sizes read at run time (issue #27): the same bits as the per-layer kernel it replaces,
ONNX Runtime's outputs, every thread count alike, and layers of other sizes and channel counts sharing one unit."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from fluidml_xc.ops.conv import conv2d
from fluidml_xc.ops.conv.shared_depthwise import tile_width
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import (assert_same_bits_at_thread_counts, build_uncached as built, float_model, rand, reference, run,
                      unit_texts)

BLOCKS = [(64, 3, 1, 1), (96, 3, 2, 1), (102, 3, 1, 1), (40, 5, 1, 2), (192, 3, 2, 1)]
"""(channels, kernel, stride, pads) of depthwise convs between 1x1 convs (the optimizer keeps them channels-last):
channel counts that are and are not multiples of the vectors, 3x3 and 5x5, strides 1 and 2."""


def blocks_model(hw=(20, 20), batch: int = 1, bias: bool = True, spec=BLOCKS, nonfinite: bool = False):
    """1x1 expand + Clip, depthwise + Clip, 1x1 project blocks; nonfinite: NaN and infinities in the input."""
    inits, nodes, prev, c_prev = {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}, [], "x", 16
    for i, (mid, kernel, stride, pad) in enumerate(spec):
        inits[f"e{i}"], inits[f"d{i}"] = rand(mid, c_prev, 1, 1, seed=i) * 0.3, rand(mid, 1, kernel, kernel, seed=20 + i)
        inits[f"p{i}"] = rand(24, mid, 1, 1, seed=40 + i) * 0.2
        db = []
        if bias:
            inits[f"db{i}"], db = rand(mid, seed=10 + i), [f"db{i}"]
        nodes += [helper.make_node("Conv", [prev, f"e{i}"], [f"ec{i}"], name=f"expand{i}"),
                  helper.make_node("Clip", [f"ec{i}", "lo", "hi"], [f"ey{i}"]),
                  helper.make_node("Conv", [f"ey{i}", f"d{i}", *db], [f"dc{i}"], group=mid, pads=[pad] * 4,
                                   strides=[stride] * 2, name=f"depthwise{i}"),
                  helper.make_node("Clip", [f"dc{i}", "lo", "hi"], [f"dy{i}"]),
                  helper.make_node("Conv", [f"dy{i}", f"p{i}"], [f"pc{i}"], name=f"project{i}")]
        prev, c_prev = f"pc{i}", 24
    x = rand(batch, 16, *hw, seed=7)
    if nonfinite:
        x[0, :, 0, 0], x[0, :4, 3, 5], x[0, 4:8, -1, -1] = np.nan, np.inf, -np.inf
    feeds = {"x": x}
    return float_model(nodes, inits, feeds, [prev]), feeds


@pytest.mark.parametrize("hw,batch,bias", [((20, 20), 1, True), ((20, 20), 2, False), ((7, 7), 2, True),
                                           ((4, 7), 1, True), ((33, 17), 1, False), ((3, 2), 1, True)])
def test_same_bits_as_the_per_layer_kernel_and_ort(tmp_path, monkeypatch, hw, batch, bias):
    model, feeds = blocks_model(hw, batch, bias)
    taken, channels_last = shared_taken(model, monkeypatch)
    assert taken == channels_last >= 1
    shared = built(model, tmp_path / "shared")
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_depthwise", lambda c: False)
        per_layer = built(model, tmp_path / "per_layer")
    got, want, ref = run(shared.artifact, feeds), run(per_layer.artifact, feeds), reference(model, feeds)
    for name in ref:
        assert got[name].tobytes() == want[name].tobytes()
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-3)


def shared_taken(model, monkeypatch, board: str = "x86_64-v3") -> tuple[int, int]:
    """How many of the model's depthwise convs the shared kernel runs, and how many the plan runs channels-last
    (their units emitted here)."""
    taken, forms, shared = [], [], conv2d.shared_depthwise

    def record(c):
        forms.append(c.plan.form == "depthwise_c")
        taken.append(shared(c))
        return taken[-1]
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_depthwise", record)
        depthwise_units(model, machine_spec(get_board(board)))
    return taken.count(True), forms.count(True)


def test_nan_and_infinities_meet_the_padding_as_onnx_runtime_says(tmp_path):
    model, feeds = blocks_model(nonfinite=True)
    got, ref = run(built(model, tmp_path).artifact, feeds), reference(model, feeds)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-3)
        assert (np.isnan(got[name]) == np.isnan(ref[name])).all()


def test_every_thread_count_gives_the_same_bits(tmp_path):
    model, feeds = blocks_model((28, 28), 2)
    assert_same_bits_at_thread_counts(built(model, tmp_path, threads=4).artifact, feeds)


def depthwise_units(model, spec) -> dict[str, str]:
    return unit_texts(model, spec, lambda n: n.name.startswith("depthwise"))


def test_layers_of_other_channel_counts_share_one_unit(monkeypatch):
    """Depthwise convs of other channel counts (all split across threads), of one stride and tile width, emit one IR
    text per code variant where the plan runs them channels-last (x86-64-v2, v3; v4 runs these NCHW); the per-layer
    kernels one each."""
    spec = [(64, 3, 1, 1), (96, 3, 1, 1), (144, 3, 1, 1), (48, 3, 1, 1)]
    model, _ = blocks_model((28, 28), spec=spec)
    for board in ("x86_64-v2", "x86_64-v3"):
        assert shared_taken(model, monkeypatch, board) == (len(spec), len(spec))
        texts = depthwise_units(model, machine_spec(get_board(board)))
        assert len(set(texts.values())) == 1
        with monkeypatch.context() as m:
            m.setattr(conv2d, "shared_depthwise", lambda c: False)
            assert len(set(depthwise_units(model, machine_spec(get_board(board))).values())) == len(spec)


def test_tile_width_recomputes_the_fewest_pixels():
    assert [tile_width(c, 8) for c in (112, 56, 28, 14, 7, 3, 1, 20, 9)] == [8, 8, 7, 7, 7, 3, 1, 5, 5]


GEOMETRIES = [  # (channels, (H, W), images, kernel, strides, pads or auto_pad, dilations)
    (64, (6, 30), 1, (1, 25), (1, 1), [0, 12, 0, 12], (1, 1)), (64, (16, 12), 2, (7, 3), (2, 1), [6, 2, 6, 2], (2, 2)),
    (72, (11, 10), 1, (4, 4), (2, 2), "SAME_UPPER", (1, 1)), (72, (11, 10), 2, (3, 3), (3, 3), "SAME_LOWER", (1, 1)),
    (64, (9, 9), 1, (2, 2), (3, 3), [4, 4, 4, 4], (1, 1)), (33, (30, 2), 1, (3, 3), (1, 2), [1, 0, 2, 1], (1, 1))]
"""Depthwise geometries beyond MobileNet's: long and tall kernels, strides and dilations per axis, SAME padding,
pads past the kernel's reach, asymmetric pads, a row narrower than any tile, a channel rest."""


def geometries_model():
    inits, nodes, outs, feeds = {}, [], [], {}
    for i, (C, hw, N, kernel, strides, pads, dilations) in enumerate(GEOMETRIES):
        feeds[f"x{i}"] = rand(N, 4, *hw, seed=i)
        inits.update({f"e{i}": rand(C, 4, 1, 1, seed=100 + i) * 0.5, f"d{i}": rand(C, 1, *kernel, seed=200 + i),
                      f"db{i}": rand(C, seed=300 + i), f"p{i}": rand(6, C, 1, 1, seed=400 + i) * 0.3})
        pad = dict(auto_pad=pads) if isinstance(pads, str) else dict(pads=pads)
        nodes += [helper.make_node("Conv", [f"x{i}", f"e{i}"], [f"ec{i}"], name=f"expand{i}"),
                  helper.make_node("Relu", [f"ec{i}"], [f"er{i}"]),
                  helper.make_node("Conv", [f"er{i}", f"d{i}", f"db{i}"], [f"dc{i}"], group=C, kernel_shape=list(kernel),
                                   strides=list(strides), dilations=list(dilations), name=f"depthwise{i}", **pad),
                  helper.make_node("Relu", [f"dc{i}"], [f"dr{i}"]),
                  helper.make_node("Conv", [f"dr{i}", f"p{i}"], [f"y{i}"], name=f"project{i}")]
        outs.append(f"y{i}")
    return float_model(nodes, inits, feeds, outs), feeds


def test_other_geometries_match_ort_at_any_thread_count(tmp_path, monkeypatch):
    model, feeds = geometries_model()
    taken, channels_last = shared_taken(model, monkeypatch)
    assert taken == channels_last >= 4
    artifact, ref = built(model, tmp_path, threads=2).artifact, reference(model, feeds)
    outs = [run(artifact, feeds, threads=t) for t in (1, 2)]
    for name in ref:
        np.testing.assert_allclose(outs[0][name], ref[name], rtol=1e-4, atol=1e-3)
        assert outs[0][name].tobytes() == outs[1][name].tobytes()
