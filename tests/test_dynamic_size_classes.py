"""Size classes (issue #26, kernels/size_classes.py): a node function over a varying dim dispatches at run time to
bodies lowered per sub-range, an exact size as static code. Each class boundary is run on both sides (threshold - 1,
threshold, threshold + 1) against onnx.reference, on this host's JIT (serial and with parallel tiles) and under
qemu-aarch64."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dynamic_harness import DynamicCase
from fluidml_xc.kernels.size_classes import SIZE_CLASSES, SizeClass, SizeClassRule
from fluidml_xc.symbolic import Sym, SymRange, floordiv

W = Sym("W")
EXACT = SIZE_CLASSES["softmax"].exact
TOP = max(EXACT)
"""The last exact Softmax row length: sizes above it run the run-time body."""
EDGES = tuple(sorted({1, 40, *(e + d for e in EXACT for d in (-1, 0, 1) if 1 <= e + d <= 40)}))
"""W over 1..40: the ends, and both sides of every class boundary (an exact length and the run-time body's)."""


def _softmax_case(op: str, rows, lo: int = 1, hi: int = 40) -> DynamicCase:
    case = DynamicCase({"W": SymRange("W", lo, hi, hi)})
    x = case.input("x", np.float32, (rows, W))
    case.node(op, [x], [(np.float32, (rows, W))], {"axis": -1})
    return case


def _feeds(rows: int):
    return lambda n: {"x": np.random.default_rng(n).standard_normal((rows, n)).astype(np.float32) * 4}


def test_rule_cuts_the_range_into_exact_sizes_and_sub_ranges():
    rule = SizeClassRule(exact=(4, 5, 12), splits=(10, 20))
    assert rule.classes(SymRange("W", 1, 30, 30), W) == [
        SizeClass("W", 4, 4, ((4, 4),)), SizeClass("W", 5, 5, ((5, 5),)), SizeClass("W", 1, 9, ((1, 3), (6, 9))),
        SizeClass("W", 12, 12, ((12, 12),)), SizeClass("W", 10, 19, ((10, 11), (13, 19))), SizeClass("W", 20, 30, ((20, 30),))]
    # the rule keys on the dim's extent: W // 2 is 4 at W = 8, 9
    assert rule.classes(SymRange("W", 7, 10, 10), floordiv(W, 2)) == [
        SizeClass("W", 7, 7, ((7, 7),)), SizeClass("W", 8, 9, ((8, 9),)), SizeClass("W", 10, 10, ((10, 10),))]
    assert rule.classes(SymRange("W", 30, 40, 40), W) == [SizeClass("W", 30, 40, ((30, 40),))]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("parallel", [False, True])
def test_softmax_class_boundaries(op, parallel):
    run = _softmax_case(op, 3).compile(parallel=parallel)
    assert len(re.findall(r"^class\.\d+:", run.ir_text, re.M)) == len(EXACT) + 1  # the exact lengths, one run-time body
    for n in EDGES:
        run.check({"W": n}, _feeds(3)(n))


def test_softmax_classes_beside_a_parallel_region():
    """The run-time body (the widest sizes) splits into parallel tiles; the exact classes run whole on tile 0."""
    run = _softmax_case("Softmax", 512, 1, 256).compile(parallel=True)
    assert "fxc_parallel_for" in run.ir_text and re.search(r"^class\.\d+:", run.ir_text, re.M)
    for n in (TOP - 1, TOP, TOP + 1, 256):
        run.check({"W": n}, _feeds(512)(n))


def test_a_range_above_the_exact_sizes_has_one_body():
    run = _softmax_case("Softmax", 3, TOP + 1, 40).compile(parallel=False)
    assert not re.search(r"^class\.", run.ir_text, re.M)
    run.check({"W": TOP + 1}, _feeds(3)(TOP + 1))


def test_softmax_class_boundaries_under_qemu_aarch64(tmp_path):
    from dynamic_qemu import BoardRun

    run = BoardRun(_softmax_case("Softmax", 3), "qemu-aarch64", tmp_path)
    for n in EDGES:
        run.check({"W": n}, _feeds(3)(n), rtol=1e-5, atol=1e-6)


def test_run_time_rows_end_in_one_masked_vector():
    """Above the exact lengths a row's last n % lanes elements are one masked vector, not a scalar exp each."""
    run = _softmax_case("LogSoftmax", 3, TOP + 1, 40).compile(parallel=False)
    assert "llvm.masked.load" in run.ir_text and "llvm.masked.store" in run.ir_text
    for n in (TOP + 1, 31, 33, 40):
        run.check({"W": n}, _feeds(3)(n))
