"""Sequence and optional values with a structure known at build time (frontend/sequences.py).

Sequence/optional ops against onnx.reference on small graphs (JIT on x86_64 through FxcBackend, which
feeds sequences as lists and optionals as None / a value), specialization on the run-time structure,
the graph ABI (`x.0`, `x.1`, ... element tensors), the one-line errors, and a build + run under
qemu-aarch64 and qemu-armv7."""
from __future__ import annotations

import platform

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc.errors import InputError
from modelrun import require_emulator

on_x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="in-process JIT on x86_64")
F = TensorProto.FLOAT
rng = np.random.default_rng(5)


def seq_info(name, elem=F, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def opt_info(name, elem=F, shape=None, sequence=False):
    inner = helper.make_tensor_type_proto(elem, shape)
    if sequence:
        inner = helper.make_sequence_type_proto(inner)
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def tensor_info(name, value):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)


def make_model(nodes, inputs, outputs, opset=18, inits=None):
    outs = [o if isinstance(o, onnx.ValueInfoProto) else helper.make_empty_tensor_value_info(o) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()]
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outs, inits), opset_imports=[helper.make_opsetid("", opset)])


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value)))


def assert_same(got, want, where="output"):
    if want is None:
        assert got is None, where
        return
    if isinstance(want, (list, tuple)):
        assert isinstance(got, list), (where, type(got))
        assert len(got) == len(want), (where, len(got), len(want))
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{k}]")
        return
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (where, got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=where)


def check(m, feeds, board=None, override=None):
    from fluidml_xc.run.backend import FxcBackend

    want = ReferenceEvaluator(m).run(None, feeds)
    rep = FxcBackend.prepare(m, board=board)
    names = [vi.name for vi in m.graph.input]
    got = rep.run([feeds[n] for n in names])
    assert len(got) == len(want)
    for vi, g, w in zip(m.graph.output, got, want):
        w = (override or {}).get(vi.name, w)
        inner = vi.type.optional_type.elem_type if vi.type.HasField("optional_type") else None
        if inner is not None and inner.HasField("tensor_type") and isinstance(w, list):
            w = w[0]  # onnx.reference's Optional wraps a tensor in a list; the backend tests' data (and fluidml-xc) do not
        assert_same(g, w, vi.name)
    return rep


def floats(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------- sequence ops
@on_x86
@pytest.mark.parametrize("pos", [0, 2, -1, -3])
def test_construct_at_length(pos):
    a, b, c = floats(2, 3), floats(2, 3), floats(2, 3)
    m = make_model([helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]), const("p", np.int64(pos)),
                    helper.make_node("SequenceAt", ["s", "p"], ["y"]), helper.make_node("SequenceLength", ["s"], ["n"]),
                    helper.make_node("Mul", ["y", "a"], ["z"])],
                   [tensor_info("a", a), tensor_info("b", b), tensor_info("c", c)], ["z", "n"])
    check(m, {"a": a, "b": b, "c": c})


@on_x86
@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-1, 1)])
def test_concat_from_sequence(axis, new_axis):
    a, b = floats(2, 3), floats(2, 3)
    m = make_model([helper.make_node("SequenceConstruct", ["a", "b", "a"], ["s"]),
                    helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)],
                   [tensor_info("a", a), tensor_info("b", b)], ["y"])
    check(m, {"a": a, "b": b})


@on_x86
@pytest.mark.parametrize("split,axis,keepdims", [(None, 0, 1), (None, 1, 0), (None, -1, 0), (np.int64(2), 1, 1),
                                                  (np.int64(4), 1, 1), (np.array([1, 4, 0], np.int64), 1, 1),
                                                  (np.array([2, 1], np.int64), 0, 1)])
def test_split_to_sequence(split, axis, keepdims):
    x = floats(3, 5)
    inputs, nodes = ["x"], []
    if split is not None:
        nodes.append(const("split", split))
        inputs.append("split")
    nodes.append(helper.make_node("SplitToSequence", inputs, ["s"], axis=axis, keepdims=keepdims))
    nodes.append(helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=0 if keepdims or split is not None else 1))
    m = make_model(nodes, [tensor_info("x", x)], [seq_info("s"), "y"])
    check(m, {"x": x})


