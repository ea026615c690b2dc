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
"""W over 1..64: the ends, odd sizes, and sizes on and off the vector width (4, 8 or 16 float lanes)."""
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


# -- data movement --------------------------------------------------------------------------------
@pytest.mark.parametrize("perm", [(1, 2, 0), (2, 0, 1), (0, 2, 1)])
def test_transpose_varying_dim_anywhere(perm):
    case = _case()
    x = case.input("x", np.float32, (2, W, 3))
    case.node("Transpose", [x], [(np.float32, tuple((2, W, 3)[p] for p in perm))], {"perm": list(perm)})
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((2, n, 3)).astype(np.float32)})


def test_transpose_parallel_rows():
    case = DynamicCase({"N": SymRange("N", 1, 256, 64)})
    x = case.input("x", np.float32, (N, 64, 80))
    case.node("Transpose", [x], [(np.float32, (80, N, 64))], {"perm": [2, 0, 1]})
    run = case.compile(parallel=True)
    assert "fxc_parallel_for" in run.ir_text
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((n, 64, 80)).astype(np.float32)}, BIG, "N")


def test_concat_moves_following_inputs():
    case = _case()
    a, b, c = case.input("a", np.float32, (2, W)), case.input("b", np.float32, (2, 5)), case.input("c", np.float32, (2, W))
    case.node("Concat", [a, b, c], [(np.float32, (2, W * 2 + 5))], {"axis": 1})
    d, e = case.input("d", np.float32, (W, 3)), case.input("e", np.float32, (4, 3))
    case.node("Concat", [d, e, d], [(np.float32, (W * 2 + 4, 3))], {"axis": 0})
    run = case.compile()
    r = _rng()
    _check_sizes(run, lambda n: {"a": r.standard_normal((2, n)).astype(np.float32), "b": r.standard_normal((2, 5)).astype(np.float32),
                                 "c": r.standard_normal((2, n)).astype(np.float32), "d": r.standard_normal((n, 3)).astype(np.float32),
                                 "e": r.standard_normal((4, 3)).astype(np.float32)})


def test_slice_starts_against_a_varying_end():
    case = _case(3, 64)
    x = case.input("x", np.float32, (2, W))

    def sl(name, starts, ends, steps, dims):
        consts = [case.const(f"{name}{j}", np.array(v, np.int64)) for j, v in enumerate((starts, ends, [1], steps))]
        case.node("Slice", [x, *consts], [(np.float32, dims)])
    sl("inner", [1], [-1], [1], (2, W - 2))
    sl("last3", [-3], [1 << 40], [1], (2, 3))
    sl("even", [0], [1 << 40], [2], (2, (W + 1) // 2))
    sl("back", [-1], [-(1 << 40)], [-1], (2, W))
    sl("head", [0], [2], [1], (2, 2))
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((2, n)).astype(np.float32)}, (3, 4, 9, 17, 40, 64))


def test_split_and_pad_and_tile():
    case = _case(2, 64)
    halves = [case.input(f"x{i}", np.float32, (4, W)) for i in range(2)]  # graph inputs' varying dims are symbols
    (x,) = case.node("Concat", halves, [(np.float32, (4, W * 2))], {"axis": 1})
    case.node("Split", [x], [(np.float32, (4, W)), (np.float32, (4, W))], {"axis": 1, "num_outputs": 2})
    sizes = case.const("sizes", np.array([1, 3], np.int64))
    case.node("Split", [x, sizes], [(np.float32, (1, W * 2)), (np.float32, (3, W * 2))], {"axis": 0})
    y = case.input("y", np.float32, (2, W))
    pads = case.const("pads", np.array([1, 2, 0, 3], np.int64))
    case.node("Pad", [y, pads, case.const("v", np.array(1.5, np.float32))], [(np.float32, (3, W + 5))])
    case.node("Pad", [y, case.const("front", np.array([0, 0, 0, 4], np.int64))], [(np.float32, (2, W + 4))])
    reps = case.const("reps", np.array([3, 2], np.int64))
    case.node("Tile", [y, reps], [(np.float32, (6, W * 2))])
    run = case.compile()
    r = _rng()
    _check_sizes(run, lambda n: {"x0": r.standard_normal((4, n)).astype(np.float32), "x1": r.standard_normal((4, n)).astype(np.float32),
                                 "y": r.standard_normal((2, n)).astype(np.float32)},
                 (2, 3, 8, 13, 31, 64))


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_modes_over_a_varying_dim(mode):
    """The mirrored / clamped / wrapped index of the run-time extent; pads up to the smallest extent (reflect needs
    pads below it), n = 1 where the mode allows."""
    lo = 4 if mode == "reflect" else 3 if mode == "wrap" else 1
    case = _case(lo, 64)
    y = case.input("y", np.float32, (3, W))
    case.node("Pad", [y, case.const("pads", np.array([1, lo - 1, 0, 3 if mode != "wrap" else 2], np.int64))],
              [(np.float32, (4, W + lo + (2 if mode != "wrap" else 1)))], {"mode": mode})
    run = case.compile()
    _check_sizes(run, lambda n: {"y": _rng(n).standard_normal((3, n)).astype(np.float32)}, (lo, lo + 1, 8, 13, 31, 64))


