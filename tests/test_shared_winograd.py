"""ops/conv/winograd.py and winograd_input.py as shared kernels (issue #27: build time): the Winograd convs' image
and output sizes, tile counts, pads and outer strides are run-time fields (and, on x86, the channel counts and pixel
strides), so layers that differ only in those emit one unit; ONNX Runtime's outputs (odd sizes, borders, residual +
Relu, groups), every thread count alike, and the same bits with the channel counts as build-time constants."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from fluidml_xc.ops.conv import winograd, winograd_input
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import (assert_same_bits_at_thread_counts, build_uncached as built, float_model, rand, require_emulator,
                      run, unit_texts)
from test_winograd import force

SIZES = ((33, 37), (29, 26))
"""Two images (H, W): no output side a multiple of m, each at least a block of tiles (T does not depend on the
size)."""


def pair_model(order: str):
    """Per image i: plain convs 32 -> 32 and 32 -> 64 (i = 1: 32 -> 64 first), a conv + residual + Relu, and
    a grouped conv (2 groups of 16 -> 24); layers of the two images differ in sizes, and the plain ones in channels."""
    inits, nodes, feeds, outs = {}, [], {}, []
    for i, hw in enumerate(SIZES):
        feeds[f"x{i}"] = rand(1, 32, *hw, seed=i)
        for name, cin, cout, group in (("a", 32, 32 + 32 * i, 1), ("b", 32, 64 - 32 * i, 1), ("r", 32, 32, 1),
                                       ("g", 32, 48, 2)):
            inits[f"w{name}{i}"] = rand(cout, cin // group, 3, 3, seed=10 * i + len(inits)) * 0.2
            inits[f"c{name}{i}"] = rand(cout, seed=50 + 10 * i + len(inits))
            nodes.append(helper.make_node("Conv", [f"x{i}", f"w{name}{i}", f"c{name}{i}"], [f"{name}{i}"],
                                          pads=[1, 1, 1, 1], group=group, name=f"conv_{name}{i}"))
        nodes += [helper.make_node("Add", [f"r{i}", f"x{i}"], [f"s{i}"]), helper.make_node("Relu", [f"s{i}"], [f"z{i}"])]
        outs += [f"a{i}", f"b{i}", f"z{i}", f"g{i}"]
    return float_model(nodes, inits, feeds, outs), feeds


def ort(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))


def conv_units(model, board: str) -> dict[str, str]:
    return unit_texts(model, machine_spec(get_board(board)), lambda n: n.name.startswith("conv_"))


@pytest.mark.parametrize("order", ["wino4", "wino6"])
def test_layers_of_other_sizes_share_one_unit(monkeypatch, order):
    """On x86 the plain convs of both images and both channel counts emit one IR text, as do the residual convs
    and the grouped convs; on aarch64 (build-time channel counts) the layers of the same channels do."""
    force(monkeypatch, order)
    model, _ = pair_model(order)
    for board in ("x86_64-v3", "x86_64-v4"):
        texts = conv_units(model, board)
        assert len({texts[f"conv_{n}{i}"] for n in "ab" for i in (0, 1)}) == 1
        assert texts["conv_r0"] == texts["conv_r1"] and texts["conv_g0"] == texts["conv_g1"]
        assert len({texts["conv_a0"], texts["conv_r0"], texts["conv_g0"]}) == 3
    texts = conv_units(model, "rpi4")
    assert texts["conv_a0"] == texts["conv_b1"] and texts["conv_r0"] == texts["conv_r1"]
    assert texts["conv_a0"] != texts["conv_a1"]


@pytest.mark.parametrize("order", ["wino2", "wino4", "wino6", "wimg4"])
def test_outputs_match_ort_at_every_thread_count(tmp_path, monkeypatch, order):
    force(monkeypatch, order)
    model, feeds = pair_model(order)
    shared = built(model, tmp_path / "shared", threads=4)
    got, ref = run(shared.artifact, feeds), ort(model, feeds)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-4)
    assert_same_bits_at_thread_counts(shared.artifact, feeds, (1, 2, 4))
    for module in (winograd, winograd_input):  # the channel counts as build-time constants: the same bits
        monkeypatch.setattr(module, "run_time_channels", lambda k: False)
    fixed = run(built(model, tmp_path / "fixed", threads=4).artifact, feeds)
    for name in ref:
        assert got[name].tobytes() == fixed[name].tobytes()


@pytest.mark.parametrize("board,order", [("rpi4", "wino4"), ("rpi4", "wimg4"), ("qemu-armv7", "wino6"),
                                         ("qemu-riscv64", "wino4"), ("qemu-riscv64-rvv", "wino6"),
                                         ("qemu-riscv64-rvv", "wimg4")])
def test_emulated_boards_match_ort(tmp_path, monkeypatch, board, order):
    """The run-time sizes on aarch64, 32-bit Arm (32-bit indices) and riscv64 with and without RVV, under qemu."""
    require_emulator(board)
    force(monkeypatch, order)
    model, feeds = pair_model(order)
    got, ref = run(built(model, tmp_path, board, threads=2).artifact, feeds), ort(model, feeds)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-4)
