"""emit/ir_text.module_text prints the same bytes as llvmlite's str(module) for every unit and entry module of
models whose kernels cover the instruction classes it prints (Conv forms with padding, depthwise, pointwise and
channels-first stores, pooling, Resize, Gemm, Softmax and LayerNorm's fast-math flags, Gather, Where's selects,
a BERT-style encoder over a dynamic sequence), on x86_64's three code variants, aarch64, armv7 (llvm.fma calls) and
riscv64 with vectors, at 1 and 2 threads (parallel tiles, the entry's serial fxc_parallel_for)."""
from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir
from onnx import helper

from encoder_models import bert_like
from fluidml_xc.emit import units
from fluidml_xc.emit.ir_text import module_text
from fluidml_xc.emit.unit_build import UnitOptions, unit_texts
from fluidml_xc.pipeline import LowerOptions, import_graph, plan
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_specs
from modelrun import float_model, rand


def _cnn():
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
             n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "wd", "bd"], ["c1"], pads=[1, 1, 1, 1], group=16),
             n("Conv", ["c1", "w2"], ["c2"]),
             n("Add", ["c2", "r0"], ["a"]),
             n("MaxPool", ["a"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             n("Resize", ["p", "", "scales"], ["u"], mode="nearest"),
             n("Conv", ["u", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             n("HardSwish", ["c3"], ["h"]),
             n("GlobalAveragePool", ["h"], ["g"]),
             n("Flatten", ["g"], ["f"]),
             n("Gemm", ["f", "wg", "bg"], ["y0"], transB=1),
             n("Softmax", ["y0"], ["y1"]),
             n("LayerNormalization", ["y1", "ln"], ["y2"]),
             n("Less", ["y2", "zero"], ["m"]),
             n("Where", ["m", "y2", "y1"], ["y"])]
    inits = {"w0": rand(16, 3, 3, 3, seed=1), "b0": rand(16, seed=2), "wd": rand(16, 1, 3, 3, seed=3), "bd": rand(16, seed=4),
             "w2": rand(16, 16, 1, 1, seed=5), "scales": np.array([1, 1, 2, 2], np.float32),
             "w3": rand(24, 16, 3, 3, seed=6), "b3": rand(24, seed=7), "wg": rand(10, 24, seed=8), "bg": rand(10, seed=9),
             "ln": rand(10, seed=10), "zero": np.zeros(1, np.float32)}
    return float_model(nodes, inits, {"x": rand(1, 3, 30, 26)}, ["y"])


MODELS = {"cnn": _cnn, "bert": lambda: bert_like(8)}
BOARDS = ("x86_64", "qemu-aarch64", "qemu-armv7", "qemu-riscv64-rvv")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("model", MODELS)
def test_module_text_is_llvmlites(model, board, threads, monkeypatch):
    seen: list[str] = []

    def both(module: ir.Module) -> str:
        text = module_text(module)
        assert text == str(module)
        seen.append(text)
        return text
    monkeypatch.setattr(units, "module_text", both)
    specs = machine_specs(get_board(board))
    planned = plan(import_graph(MODELS[model](), {}), specs[0], LowerOptions(threads=threads, parallel=threads > 1))
    texts, _ = unit_texts(planned.graph, planned.plan, specs,
                          UnitOptions(planned.decisions.layouts, planned.decisions.loop_orders, threads > 1))
    assert len(texts) == len(specs) and len(seen) > 10
    if model == "cnn":  # every printer ran, and the fallback (an instruction with metadata)
        kinds = " ".join(seen)
        for needle in ("phi ", "select ", "shufflevector ", "getelementptr inbounds ", "fcmp ", "icmp ", "alloca ",
                       "call ", "!llvm.loop"):
            assert needle in kinds, needle


def test_vector_constants_are_shared_by_value_bits():
    """kernels/scalar.py splat_const makes a vector constant once per type and value bits: -0.0 (also as a numpy
    float) is not 0.0, NaN stays NaN, an integer its own constant."""
    import math

    from fluidml_xc.kernels.scalar import splat_const

    vt = ir.VectorType(ir.FloatType(), 4)
    zero, negative = splat_const(vt, 0.0), splat_const(vt, -0.0)
    assert splat_const(vt, 0.0) is zero and splat_const(vt, np.float32(-0.0)) is negative
    assert [math.copysign(1, c.constant) for c in (zero.constant[0], negative.constant[0])] == [1, -1]
    assert math.isnan(splat_const(vt, float("nan")).constant[0].constant)
    assert str(splat_const(ir.VectorType(ir.IntType(32), 2), 3)) == "<2 x i32> <i32 3, i32 3>"