def test_gather_varying_indices_and_data():
    case = _case(3, 64)
    table = case.const("table", _rng(3).standard_normal((10, 4)).astype(np.float32))
    ids = case.input("ids", np.int64, (W,))
    case.node("Gather", [table, ids], [(np.float32, (W, 4))], {"axis": 0})
    data = case.input("data", np.float32, (5, W))
    idx = case.input("idx", np.int32, (2, 3))
    case.node("Gather", [data, idx], [(np.float32, (5, 2, 3))], {"axis": 1})
    scalar = case.const("one", np.array(-1, np.int64))
    case.node("Gather", [data, scalar], [(np.float32, (5,))], {"axis": 1})
    first = case.const("first", np.array([2], np.int64))
    case.node("Gather", [data, first], [(np.float32, (5, 1))], {"axis": 1})
    rows = case.input("rows", np.float32, (W, 3, 4))
    case.node("Gather", [rows, case.const("mid", np.array(-2, np.int64))], [(np.float32, (W, 4))], {"axis": 1})
    run = case.compile()

    def feeds(n):
        r = _rng(n)
        return {"ids": r.integers(-10, 10, n).astype(np.int64), "data": r.standard_normal((5, n)).astype(np.float32),
                "idx": r.integers(-n, n, (2, 3)).astype(np.int32), "rows": r.standard_normal((n, 3, 4)).astype(np.float32)}
    _check_sizes(run, feeds, (3, 4, 8, 13, 31, 64))


def test_gather_elements_varying_axis():
    case = _case()
    data = case.input("data", np.float32, (3, W))
    idx = case.input("idx", np.int64, (3, W))
    case.node("GatherElements", [data, idx], [(np.float32, (3, W))], {"axis": 1})
    run = case.compile()
    run.check({"W": 5}, {"data": _rng(5).standard_normal((3, 5)).astype(np.float32),
                         "idx": _rng(6).integers(-5, 5, (3, 5)).astype(np.int64)})
    for n in SIZES:  # numpy's take_along_axis: onnx.reference's GatherElements (np.choose) fails past 32 positions
        data, idx = _rng(n).standard_normal((3, n)).astype(np.float32), _rng(n + 1).integers(-n, n, (3, n)).astype(np.int64)
        np.testing.assert_array_equal(run({"W": n}, {"data": data, "idx": idx})[0], np.take_along_axis(data, idx % n, 1))


# -- views ----------------------------------------------------------------------------------------
def _aliases(case):
    from fluidml_xc.planning import PlanOptions, plan_memory

    return plan_memory(case.graph, PlanOptions(reuse=False, inplace=False, reorder=False)).alias_of


