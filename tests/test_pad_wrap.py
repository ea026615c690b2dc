"""Pad mode=wrap (ops/movement.py): pads up to the dim's size take one add or subtract of the size, larger ones a
remainder; against onnx.reference (numpy's wrap), x86_64 and qemu."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc.run.backend import compile_model
from modelrun import build, graph_model, require_emulator, run

PADS = {"within": [1, 4, 2, 3, 4, 5], "beyond": [4, 0, 7, 5, 9, 11]}


def _model(pads):
    x = np.random.default_rng(6).standard_normal((3, 4, 5)).astype(np.float32)
    x[1, 2, 3] = np.nan
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")
    return graph_model([node], {"x": x}, ["y"], consts={"p": np.array(pads, np.int64)}, opset=19, infer=True), x


@pytest.mark.parametrize("case", sorted(PADS))
def test_pad_wrap_as_reference(case):
    model, x = _model(PADS[case])
    want = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    np.testing.assert_array_equal(compile_model(model)({"x": x})[0], want)


@pytest.mark.parametrize("board", ["rpi4", "rpi3"])
def test_pad_wrap_on_arm(board, tmp_path):
    require_emulator(board)
    for case, pads in sorted(PADS.items()):
        model, x = _model(pads)
        want = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
        np.testing.assert_array_equal(run(build(model, tmp_path / case, board, profile_runner=False), {"x": x})["y"], want)
