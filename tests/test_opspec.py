"""Op traits on OpSpec (opspec.py): the combinations the stages rely on hold for every registered op."""
from __future__ import annotations

from fluidml_xc.ir import is_onnx_domain
from fluidml_xc.opspec import FUSED_OP, OUR_DOMAIN, all_specs, lookup

SPECS = [spec for versions in all_specs().values() for spec in versions]


def _names(predicate) -> list[str]:
    return sorted(f"{s.domain}.{s.op_type}" if s.domain else s.op_type for s in SPECS if predicate(s))


def test_fusable_steps_are_elementwise_onnx_ops():
    """ops/fused.py evaluates a step with the elementwise family's scalar lowering, on ONNX semantics."""
    assert not _names(lambda s: s.fusable and not (s.elementwise and is_onnx_domain(s.domain)))


def test_loop_ordered_kernels_anchor_layouts():
    """fluid chooses a loop order under the layouts it chose, so such a kernel must accept any layout."""
    assert not _names(lambda s: s.loop_orders and not (s.layout_anchor and s.layout_safe))
    assert {s.op_type for s in SPECS if s.loop_orders} >= {"MatMul", "Gemm", "Conv"}


def test_views_are_not_layout_safe():
    """A view aliases its input's bytes: its input and output layouts cannot differ."""
    assert not _names(lambda s: s.view and s.layout_safe)


def test_the_data_dependent_ops_give_output_bounds():
    assert _names(lambda s: s.output_bound is not None) == ["Compress", "NonMaxSuppression", "NonZero", "Unique"]


def test_our_ops_are_heavy_unless_they_say_otherwise():
    fused = lookup(FUSED_OP, 1, OUR_DOMAIN)
    assert fused is not None and not fused.heavy and fused.elementwise and fused.lowp_native
    assert lookup("Col2Im", 1, OUR_DOMAIN).heavy and lookup("Relu", 14).heavy is False
    assert lookup("Relu", 14, "ai.onnx") is lookup("Relu", 14, "")
