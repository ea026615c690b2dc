"""TopK, Einsum, CumProd and Shrink against onnx.reference, built and run natively on x86_64
(a few nodes per model, so only a handful of builds)."""
from __future__ import annotations

import platform

import numpy as np
import pytest
from onnx import helper

from modelrun import check_model, graph_model

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="native builds for x86_64")

rng = np.random.default_rng(7)


node = helper.make_node


def model(nodes, feeds, outputs, consts=None, opset=18):
    return graph_model(nodes, feeds, outputs, consts, opset, ir_version=8, infer=True)


def check(tmp_path, m, feeds, rtol=1e-5, atol=1e-5):
    check_model(tmp_path, m, feeds, rtol=rtol, atol=atol)


def k_(v):
    return np.array([v], dtype=np.int64)


CASES = {
    # ties (small integers as floats) must come out by lower index; a transposed input is read by strides
    "topk": lambda: (
        [node("TopK", ["x", "k3"], ["v1", "i1"], axis=1),
         node("TopK", ["n", "k2"], ["v2", "i2"], axis=-1, largest=0),
         node("Transpose", ["x"], ["xt"], perm=[2, 0, 1]),
         node("TopK", ["xt", "k4"], ["v3", "i3"], axis=2),
         node("TopK", ["u", "k5"], ["v4", "i4"], axis=0, largest=1, sorted=1)],
        {"x": rng.integers(-3, 3, (3, 7, 4)).astype(np.float32), "n": rng.integers(-4, 4, (5, 6)).astype(np.int32),
         "u": rng.integers(0, 10, (5,)).astype(np.uint64)},
        ["v1", "i1", "v2", "i2", "v3", "i3", "v4", "i4"], {"k3": k_(3), "k2": k_(2), "k4": k_(4), "k5": k_(5)}),
    "topk_attr_opset9": lambda: (
        [node("TopK", ["x"], ["v", "i"], k=2, axis=0)],
        {"x": rng.standard_normal((4, 3)).astype(np.float32)}, ["v", "i"], None, 9),
    "einsum": lambda: (
        [node("Einsum", ["a", "b"], ["bmm"], equation="bij,bjk->bik"),
         node("Einsum", ["sq"], ["diag"], equation="ii->i"),
         node("Einsum", ["sq"], ["tot"], equation="ij->"),
         node("Einsum", ["sq", "c"], ["imp"], equation="ij,jk"),
         node("Einsum", ["bd"], ["bdiag"], equation="...ii ->...i"),
         node("Einsum", ["v", "v"], ["dot"], equation="i,i"),
         node("Einsum", ["a"], ["tr"], equation="bij->jib"),
         node("Einsum", ["a", "v3"], ["bc"], equation="bij,j->bi")],
        {"a": rng.standard_normal((2, 3, 4)).astype(np.float32), "b": rng.standard_normal((2, 4, 5)).astype(np.float32),
         "sq": rng.standard_normal((4, 4)).astype(np.float32), "c": rng.standard_normal((4, 3)).astype(np.float32),
         "bd": rng.standard_normal((2, 3, 5, 5)).astype(np.float32), "v": rng.standard_normal((6,)).astype(np.float32),
         "v3": rng.standard_normal((4,)).astype(np.float32)},
        ["bmm", "diag", "tot", "imp", "bdiag", "dot", "tr", "bc"], None),
    # CumProd needs opset 26; its axis is a constant, then a run-time input ("axis")
    "cumprod_shrink": lambda: (
        [node("CumProd", ["x", "ax0"], ["c1"]),
         node("CumProd", ["x", "axm1"], ["c2"], exclusive=1, reverse=1),
         node("CumProd", ["i", "ax1"], ["c3"], reverse=1),
         node("CumProd", ["x", "axis"], ["c4"], exclusive=1),
         node("Shrink", ["s"], ["h1"]),
         node("Shrink", ["s"], ["h2"], bias=1.5, lambd=1.5),
         node("Shrink", ["si"], ["h3"], bias=1.0, lambd=2.0)],
        {"x": rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32), "i": rng.integers(-3, 4, (4, 3)).astype(np.int32),
         "axis": np.array(-2, dtype=np.int64), "s": rng.uniform(-3, 3, (4, 6)).astype(np.float32),
         "si": np.arange(-5, 6, dtype=np.int32)},
        ["c1", "c2", "c3", "c4", "h1", "h2", "h3"],
        {"ax0": np.array(0, dtype=np.int64), "axm1": np.array(-1, dtype=np.int64), "ax1": np.array(1, dtype=np.int32)}, 26),
}


@pytest.mark.parametrize("case", list(CASES))
def test_extra_ops(case, tmp_path):
    nodes, feeds, outputs, consts, *opset = CASES[case]()
    check(tmp_path, model(nodes, feeds, outputs, consts, *opset), feeds)
