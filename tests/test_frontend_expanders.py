"""The frontend's expansion registry (frontend/expanders.py) and the errors that carry the tensor or node the ONNX
backend binds inputs for (errors.UnresolvedShape, errors.NeedsConstant), checked on imports and JIT runs against
numpy / onnx.reference."""
from __future__ import annotations

import platform

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc.errors import InputError, NeedsConstant, UnresolvedShape
from fluidml_xc.frontend import expanders
from fluidml_xc.frontend.builder import NodeBuilder
from fluidml_xc.frontend.importer import import_model
from fluidml_xc.pipeline import import_graph

on_x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="in-process JIT on x86_64")
F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(25)


def model(nodes, inputs, outputs, opsets=(("", 18),)):
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outs),
                             opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def reshape_model(out: str):
    return model([helper.make_node("Reshape", ["x", "s"], [out], name="r")],
                 [helper.make_tensor_value_info("x", F, [2, 6]), helper.make_tensor_value_info("s", I64, [2])], [out])


def sequence_at_model(node: str):
    return model([helper.make_node("SequenceConstruct", ["a", "b"], ["q"], name="make"),
                  helper.make_node("SequenceAt", ["q", "p"], ["y"], name=node), helper.make_node("Neg", ["y"], ["z"])],
                 [helper.make_tensor_value_info("a", F, [3]), helper.make_tensor_value_info("b", F, [3]),
                  helper.make_tensor_value_info("p", I64, [])], ["z"])


def test_unresolved_shape_names_the_tensor():
    with pytest.raises(UnresolvedShape) as info:
        import_graph(reshape_model("y"))
    assert info.value.tensor == "y" and info.value.exit_code == InputError.exit_code == 2
    assert str(info.value) == ("the shape of 'y' (Reshape node 'r') depends on the run-time value of 's', computed from "
                               "input 's': freeze it at build time with --bind s=VALUE")


def test_needs_constant_names_the_node():
    with pytest.raises(NeedsConstant) as info:
        import_graph(sequence_at_model("at"))
    assert info.value.node == "at" and info.value.exit_code == 2
    assert str(info.value) == ("node 'at' (SequenceAt): the position must be a build-time constant (sequences have a "
                               "static structure)")


def test_if_refusal_keeps_the_branch_tensor():
    """An If on a run-time condition whose branch has a shape from run-time values: the refusal names that tensor."""
    branch = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["t"], name="inner")], "then", [],
                               [helper.make_empty_tensor_value_info("t")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_empty_tensor_value_info("e")])
    m = model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=other)],
              [helper.make_tensor_value_info("x", F, [2, 6]), helper.make_tensor_value_info("s", I64, [2]),
               helper.make_tensor_value_info("c", TensorProto.BOOL, [])], ["y"])
    with pytest.raises(UnresolvedShape) as info:
        import_graph(m)
    assert info.value.tensor == "if/then/t" and str(info.value).startswith("If node 'if': its condition 'c'")


@on_x86
@pytest.mark.parametrize("out", ["y", "it's", "a' (b"])
def test_backend_binds_the_shape_input_whatever_the_tensor_name(out):
    """The backend binds `s` from the error's tensor, not from its message (whose quoting changes with the name)."""
    from fluidml_xc.run.backend import FxcBackend

    x = rng.standard_normal((2, 6)).astype(np.float32)
    rep = FxcBackend.prepare(reshape_model(out))
    for shape in ([3, 4], [12, 1]):
        (got,) = rep.run([x, np.array(shape, np.int64)])
        np.testing.assert_array_equal(got, x.reshape(shape))
    assert rep.specialized == ["s"]


@on_x86
@pytest.mark.parametrize("node", ["at", "at'1"])
def test_backend_binds_the_position_whatever_the_node_name(node):
    from fluidml_xc.run.backend import FxcBackend

    m = sequence_at_model(node)
    a, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    rep = FxcBackend.prepare(m)
    for p in (1, 0):
        feeds = {"a": a, "b": b, "p": np.array(p, np.int64)}
        (got,) = rep.run([a, b, feeds["p"]])
        np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, feeds)[0], rtol=0, atol=0)
    assert rep.specialized == ["p"]


@pytest.fixture
def twice():
    """A tensor expansion of test.fxc/Twice (x + x), registered for one test."""
    key = ("test.fxc", "Twice")

    @expanders.expands(*key)
    def expand(node: onnx.NodeProto, node_name: str, scope: expanders.Scope):
        if node.input[0] not in scope.tensors:
            return None
        bld = NodeBuilder(node_name, scope.opset)
        bld.add("Add", [node.input[0], node.input[0]], [node.output[0]])
        return bld.nodes
    yield key
    del expanders.REGISTRY[key]


