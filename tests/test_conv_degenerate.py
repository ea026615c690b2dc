"""Convolutions exporters write with a degenerate spatial dim (a 1-D conv as 2-D: W = 1 and a k x 1 kernel)
run along the row (ops/conv/): a chain with bias, Relu, depthwise, stride, dilation, padding and a
residual, against ONNX Runtime on this machine (both --opt modes) and under qemu."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from modelrun import compile_and_run, graph_model, require_emulator


def _model(channels=16, length=97):
    rng = np.random.default_rng(3)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[5, 1], pads=[2, 0, 2, 0]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 1], pads=[2, 0, 2, 0], dilations=[2, 1], group=channels),
        helper.make_node("Add", ["c2", "r1"], ["s"]),
        helper.make_node("Conv", ["s", "w3", "b3"], ["y"], kernel_shape=[4, 1], strides=[2, 1], pads=[1, 0, 1, 0]),
    ]
    consts = {"w1": w(channels, 8, 5, 1), "b1": w(channels), "w2": w(channels, 1, 3, 1), "w3": w(24, channels, 4, 1), "b3": w(24)}
    feeds = {"x": rng.standard_normal((2, 8, length, 1)).astype(np.float32)}
    return graph_model(nodes, feeds, ["y"], consts, opset=13), feeds


def _check(model, feeds, tmp_path, board, **options):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = compile_and_run(model, feeds, tmp_path, board, **options)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opt", ["greedy", "fluid"])
def test_kx1_conv_chain_matches_ort(tmp_path, opt):
    _check(*_model(), tmp_path, "x86_64", opt=opt)


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["rpi4", "rpi3"])
def test_kx1_conv_chain_under_qemu(tmp_path, board):
    require_emulator(board)
    _check(*_model(length=41), tmp_path, board)
