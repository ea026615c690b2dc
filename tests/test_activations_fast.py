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
    """Sigmoid in one division over exp(-|x|) (kernels/scalar.py sigmoid_f32): 2.4 ulps at most over every float32
    (x86-64-v3, docs/OPS.md), so 3 here; tiny results keep their relative precision."""
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