def test_views_share_storage_only_where_elements_stay_in_place():
    """Inside the graph: (2, W, 4) -> (2, W*4) keeps every element in place (a view alias); (2, W) -> (2W,) does
    not (capacity strides) and copies. At the graph's boundary both copy."""
    case = _case()
    x = case.input("x", np.float32, (4, 2, W))
    t = case.node("Transpose", [x], [(np.float32, (2, W, 4))], {"perm": [1, 2, 0]}, output=False)[0]
    same = case.node("Reshape", [t, case.const("s0", np.array([0, -1], np.int64))], [(np.float32, (2, W * 4))], output=False)[0]
    case.node("Transpose", [same], [(np.float32, (W * 4, 2))], {"perm": [1, 0]})
    y = case.input("y", np.float32, (W, 2))
    u = case.node("Transpose", [y], [(np.float32, (2, W))], {"perm": [1, 0]}, output=False)[0]
    moved = case.node("Reshape", [u, case.const("s1", np.array([-1], np.int64))], [(np.float32, (W * 2,))], output=False)[0]
    case.node("Unsqueeze", [moved, case.const("a0", np.array([0], np.int64))], [(np.float32, (1, W * 2))])
    case.node("Flatten", [x], [(np.float32, (8, W))], {"axis": 2})
    sq = case.input("sq", np.float32, (1, W, 1))
    case.node("Squeeze", [sq, case.const("a1", np.array([0, 2], np.int64))], [(np.float32, (W,))])
    case.node("Identity", [sq], [(np.float32, (1, W, 1))])
    aliases = _aliases(case)
    assert same in aliases and moved not in aliases, aliases
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((4, 2, n)).astype(np.float32),
                                 "y": _rng(n + 1).standard_normal((n, 2)).astype(np.float32),
                                 "sq": _rng(n + 2).standard_normal((1, n, 1)).astype(np.float32)})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL1"])
def test_reduce_middle_axis_in_column_vectors(op):
    """One middle axis before a static run of 20 floats (whole vectors and a tail of 4 for 8 or 16 lanes): columns in
    lanes, the axis (or the dims before it) at its run-time extent."""
    case = _case()
    x = case.input("x", np.float32, (W, 3, 20))
    case.node(op, [x, case.const("a1", np.array([1], np.int64))], [(np.float32, (W, 1, 20))])
    y = case.input("y", np.float32, (2, W, 20))
    case.node(op, [y, case.const("a2", np.array([1], np.int64))], [(np.float32, (2, 20))], {"keepdims": 0})
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((n, 3, 20)).astype(np.float32),
                                 "y": _rng(n + 1).standard_normal((2, n, 20)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_expand_to_varying_rows():
    case = _case()
    x = case.input("x", np.float32, (1, W, 1))
    case.node("Expand", [x, case.const("shape", np.array([3, 1, 5], np.int64))], [(np.float32, (3, W, 5))])
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((1, n, 1)).astype(np.float32)})


# -- ArgMax, CumSum, the normalizations ------------------------------------------------------------
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_over_varying_axis_and_rows(op):
    case = _case()
    x = case.input("x", np.float32, (3, W))
    case.node(op, [x], [(np.int64, (3, 1))], {"axis": 1})
    y = case.input("y", np.float32, (W, 7))
    case.node(op, [y], [(np.int64, (W,))], {"axis": 1, "keepdims": 0, "select_last_index": 1})
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((3, n)).astype(np.float32),
                                 "y": _rng(n + 1).integers(0, 3, (n, 7)).astype(np.float32)})


@pytest.mark.parametrize("attrs", [{}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}])
def test_cumsum_along_varying_axis(attrs):
    case = _case()
    x = case.input("x", np.float32, (2, W))
    case.node("CumSum", [x, case.const("axis", np.array(1, np.int64))], [(np.float32, (2, W))], attrs)
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((2, n)).astype(np.float32)}, atol=1e-5)


def test_batch_and_instance_norm_over_varying_height_and_width():
    """An image of H x W: BatchNormalization per channel, InstanceNormalization over a contiguous spatial run of
    run-time length (H varies, W static) and over a strided one (W varies), MVN and LpNormalization."""
    H = Sym("H")
    case = DynamicCase({"H": SymRange("H", 1, 33, 16), "W": SymRange("W", 1, 40, 16)})
    r = _rng(9)
    c = [case.const(f"p{j}", v.astype(np.float32)) for j, v in enumerate((r.standard_normal(3), r.standard_normal(3),
                                                                          r.standard_normal(3), r.random(3) + 0.5))]
    x = case.input("x", np.float32, (2, 3, H, W))
    case.node("BatchNormalization", [x, *c], [(np.float32, (2, 3, H, W))])
    case.node("InstanceNormalization", [x, c[0], c[1]], [(np.float32, (2, 3, H, W))])
    case.node("MeanVarianceNormalization", [x], [(np.float32, (2, 3, H, W))])
    case.node("LpNormalization", [x], [(np.float32, (2, 3, H, W))], {"axis": 3, "p": 2})
    y = case.input("y", np.float32, (1, 3, H, 20))
    case.node("InstanceNormalization", [y, c[0], c[1]], [(np.float32, (1, 3, H, 20))])
    run = case.compile()
    for h, w in ((1, 1), (33, 40), (5, 13), (16, 7), (1, 31), (30, 2)):
        run.check({"H": h, "W": w}, {"x": _rng(h).standard_normal((2, 3, h, w)).astype(np.float32),
                                     "y": _rng(w).standard_normal((1, 3, h, 20)).astype(np.float32)}, rtol=1e-4, atol=1e-4)


