"""Graph passes: elementwise fusion (passes/elementwise_fusion.py -> ops/fused.py) and MatMul + bias
(passes/epilogues.py -> ops/matmul.py's epilogue): which patterns fuse, and that fused models compute
what onnx.reference does, natively (JIT) and for aarch64 under qemu."""
from __future__ import annotations


import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper

from fluidml_xc.run.backend import compile_model
from fluidml_xc.pipeline import import_graph
from fluidml_xc.opspec import FUSED_OP, OUR_DOMAIN
from modelrun import require_emulator

F32 = T.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _c(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _fused(graph):
    return [n for n in graph.nodes if n.op_type == FUSED_OP]


def _reference(model, feeds):
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(model).run(None, feeds)


def _feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dtype == np.bool_:
            feeds[vi.name] = rng.random(shape) < 0.5
        elif np.dtype(dtype).kind in "iu":
            feeds[vi.name] = rng.integers(-5, 6, shape).astype(dtype)
        else:
            feeds[vi.name] = (rng.standard_normal(shape) * 2).astype(dtype)
    return feeds


def _check(model, board="x86_64", opt="fluid", rtol=1e-5, atol=1e-5, feeds=None):
    feeds = feeds or _feeds(model)
    got = compile_model(model, board, opt=opt)(feeds)
    for g, r in zip(got, _reference(model, feeds)):
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, r.shape, g.dtype, r.dtype)
        if r.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, r)


# -- models -------------------------------------------------------------------------------------------
def gelu_model(shape=(2, 16, 40)):
    """bert's erf GELU on a residual: y = gelu(x) + r."""
    nodes = [helper.make_node("Div", ["x", "s2"], ["a"], name="div"), helper.make_node("Erf", ["a"], ["b"], name="erf"),
             helper.make_node("Add", ["b", "one"], ["c"], name="add1"), helper.make_node("Mul", ["x", "c"], ["d"], name="mul1"),
             helper.make_node("Mul", ["d", "half"], ["e"], name="mul2"), helper.make_node("Add", ["e", "r"], ["y"], name="res")]
    return _model(nodes, [("x", F32, shape), ("r", F32, shape)], [("y", F32, shape)],
                  [_c("s2", 1.4142135), _c("one", 1.0), _c("half", 0.5)])