@on_x86
def test_insert_erase_positions():
    a, b, c = floats(4), floats(2), floats(3)
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
             helper.make_node("SequenceInsert", ["s0", "c"], ["s1"]),                  # at the back
             const("p0", np.int64(0)), helper.make_node("SequenceInsert", ["s1", "b", "p0"], ["s2"]),
             const("pm", np.int64(-2)), helper.make_node("SequenceInsert", ["s2", "a", "pm"], ["s3"]),
             helper.make_node("SequenceErase", ["s3"], ["s4"]),                          # the last
             const("p1", np.int64(1)), helper.make_node("SequenceErase", ["s4", "p1"], ["s5"])]
    m = make_model(nodes, [tensor_info("a", a), tensor_info("b", b), tensor_info("c", c)], [seq_info("s3"), seq_info("s5")])
    check(m, {"a": a, "b": b, "c": c})


@on_x86
def test_sequence_empty_then_inserts():
    a = floats(2, 2)
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=F), helper.make_node("SequenceInsert", ["e", "a"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "a"], ["t"]), helper.make_node("SequenceLength", ["t"], ["n"]),
             helper.make_node("ConcatFromSequence", ["t"], ["y"], axis=0)]
    check(make_model(nodes, [tensor_info("a", a)], ["y", "n"]), {"a": a})


@on_x86
def test_sequence_map_with_tensor_and_shape():
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "t"], ["sum"]), helper.make_node("Shape", ["e"], ["shp"]),
         helper.make_node("Relu", ["sum"], ["r"])], "body",
        [helper.make_tensor_value_info("e", F, None), helper.make_tensor_value_info("t", F, None)],
        [helper.make_tensor_value_info("r", F, None), helper.make_tensor_value_info("shp", TensorProto.INT64, None)])
    m = make_model([helper.make_node("SequenceMap", ["xs", "t"], ["ys", "shapes"], body=body)],
                   [seq_info("xs"), helper.make_tensor_value_info("t", F, [4])], [seq_info("ys"), seq_info("shapes", TensorProto.INT64)])
    xs = [floats(4), floats(3, 4), floats(2, 1, 4)]
    rep = check(m, {"xs": xs, "t": floats(4)})
    check(m, {"xs": xs[:1], "t": floats(4)})  # another length: another specialization
    assert not rep.specialized


@on_x86
def test_sequence_input_respecializes_on_length_and_shapes():
    from fluidml_xc.run.backend import FxcBackend

    m = make_model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)], [seq_info("xs")], ["y"])
    rep = FxcBackend.prepare(m)
    for xs in ([floats(2, 3)], [floats(2, 3), floats(1, 3)], [floats(2, 3)], [floats(4, 3), floats(1, 3), floats(1, 3)]):
        (y,) = rep.run([xs])
        np.testing.assert_array_equal(y, np.concatenate(xs))
    assert len(rep._compiled) == 3


@on_x86
def test_runtime_position_is_bound_at_build_time():
    a, b = floats(3), floats(3)
    m = make_model([helper.make_node("SequenceConstruct", ["a", "b"], ["s"]), helper.make_node("SequenceAt", ["s", "p"], ["y"]),
                    helper.make_node("Neg", ["y"], ["z"])],
                   [tensor_info("a", a), tensor_info("b", b), helper.make_tensor_value_info("p", TensorProto.INT64, [])], ["z"])
    for p in (1, 0, -1):
        rep = check(m, {"a": a, "b": b, "p": np.array(p, np.int64)})
        assert rep.specialized == ["p"]


# ---------------------------------------------------------------------------------------------- optionals
@on_x86
@pytest.mark.parametrize("present", [True, False])
def test_optional_input(present):
    x = floats(3)
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"])]
    outputs = ["has"]
    if present:
        nodes += [helper.make_node("OptionalGetElement", ["o"], ["v"]), helper.make_node("Exp", ["v"], ["y"])]
        outputs.append("y")
    m = make_model(nodes, [opt_info("o", F, [3])], outputs)
    check(m, {"o": x if present else None})


@on_x86
def test_optional_wrapping_and_outputs():
    x = floats(2, 2)
    nodes = [helper.make_node("Optional", ["x"], ["o"]), helper.make_node("OptionalGetElement", ["o"], ["v"]),
             helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(F, [2, 2])),
             helper.make_node("OptionalHasElement", ["none"], ["h0"]), helper.make_node("OptionalHasElement", ["o"], ["h1"]),
             helper.make_node("SequenceConstruct", ["v", "x"], ["s"]), helper.make_node("Optional", ["s"], ["os"]),
             helper.make_node("Identity", ["os"], ["os2"])]
    m = make_model(nodes, [tensor_info("x", x)], [opt_info("o", F, [2, 2]), "h0", "h1", opt_info("os2", F, None, sequence=True)])
    # onnx.reference's Optional wraps its value in a list (and gives [None] without an input, which its
    # OptionalHasElement calls present): the expected values by hand
    check(m, {"x": x}, override={"o": x, "h0": np.array(False), "h1": np.array(True), "os2": [x, x]})