# -- on aarch64 and armv7 (4-lane NEON; 32-bit indices on armv7), under qemu ----------------------------------
def _mixed_case():
    """One graph over W with most of the kernels above: each output checked at every size."""
    case = _case()
    x = case.input("x", np.float32, (3, W))
    y = case.input("y", np.float32, (2, W, 6))
    ids = case.input("ids", np.int64, (W,))
    case.node("Softmax", [x], [(np.float32, (3, W))])
    case.node("LogSoftmax", [y], [(np.float32, (2, W, 6))], {"axis": 1})
    case.node("LayerNormalization", [x, case.const("s", np.array([0.5], np.float32))], [(np.float32, (3, W))])
    case.node("ReduceMean", [y, case.const("a1", np.array([1], np.int64))], [(np.float32, (2, 1, 6))])
    case.node("ReduceMax", [x, case.const("a2", np.array([1], np.int64))], [(np.float32, (3, 1))])
    case.node("ArgMax", [x], [(np.int64, (1, W))], {"axis": 0})
    case.node("Transpose", [y], [(np.float32, (6, 2, W))], {"perm": [2, 0, 1]})
    case.node("Concat", [x, x], [(np.float32, (3, W * 2))], {"axis": 1})
    case.node("Slice", [x, *(case.const(f"sl{j}", np.array([v], np.int64)) for j, v in enumerate((1, 1 << 40, 1)))], [(np.float32, (3, W - 1))])
    case.node("Gather", [case.const("table", _rng(4).standard_normal((10, 5)).astype(np.float32)), ids], [(np.float32, (W, 5))])
    case.node("Reshape", [y, case.const("shape", np.array([-1], np.int64))], [(np.float32, (W * 12,))])
    case.node("Pad", [x, case.const("pads", np.array([0, 2, 1, 1], np.int64))], [(np.float32, (4, W + 3))])
    case.node("CumSum", [x, case.const("axis", np.array(1, np.int64))], [(np.float32, (3, W))], {"reverse": 1})
    return case


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_row_and_movement_kernels_under_qemu(board, tmp_path):
    from dynamic_qemu import BoardRun

    run = BoardRun(_mixed_case(), board, tmp_path)

    def feeds(n):
        r = _rng(n)
        return {"x": r.standard_normal((3, n)).astype(np.float32), "y": r.standard_normal((2, n, 6)).astype(np.float32),
                "ids": r.integers(-10, 10, n).astype(np.int64)}
    _check_sizes(run, feeds, rtol=1e-4, atol=1e-5)


def test_transpose_made_a_view_by_layouts():
    """fluid rewrites a Transpose whose layouts make it a byte copy to Identity{_transpose_perm}: inside the graph it
    shares storage at every size (a permutation moves no element, unlike a reshape); at the boundary it copies
    through the permutation."""
    case = _case()
    x = case.input("x", np.float32, (1, W, 2, 4))
    a = case.node("Neg", [x], [(np.float32, (1, W, 2, 4))], output=False)[0]

    def view(src, name_dims, output):
        out = case.node("Identity", [src], [(np.float32, name_dims)], {"_transpose_perm": [0, 2, 1, 3]}, output=output)[0]
        case.onnx_nodes[-1] = helper.make_node("Transpose", [src], [out], perm=[0, 2, 1, 3])
        return out
    v = view(a, (1, 2, W, 4), False)
    case.node("Neg", [v], [(np.float32, (1, 2, W, 4))])
    edge = view(x, (1, 2, W, 4), False)
    case.node("Neg", [edge], [(np.float32, (1, 2, W, 4))])
    assert v in _aliases(case) and edge not in _aliases(case)
    run = case.compile(layouts={v: (0, 2, 1, 3), edge: (0, 2, 1, 3)})
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((1, n, 2, 4)).astype(np.float32)})


