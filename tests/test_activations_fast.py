"""Vectorized float32 approximations of libm functions (kernels/scalar.py): error bounds over a dense
range and the special values, against numpy in float64."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from fluidml_xc.run.backend import compile_model

SPECIALS = [0.0, -0.0, 1e-30, -1e-30, 1e-5, -3e-4, 4e-4, 7.9, -8.5, 9.0, 100.0, np.inf, -np.inf, np.nan]


def _unary(op: str, x: np.ndarray, **attrs) -> np.ndarray:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return compile_model(model)({"x": x})[0]


@pytest.mark.parametrize("op,ref,ulps", [
    ("Tanh", np.tanh, 5),
    ("Gelu", lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), None),
])
def test_tanh_family_accuracy(op, ref, ulps):
    x = np.concatenate([np.linspace(-12, 12, 100_001), SPECIALS]).astype(np.float32)
    got = _unary(op, x, **({"approximate": "tanh"} if op == "Gelu" else {}))
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    err = np.abs(got[~nan].astype(np.float64) - want[~nan])
    if ulps:
        assert (err <= ulps * np.spacing(np.abs(want[~nan]).astype(np.float32))).all(), err.max()
        assert got[x == np.inf][0] == 1.0 and got[x == -np.inf][0] == -1.0
        assert np.signbit(got[np.signbit(x) & (x == 0)]).all()
    else:
        finite = np.isfinite(want[~nan])
        np.testing.assert_allclose(got[~nan][finite], want[~nan][finite], rtol=1e-5, atol=1e-6)  # 1 + tanh cancels for x << 0, as in float32 everywhere


def test_tanh_never_exceeds_one():
    """tanh_f32 clamps its argument where x * P / Q rounds to exactly 1 (kernels/scalar.py TANH_LIMIT) instead of
    clamping the result: every float32 from 7 to 9.6 gives a value in [tanh's float32 - 5 ulps, 1], and 1 from the
    limit on (the ratio itself passes 1 at 8.12 and reaches 1 + 4e-7 by 9.5)."""
    from fluidml_xc.kernels.scalar import TANH_LIMIT
    x = np.arange(np.float32(7.0).view(np.uint32), np.float32(9.6).view(np.uint32), dtype=np.uint32).view(np.float32)
    got = _unary("Tanh", np.concatenate([x, -x]))
    assert got[:x.size].max() == 1.0 and got[x.size:].min() == -1.0
    assert (got[:x.size][x >= np.float32(TANH_LIMIT)] == 1.0).all()
    np.testing.assert_array_equal(got[x.size:], -got[:x.size])
    want = np.tanh(x.astype(np.float64))
    assert (want - got[:x.size] <= 5 * np.spacing(want.astype(np.float32))).all()


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh"])
def test_vector_rows_with_a_tail(op):
    """A 4-D tensor in rows of 37 x 29 = 1073 elements (Sigmoid: ops/elementwise.py _vector_unary on x86, whole
    vectors then one element per row; Tanh: the generic loop): each element within 2 ulps of the 1-D kernel's (a
    scalar remainder may round an FMA differently from the vector body), NaN and infinities where it has them."""
    from fluidml_xc.run.backend import compile_model
    x = np.random.default_rng(5).normal(0, 6, (2, 3, 37, 29)).astype(np.float32)
    x.flat[::97] = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0], np.float32)[np.arange(x.size)[::97] % 7]
    node = helper.make_node(op, ["x"], ["y"])
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    got = compile_model(model)({"x": x})[0]
    np.testing.assert_allclose(got.ravel(), _unary(op, x.ravel()), rtol=2.4e-7, atol=0)


def test_log_accuracy_and_special_values():
    x = np.concatenate([np.geomspace(1e-45, 3e38, 100_001), np.linspace(0.5, 2, 100_001),
                        [0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1.0]]).astype(np.float32)  # subnormals included
    got = _unary("Log", x)
    with np.errstate(all="ignore"):
        want = np.log(x.astype(np.float64))
    finite = np.isfinite(want)
    assert (np.abs(got[finite] - want[finite]) <= 1.5 * np.spacing(np.abs(want[finite]).astype(np.float32))).all()
    np.testing.assert_array_equal(got[~finite], want[~finite].astype(np.float32))  # -inf at +-0, inf at inf, NaN below 0


def _sigmoid_points() -> np.ndarray:
    return np.concatenate([np.linspace(-90, 90, 200_001), np.geomspace(1e-30, 87, 20_001), -np.geomspace(1e-30, 87, 20_001),
                           SPECIALS]).astype(np.float32)


def _check_sigmoid(x: np.ndarray, got: np.ndarray, ulps: float) -> None:
    """Within `ulps` of the float64 value where that is a normal float32; subnormal results within 1.2e-38 absolute."""
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-x.astype(np.float64)))
    nan = np.isnan(x)
    assert np.isnan(got[nan]).all()
    normal = ~nan & (want >= np.finfo(np.float32).tiny)
    err = np.abs(got.astype(np.float64) - want)
    assert (err[normal] <= ulps * np.spacing(want[normal].astype(np.float32))).all(), err[normal].max()
    assert (err[~nan & ~normal] <= 1.2e-38).all()
    assert got[x == np.inf][0] == 1.0 and got[x == -np.inf][0] == 0.0 and (got[x == 0] == 0.5).all()


def test_sigmoid_accuracy():
    """Sigmoid as 2^-n / (2^-n + y) over exp(-x) = y 2^n (kernels/scalar.py sigmoid_f32): 2.48 ulps at most over
    every float32 (x86-64-v3, docs/OPS.md), so 3 here; tiny results keep their relative precision."""
    x = _sigmoid_points()
    _check_sigmoid(x, _unary("Sigmoid", x), 3)


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_sigmoid_and_tanh_on_arm(tmp_path, board):
    from modelrun import compile_and_run, require_emulator
    require_emulator(board)
    x = np.concatenate([_sigmoid_points()[::7], SPECIALS]).astype(np.float32)
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Tanh", ["x"], ["t"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [x.size]) for n in ("s", "t")])
    got = compile_and_run(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), {"x": x}, tmp_path, board,
                          profile_runner=False)
    _check_sigmoid(x, got["s"], 3)
    finite = ~np.isnan(x)
    want = np.tanh(x[finite].astype(np.float64))
    assert (np.abs(got["t"][finite] - want) <= 5 * np.spacing(np.abs(want).astype(np.float32))).all()
    assert np.isnan(got["t"][~finite]).all()
