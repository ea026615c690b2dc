"""The Winograd output stores (issue #27, docs/WINOGRAD.md "Output stores"): whole tiles of a channels-first output
stored as row vectors after an in-register transpose, edge tiles through one pixel loop. Outputs against ONNX Runtime
for odd sizes, channel tails (output channels not a multiple of the vector), both layouts, the blocked and the
whole-image forms, natively and under qemu-aarch64 / qemu-armv7; the IR holds no lane-by-lane copy of every pixel,
and one copy of the output transform's arithmetic."""
from __future__ import annotations

import re

import numpy as np
import pytest

from modelrun import build, jit_run, require_emulator
from test_winograd import RTOL, conv_model, force, jit_conv, ort, rel_error, run_runner
from test_winograd_whole import lowered

ODD = dict(c=24, oc=20, h=13, w=11, pads=(1, 0, 1, 2))
"""Partial tiles on the bottom and right edges for m = 2, 4, 6; 20 output channels: a tail of 4 lanes (AVX-512)."""


@pytest.mark.parametrize("order", ["wino2", "wino4", "wino6", "wimg2", "wimg4", "wimg6"])
def test_channels_first_residual_relu_matches_ort(order, monkeypatch):
    model = conv_model(**ODD, residual_relu=True, batch=2)
    low = lowered(model, order, monkeypatch)
    assert low.decisions.loop_orders["conv"] == order
    x = np.random.default_rng(7).standard_normal((2, 24, 13, 11)).astype(np.float32)
    assert rel_error(next(iter(jit_run(model, {"x": x}).values())), ort(model, x)) < RTOL


@pytest.mark.parametrize("order", ["wino2", "wino4", "wino6"])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("oc", [20, 33])
def test_tails_in_both_layouts(order, channels_last, oc):
    model = conv_model(24, oc, 10, 7, (0, 1, 2, 1))
    x, got = jit_conv(model, order, channels_last)
    assert rel_error(got, ort(model, x)) < RTOL


@pytest.mark.parametrize("order", ["wino4", "wimg4", "wino6"])
def test_no_lane_by_lane_pixel_stores(order, monkeypatch):
    """A 64 -> 64 28x28 conv with residual + Relu, channels-first: the whole tiles store <4 x float> rows and the edge
    tiles share one loop, so the kernel keeps under 200 scalar float stores (1,096 for F(4x4) and 2,432 for F(6x6)
    when every pixel's lanes were stored one by one)."""
    ir = lowered(conv_model(64, 64, 28, 28, residual_relu=True), order, monkeypatch).ir_text
    assert len(re.findall(r"store float ", ir)) < 200
    assert re.search(r"store <4 x float>", ir)


@pytest.mark.parametrize("order, most", [("wino4", 1100), ("wimg4", 1100), ("wino6", 3500), ("wimg6", 3500)])
def test_output_transform_emitted_once(order, most, monkeypatch):
    """The same 64 -> 64 conv: the output transform's arithmetic exists once for the panel's vectors (a loop over
    them): 993 float adds, subtracts and multiplies for F(4x4) and 3,061 for F(6x6) on x86-64-v3 (the input
    transform included), against 1,242 and 3,922 with a copy per panel vector."""
    ir = lowered(conv_model(64, 64, 28, 28, residual_relu=True), order, monkeypatch).ir_text
    assert len(re.findall(r"= f(add|sub|mul) ", ir)) < most


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
@pytest.mark.parametrize("order", ["wino4", "wimg6"])
def test_arm_tails_under_qemu(board, order, tmp_path, patched_compiler):
    """18 output channels: a tail of 2 lanes on 128-bit NEON; odd sizes, residual + Relu."""
    require_emulator(board)
    force(patched_compiler, order)
    model = conv_model(16, 18, 11, 9, (1, 0, 1, 2), residual_relu=True)
    x = np.random.default_rng(3).standard_normal((1, 16, 11, 9)).astype(np.float32)
    art = build(model, tmp_path, board)
    assert rel_error(run_runner(art, x), ort(model, x)) < RTOL