# -- TopK -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_over_varying_axis_and_rows(largest):
    """K = 3 over a varying axis (the sorted stack buffer and its vector scan chosen at the capacity, the scan and
    its tail to the run-time length) and over a static axis of a varying row count."""
    case = _case(3, 64)
    x = case.input("x", np.float32, (2, W))
    kk = case.const("k", np.array([3], np.int64))
    case.node("TopK", [x, kk], [(np.float32, (2, 3)), (np.int64, (2, 3))], {"largest": largest})
    y = case.input("y", np.float32, (W, 40))
    case.node("TopK", [y, kk], [(np.float32, (W, 3)), (np.int64, (W, 3))], {"largest": largest})
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((2, n)).astype(np.float32),
                                 "y": _rng(n + 1).standard_normal((n, 40)).astype(np.float32)}, (3, 4, 8, 13, 31, 64))


def test_topk_large_k_over_varying_axis():
    case = DynamicCase({"W": SymRange("W", 300, 333, 333)})
    x = case.input("x", np.float32, (2, W))
    case.node("TopK", [x, case.const("k", np.array([300], np.int64))], [(np.float32, (2, 300)), (np.int64, (2, 300))])
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).standard_normal((2, n)).astype(np.float32)}, (300, 301, 317, 333))


# -- Resize ---------------------------------------------------------------------------------------------
RESIZES = [("nearest", "asymmetric", 0), ("nearest", "half_pixel", 0), ("linear", "half_pixel", 0),
           ("cubic", "pytorch_half_pixel", 0), ("linear", "half_pixel", 1)]


