"""ConvTranspose with constant weights runs as a Conv (stride 1, pads within the dilated kernel), else as a 1x1
Conv (a MatMul in 3-D) + Col2Im (passes/conv_transpose.py): outputs against ONNX Runtime over strides, pads,
output_padding, dilations, groups, auto_pad, output_shape, bias and 1-D / 2-D / 3-D, and the graph really is
rewritten into the form its case expects."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.run.backend import compile_model
from fluidml_xc.pipeline import import_graph

CASES = [  # (x shape, Cout, kernel, attrs)
    ((1, 64, 20, 20), 32, (2, 2), {"strides": [2, 2]}),
    ((1, 16, 14, 14), 8, (3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 8, 10, 10), 6, (4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 8, 9, 7), 8, (3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2], "output_padding": [1, 1]}),
    ((1, 8, 9, 9), 12, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 4}),
    ((1, 6, 8, 8), 4, (3, 3), {"dilations": [2, 2], "strides": [1, 2]}),
    ((1, 4, 7, 7), 4, (3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 4, 7, 7), 4, (3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 4, 5, 5), 3, (3, 3), {"strides": [3, 2], "output_shape": [14, 10]}),
    ((1, 16, 64), 8, (4,), {"strides": [2], "pads": [1, 1]}),
    ((1, 4, 4, 6, 6), 4, (3, 3, 3), {"strides": [2, 2, 2], "pads": [1] * 6, "output_padding": [1, 1, 1]}),
    ((1, 3, 5, 5), 2, (1, 1), {}),
    ((1, 8, 10, 10), 8, (3, 3), {"pads": [0, 1, 2, 0], "dilations": [2, 1], "group": 2}),
    ((1, 6, 12), 4, (5,), {"pads": [1, 3]}),
    ((1, 4, 9, 9), 4, (3, 3), {"pads": [3, 0, 0, 0]}),
    ((1, 4, 4, 5, 5), 4, (3, 3, 3), {"pads": [1] * 6}),
    ((2, 8, 6, 5), 4, (4, 4), {"strides": [4, 4]}),
    ((1, 8, 6, 19), 6, (2, 1), {"strides": [2, 1], "group": 2}),
]


def _expected_ops(x_shape, kernel, attrs) -> set[str]:
    """Stride 1 with explicit pads within the dilated kernel: one Conv; otherwise 1x1 Conv (MatMul in 3-D) + Col2Im."""
    sp = len(x_shape) - 2
    dils, pads = attrs.get("dilations", [1] * sp), attrs.get("pads", [0] * 2 * sp)
    within = all(p <= d * (k - 1) for p, d, k in zip(pads, dils * 2, list(kernel) * 2))
    if sp <= 2 and set(attrs.get("strides", [1])) == {1} and within and "auto_pad" not in attrs:
        return {"Conv"}
    return {"Col2Im", "Conv" if sp <= 2 else "MatMul"}


def _model(x_shape, cout, kernel, attrs, bias: bool):
    rng = np.random.default_rng(len(x_shape) * 7 + cout)
    groups = attrs.get("group", 1)
    w = (rng.standard_normal((x_shape[1], cout // groups, *kernel)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"))
        inputs.append("b")
    node = helper.make_node("ConvTranspose", inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, rng.standard_normal(x_shape).astype(np.float32)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_conv_transpose_matches_ort(case, bias):
    model, x = _model(*CASES[case], bias)
    ops = {n.op_type for n in import_graph(model).nodes}
    assert "ConvTranspose" not in ops
    x_shape, _, kernel, attrs = CASES[case]
    expected = _expected_ops(x_shape, kernel, attrs)
    assert expected <= ops and ("Col2Im" in ops) == ("Col2Im" in expected), ops
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = compile_model(model)({"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_exact_tiling_col2im_under_qemu(tmp_path, board):
    """The pixel-shuffle Col2Im (blocks tiling the image: 2x2 stride 2, 4x4 stride 4) with the ARM vector widths."""
    from modelrun import compile_and_run, require_emulator
    require_emulator(board)
    for i, case in enumerate((CASES[0], ((2, 8, 6, 5), 4, (4, 4), {"strides": [4, 4]}))):
        model, x = _model(*case, bias=True)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = compile_and_run(model, {"x": x}, tmp_path / str(i), board)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
