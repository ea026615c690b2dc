"""ops/conv/shared_direct.py: x86's channel-vector 3x3 convs (stride 1 and 2, padding 1) as one kernel per stride, tile,
loop order, input layout and epilogue, their sizes read at run time (issue #27): the same bits as the per-layer
kernel it replaces, ONNX Runtime's outputs, every thread count alike, and layers of other sizes and channel counts
sharing one unit."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from fluidml_xc.ops.conv import conv2d
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import (assert_same_bits_at_thread_counts, build_uncached as built, float_model, rand, reference, run,
                      unit_texts)

LAYERS = [(24, 2, "relu"), (24, 1, "res"), (40, 2, None), (37, 1, "relu"), (40, 1, "res")]
"""(output channels, stride, epilogue) of a chain of 3x3 pad-1 convs: channel counts that are and are not multiples
of the vectors and register blocks, both strides, Relu and residual + Relu epilogues."""


def chain_model(hw=(40, 40), batch: int = 1, bias: bool = True, layers=LAYERS, c_in: int = 8):
    """A 1x1 conv (so the optimizer may keep the activations channels-last), then the 3x3 convs of `layers`."""
    inits, nodes, prev, c_prev = {"w_in": rand(c_in, 3, 1, 1, seed=1)}, [], "x", c_in
    nodes.append(helper.make_node("Conv", ["x", "w_in"], ["x0"], name="stem"))
    prev = "x0"
    for i, (co, stride, epi) in enumerate(layers):
        inits[f"w{i}"] = rand(co, c_prev, 3, 3, seed=10 + i) * np.float32(1.0 / np.sqrt(9 * c_prev))
        b = []
        if bias:
            inits[f"b{i}"], b = rand(co, seed=30 + i), [f"b{i}"]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", *b], [f"c{i}"], pads=[1] * 4, strides=[stride] * 2,
                                      name=f"conv{i}"))
        out = f"c{i}"
        if epi == "res" and co == c_prev and stride == 1:
            nodes.append(helper.make_node("Add", [out, prev], [f"a{i}"]))
            out = f"a{i}"
        if epi in ("relu", "res"):
            nodes.append(helper.make_node("Relu", [out], [f"y{i}"]))
            out = f"y{i}"
        prev, c_prev = out, co
    feeds = {"x": rand(batch, 3, *hw, seed=7)}
    return float_model(nodes, inits, feeds, [prev]), feeds


def shared_taken(model, monkeypatch, board: str = "x86_64-v3", **imports) -> tuple[int, dict]:
    """How many of the model's convs the shared kernel runs, and the unit IR texts of its 3x3 convs."""
    taken, shared = [], conv2d.shared_direct

    def record(c):
        taken.append(shared(c))
        return taken[-1]
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_direct", record)
        texts = unit_texts(model, machine_spec(get_board(board)), lambda n: n.op_type == "Conv" and n.name != "stem",
                           **imports)
    return taken.count(True), texts


FIRST_OUT = [(16, 2, "relu"), (32, 2, None)]
"""The last conv stores the model's output, channels-first (its tiles' vectors transposed and stored as rows)."""


@pytest.mark.parametrize("hw,batch,bias,layers,least", [((40, 40), 1, True, LAYERS, 5), ((23, 31), 2, False, LAYERS, 5),
                                                         ((20, 13), 1, True, LAYERS, 2), ((41, 40), 1, True, FIRST_OUT, 2),
                                                         ((30, 50), 2, False, FIRST_OUT, 2)])
def test_same_bits_as_the_per_layer_kernel_and_ort(tmp_path, monkeypatch, hw, batch, bias, layers, least):
    """Direct convs only (--conv-algo direct: the stride-1 ones would be Winograd's here)."""
    model, feeds = chain_model(hw, batch, bias, layers)
    taken, _ = shared_taken(model, monkeypatch, conv_algo="direct")
    assert taken >= least
    shared = built(model, tmp_path / "shared", conv_algo="direct")
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_direct", lambda c: False)
        per_layer = built(model, tmp_path / "per_layer", conv_algo="direct")
    got, want, ref = run(shared.artifact, feeds), run(per_layer.artifact, feeds), reference(model, feeds)
    for name in ref:
        assert got[name].tobytes() == want[name].tobytes()
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-3)


def test_layers_of_other_sizes_and_channels_share_one_unit(monkeypatch):
    layers = [(32, 2, "relu"), (32, 2, "relu"), (48, 2, "relu"), (48, 2, None), (16, 2, None)]
    model, _ = chain_model((128, 128), layers=layers)
    taken, texts = shared_taken(model, monkeypatch)
    assert taken == 4  # not the last: the model's output stores channels-first
    assert texts["conv1"] == texts["conv2"]  # 32 -> 32 from 64x64, 32 -> 48 from 32x32
    assert texts["conv2"] != texts["conv3"]  # another epilogue: its own unit


def test_every_thread_count_gives_the_same_bits(tmp_path):
    model, feeds = chain_model((33, 29), batch=2)
    assert_same_bits_at_thread_counts(built(model, tmp_path, threads=4, conv_algo="direct").artifact, feeds, (1, 2, 4))


def test_narrow_rows_keep_the_per_layer_kernel(monkeypatch):
    model, _ = chain_model((6, 6), layers=[(16, 1, "relu"), (16, 2, None)])
    taken, _ = shared_taken(model, monkeypatch)
    assert taken == 0


def test_nan_and_infinities_in_the_input_as_onnx_runtime_says(tmp_path, monkeypatch):
    model, feeds = chain_model((40, 40), layers=[(16, 2, None), (32, 2, None)])
    assert shared_taken(model, monkeypatch, conv_algo="direct")[0] == 2
    x = feeds["x"]
    x[0, :, 0, 0], x[0, 1, 5, 7], x[0, 2, -1, -1] = np.nan, np.inf, -np.inf
    got, ref = run(built(model, tmp_path, conv_algo="direct").artifact, feeds), reference(model, feeds)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-3)


def test_taps_outer_plans_keep_the_per_layer_kernel(tmp_path, monkeypatch):
    """On AVX2 the 512-channel stride-1 conv at 5x5 is planned with its taps outside the loop over input channels
    (TargetForms.taps_outer: the taps' cache lines crowd one L1 set), a sum in another order than the shared kernel's:
    it keeps the per-layer kernel, so the model's bits are a build's without the shared kernel."""
    layers = [(32, 2, "relu"), (64, 2, "relu"), (128, 2, "relu"), (256, 2, "relu"), (256, 1, "relu"), (512, 2, "relu"),
              (512, 1, "relu")]
    model, feeds = chain_model((160, 160), layers=layers)
    outer = []
    shared = conv2d.shared_direct

    def record(c):
        outer.append(c.plan.taps_outer)
        return shared(c)
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_direct", record)
        unit_texts(model, machine_spec(get_board("x86_64-v3")), lambda n: n.op_type == "Conv", conv_algo="direct")
    assert any(outer)
    got = run(built(model, tmp_path / "shared", board="x86_64-v3", conv_algo="direct").artifact, feeds)
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_direct", lambda c: False)
        want = run(built(model, tmp_path / "per_layer", board="x86_64-v3", conv_algo="direct").artifact, feeds)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes()