@pytest.mark.parametrize("mode,coord,antialias", RESIZES)
def test_resize_over_varying_height_and_width(mode, coord, antialias):
    """Tap tables built at the capacity, tap indices clamped to the run-time end: up by 2 x 1.5 and down by 0.5
    (pytorch_half_pixel needs outputs above 1 over the whole range: minimum 4)."""
    H = Sym("H")
    case = DynamicCase({"H": SymRange("H", 4, 24, 16), "W": SymRange("W", 4, 20, 16)})
    x = case.input("x", np.float32, (1, 2, H, W))
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "antialias": antialias}
    up = case.const("up", np.array([1, 1, 2, 1.5], np.float32))
    case.node("Resize", [x, "", up], [(np.float32, (1, 2, H * 2, (W * 3) // 2))], attrs)
    down = case.const("down", np.array([1, 1, 0.5, 0.5], np.float32))
    case.node("Resize", [x, "", down], [(np.float32, (1, 2, H // 2, W // 2))], attrs)
    run = case.compile()
    for h, w in ((4, 4), (24, 20), (5, 13), (16, 7), (9, 19), (11, 4)):
        run.check({"H": h, "W": w}, {"x": _rng(h * w).standard_normal((1, 2, h, w)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_resize_align_corners_over_a_varying_dim_is_refused():
    from fluidml_xc.errors import InputError

    case = _case(2, 64)
    x = case.input("x", np.float32, (1, 1, 4, W))
    sc = case.const("sc", np.array([1, 1, 2, 2], np.float32))
    case.node("Resize", [x, "", sc], [(np.float32, (1, 1, 8, W * 2))], {"mode": "linear", "coordinate_transformation_mode": "align_corners"})
    with pytest.raises(InputError, match="coordinate_transformation_mode 'align_corners' along dim 3, which varies"):
        case.compile()


# -- Hardmax, Trilu, OneHot, DepthToSpace / SpaceToDepth, LRN ------------------------------------------------
def test_hardmax_trilu_one_hot_over_varying_dims():
    case = _case()
    x = case.input("x", np.float32, (3, W))
    case.node("Hardmax", [x], [(np.float32, (3, W))])
    case.node("Trilu", [x, case.const("diag", np.array(1, np.int64))], [(np.float32, (3, W))], {"upper": 0})
    ids = case.input("ids", np.int64, (W,))
    values = case.const("values", np.array([0.0, 2.0], np.float32))
    case.node("OneHot", [ids, case.const("depth", np.array(6, np.int64)), values], [(np.float32, (W, 6))])
    run = case.compile()
    _check_sizes(run, lambda n: {"x": _rng(n).integers(0, 4, (3, n)).astype(np.float32),
                                 "ids": _rng(n + 1).integers(-6, 6, n).astype(np.int64)})


def _lrn(x, size, alpha, beta, bias):
    """The ONNX spec's LRN (onnx.reference's differs from it, and from ONNX Runtime, by up to 1e-3 here)."""
    sq, C = np.zeros_like(x), x.shape[1]
    for c in range(C):
        lo, hi = max(0, c - (size - 1) // 2), min(C - 1, c + -(-(size - 1) // 2))
        sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_and_lrn_over_varying_height_and_width(mode):
    H = Sym("H")
    case = DynamicCase({"H": SymRange("H", 1, 12, 8), "W": SymRange("W", 1, 10, 8)})
    x = case.input("x", np.float32, (1, 8, H, W))
    case.node("DepthToSpace", [x], [(np.float32, (1, 2, H * 2, W * 2))], {"blocksize": 2, "mode": mode})
    y0 = case.input("y", np.float32, (1, 2, H, W))  # graph inputs' varying dims are symbols
    (y,) = case.node("Tile", [y0, case.const("reps", np.array([1, 1, 2, 2], np.int64))], [(np.float32, (1, 2, H * 2, W * 2))])
    case.node("SpaceToDepth", [y], [(np.float32, (1, 8, H, W))], {"blocksize": 2})
    run = case.compile()
    lrn = DynamicCase(dict(case.ranges))
    lrn.node("LRN", [lrn.input("x", np.float32, (1, 8, H, W))], [(np.float32, (1, 8, H, W))],
             {"size": 3, "alpha": 1e-3, "beta": 0.75, "bias": 1.0})
    lrn_run = lrn.compile()
    for h, w in ((1, 1), (12, 10), (5, 7), (8, 3), (11, 10)):
        r = _rng(h * 100 + w)
        xs = r.standard_normal((1, 8, h, w)).astype(np.float32)
        run.check({"H": h, "W": w}, {"x": xs, "y": r.standard_normal((1, 2, h, w)).astype(np.float32)})
        np.testing.assert_allclose(lrn_run({"H": h, "W": w}, {"x": xs})[0], _lrn(xs.astype(np.float64), 3, 1e-3, 0.75, 1.0),
                                   rtol=1e-5, atol=1e-6)


def test_gather_nd_and_scatters_over_varying_dims():
    """Index tuples wrap by the data's run-time extents; the scatter's copy of the data runs to them."""
    case = _case(4, 64)
    data = case.input("data", np.float32, (W, 4))
    ids = case.input("ids", np.int64, (W, 1))
    case.node("GatherND", [data, ids], [(np.float32, (W, 4))])
    rows = case.input("rows", np.int64, (3, 1))
    case.node("GatherND", [data, rows], [(np.float32, (3, 4))])
    upd = case.input("upd", np.float32, (3, 4))
    case.node("ScatterND", [data, rows, upd], [(np.float32, (W, 4))])
    cols = case.input("cols", np.int64, (4, 2))
    case.node("ScatterElements", [case.node("Transpose", [data], [(np.float32, (4, W))], {"perm": [1, 0]}, output=False)[0],
                                  cols, case.input("u2", np.float32, (4, 2))], [(np.float32, (4, W))], {"axis": 1, "reduction": "add"})
    run = case.compile()

    def feeds(n):
        r = _rng(n)
        return {"data": r.standard_normal((n, 4)).astype(np.float32), "ids": r.integers(-n, n, (n, 1)).astype(np.int64),
                "rows": (r.permutation(n)[:3] - n * (r.random(3) < 0.5)).reshape(3, 1).astype(np.int64),
                "upd": r.standard_normal((3, 4)).astype(np.float32), "cols": r.integers(-n, n, (4, 2)).astype(np.int64),
                "u2": r.standard_normal((4, 2)).astype(np.float32)}
    _check_sizes(run, feeds, (4, 5, 8, 13, 31, 64))
