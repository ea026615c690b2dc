"""Op traits on OpSpec (opspec.py): the combinations the stages rely on hold for every registered op."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx.defs
import pytest

from fluidml_xc.errors import InputError
from fluidml_xc.fluid.costs import KIND_COSTS, AnalyticModel
from fluidml_xc.frontend.importer import import_model
from fluidml_xc.frontend.subgraphs import indexes_memory
from fluidml_xc.frontend.validate import SHAPE_CHECKS
from fluidml_xc.ir import is_onnx_domain
from fluidml_xc.kernels.kernel import element_work
from fluidml_xc.opspec import FUSED_OP, OUR_DOMAIN, all_specs, lookup, traits

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
    assert _names(lambda s: s.output_bound is not None) == [
        "BlackmanWindow", "Compress", "HammingWindow", "HannWindow", "ImageDecoder", "MelWeightMatrix", "NonMaxSuppression",
        "NonZero", "Range", "StringNormalizer", "StringSplit", "TopK", "Unique", "com.microsoft.Tokenizer",
        "fluidml.TokenIds"]


def test_our_ops_are_heavy_unless_they_say_otherwise():
    fused = lookup(FUSED_OP, 1, OUR_DOMAIN)
    assert fused is not None and not fused.heavy and fused.elementwise and fused.lowp_native
    assert lookup("Col2Im", 1, OUR_DOMAIN).heavy and lookup("Relu", 14).heavy is False
    assert lookup("Relu", 14, "ai.onnx") is lookup("Relu", 14, "")


# -- index_inputs: a memory-safety fact, checked against ONNX's own schemas --------------------------------------
INDEX_TYPES = {"tensor(int32)", "tensor(int64)"}

SHAPE_OPERAND = "its values decide the output's shape, so they are build-time constants (the frontend infers static shapes)"
CHECKED = "the kernel clamps or bounds-checks the value before addressing memory with it"
ARITHMETIC = "its values enter arithmetic or comparisons only, never an address"
NOT_INDEX_INPUTS: dict[tuple[str, str], str] = {
    **{(op, name): SHAPE_OPERAND for op, name in [
        ("Col2Im", "image_shape"), ("Col2Im", "block_shape"), ("Expand", "shape"), ("Reshape", "shape"),
        ("Tile", "repeats"), ("Resize", "sizes"), ("Slice", "starts"), ("Slice", "ends"), ("Slice", "axes"),
        ("Slice", "steps"), ("Split", "split"), ("Squeeze", "axes"), ("Unsqueeze", "axes"), ("Pad", "pads"),
        ("Pad", "axes"), ("TopK", "K"), ("DFT", "dft_length"), ("DFT", "axis"), ("STFT", "frame_step"),
        ("STFT", "frame_length"), ("MaxUnpool", "output_shape"), ("ConstantOfShape", "input"),
        *((f"Reduce{r}", "axes") for r in ("L1", "L2", "LogSum", "LogSumExp", "Max", "Mean", "Min", "Prod", "Sum",
                                           "SumSquare"))]},
    ("MaxUnpool", "I"): CHECKED + " (unsigned compare with the unpooled size)",
    ("Loop", "M"): CHECKED + " (clamped to [0, the most steps the scan outputs are sized for])",
    ("RoiAlign", "batch_indices"): CHECKED + " (clamped to [0, N - 1])",
    ("ReverseSequence", "sequence_lens"): CHECKED + " (at most the time axis' length)",
    **{(op, "sequence_lens"): CHECKED + " (at most seq_length; a step past it is inactive)" for op in ("RNN", "GRU", "LSTM")},
    **{(op, "axis"): CHECKED + " (a run-time axis selects one of the per-axis loops)" for op in ("CumSum", "CumProd")},
    ("Trilu", "k"): ARITHMETIC + " (compared with each element's diagonal offset)",
    ("QLinearConv", "B"): ARITHMETIC + " (the int32 bias added to the accumulators)",
    ("NonMaxSuppression", "max_output_boxes_per_class"): ARITHMETIC + " (a count compared with the boxes kept)",
    **{(op, "T"): ARITHMETIC + " (the step count of the update)" for op in ("Adagrad", "Adam", "Momentum")},
    **{(op, name): CHECKED + " (a size over the --max-dim bound fails the run before anything is written)"
       for op, name in [("HannWindow", "size"), ("HammingWindow", "size"), ("BlackmanWindow", "size"),
                        ("MelWeightMatrix", "num_mel_bins"), ("MelWeightMatrix", "dft_length")]},
    ("MelWeightMatrix", "sample_rate"): ARITHMETIC + " (the filter edges' frequencies)",
}
"""Integer-only inputs of registered ops that do not index memory at run time, each with its reason."""
DECLARED_BEYOND_SCHEMA = {("OneHot", 0): "indices may be any numeric type in the schema; declared since before #25"}
"""index_inputs that the schema rule does not find (reason given)."""


SCHEMAS = onnx.defs.get_all_schemas_with_history()


def _integer_inputs(op_type: str, domain: str) -> set[tuple[int, str]]:
    """(position, name) of the inputs whose type constraint is int32/int64 only, in any version of the op's schema."""
    found = set()
    for schema in SCHEMAS:
        if schema.name != op_type or schema.domain != domain:
            continue
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        for i, inp in enumerate(schema.inputs):
            types = allowed.get(inp.type_str, {inp.type_str})
            if types and types <= INDEX_TYPES:
                found.add((i, inp.name))
    return found