@on_x86
def test_optional_sequence_input():
    m = make_model([helper.make_node("OptionalGetElement", ["o"], ["s"]), helper.make_node("SequenceLength", ["s"], ["n"]),
                    helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1)],
                   [opt_info("o", F, None, sequence=True)], ["y", "n"])
    check(m, {"o": [floats(2, 1), floats(2, 3)]})


# ---------------------------------------------------------------------------------------------- control flow
def _seq_branches():
    then_g = helper.make_graph([helper.make_node("Neg", ["a"], ["na"]), helper.make_node("SequenceConstruct", ["na", "b"], ["s"])],
                               "then", [], [seq_info("s")])
    else_g = helper.make_graph([helper.make_node("Abs", ["b"], ["ab"]), helper.make_node("SequenceConstruct", ["a", "ab"], ["t"])],
                               "else", [], [seq_info("t")])
    return then_g, else_g


@on_x86
@pytest.mark.parametrize("cond", [True, False])
def test_if_with_sequence_outputs_runtime_condition(cond):
    a, b = floats(3), floats(3)
    then_g, else_g = _seq_branches()
    m = make_model([helper.make_node("If", ["c"], ["s"], then_branch=then_g, else_branch=else_g)],
                   [tensor_info("a", a), tensor_info("b", b), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                   [seq_info("s")])
    rep = check(m, {"a": a, "b": b, "c": np.array(cond)})
    assert not rep.specialized  # one Where per element


@on_x86
def test_if_with_different_structures_binds_the_condition():
    from fluidml_xc.pipeline import import_graph

    a = floats(3)
    then_g = helper.make_graph([helper.make_node("SequenceConstruct", ["a", "a"], ["s"])], "then", [], [seq_info("s")])
    else_g = helper.make_graph([helper.make_node("SequenceConstruct", ["a"], ["t"])], "else", [], [seq_info("t")])
    m = make_model([helper.make_node("If", ["c"], ["s"], then_branch=then_g, else_branch=else_g)],
                   [tensor_info("a", a), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [seq_info("s")])
    with pytest.raises(InputError) as err:
        import_graph(m)
    assert "\n" not in str(err.value) and "build time" in str(err.value)
    for cond in (True, False):
        rep = check(m, {"a": a, "c": np.array(cond)})
        assert rep.specialized == ["c"]


@on_x86
def test_loop_carrying_a_sequence():
    x = floats(5)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), const("one", np.array([1], np.int64)),
         const("zero", np.array([0], np.int64)), helper.make_node("Unsqueeze", ["i", "zero"], ["i1"]),
         helper.make_node("Add", ["i1", "one"], ["end"]), helper.make_node("Slice", ["x", "zero", "end"], ["part"]),
         helper.make_node("SequenceInsert", ["s_in", "part"], ["s_out"]), helper.make_node("ReduceSum", ["part"], ["total"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 seq_info("s_in")],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), seq_info("s_out"), helper.make_tensor_value_info("total", F, None)])
    m = make_model([const("n", np.int64(4)), const("go", np.array(True)), helper.make_node("SequenceEmpty", [], ["e"], dtype=F),
                    helper.make_node("Loop", ["n", "go", "e"], ["s", "totals"], body=body)],
                   [tensor_info("x", x)], [seq_info("s"), "totals"])
    check(m, {"x": x})


# ---------------------------------------------------------------------------------------------- ABI, errors
@on_x86
def test_graph_abi_names_elements():
    from fluidml_xc.pipeline import import_graph

    m = make_model([helper.make_node("SequenceInsert", ["xs", "t"], ["ys"]), helper.make_node("Optional", ["t"], ["o"])],
                   [seq_info("xs"), helper.make_tensor_value_info("t", F, [2])], [seq_info("ys"), opt_info("o", F, [2])])
    g = import_graph(m, {"xs.0": (3,), "xs.1": (1,)})
    assert g.inputs == ["xs.0", "xs.1", "t"]
    assert g.outputs == ["ys.0", "ys.1", "ys.2", "o.0"]
    assert g.structures == {"inputs": {"xs": ["seq", 2]}, "outputs": {"ys": ["seq", 3], "o": ["opt", "tensor"]}}
    g = import_graph(m, {}, structures={"xs": ["seq", 0]})
    assert g.inputs == ["t"] and g.outputs == ["ys.0", "o.0"]


