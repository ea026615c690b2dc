"""What we do not support is named, each with its own one-line error and fix (exit 2, nothing written):
string tensors an op does not take, training-only ops, ops we lack, shapes that depend on run-time values. None of them
sends the user to --input-shape, which cannot help once every input shape is static."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from modelrun import cli, one_line_error, proto_model, run

V = helper.make_tensor_value_info


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _fails(tmp_path, model, *args) -> str:
    onnx.save(model, str(tmp_path / "m.onnx"))
    proc = cli("build", "m.onnx", *args, cwd=tmp_path)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "--input-shape" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    return line


def test_string_input(tmp_path):
    model = proto_model([helper.make_node("Concat", ["text", "text"], ["t"], axis=0), helper.make_node("Relu", ["x"], ["y"])],
                   [V("text", TP.STRING, [2]), V("x", TP.FLOAT, [2])], [V("y", TP.FLOAT, [2]), V("t", TP.STRING, [4])])
    line = _fails(tmp_path, model)
    assert "'text' (Concat node" in line and "Concat does not take" in line and "docs/STRINGS.md" in line


def test_string_output(tmp_path):
    model = proto_model([helper.make_node("Cast", ["x"], ["label"], to=TP.STRING)], [V("x", TP.FLOAT, [2])],
                   [V("label", TP.STRING, [2])])
    line = _fails(tmp_path, model)
    assert "'label' (Cast node" in line and "Cast does not take" in line and "docs/STRINGS.md" in line


def test_string_intermediate_from_a_label_encoder_builds(tmp_path):
    """An int64 -> string LabelEncoder compared with a string constant (docs/STRINGS.md)."""
    model = proto_model([helper.make_node("LabelEncoder", ["x"], ["names"], domain="ai.onnx.ml", keys_int64s=[1, 2],
                                     values_strings=["cat", "dog"], default_string="?"),
                    helper.make_node("Equal", ["names", "dog"], ["y"])],
                   [V("x", TP.INT64, [2])], [V("y", TP.BOOL, [2])], [_const("dog", np.array(["dog"], dtype=object))],
                   opsets=(("", 20), ("ai.onnx.ml", 4)), ir_version=9)
    onnx.save(model, str(tmp_path / "m.onnx"))
    proc = cli("build", "m.onnx", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(run(tmp_path / "out", {"x": np.array([2, 3], np.int64)})["y"], [True, False])


def test_string_constant_folded_at_build_time_is_fine(tmp_path):
    """String constants compared at build time leave no string tensor: it builds."""
    model = proto_model([helper.make_node("Equal", ["words", "ref"], ["same"]),
                    helper.make_node("Cast", ["same"], ["f"], to=TP.FLOAT),
                    helper.make_node("Mul", ["x", "f"], ["y"])],
                   [V("x", TP.FLOAT, [2])], [V("y", TP.FLOAT, [2])],
                   [_const("words", np.array(["b", "a"], dtype=object)), _const("ref", np.array(["b", "b"], dtype=object))],
                   opsets=(("", 20),), ir_version=9)
    onnx.save(model, str(tmp_path / "m.onnx"))
    proc = cli("build", "m.onnx", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(run(tmp_path / "out", {"x": np.array([3, 2], np.float32)})["y"], [3, 0])


def test_gradient_is_a_training_only_op(tmp_path):
    model = proto_model([helper.make_node("Mul", ["x", "x"], ["y"]),
                    helper.make_node("Gradient", ["x"], ["dx"], domain="ai.onnx.preview.training", xs=["x"], y="y", name="grad")],
                   [V("x", TP.FLOAT, [2])], [V("dx", TP.FLOAT, [2])],
                   opsets=(("", 17), ("ai.onnx.preview.training", 1)))
    line = _fails(tmp_path, model)
    assert line.startswith("fluidml-xc: error: training-only ops: ai.onnx.preview.training.Gradient (node 'grad')")
    assert "export the model for inference" in line


def test_ort_training_grad_op_is_a_training_only_op(tmp_path):
    model = proto_model([helper.make_node("SoftmaxCrossEntropyLossGrad", ["dy", "p", "l"], ["dx"], domain="com.microsoft")],
                   [V("dy", TP.FLOAT, []), V("p", TP.FLOAT, [2, 3]), V("l", TP.INT64, [2])], [V("dx", TP.FLOAT, [2, 3])],
                   opsets=(("", 17), ("com.microsoft", 1)))
    assert "training-only ops: com.microsoft.SoftmaxCrossEntropyLossGrad" in _fails(tmp_path, model)


def test_op_we_lack_is_listed(tmp_path):
    model = proto_model([helper.make_node("RandomUniformLike", ["x"], ["r"], name="noise"), helper.make_node("Add", ["x", "r"], ["y"])],
                   [V("x", TP.FLOAT, [2])], [V("y", TP.FLOAT, [2])])
    line = _fails(tmp_path, model)
    assert "unsupported ops: RandomUniformLike (node 'noise')" in line and "SUPPORTED_OPS" in line


def _mode_if(then_op: str, then_domain: str = "") -> onnx.ModelProto:
    """y = FastGelu(If(mode == 1, then: THEN_OP(x), else: Neg(x))) + x, as a model saved from an optimizing ORT
    session has it: the If is resolved by --bind mode=1, FastGelu (com.microsoft) has no schema and no lowering."""
    then = helper.make_graph([helper.make_node(then_op, ["x"], ["t"], name="pick", domain=then_domain)], "then", [],
                             [V("t", TP.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="neg")], "else", [], [V("e", TP.FLOAT, [4])])
    nodes = [helper.make_node("Equal", ["mode", "one"], ["c"], name="eq"),
             helper.make_node("If", ["c"], ["f"], then_branch=then, else_branch=other, name="choose"),
             helper.make_node("FastGelu", ["f"], ["g"], name="gelu", domain="com.microsoft"),
             helper.make_node("Add", ["g", "x"], ["y"], name="add")]
    return proto_model(nodes, [V("x", TP.FLOAT, [4]), V("mode", TP.INT64, [])], [V("y", TP.FLOAT, [4])],
                  [_const("one", np.array(1, np.int64))], opsets=(("", 17), ("com.microsoft", 1), ("com.example", 1)))


def test_unsupported_list_is_the_graph_after_bind(tmp_path):
    """An If that --bind resolves is not in the list (it was, when the list was taken before binding)."""
    line = _fails(tmp_path, _mode_if("Relu"), "--bind", "mode=1")
    assert line == ("fluidml-xc: error: unsupported ops: com.microsoft.FastGelu (node 'gelu'); see docs/SUPPORTED_OPS.md, "
                    "or replace them before export")


def test_unsupported_list_names_an_op_of_the_branch_bind_keeps(tmp_path):
    line = _fails(tmp_path, _mode_if("Fancy", "com.example"), "--bind", "mode=1")
    assert "com.example.Fancy (node 'choose/" in line and "com.microsoft.FastGelu (node 'gelu')" in line
    assert "If" not in line and "Neg" not in line


@pytest.mark.parametrize("op, nodes, inputs", [
    ("Reshape", [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
     [V("x", TP.FLOAT, [2, 6]), V("shape", TP.INT64, [2])]),
    ("Tile", [helper.make_node("Tile", ["x", "reps"], ["y"], name="tile")],
     [V("x", TP.FLOAT, [2, 6]), V("reps", TP.INT64, [2])]),
    ("ConstantOfShape", [helper.make_node("ConstantOfShape", ["dims"], ["y"], name="fill")], [V("dims", TP.INT64, [2])]),
])
def test_shape_from_a_runtime_input_asks_for_bind(tmp_path, op, nodes, inputs):
    model = proto_model(nodes, inputs, [V("y", TP.FLOAT, None)])
    line = _fails(tmp_path, model)
    value = nodes[0].input[-1]
    assert f"the shape of 'y' ({op} node '{nodes[0].name}') depends on the run-time value of '{value}'" in line
    assert f"--bind {value}=VALUE" in line


def test_shape_from_the_data_is_named_a_data_dependent_shape(tmp_path):
    """A Range whose limit comes from ArgMax of the data: the op, the source and the --max-dim that bounds it are named."""
    nodes = [helper.make_node("ArgMax", ["x"], ["k"], keepdims=0, axis=0),
             helper.make_node("Add", ["k", "one"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["r"], name="ramp")]
    model = proto_model(nodes, [V("x", TP.FLOAT, [6])], [V("r", TP.INT64, None)],
                   [_const("one", np.array(1, np.int64)), _const("zero", np.array(0, np.int64))])
    line = _fails(tmp_path, model)
    assert "(Range node 'ramp')" in line and "computed from 'x': a data-dependent shape" in line
    assert "--bind" not in line and line.endswith("or bound it with --max-dim ramp=N (--max-dim '*=N' bounds every such size)")


def test_range_limit_from_a_scalar_input_builds_with_bind(tmp_path):
    nodes = [helper.make_node("Range", ["zero", "n", "one"], ["r"], name="ramp"),
             helper.make_node("Cast", ["r"], ["rf"], to=TP.FLOAT), helper.make_node("Mul", ["rf", "x"], ["y"])]
    model = proto_model(nodes, [V("x", TP.FLOAT, []), V("n", TP.INT64, [])], [V("y", TP.FLOAT, None)],
                   [_const("one", np.array(1, np.int64)), _const("zero", np.array(0, np.int64))])
    line = _fails(tmp_path, model)
    assert "(Range node 'ramp')" in line and "computed from input 'n'" in line and "--bind n=VALUE" in line
    proc = cli("build", "m.onnx", "--bind", "n=5", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(run(tmp_path / "out", {"x": np.array(2, np.float32)})["y"], [0, 2, 4, 6, 8])