@on_x86
def test_a_registered_expansion_is_what_the_importer_imports(twice):
    from fluidml_xc.run.backend import FxcBackend

    m = model([helper.make_node("Twice", ["x"], ["y"], name="t", domain="test.fxc"), helper.make_node("Relu", ["y"], ["z"])],
              [helper.make_tensor_value_info("x", F, [4])], ["z"], opsets=(("", 18), ("test.fxc", 1)))
    graph = import_model(m)
    assert [(n.op_type, n.name) for n in graph.nodes] == [("Add", "t/Add_1"), ("Relu", "Relu_1")]
    x = rng.standard_normal(4).astype(np.float32)
    (got,) = FxcBackend.prepare(m).run([x])
    np.testing.assert_array_equal(got, np.maximum(x + x, 0))


def test_an_op_is_expanded_once_per_kind(twice):
    with pytest.raises(ValueError, match="two tensor expansions of test.fxc Twice"):
        expanders.expands(*twice)(lambda node, name, scope: None)


def test_unregistered_op_reading_a_sequence_is_refused_in_one_line():
    m = model([helper.make_node("SequenceConstruct", ["a"], ["q"]), helper.make_node("Abs", ["q"], ["y"], name="abs")],
              [helper.make_tensor_value_info("a", F, [3])], ["y"])
    with pytest.raises(InputError, match=r"^node 'abs' \(Abs\) reads the sequence/optional value 'q': only sequence and "
                                         r"optional ops, Identity, If and Loop accept one$"):
        import_graph(m)


def test_expanded_nodes_keep_their_names():
    """Scan unrolled through the registry: the step nodes keep the names `NODE/tSTEP/...` later stages key by."""
    body = helper.make_graph([helper.make_node("Add", ["s", "v"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])],
                             "body", [helper.make_tensor_value_info("s", F, [2]), helper.make_tensor_value_info("v", F, [2])],
                             [helper.make_tensor_value_info("s2", F, [2]), helper.make_tensor_value_info("o", F, [2])])
    init = numpy_helper.from_array(np.ones(2, np.float32), "s0")
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Scan", ["s0", "xs"], ["final", "ys"], name="scan", body=body, num_scan_inputs=1)], "g",
        [helper.make_tensor_value_info("xs", F, [3, 2])], [helper.make_empty_tensor_value_info("final"),
                                                           helper.make_empty_tensor_value_info("ys")], [init]),
        opset_imports=[helper.make_opsetid("", 18)])
    graph = import_model(m)
    assert [(n.op_type, n.name) for n in graph.nodes if n.op_type == "Add"] == [
        ("Add", f"scan/t{t}/Add_0") for t in range(3)]


@pytest.mark.parametrize("op, attrs, value, x_shape", [
    ("ReduceMax", {"keepdims": 1}, np.array([1], np.int64), [2, 6]),
    ("Pad", {}, np.array([0, 1, 0, 1], np.int64), [2, 6]),
    ("DFT", {"axis": 1}, np.array(8, np.int64), [1, 8, 1]),
])
def test_a_lowering_that_needs_a_constant_names_its_node(op, attrs, value, x_shape):
    """The lowerings' own check (input 1 left run-time after import) raises NeedsConstant with the node's label, which
    run/backend.py binds from; the name's quoting ("it's") no longer matters."""
    from fluidml_xc.pipeline import LowerOptions, lower
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    outs = ["y"]
    m = helper.make_model(helper.make_graph(
        [helper.make_node(op, ["x", "c"], outs, name="it's", **attrs)], "g", [helper.make_tensor_value_info("x", F, x_shape)],
        [helper.make_empty_tensor_value_info(o) for o in outs], [numpy_helper.from_array(value, "c")]),
        opset_imports=[helper.make_opsetid("", 18)])
    graph = import_graph(m)
    node = next(n for n in graph.nodes if n.op_type == op)
    graph.tensors[node.inputs[1]].value = None
    graph.inputs.append(node.inputs[1])
    with pytest.raises(NeedsConstant, match="must be a build-time constant") as info:
        lower(graph, machine_spec(get_board("x86_64-v3")), LowerOptions())
    assert info.value.node == "it's" and info.value.exit_code == 2