def test_sequence_input_without_element_shapes_is_a_one_line_error():
    from fluidml_xc.pipeline import import_graph

    m = make_model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)], [seq_info("xs")], ["y"])
    with pytest.raises(InputError) as err:
        import_graph(m)
    message = str(err.value)
    assert "\n" not in message and "--input-shape xs.0=" in message and "sequence" in message


def test_other_op_reading_a_sequence_is_a_one_line_error():
    from fluidml_xc.pipeline import import_graph

    m = make_model([helper.make_node("Relu", ["xs"], ["y"])], [seq_info("xs")], ["y"])
    with pytest.raises(InputError) as err:
        import_graph(m, {"xs.0": (2,)})
    assert "\n" not in str(err.value) and "Relu" in str(err.value) and "'xs'" in str(err.value)


def test_cli_build_error_names_the_option(tmp_path, capsys):
    from fluidml_xc.cli import main

    m = make_model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)], [seq_info("xs")], ["y"])
    path = tmp_path / "seq.onnx"
    onnx.save(m, str(path))
    assert main(["build", str(path), "-o", str(tmp_path / "art")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--input-shape xs.0=DIMS" in err


# ---------------------------------------------------------------------------------------------- qemu
def _cross_model():
    body = helper.make_graph([helper.make_node("Mul", ["e", "t"], ["r"])], "body",
                             [helper.make_tensor_value_info("e", F, None), helper.make_tensor_value_info("t", F, None)],
                             [helper.make_tensor_value_info("r", F, None)])
    return make_model([helper.make_node("SequenceMap", ["xs", "t"], ["ys"], body=body),
                       helper.make_node("ConcatFromSequence", ["ys"], ["cat"], axis=0),
                       helper.make_node("SplitToSequence", ["cat"], ["parts"], axis=0, keepdims=0)],
                      [seq_info("xs"), helper.make_tensor_value_info("t", F, [3])], [seq_info("ys"), seq_info("parts")])


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_backend_under_qemu(board):
    require_emulator(board)
    check(_cross_model(), {"xs": [floats(1, 3), floats(2, 3)], "t": floats(3)}, board=board)


def test_build_and_run_artifact_under_qemu_aarch64(tmp_path):
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.run.execute import run_artifact

    require_emulator("qemu-aarch64")
    path = tmp_path / "seq.onnx"
    onnx.save(_cross_model(), str(path))
    result = build_model(path, BuildOptions(board="qemu-aarch64", out_dir=tmp_path / "art", profile_runner=False, record_last=False,
                                            input_shapes={"xs.0": (1, 3), "xs.1": (2, 3), "t": (3,)}))
    assert [i.name for i in result.manifest.inputs] == ["xs.0", "xs.1", "t"]
    assert result.manifest.structures["outputs"] == {"ys": ["seq", 2], "parts": ["seq", 3]}
    feeds = {"xs.0": floats(1, 3), "xs.1": floats(2, 3), "t": floats(3)}
    got = run_artifact(result.artifact, feeds, timeout=300).outputs
    want = ReferenceEvaluator(_cross_model()).run(None, {"xs": [feeds["xs.0"], feeds["xs.1"]], "t": feeds["t"]})
    for k in range(2):
        np.testing.assert_allclose(got[f"ys.{k}"], want[0][k], rtol=1e-6)
    for k in range(3):
        np.testing.assert_allclose(np.asarray(got[f"parts.{k}"]).reshape(3), want[1][k], rtol=1e-6)


@on_x86
def test_loop_without_iterations_passes_the_sequence_through():
    a = floats(2)
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("SequenceInsert", ["s_in", "a"], ["s_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), seq_info("s_in")],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), seq_info("s_out")])
    m = make_model([const("n", np.int64(0)), const("go", np.array(True)), helper.make_node("SequenceConstruct", ["a"], ["s0"]),
                    helper.make_node("Loop", ["n", "go", "s0"], ["s"], body=body)], [tensor_info("a", a)], [seq_info("s")])
    check(m, {"a": a})