def _schema_integer_inputs() -> dict[tuple[str, str], set[tuple[int, str]]]:
    return {(domain, op): ins for (domain, op) in all_specs() if (ins := _integer_inputs(op, domain))}


def test_every_integer_index_input_is_declared():
    """An op whose schema gives it an int32/int64-only input that indexes memory declares it in index_inputs
    (frontend/subgraphs.py will not compute an If's untaken branch that holds it with run-time values)."""
    missing, stale = [], set(NOT_INDEX_INPUTS)
    for (domain, op), inputs in _schema_integer_inputs().items():
        declared = set()
        for spec in all_specs()[(domain, op)]:
            declared |= set(spec.index_inputs)
        for i, name in inputs:
            stale.discard((op, name))
            if i not in declared and (op, name) not in NOT_INDEX_INPUTS:
                missing.append(f"{op} input {i} ({name})")
    assert not missing, f"integer index inputs without index_inputs (declare them or give a reason): {missing}"
    assert not stale, f"NOT_INDEX_INPUTS entries no registered op has: {sorted(stale)}"


def test_declared_index_inputs_are_schema_integer_inputs():
    found = _schema_integer_inputs()
    extra = [(spec.op_type, i) for spec in SPECS for i in spec.index_inputs
             if i not in {pos for pos, _ in found.get((spec.domain, spec.op_type), set())}]
    assert sorted(extra) == sorted(DECLARED_BEYOND_SCHEMA)


def test_version_independent_facts_agree_across_versions():
    """traits(op) answers work and index_inputs from the newest version: every version must agree."""
    for versions in all_specs().values():
        assert len({(s.work, s.index_inputs, s.axis_attr) for s in versions}) == 1, versions[0].op_type


# -- the answers the five op-keyed tables gave before #25 moved them onto OpSpec ----------------------------------
OLD_ELEMENT_WORK = {"Exp": 10, "Log": 10, "Erf": 10, "Tanh": 10, "Sigmoid": 10, "Softplus": 12, "Softsign": 4, "Sin": 10,
                    "Cos": 10, "Tan": 12, "Asin": 12, "Acos": 12, "Atan": 12, "Sinh": 12, "Cosh": 12, "Asinh": 14,
                    "Acosh": 14, "Atanh": 14, "Pow": 20, "Gelu": 14, "HardSwish": 3, "Div": 4, "Sqrt": 4,
                    "Reciprocal": 4, "Mod": 6}
"""kernels/kernel.py ELEMENT_WORK (its "Mish": 24 was never asked: Mish is not registered, so it is never fused)."""
OLD_COST_KINDS = {"Conv": "conv", "MaxPool": "pool", "AveragePool": "pool", "GlobalAveragePool": "global_pool",
                  "GlobalMaxPool": "global_pool", "Concat": "concat", "BatchNormalization": "channel_affine",
                  "Transpose": "transpose", "MatMul": "matmul", "Gemm": "matmul"}
"""fluid/costs.py _KINDS (op -> AnalyticModel method)."""
OLD_AXIS_OPS = {"Softmax", "LogSoftmax", "Hardmax", "Concat", "Gather", "GatherElements", "ScatterElements", "Split",
                "ArgMax", "ArgMin", "TopK", "Compress", "LayerNormalization", "Flatten", "LpNormalization"}
