"""Row-wise and data-movement kernels over dims that vary at run time (issue #26): each graph compiled once
(tests/dynamic_harness.py), run at the minimum, the maximum and sizes between (odd sizes, sizes that are not a
multiple of the vector width, 1 where the range allows) against onnx.reference; the varying dim as the row, as the
reduced axis and as the row count; serial and with parallel tiles."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from dynamic_harness import DynamicCase
from fluidml_xc.symbolic import Sym, SymRange

W, N = Sym("W"), Sym("N")
SIZES = (1, 3, 8, 13, 31, 64)
"""W over 1..64: the ends, odd sizes, one vector of 8, and sizes off the vector width."""
BIG = (1, 5, 17, 130, 255)
"""N over 1..256 for the row count with parallel tiles (enough work for a split at the capacity)."""


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def _check_sizes(run, feeds_at, sizes=SIZES, sym="W", **tol):
    for n in sizes:
        run.check({sym: n}, feeds_at(n), **tol)


def _case(lo=1, hi=64, name="W"):
    return DynamicCase({name: SymRange(name, lo, hi, hi)})


# -- Softmax / LogSoftmax / LayerNormalization --------------------------------------------------------
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("parallel", [False, True])
def test_softmax_varying_row_length(op, parallel):
    case = _case()
    x = case.input("x", np.float32, (3, W))
    case.node(op, [x], [(np.float32, (3, W))], {"axis": -1})
    run = case.compile(parallel=parallel)
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((3, n)).astype(np.float32) * 4})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_varying_row_count_parallel(op):
    case = DynamicCase({"N": SymRange("N", 1, 256, 128)})
    x = case.input("x", np.float32, (N, 4, 250))
    case.node(op, [x], [(np.float32, (N, 4, 250))], {"axis": -1})
    run = case.compile(parallel=True)
    assert "fxc_parallel_for" in run.ir_text
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((n, 4, 250)).astype(np.float32)}, BIG, "N")


def test_softmax_varying_middle_axis():
    """Rows along a varying axis that is not the last: strided rows, scalar path."""
    case = _case()
    x = case.input("x", np.float32, (2, W, 5))
    case.node("Softmax", [x], [(np.float32, (2, W, 5))], {"axis": 1})
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((2, n, 5)).astype(np.float32)})


@pytest.mark.parametrize("parallel", [False, True])
def test_layer_norm_varying_rows_and_length(parallel):
    """Sequence length varies (row count); then the normalized axis itself varies (count at run time)."""
    case = _case()
    x = case.input("x", np.float32, (W, 24))
    scale, bias = case.const("s", _rng(1).standard_normal(24).astype(np.float32)), case.const("b", _rng(2).standard_normal(24).astype(np.float32))
    case.node("LayerNormalization", [x, scale, bias], [(np.float32, (W, 24))], {"axis": -1, "epsilon": 1e-5})
    run = case.compile(parallel=parallel)
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((n, 24)).astype(np.float32)}, atol=1e-5)

    case = _case()
    x = case.input("x", np.float32, (3, W))
    one = case.const("one", np.array([1.5], np.float32))
    case.node("LayerNormalization", [x, one], [(np.float32, (3, W))], {"axis": -1})
    run = case.compile(parallel=parallel)
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((3, n)).astype(np.float32)}, atol=1e-5)


# -- reductions -----------------------------------------------------------------------------------
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceProd"]


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_over_varying_axis(op):
    """The reduced axis varies: last (contiguous, vector body + tail) and middle (strided)."""
    case = _case()
    x = case.input("x", np.float32, (3, W))
    axes = case.const("axes", np.array([1], np.int64))
    case.node(op, [x, axes], [(np.float32, (3, 1))], {"keepdims": 1})
    y = case.input("y", np.float32, (2, W, 3))
    axes0 = case.const("axes0", np.array([1], np.int64))
    case.node(op, [y, axes0], [(np.float32, (2, 3))], {"keepdims": 0})
    run = case.compile()
    scale = 0.3 if op == "ReduceProd" else 1.0
    _check_sizes(run, lambda n: {"x": (_rng(n).standard_normal((3, n)) * scale + (2 if op == "ReduceL2" else 0)).astype(np.float32),
                                 "y": (_rng(n + 1).standard_normal((2, n, 3)) * scale).astype(np.float32)}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax"])
@pytest.mark.parametrize("parallel", [False, True])
def test_reduce_varying_kept_dim(op, parallel):
    """The kept dim varies (row count), the reduced axis is static."""
    case = DynamicCase({"N": SymRange("N", 1, 256, 64)})
    x = case.input("x", np.float32, (N, 2100))
    axes = case.const("axes", np.array([-1], np.int64))
    case.node(op, [x, axes], [(np.float32, (N, 1))])
    run = case.compile(parallel=parallel)
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((n, 2100)).astype(np.float32)}, BIG, "N", rtol=1e-4)


def test_reduce_int_and_all_axes():
    case = _case()
    x = case.input("x", np.int32, (W, 3))
    case.node("ReduceSum", [x], [(np.int32, (1, 1))])
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).integers(-50, 50, (n, 3)).astype(np.int32)})