def linear_gelu_model(m=24, k=32, n=40):
    """PyTorch Linear (MatMul + Add bias) -> GELU -> Linear + bias + residual, 3-D activations."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"), helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Div", ["hb", "s2"], ["a"]), helper.make_node("Erf", ["a"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["c"]), helper.make_node("Mul", ["hb", "c"], ["d"]),
             helper.make_node("Mul", ["d", "half"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["o"], name="mm2"), helper.make_node("Add", ["b2", "o"], ["ob"], name="bias2"),
             helper.make_node("Add", ["ob", "x2"], ["y"], name="residual")]
    inits = [_c("w1", rng.standard_normal((k, n)) * 0.3), _c("b1", rng.standard_normal(n)),
             _c("w2", rng.standard_normal((n, k)) * 0.3), _c("b2", rng.standard_normal((1, 1, k))),
             _c("s2", 1.4142135), _c("one", 1.0), _c("half", 0.5)]
    return _model(nodes, [("x", F32, (1, m, k)), ("x2", F32, (1, m, k))], [("y", F32, (1, m, k))], inits)


def dtype_model(shape=(3, 7, 9)):
    """Comparisons give bool, Where picks, Cast to int and back, integer arithmetic, Not/And on bools."""
    nodes = [helper.make_node("Less", ["x", "y"], ["lt"]), helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("And", ["lt", "pos"], ["both"]), helper.make_node("Not", ["both"], ["nb"]),
             helper.make_node("Where", ["nb", "x", "y"], ["w"]),
             helper.make_node("Mul", ["w", "three"], ["w3"]),
             helper.make_node("Cast", ["w3"], ["wi"], to=T.INT32), helper.make_node("Add", ["wi", "seven"], ["wi7"]),
             helper.make_node("Cast", ["wi7"], ["wf"], to=T.FLOAT), helper.make_node("Clip", ["wf", "lo", "hi"], ["cl"]),
             helper.make_node("Pow", ["cl", "two"], ["p"]), helper.make_node("Max", ["p", "x", "y"], ["out"]),
             helper.make_node("Cast", ["nb"], ["nbf"], to=T.FLOAT), helper.make_node("Sum", ["out", "nbf", "x"], ["z"])]
    inits = [_c("zero", 0.0), _c("three", 3.0), _c("seven", 7, np.int32), _c("lo", -2.0), _c("hi", 5.5), _c("two", 2.0)]
    return _model(nodes, [("x", F32, shape), ("y", F32, shape)], [("z", F32, shape)], inits)


# -- pattern matching ---------------------------------------------------------------------------------
def test_gelu_and_residual_fuse_into_one_node():
    model = gelu_model()
    graph = import_graph(model)
    assert [n.op_type for n in graph.nodes] == [FUSED_OP]
    node = graph.nodes[0]
    assert node.domain == OUR_DOMAIN and node.name == "Div+Erf+Add+Mul+Mul+Add@res"
    assert node.attrs["_fused_nodes"] == ["div", "erf", "add1", "mul1", "mul2", "res"]
    assert node.inputs == ["x", "r"] and node.outputs == ["y"]
    assert set(graph.tensors) >= {"x", "r", "y"} and not {"a", "b", "c", "d", "e"} & set(graph.tensors)
    # scalar constants are immediates, not operands
    steps = node.attrs["program"]
    assert [s["op"] for s in steps] == ["Div", "Erf", "Add", "Mul", "Mul", "Add"]
    assert steps[0]["args"] == [["in", 0], ["imm", float(np.float32(1.4142135)), "float32"]]
    assert steps[-1]["args"] == [["step", 4], ["in", 1]]


def test_multiple_consumers_stop_fusion():
    shape = (4, 8)
    nodes = [helper.make_node("Exp", ["x"], ["a"], name="exp"), helper.make_node("Add", ["a", "one"], ["b"], name="add"),
             helper.make_node("Mul", ["a", "b"], ["y"], name="mul")]
    model = _model(nodes, [("x", F32, shape)], [("y", F32, shape)], [_c("one", 1.0)])
    graph = import_graph(model)
    assert [n.op_type for n in graph.nodes] == ["Exp", FUSED_OP]
    assert graph.nodes[1].attrs["_fused_ops"] == ["Add", "Mul"] and graph.nodes[1].inputs == ["a"]
    assert "a" in graph.tensors and "b" not in graph.tensors
    _check(model)


def test_graph_output_intermediate_is_not_fused():
    shape = (4, 8)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    model = _model(nodes, [("x", F32, shape)], [("a", F32, shape), ("y", F32, shape)])
    graph = import_graph(model)
    assert [n.op_type for n in graph.nodes] == ["Relu", "Neg"]
    _check(model)


def test_non_elementwise_breaks_chain_and_small_intermediates_stay_separate():
    # the mask (1, 1, 8) is computed once, not per score element; Softmax is not elementwise
    nodes = [helper.make_node("Cast", ["mask"], ["mf"], to=T.FLOAT), helper.make_node("Sub", ["one", "mf"], ["inv"]),
             helper.make_node("Mul", ["inv", "big"], ["bias"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]), helper.make_node("Add", ["ss", "bias"], ["sb"]),
             helper.make_node("Softmax", ["sb"], ["p"], axis=-1), helper.make_node("Mul", ["p", "two"], ["p2"]),
             helper.make_node("Sqrt", ["p2"], ["y"])]
    model = _model(nodes, [("s", F32, (2, 8, 8)), ("mask", T.INT64, (1, 1, 8))], [("y", F32, (2, 8, 8))],
                   [_c("one", 1.0), _c("big", -10000.0), _c("scale", 0.125), _c("two", 2.0)])
    graph = import_graph(model)
    ops = [n.attrs.get("_fused_ops", n.op_type) for n in graph.nodes]
    assert ops == [["Cast", "Sub", "Mul"], ["Mul", "Add"], "Softmax", ["Mul", "Sqrt"]]
    program = graph.nodes[0].attrs["program"]
    assert [s["dtype"] for s in program] == ["float32"] * 3 and graph.nodes[0].inputs == ["mask"]
    feeds = {"s": np.random.default_rng(0).standard_normal((2, 8, 8)).astype(np.float32),
             "mask": np.array([[[1, 1, 1, 0, 1, 0, 0, 1]]], dtype=np.int64)}
    _check(model, feeds=feeds)


def test_intermediate_dtypes_follow_onnx():
    model = dtype_model()
    graph = import_graph(model)
    fused = _fused(graph)
    # `nb` feeds both Where and a Cast: it is the boundary between two fused nodes
    assert len(fused) == 2 and len(graph.nodes) == 2 and fused[0].outputs == ["nb"] and "nb" in fused[1].inputs
    by_op = [(s["op"], s["dtype"]) for f in fused for s in f.attrs["program"]]
    assert ("Less", "bool") in by_op and ("And", "bool") in by_op and ("Not", "bool") in by_op
    assert ("Cast", "int32") in by_op and ("Add", "int32") in by_op and ("Where", "float32") in by_op
    assert graph.tensors["nb"].dtype == np.bool_ and not {"lt", "pos", "both", "w", "wi", "wf"} & set(graph.tensors)
    for opt in ("plain", "greedy", "fluid"):
        _check(model, opt=opt)


def test_intermediate_of_another_dtype_size_keeps_graph_output_dtype():
    """float32 -> float64 -> bool: the fused output is the root's tensor, with the root's dtype."""
    shape = (5, 6)
    nodes = [helper.make_node("Cast", ["x"], ["d"], to=T.DOUBLE), helper.make_node("Mul", ["d", "k"], ["dk"]),
             helper.make_node("GreaterOrEqual", ["dk", "t"], ["y"])]
    model = _model(nodes, [("x", F32, shape)], [("y", T.BOOL, shape)], [_c("k", 3.0, np.float64), _c("t", 0.5, np.float64)])
    graph = import_graph(model)
    assert [n.op_type for n in graph.nodes] == [FUSED_OP] and graph.tensors["y"].dtype == np.bool_
    _check(model)


def test_matmul_bias_pattern():
    model = linear_gelu_model()
    graph = import_graph(model)
    mms = [n for n in graph.nodes if n.op_type == "MatMul"]
    assert [n.inputs[2] for n in mms] == ["b1", "b2"] and "_epilogue" not in mms[0].attrs  # a bias is input 2 alone
    assert mms[0].outputs == ["hb"] and "h" not in graph.tensors and "o" not in graph.tensors
    # the GELU fuses; the residual Add joins the second MatMul's epilogue
    assert [n.attrs.get("_fused_ops", n.op_type) for n in graph.nodes] == ["MatMul", ["Div", "Erf", "Add", "Mul", "Mul"], "MatMul"]
    assert mms[1].inputs == ["g", "w2", "b2", "x2"] and mms[1].outputs == ["y"] and mms[1].attrs["_epilogue"].residual
    assert mms[1].attrs["_fused_nodes"] == ["mm2", "bias2", "residual"] and "ob" not in graph.tensors


def residual_model(dtype=T.FLOAT, m=10, k=12, n=9):
    """A residual computed after the MatMul (the MatMul must move to the Add), no bias, batch dims."""
    npd = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(4)
    w = rng.integers(-3, 4, (k, n)) if np.dtype(npd).kind == "i" else rng.standard_normal((k, n))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Neg", ["r0"], ["r"], name="neg"),
             helper.make_node("Add", ["r", "h"], ["y"], name="res")]
    return _model(nodes, [("x", dtype, (2, m, k)), ("r0", dtype, (2, m, n))], [("y", dtype, (2, m, n))], [_c("w", w, npd)])


@pytest.mark.parametrize("dtype", [T.FLOAT, T.INT32])
@pytest.mark.parametrize("opt", ["plain", "fluid"])
def test_matmul_residual_without_bias(dtype, opt):
    model = residual_model(dtype)
    graph = import_graph(model)
    assert [n.op_type for n in graph.nodes] == ["Neg", "MatMul"]
    assert graph.nodes[1].inputs == ["x", "w", "", "r"]
    _check(model, opt=opt, rtol=1e-4, atol=1e-4)


def test_matmul_bias_not_fused_when_bias_broadcasts_rows_or_output_is_shared():
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y1"]),
             helper.make_node("MatMul", ["x", "w"], ["h2"]), helper.make_node("Add", ["h2", "c"], ["y2"]),
             helper.make_node("Relu", ["h2"], ["y3"])]
    model = _model(nodes, [("x", F32, (6, 5))], [("y1", F32, (6, 4)), ("y2", F32, (6, 4)), ("y3", F32, (6, 4))],
                   [_c("w", rng.standard_normal((5, 4))), _c("b", rng.standard_normal((6, 4))), _c("c", rng.standard_normal(4))])
    graph = import_graph(model)
    assert all(len(n.inputs) == 2 for n in graph.nodes if n.op_type == "MatMul")
    assert sum(n.op_type == "Add" for n in graph.nodes) == 2
    _check(model)


# -- numerics -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("opt", ["plain", "greedy", "fluid"])
def test_gelu_residual_matches_reference(opt):
    _check(gelu_model(), opt=opt)


@pytest.mark.parametrize("opt", ["plain", "greedy", "fluid"])
@pytest.mark.parametrize("dims", [(24, 32, 40), (5, 7, 3), (1, 16, 9)])
def test_linear_gelu_matches_reference(opt, dims):
    _check(linear_gelu_model(*dims), opt=opt, rtol=1e-4, atol=1e-4)


def test_matmul_bias_on_batched_and_scalar_bias():
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"]),
             helper.make_node("MatMul", ["x", "wt"], ["h2"]), helper.make_node("Add", ["s", "h2"], ["y2"])]
    model = _model(nodes, [("x", F32, (3, 9, 16))], [("y", F32, (3, 9, 12)), ("y2", F32, (3, 9, 1))],
                   [_c("w", rng.standard_normal((16, 12))), _c("b", rng.standard_normal((1, 12))),
                    _c("wt", rng.standard_normal((16, 1))), _c("s", 0.75)])
    graph = import_graph(model)
    assert all(len(n.inputs) == 3 for n in graph.nodes if n.op_type == "MatMul")
    for opt in ("greedy", "fluid"):
        _check(model, opt=opt, rtol=1e-4, atol=1e-4)


def test_transformer_example_fuses_gelu_and_matches_reference():
    from fluidml_xc.examples import example_feeds, tiny_transformer

    model = tiny_transformer()
    graph = import_graph(model)
    names = [n.name for n in _fused(graph)]
    assert sum(name.startswith("Mul+Erf+Add+Mul+Mul@") for name in names) == 1
    assert [n.name for n in graph.nodes if n.op_type == "MatMul" and len(n.inputs) == 4] == ["attend", "mlp2"]  # residual Adds
    feeds = example_feeds(model)
    got = compile_model(model, "x86_64")(feeds)
    np.testing.assert_allclose(got[0], _reference(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_fused_model_on_aarch64_under_qemu(tmp_path):
    require_emulator("rpi4")
    _check(linear_gelu_model(), board="rpi4", rtol=1e-4, atol=1e-4)
    _check(dtype_model(), board="rpi4")


def relu_model(dtype=T.FLOAT):
    """Gemm + Relu (an exported MLP) and MatMul + bias + Relu on 3-D activations; the last Relu's input is an output too."""
    npd = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Reshape", ["r1", "shape"], ["r1r"]),
             helper.make_node("MatMul", ["r1r", "w2"], ["h2"]), helper.make_node("Add", ["h2", "b2"], ["h2b"]),
             helper.make_node("Relu", ["h2b"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    inits = [_c("w1", rng.standard_normal((20, 16)), npd), _c("b1", rng.standard_normal(20), npd),
             _c("shape", [2, 3, 20], np.int64), _c("w2", rng.standard_normal((20, 11)), npd), _c("b2", rng.standard_normal(11), npd)]
    return _model(nodes, [("x", dtype, (6, 16))], [("y", dtype, (2, 3, 11)), ("z", dtype, (2, 3, 11))], inits)


@pytest.mark.parametrize("opt", ["plain", "greedy", "fluid"])
def test_matmul_and_gemm_relu_epilogue(opt):
    model = relu_model()
    graph = import_graph(model)
    assert [(n.op_type, getattr(n.attrs.get("_epilogue"), "activation", None)) for n in graph.nodes] == \
        [("Gemm", "relu"), ("Reshape", None), ("MatMul", "relu"), ("Relu", None)]
    _check(model, opt=opt, rtol=1e-4, atol=1e-4)


def test_epilogues_on_aarch64_under_qemu():
    require_emulator("rpi4")
    _check(relu_model(), board="rpi4", rtol=1e-4, atol=1e-4)
    _check(residual_model(), board="rpi4", rtol=1e-4, atol=1e-4)


# -- rematerialization of input-derived cones (passes/rematerialize.py) ------------------------------
def mask_model(n=16, layers=2):
    """A float mask from an int input (Cast, Sub, Mul) added to the scores of `layers` far-apart layers."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Cast", ["mask"], ["mf"], to=T.FLOAT, name="cast"),
             helper.make_node("Sub", ["one", "mf"], ["inv"], name="inv"),
             helper.make_node("Mul", ["inv", "big"], ["m"], name="scale")]
    inits = [_c("one", 1.0), _c("big", -1e4)]
    h = "x"
    for k in range(layers):
        nodes += [helper.make_node("MatMul", [h, f"w{k}"], [f"s{k}"], name=f"mm{k}"),
                  helper.make_node("Add", [f"s{k}", "m"], [f"a{k}"], name=f"mask{k}"),
                  helper.make_node("Softmax", [f"a{k}"], [f"p{k}"], name=f"softmax{k}"),
                  helper.make_node("MatMul", [f"p{k}", f"v{k}"], [f"o{k}"], name=f"mv{k}"),
                  helper.make_node("Tanh", [f"o{k}"], [f"h{k}"], name=f"tanh{k}")]
        inits += [_c(f"w{k}", rng.standard_normal((n, n)) * 0.3), _c(f"v{k}", rng.standard_normal((n, n)) * 0.3)]
        h = f"h{k}"
    return _model(nodes, [("x", F32, (n, n)), ("mask", T.INT64, (n, n))], [(h, F32, (n, n))], inits)


def test_input_cone_is_recomputed_for_a_far_consumer():
    model = mask_model()
    graph = import_graph(model)
    clones = [n.name for n in graph.nodes if "#remat" in n.name]
    assert clones == ["Cast+Sub+Mul@scale#remat1"]  # the fused mask chain, once more for layer 1
    readers = {x: n.name for n in graph.nodes for x in n.inputs if x in ("m", "m#remat1")}
    assert readers == {"m": "mm0", "m#remat1": "mm1"}  # the masked score MatMuls (residual epilogue)
    feeds = _feeds(model)
    feeds["mask"] = (feeds["mask"] > 0).astype(np.int64)
    _check(model, feeds=feeds, rtol=1e-4, atol=1e-5)


def test_rematerialization_shrinks_the_transformer_arena_to_the_op_bound():
    from fluidml_xc.examples import tiny_transformer
    from fluidml_xc.planning import PlanOptions, plan_memory, verify_plan

    graph = import_graph(tiny_transformer())
    attend = next(n for n in graph.nodes if n.name == "attend")
    assert attend.inputs[3] == "x#remat1" and any(n.name == "embed#remat1" for n in graph.nodes)
    result = plan_memory(graph, PlanOptions(alignment=64))
    verify_plan(graph, result)
    # one 16x32 f32 activation = 2048 B: q, k, the 16x16 scores (1024 B) and xn at most; 9216 B before
    assert result.lower_bound_bytes == 7168
    assert result.arena_bytes == result.live_peak_bytes == result.order_bound_bytes == 7168


def test_no_copy_for_near_consumers_heavy_cones_or_small_tensors():
    from fluidml_xc.passes.rematerialize import rematerialize_input_cones

    # consumers two nodes apart share the original
    graph = import_graph(mask_model(layers=1))
    assert not [n for n in graph.nodes if "#remat" in n.name]
    # a cone with a MatMul (heavy) is never copied, however far apart its consumers
    n = 16
    nodes = [helper.make_node("MatMul", ["x", "w"], ["e"], name="embed")]
    for k in range(6):
        nodes.append(helper.make_node("MatMul", ["e" if k == 0 else f"t{k - 1}", "w"], [f"t{k}"], name=f"mm{k}"))
    nodes.append(helper.make_node("Add", ["t5", "e"], ["y"], name="residual"))
    model = _model(nodes, [("x", F32, (n, n))], [("y", F32, (n, n))], [_c("w", np.eye(n))])
    graph = import_graph(model)
    assert not [n for n in graph.nodes if "#remat" in n.name]
    before = len(graph.nodes)
    rematerialize_input_cones(graph)
    assert len(graph.nodes) == before


# -- Conv over a kept Concat split per input (passes/concat_split.py) ---------------------------------
def dense_block_model():
    """A DenseNet layer: X = Concat(a, n) is kept for the next Concat and also goes through BN, Mul, Add,
    Relu into a 1x1 Conv (16 ch) and a 3x3 Conv (4 ch) whose output joins X in the block's output."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], name="stem"),  # 32 ch
             helper.make_node("Conv", ["a", "w1"], ["n"], kernel_shape=[1, 1], name="new"),
             helper.make_node("Concat", ["a", "n"], ["X"], axis=1, name="concat1"),
             helper.make_node("BatchNormalization", ["X", "s", "b", "mu", "var"], ["bn"], name="bn"),
             helper.make_node("Mul", ["bn", "k"], ["bk"], name="mul"),
             helper.make_node("Add", ["bk", "c"], ["bc"], name="add"),
             helper.make_node("Relu", ["bc"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2", "b2"], ["m"], kernel_shape=[1, 1], name="bottleneck"),
             helper.make_node("Conv", ["m", "w3"], ["n2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], name="grow"),
             helper.make_node("Concat", ["X", "n2"], ["Y"], axis=1, name="concat2"),
             helper.make_node("Relu", ["Y"], ["y"], name="out")]
    inits = [_c("w0", rng.standard_normal((32, 4, 3, 3)) * 0.3), _c("w1", rng.standard_normal((4, 32, 1, 1)) * 0.3),
             _c("s", rng.random(36) + 0.5), _c("b", rng.standard_normal(36)), _c("mu", rng.standard_normal(36)),
             _c("var", rng.random(36) + 0.5), _c("k", rng.standard_normal((36, 1, 1))), _c("c", rng.standard_normal((1, 36, 1, 1))),
             _c("w2", rng.standard_normal((16, 36, 1, 1)) * 0.3), _c("b2", rng.standard_normal(16)),
             _c("w3", rng.standard_normal((4, 16, 3, 3)) * 0.3)]
    return _model(nodes, [("x", F32, (1, 4, 8, 8))], [("y", F32, (1, 40, 8, 8))], inits)


def test_conv_over_a_kept_concat_splits_per_input_and_shrinks_the_arena():
    from fluidml_xc import passes
    from fluidml_xc.planning import PlanOptions, plan_memory, verify_plan

    model = dense_block_model()
    graph = import_graph(model)
    split = sorted(n.name for n in graph.nodes if "#split" in n.name)
    assert [n for n in split if n.startswith("bottleneck")] == ["bottleneck#split1.0", "bottleneck#split1.1"]
    assert not any(n.name == "bottleneck" for n in graph.nodes)
    result = plan_memory(graph, PlanOptions(alignment=64))
    verify_plan(graph, result)

    passes.registered_passes()
    saved = passes._PASSES[:]
    passes._PASSES[:] = [p for p in saved if p[1] != "split_conv_over_kept_concat"]
    try:
        unsplit = import_graph(model)
    finally:
        passes._PASSES[:] = saved
    before = plan_memory(unsplit, PlanOptions(alignment=64))
    # 8x8 f32 planes of 256 B: X (36 ch) + its normalized copy (36) + the bottleneck output (16) = 88 planes;
    # the op bound is the last Concat: X (36) + n2 (4) in, Y (40) out = 80 planes
    assert (before.arena_bytes, before.lower_bound_bytes) == (88 * 256, 80 * 256)
    # split: a (32), its normalized copy (32) and the partial sum (16) = 80 planes at a's Conv, n (4) is only
    # computed after it and X concatenated after the layer, next to the Concat that reads it: the op bound
    assert (result.arena_bytes, result.lower_bound_bytes) == (80 * 256, 80 * 256)
    _check(model, rtol=1e-4, atol=1e-4)


def test_conv_over_a_concat_is_not_split_when_it_stays_within_the_op_bound():
    model = dense_block_model()
    small = helper.make_node("Conv", ["r", "w2", "b2"], ["m"], kernel_shape=[1, 1], name="bottleneck")
    nodes = list(model.graph.node)
    # a wide Concat of the block output (40 ch in, 120 out) makes the op bound 160 planes, above the layer's 88
    nodes[-1] = helper.make_node("Concat", ["Y", "Y", "Y"], ["W"], axis=1, name="wide")
    nodes.append(helper.make_node("Relu", ["W"], ["y"], name="out"))
    model = _model(nodes, [("x", F32, (1, 4, 8, 8))], [("y", F32, (1, 120, 8, 8))], list(model.graph.initializer))
    graph = import_graph(model)
    assert small.name in [n.name for n in graph.nodes] and not [n for n in graph.nodes if "#split" in n.name]
