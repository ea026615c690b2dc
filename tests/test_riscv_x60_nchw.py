"""RVV's NCHW depthwise 3x3 column strips (ops/conv/strips.py, #30): every strip layout (one strip with both edges,
overlapping last strips, interior strips), plane heights around the hot loop's 5 steps (no hot iteration, one,
several, with a remainder), bias or none, Clip (NaN kept; bounds from 0, above 0, -0.0, below 0) / Relu / no
epilogue, at VLEN 256, 128 and 512, against
ONNX Runtime and ONNX's reference under qemu; 1, 4 and 8 threads (rows split between them) give the same bytes.
Each build is checked to run the strips."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from modelrun import build, graph_model, run
from test_riscv import match_onnx

# (channels, H, W, epilogue, bias): W 16 one strip; 28 and 37 an overlapping last strip; 48 three; H 1-4 no hot
# iteration, 8 one, 13 two and a remainder, 30 five; 3 x 120 x 64 enough work to split its rows between threads
CONVS = [(3, 8, 16, (0, 6), True), (4, 13, 28, (0, 6), True), (2, 1, 20, "relu", True), (2, 2, 37, None, False),
         (3, 3, 48, (0.5, 3), False), (2, 4, 17, "relu", True), (5, 30, 33, (0, 6), True), (3, 120, 64, (0, 6), True),
         (2, 9, 19, (-0.0, 2), True), (2, 7, 21, (-1, 1), True)]
"""Clip bounds (lo, hi): 0 <= lo < hi take strips.py's integer upper bound, -0.0 and a negative lo the epilogue's Clip."""


def _model(V: int) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(13)
    f = lambda *shape: (2 * rng.standard_normal(shape)).astype(np.float32)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 6.0, 1e38], np.float32)
    nodes, consts, feeds, outs = [], {}, {}, []
    for i, (C, H, W, epi, bias) in enumerate(CONVS):
        W = max(W, V)
        x = f(1, C, H, W)
        x.reshape(-1)[rng.choice(x.size, specials.size, replace=False)] = specials
        feeds[f"x{i}"] = x
        consts[f"w{i}"] = f(C, 1, 3, 3)
        inputs = [f"x{i}", f"w{i}"]
        if bias:
            consts[f"b{i}"] = f(C)
            inputs.append(f"b{i}")
        nodes.append(helper.make_node("Conv", inputs, [f"c{i}"], pads=[1] * 4, group=C))
        if isinstance(epi, tuple):
            consts[f"lo{i}"], consts[f"hi{i}"] = np.float32(epi[0]), np.float32(epi[1])
            nodes.append(helper.make_node("Clip", [f"c{i}", f"lo{i}", f"hi{i}"], [f"y{i}"]))
        elif epi == "relu":
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"y{i}"]))
        else:
            nodes.append(helper.make_node("Identity", [f"c{i}"], [f"y{i}"]))
        outs.append(f"y{i}")
    return graph_model(nodes, feeds, outs, consts, 13), feeds


def _strips_recorded(patched_compiler) -> list:
    from fluidml_xc.ops.conv import conv2d as conv
    from fluidml_xc.ops.conv.strips import column_strips
    seen, emit = [], conv.emit_conv

    def record(c):
        seen.append(column_strips(c, c.plan))
        emit(c)
    patched_compiler.setattr(conv, "emit_conv", record)
    return seen


@pytest.mark.qemu
@pytest.mark.parametrize("board, features, V", [("qemu-riscv64-rvv", None, 16), ("qemu-riscv64", "+v", 8),
                                                ("qemu-riscv64", "+v,+zvl512b", 32)])
def test_column_strips_match_onnxruntime(board, features, V, tmp_path, patched_compiler):
    seen = _strips_recorded(patched_compiler)
    model, feeds = _model(V)
    match_onnx(model, feeds, run(build(model, tmp_path, board, profile_runner=False, features=features), feeds))
    assert seen and all(seen), seen


@pytest.mark.qemu
def test_column_strips_threads_bit_identical_at_1_4_8(tmp_path, patched_compiler):
    seen = _strips_recorded(patched_compiler)
    model, feeds = _model(16)
    artifact = build(model, tmp_path, "qemu-riscv64-rvv", threads=8, profile_runner=False)
    results = {t: run(artifact, feeds, threads=t) for t in (1, 4, 8)}
    for t in (4, 8):
        for out in results[1]:
            assert results[1][out].tobytes() == results[t][out].tobytes(), f"{out}: {t} threads differ from 1"
    match_onnx(model, feeds, results[1])
    assert seen and all(seen), seen