"""frontend/validate.py AXIS_OPS (its CumSum had no `axis` attribute to check: the check never applied)."""
OLD_REDUCE_OPS = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                  "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
"""frontend/validate.py SHAPE_CHECKS' Reduce ops (their `axes` attribute checked)."""
OLD_INDEX_INPUTS = {"Gather": (1,), "GatherElements": (1,), "GatherND": (1,), "Scatter": (1,), "ScatterElements": (1,),
                    "ScatterND": (1,), "TensorScatter": (2,), "ArrayFeatureExtractor": (1,), "OneHot": (0,)}
"""frontend/subgraphs.py INDEX_INPUTS; INDEXING_OPS was these and Loop, Scan, If."""
OLD_ACTIVATIONS = {"Relu", "Clip", "LeakyRelu"}
"""ACTIVATIONS of the former conv epilogue pass (its fusion is in passes/epilogues.py)."""
OLD_SKIP_INPUT = {"CastLike": (1,)}
"""passes/elementwise_fusion.py _SKIP_INPUT."""
REGISTERED = sorted({op for (_, op) in all_specs()})


def test_element_work_as_before():
    assert {op: element_work([op]) for op in REGISTERED} == {op: OLD_ELEMENT_WORK.get(op, 1) for op in REGISTERED}


def test_cost_kinds_as_before():
    kinds = {op: traits(op).cost_kind for op in REGISTERED if traits(op).cost_kind}
    assert kinds == OLD_COST_KINDS
    assert all(KIND_COSTS[kind] is getattr(AnalyticModel, kind) for kind in set(kinds.values()))


def test_axis_checks_as_before():
    """The validator refuses an out-of-range axis for the same ops (Flatten's axis may equal the rank)."""
    checked = {op for op in REGISTERED if op in SHAPE_CHECKS and traits(op).axis_attr}
    assert checked == OLD_AXIS_OPS | OLD_REDUCE_OPS
    for op in sorted(checked):
        attrs = {"axes": [3]} if op in OLD_REDUCE_OPS else {"axis": 3}
        with pytest.raises(InputError, match="outside"):
            SHAPE_CHECKS[op](op, "n", attrs, [(4, 5)])
        SHAPE_CHECKS[op](op, "n", {"axes": [-2]} if op in OLD_REDUCE_OPS else {"axis": -2}, [(4, 5)])
    SHAPE_CHECKS["Flatten"]("Flatten", "n", {"axis": 2}, [(4, 5)])
    with pytest.raises(InputError, match="outside"):
        SHAPE_CHECKS["Softmax"]("Softmax", "n", {"axis": 2}, [(4, 5)])


def test_index_facts_as_before():
    for op, inputs in OLD_INDEX_INPUTS.items():
        domain = "ai.onnx.ml" if op == "ArrayFeatureExtractor" else ""
        assert traits(op, domain=domain).index_inputs == inputs
    assert {op for op in REGISTERED + ["Loop", "Scan", "If"] if indexes_memory({op})} == {*OLD_INDEX_INPUTS, "Loop", "Scan", "If"}


def test_epilogue_activations_as_before():
    assert {op for op in REGISTERED if traits(op, 21).epilogue_activation} == OLD_ACTIVATIONS


def test_type_only_inputs_as_before():
    assert {op: traits(op).type_only_inputs for op in REGISTERED if traits(op).type_only_inputs} == OLD_SKIP_INPUT


def _castlike_of_constant():
    c = onnx.numpy_helper.from_array(np.array([1, 2], np.int64), "c")
    return onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("CastLike", ["c", "x"], ["y"]), onnx.helper.make_node("Add", ["y", "x"], ["z"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2])], [c]),
        opset_imports=[onnx.helper.make_opsetid("", 18)])


def test_the_importer_folds_by_the_type_only_inputs_trait():
    """CastLike of a constant folds because OpSpec declares its input 1 type-only; without the trait it stays."""
    assert [n.op_type for n in import_model(_castlike_of_constant()).nodes] == ["Add"]
    specs = all_specs()[("", "CastLike")]
    kept = list(specs)
    specs[:] = [dataclasses.replace(spec, type_only_inputs=()) for spec in kept]
    try:
        assert [n.op_type for n in import_model(_castlike_of_constant()).nodes] == ["CastLike", "Add"]
    finally:
        specs[:] = kept
