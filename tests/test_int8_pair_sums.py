"""int8 GEMMs on AVX2 without VNNI (x86_64-v3): constant weights within +-64 run as k-quads through vpmaddubsw pair
sums (kernels/qgemm.py Config.pairs), exact against onnx.reference even where the int16 pair sums reach their
largest magnitude; wider weights keep the k-pairs (pmaddwd), still exact, where vpmaddubsw would saturate."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc.pipeline import LowerOptions, import_graph, lower
from fluidml_xc.run.backend import compile_model
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec

BOARD = "x86_64-v3"
PAIR_SUMS = "llvm.x86.avx2.pmadd.ub.sw"


def _model(node, x: np.ndarray, consts: dict):
    dtype = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", dtype, x.shape)],
                              [helper.make_tensor_value_info("y", dtype, None)],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _qmatmul(x: np.ndarray, w: np.ndarray, w_zp=0):
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(7, x.dtype), "w": w, "ws": np.array(0.002, np.float32),
              "wz": np.array(w_zp, w.dtype), "ys": np.array(0.5, np.float32), "yz": np.array(3, x.dtype)}
    node = helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    return _model(node, x, consts)


def _qconv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, group: int):
    m = w.shape[0]
    rng = np.random.default_rng(1)
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(-5 if x.dtype == np.int8 else 100, x.dtype), "w": w,
              "ws": rng.uniform(0.001, 0.003, m).astype(np.float32), "wz": np.zeros(m, np.int8),
              "ys": np.array(0.3, np.float32), "yz": np.array(10, x.dtype),
              "bias": rng.integers(-3000, 3000, m).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["y"],
                            pads=[pad] * 4, strides=[stride] * 2, group=group)
    return _model(node, x, consts)


def _check(model, x: np.ndarray, pair_sums: bool) -> None:
    ir_text = lower(import_graph(model), machine_spec(get_board(BOARD)), LowerOptions()).ir_text
    assert (PAIR_SUMS in ir_text) == pair_sums
    got = compile_model(model, BOARD)({"x": x})[0]
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_qlinear_matmul_seven_bit_weights_pair_sums(xdt):
    rng = np.random.default_rng(0)
    info = np.iinfo(xdt)
    x = rng.integers(info.min, info.max + 1, (33, 99)).astype(xdt)  # K not a multiple of 4, N not of the block
    w = rng.integers(-64, 65, (99, 70)).astype(np.int8)
    _check(_qmatmul(x, w), x, True)


def test_pair_sums_at_their_largest_magnitude():
    """Every pair sum 255 * (64 + 64) = 32640 or -32640: the edge of int16, exact."""
    x = np.full((8, 64), 255, np.uint8)
    w = np.where(np.arange(64 * 16).reshape(64, 16) % 3 == 0, 64, -64).astype(np.int8)
    w[:, :8] = -64
    _check(_qmatmul(x, w, 0), x, True)


def test_full_range_weights_keep_the_k_pairs():
    """Weights of -128 against inputs of 255: vpmaddubsw would saturate (-65280); the k-pairs stay exact."""
    rng = np.random.default_rng(2)
    x = np.full((16, 48), 255, np.uint8)
    x[::2] = rng.integers(0, 256, (8, 48))
    w = rng.integers(-128, 128, (48, 24)).astype(np.int8)
    w[:2] = -128
    _check(_qmatmul(x, w), x, False)


@pytest.mark.parametrize("c,m,h,k,stride,pad,group,xdt", [
    (16, 24, 13, 3, 1, 1, 1, np.uint8),   # odd image, padding
    (12, 20, 11, 3, 2, 1, 1, np.uint8),   # stride 2, channels not multiples of 4
    (16, 16, 9, 3, 1, 0, 4, np.int8),     # groups, int8 activations (flipped to uint8), no padding
    (32, 48, 7, 1, 1, 0, 1, np.uint8),    # 1x1
])
def test_qlinear_conv_seven_bit_weights_pair_sums(c, m, h, k, stride, pad, group, xdt):
    rng = np.random.default_rng(c + m + h)
    info = np.iinfo(xdt)
    x = rng.integers(info.min, info.max + 1, (1, c, h, h)).astype(xdt)
    w = rng.integers(-64, 65, (m, c // group, k, k)).astype(np.int8)
    _check(_qconv(x, w, stride, pad, group), x, True)


def test_qlinear_conv_full_range_weights_keep_the_k_pairs():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 16, 10, 10)).astype(np.uint8)
    w = rng.integers(-128, 128, (16, 16, 3, 3)).astype(np.int8)
    _check(_qconv(x, w, 1, 1, 1), x, False)


def test_matmul_integer_uint8_weights_near_their_zero_point():
    """uint8 B with zero point 128 and values within 128 +- 64: B - zp fits the pair sums; batched A (rows fold)."""
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (3, 17, 40)).astype(np.uint8)
    w = rng.integers(64, 193, (40, 36)).astype(np.uint8)
    node = helper.make_node("MatMulInteger", ["x", "w", "xz", "wz"], ["y"])
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(9, np.uint8), "xz"),
                               numpy_helper.from_array(np.array(128, np.uint8), "wz")])
    _check(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), x, True)


def test_conv_integer_with_a_weight_zero_point():
    """ConvInteger (int32 out), int8 weights minus a zero point of 3 within +-64."""
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, (1, 8, 9, 11)).astype(np.uint8)
    w = (rng.integers(-61, 62, (12, 8, 3, 3)) + 3).astype(np.int8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1] * 4)
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(17, np.uint8), "xz"),
                               numpy_helper.from_array(np.array(3, np.int8), "wz")])
    _check(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), x, True)
