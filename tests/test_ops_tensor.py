"""Data-movement, reduction and normalization lowerings against onnx.reference, built and run natively;
a small transformer block also on aarch64 and armv7 under qemu-user."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from modelrun import check_model, compile_and_run, graph_model, reference, require_emulator

rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


node = helper.make_node


def model(nodes, feeds, outputs, consts=None, opset=17):
    return graph_model(nodes, feeds, outputs, consts, opset, ir_version=8, infer=True)


def ort_reference(m, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in m.graph.output], sess.run(None, feeds)))


def ints(*values, dtype=np.int64):
    return np.array(values, dtype=dtype)


CASES = {
    "transpose_concat": lambda: (
        [node("Transpose", ["x"], ["t"], perm=[2, 0, 1]), node("Transpose", ["ids"], ["ti"]),
         node("Concat", ["x", "c", "x"], ["cat"], axis=-1), node("Concat", ["m", "m"], ["mb"], axis=0)],
        {"x": f32(2, 3, 4), "ids": rng.integers(-9, 9, (3, 5)), "m": rng.random((2, 3)) > 0.5},
        ["t", "ti", "cat", "mb"], {"c": f32(2, 3, 1)}, 17),
    "slice": lambda: (
        [node("Slice", ["x", "s1", "e1", "a1", "p1"], ["y1"]), node("Slice", ["x", "s2", "e2", "a2", "p2"], ["y2"]),
         node("Slice", ["i", "s3", "e3"], ["y3"])],
        {"x": f32(5, 6, 7), "i": rng.integers(0, 100, (4, 6))},
        ["y1", "y2", "y3"],
        {"s1": ints(-1, 1), "e1": ints(-(2 ** 62), 100), "a1": ints(-1, 0), "p1": ints(-2, 1),
         "s2": ints(4, 5, 0), "e2": ints(0, -(2 ** 62), 7), "a2": ints(0, 1, 2), "p2": ints(-1, -3, 3),
         "s3": ints(1, -5), "e3": ints(3, -1)}, 13),
    "slice_attrs_opset9": lambda: (
        [node("Slice", ["x"], ["y"], starts=[1, -3], ends=[1000, -1], axes=[0, 2])],
        {"x": f32(3, 4, 5)}, ["y"], None, 9),
    "split": lambda: (
        [node("Split", ["x", "sp"], ["a", "b"], axis=1), node("Split", ["x"], ["c", "d", "e"], axis=-1, num_outputs=3)],
        {"x": f32(2, 5, 7)}, ["a", "b", "c", "d", "e"], {"sp": ints(2, 3)}, 18),
    "split_attr_opset11": lambda: (
        [node("Split", ["x"], ["a", "b", "c"], axis=0, split=[1, 2, 1]), node("Split", ["x"], ["d", "e"], axis=-1)],
        {"x": f32(4, 6)}, ["a", "b", "c", "d", "e"], None, 11),
    "gather": lambda: (
        [node("Gather", ["x", "idx"], ["g1"], axis=1), node("Gather", ["x", "one"], ["g2"], axis=-1),
         node("Gather", ["emb", "tok"], ["g3"]), node("Gather", ["x", "cidx"], ["g4"], axis=0)],
        {"x": f32(3, 4, 5), "idx": ints(-1, 0, 2, -4, 3, 1).reshape(2, 3), "emb": f32(10, 6),
         "tok": rng.integers(0, 10, (2, 4)).astype(np.int32)},
        ["g1", "g2", "g3", "g4"], {"one": np.array(-2, np.int64), "cidx": ints(2, -3)}, 13),
    "gather_elements_nd": lambda: (
        [node("GatherElements", ["x", "ie"], ["ge"], axis=2), node("GatherElements", ["b", "ie0"], ["ge0"], axis=0),
         node("GatherND", ["x", "ind"], ["gn"]), node("GatherND", ["x", "indb"], ["gnb"], batch_dims=1)],
        {"x": f32(3, 4, 5), "ie": rng.integers(-5, 5, (3, 4, 2)), "b": rng.random((3, 4)) > 0.5,
         "ie0": rng.integers(-3, 3, (2, 4)), "ind": ints(0, 1, 2, -1, 1, 0).reshape(3, 2),
         "indb": rng.integers(0, 4, (3, 2, 1))},
        ["ge", "ge0", "gn", "gnb"], None, 13),
    "expand_tile": lambda: (
        [node("Expand", ["x", "shape"], ["ex"]), node("Tile", ["i", "reps"], ["ti"]), node("Tile", ["x", "reps2"], ["tx"])],
        {"x": f32(3, 1), "i": rng.integers(-5, 5, (2, 3))},
        ["ex", "ti", "tx"], {"shape": ints(2, 3, 4), "reps": ints(2, 3), "reps2": ints(1, 2)}, 13),
    "pad": lambda: (
        [node("Pad", ["x", "pp", "v"], ["c"]), node("Pad", ["x", "pr"], ["r"], mode="reflect"),
         node("Pad", ["x", "pr"], ["e"], mode="edge"), node("Pad", ["x", "pr"], ["w"], mode="wrap"),
         node("Pad", ["i", "pa", "", "ax"], ["ia"])],
        {"x": f32(3, 4, 5), "v": np.array(1.5, np.float32), "i": rng.integers(0, 9, (3, 4))},
        ["c", "r", "e", "w", "ia"],
        {"pp": ints(1, 0, 2, 2, 1, 3), "pr": ints(2, 0, 3, 1, 3, 2), "pa": ints(2, 1), "ax": ints(-1)}, 19),
    "pad_negative": lambda: (
        [node("Pad", ["x", "pc", "v"], ["c"]), node("Pad", ["x", "pc"], ["e"], mode="edge")],
        {"x": f32(3, 4, 5), "v": np.array(1.5, np.float32)}, ["c", "e"], {"pc": ints(1, 0, -1, 2, -2, 3)}, 13),
    "pad_attrs_opset2": lambda: (
        [node("Pad", ["x"], ["y"], pads=[1, 2, 0, 1], value=-3.0)], {"x": f32(2, 3)}, ["y"], None, 2),
    "depth_space": lambda: (
        [node("DepthToSpace", ["x"], ["d"], blocksize=2), node("DepthToSpace", ["x"], ["c"], blocksize=2, mode="CRD"),
         node("SpaceToDepth", ["y"], ["s"], blocksize=2)],
        {"x": f32(2, 8, 3, 2), "y": f32(1, 3, 4, 6)}, ["d", "c", "s"], None, 13),
    "scatter": lambda: (
        [node("ScatterElements", ["x", "i", "u"], ["s1"], axis=1), node("ScatterElements", ["x", "i", "u"], ["s2"], axis=1, reduction="add"),
         node("ScatterND", ["x", "ind", "un"], ["s3"]), node("ScatterND", ["x", "ind2", "un2"], ["s4"], reduction="mul")],
        {"x": f32(3, 4), "i": ints(0, -1, 2, 1, -4, 3).reshape(3, 2), "u": f32(3, 2),
         "ind": ints(1, -1).reshape(2, 1), "un": f32(2, 4), "ind2": ints(0, 1, 2, 3, 0, 1).reshape(3, 2), "un2": f32(3)},
        ["s1", "s2", "s3", "s4"], None, 18),
    "trilu_onehot": lambda: (
        [node("Trilu", ["x", "k"], ["up"]), node("Trilu", ["x"], ["lo"], upper=0), node("Trilu", ["x", "kn"], ["lo2"], upper=0),
         node("OneHot", ["ids", "depth", "vals"], ["oh"]), node("OneHot", ["ids", "depth", "vals"], ["oh0"], axis=0)],
        {"x": f32(2, 4, 5), "k": np.array(1, np.int64), "ids": ints(0, 3, -1, 7, -2, 2).reshape(2, 3)},
        ["up", "lo", "lo2", "oh", "oh0"],
        {"kn": np.array(-1, np.int64), "depth": np.array(4, np.int64), "vals": np.array([0.5, 2.0], np.float32)}, 14),
    "resize": lambda: (
        [node("Resize", ["x", "", "sc"], ["n1"], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
         node("Resize", ["x", "", "", "sz"], ["n2"], mode="nearest"),
         node("Resize", ["x", "", "sc"], ["l1"], mode="linear"),
         node("Resize", ["x", "", "", "sz"], ["l2"], mode="linear", coordinate_transformation_mode="align_corners"),
         node("Resize", ["x", "", "", "sz"], ["l3"], mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
         node("Resize", ["x", "", "sc"], ["c1"], mode="cubic", exclude_outside=1),
         node("Resize", ["x", "", "down"], ["c2"], mode="cubic", antialias=1),
         node("Resize", ["x", "roi", "sc"], ["t1"], mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
              extrapolation_value=7.0)],
        {"x": f32(1, 2, 3, 4)}, ["n1", "n2", "l1", "l2", "l3", "c1", "c2", "t1"],
        {"sc": np.array([1, 1, 2, 1.5], np.float32), "sz": ints(1, 2, 5, 3), "down": np.array([1, 1, 0.6, 0.5], np.float32),
         "roi": np.array([0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3], np.float32)}, 18),
    "reduce_opset13": lambda: (
        [node("ReduceMean", ["x"], ["mean"], axes=[-1]), node("ReduceMax", ["x"], ["max"], axes=[0, 2], keepdims=0),
         node("ReduceMin", ["x"], ["min"]), node("ReduceProd", ["x"], ["prod"], axes=[1]),
         node("ReduceL1", ["x"], ["l1"], axes=[1], keepdims=0), node("ReduceL2", ["x"], ["l2"], axes=[-2, -1]),
         node("ReduceLogSum", ["p"], ["ls"], axes=[2]), node("ReduceLogSumExp", ["x"], ["lse"], axes=[1, 2], keepdims=0),
         node("ReduceSumSquare", ["x"], ["ss"], axes=[0]), node("ReduceSum", ["x", "ax"], ["sum"], keepdims=0),
         node("ReduceSum", ["i", "ax"], ["isum"]), node("ReduceMax", ["i"], ["imax"], axes=[1], keepdims=0)],
        {"x": f32(3, 4, 5), "p": np.abs(f32(3, 4, 5)) + 0.1, "i": rng.integers(-99, 99, (3, 4, 5))},
        ["mean", "max", "min", "prod", "l1", "l2", "ls", "lse", "ss", "sum", "isum", "imax"], {"ax": ints(-1, 0)}, 13),
    "reduce_opset20": lambda: (
        [node("ReduceMean", ["x", "ax"], ["mean"], keepdims=0), node("ReduceMax", ["x", "none"], ["noop"], noop_with_empty_axes=1),
         node("ReduceL2", ["x"], ["all"]), node("ReduceSum", ["x", "none"], ["sum_all"], keepdims=0),
         node("ReduceMax", ["m", "ax"], ["any"]), node("ReduceMin", ["m", "ax"], ["every"], keepdims=0)],
        {"x": f32(2, 3, 4), "m": rng.random((2, 3, 4)) > 0.3}, ["mean", "noop", "all", "sum_all", "any", "every"],
        {"ax": ints(1), "none": np.zeros(0, np.int64)}, 20),
    "arg_cumsum": lambda: (
        [node("ArgMax", ["i"], ["am"], axis=1), node("ArgMax", ["i"], ["aml"], axis=-1, keepdims=0, select_last_index=1),
         node("ArgMin", ["x"], ["an"], axis=0, keepdims=0), node("ArgMin", ["i"], ["anl"], axis=1, select_last_index=1),
         node("CumSum", ["x", "a1"], ["cs"]), node("CumSum", ["x", "a2"], ["csr"], exclusive=1, reverse=1),
         node("CumSum", ["i", "a1"], ["csi"], reverse=1), node("CumSum", ["x", "ax"], ["csd"], exclusive=1)],
        {"x": f32(3, 4, 5), "i": rng.integers(0, 3, (3, 4, 5)), "ax": np.array(-2, np.int32)},
        ["am", "aml", "an", "anl", "cs", "csr", "csi", "csd"], {"a1": np.array(-1, np.int64), "a2": np.array(1, np.int32)}, 13),
    "softmax_opset11": lambda: (
        [node("Softmax", ["x"], ["s"]), node("LogSoftmax", ["x"], ["ls"], axis=2), node("Hardmax", ["x"], ["h"])],
        {"x": f32(2, 3, 4)}, ["s", "ls", "h"], None, 11),
    "softmax_opset13": lambda: (
        [node("Softmax", ["x"], ["s"], axis=1), node("LogSoftmax", ["x"], ["ls"]), node("Hardmax", ["x"], ["h"], axis=0),
         node("Softmax", ["big"], ["sb"])],
        {"x": f32(2, 3, 4), "big": 50 * f32(3, 70)}, ["s", "ls", "h", "sb"], None, 13),
    "layernorm": lambda: (
        [node("LayerNormalization", ["x", "g", "b"], ["y", "mean", "inv"], axis=-2, epsilon=1e-3),
         node("LayerNormalization", ["x", "g1"], ["y1"])],
        {"x": 3 + f32(2, 3, 4)}, ["y", "mean", "inv", "y1"], {"g": f32(3, 4), "b": f32(3, 4), "g1": f32(4)}, 17),
}


ORT_ORACLE = {"pad_negative", "softmax_opset11"}
"""onnx.reference rejects negative pads and applies opset-13 Softmax semantics to older opsets."""


@pytest.mark.parametrize("case", list(CASES))
def test_op(tmp_path, case):
    nodes, feeds, outputs, consts, opset = CASES[case]()
    check_model(tmp_path, model(nodes, feeds, outputs, consts, opset), feeds, oracle=ort_reference if case in ORT_ORACLE else reference)


def transformer_block(seq=8, vocab=20, dim=16, heads=2):
    """Embedding Gather from int64 ids, LayerNorm, self-attention with a Where mask, Erf-GELU MLP."""
    hd = dim // heads
    w = {n: f32(*s) * 0.3 for n, s in {"emb": (vocab, dim), "pos": (seq, dim), "wq": (dim, dim), "wk": (dim, dim),
                                        "wv": (dim, dim), "wo": (dim, dim), "w1": (dim, 4 * dim), "w2": (4 * dim, dim)}.items()}
    w.update(g=1 + f32(dim) * 0.1, bln=f32(dim) * 0.1, heads=ints(1, seq, heads, hd), flat=ints(1, seq, dim),
             zero=np.array(0, np.int64), neg=np.array(-1e4, np.float32), scale=np.array(hd ** -0.5, np.float32),
             half=np.array(0.5, np.float32), one=np.array(1.0, np.float32), rs2=np.array(2 ** -0.5, np.float32))
    n = [node("Gather", ["emb", "ids"], ["e"]), node("Add", ["e", "pos"], ["h0"]),
         node("LayerNormalization", ["h0", "g", "bln"], ["h"])]
    for p in "qkv":
        n += [node("MatMul", ["h", f"w{p}"], [f"{p}0"]), node("Reshape", [f"{p}0", "heads"], [f"{p}1"])]
    n += [node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]), node("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
          node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
          node("MatMul", ["q", "kt"], ["sc0"]), node("Mul", ["sc0", "scale"], ["sc"]),
          node("Equal", ["mask", "zero"], ["pad"]), node("Unsqueeze", ["pad", "ax12"], ["pad4"]),
          node("Where", ["pad4", "neg", "sc"], ["scm"]), node("Softmax", ["scm"], ["att"], axis=-1),
          node("MatMul", ["att", "v"], ["ctx0"]), node("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
          node("Reshape", ["ctx1", "flat"], ["ctx"]), node("MatMul", ["ctx", "wo"], ["ao"]), node("Add", ["ao", "h"], ["r1"]),
          node("LayerNormalization", ["r1", "g", "bln"], ["h2"]),
          node("MatMul", ["h2", "w1"], ["f0"]), node("Mul", ["f0", "rs2"], ["f1"]), node("Erf", ["f1"], ["f2"]),
          node("Add", ["f2", "one"], ["f3"]), node("Mul", ["f0", "f3"], ["f4"]), node("Mul", ["f4", "half"], ["f5"]),
          node("MatMul", ["f5", "w2"], ["f6"]), node("Add", ["f6", "h2"], ["out"]),
          node("ReduceMean", ["out"], ["pooled"], axes=[1])]
    w["ax12"] = ints(1, 2)
    ids = rng.integers(0, vocab, (1, seq))
    mask = np.ones((1, seq), np.int64)
    mask[0, -2:] = 0
    feeds = {"ids": ids, "mask": mask}
    return model(n, feeds, ["out", "pooled"], w, 17), feeds


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64", "qemu-armv7"])
def test_transformer_block(tmp_path, board):
    require_emulator(board)
    m, feeds = transformer_block()
    check_model(tmp_path, m, feeds, board)


def layout_model():
    """Ops between Neg nodes, so their inputs and outputs are intermediates that can take any layout."""
    x, y, ids = f32(2, 8, 3, 4), f32(2, 3, 4), rng.integers(-3, 3, (2, 5, 4))
    ops = [
        node("Transpose", ["a"], ["r0"], perm=[0, 2, 3, 1]), node("Slice", ["a", "ss", "se", "sa", "sp"], ["r1"]),
        node("Concat", ["a", "a"], ["r2"], axis=2), node("Pad", ["a", "pads"], ["r3"], mode="reflect"),
        node("DepthToSpace", ["a"], ["r4"], blocksize=2), node("Tile", ["b", "reps"], ["r5"]),
        node("Gather", ["b", "gi"], ["r6"], axis=1), node("GatherElements", ["b", "ids"], ["r7"], axis=1),
        node("Softmax", ["b"], ["r8"], axis=1), node("LayerNormalization", ["b", "g"], ["r9"], axis=1),
        node("ReduceSum", ["b", "rax"], ["r10"]), node("ArgMax", ["b"], ["r11"], axis=1),
        node("CumSum", ["b", "cax"], ["r12"], reverse=1), node("ScatterElements", ["b", "si", "su"], ["r13"], axis=2),
        node("Expand", ["b", "eshape"], ["r14"]), node("Split", ["b"], ["r15", "r16"], axis=2, num_outputs=2),
    ]
    outs = [o for n in ops for o in n.output]
    nodes = [node("Neg", ["x"], ["a"]), node("Neg", ["y"], ["b"]), *ops]
    nodes += [node("Cast", [o], [f"o{o}"], to=onnx.TensorProto.INT64) if o == "r11" else node("Neg", [o], [f"o{o}"]) for o in outs]
    consts = {"ss": ints(1, 3, 0), "se": ints(-1, 0, 3), "sa": ints(1, 3, 2), "sp": ints(2, -1, 1), "pads": ints(0, 1, 2, 0, 0, 2, 1, 3),
              "reps": ints(1, 2, 2), "gi": ints(2, -1, 0, 0).reshape(2, 2), "g": f32(3, 4), "rax": ints(0, 2), "cax": np.array(1, np.int64),
              "si": rng.integers(-4, 4, (2, 3, 2)), "su": f32(2, 3, 2), "eshape": ints(3, 2, 3, 4)}
    m = model(nodes, {"x": x, "y": y, "ids": ids % 3 - 1}, [f"o{o}" for o in outs], consts, 18)
    return m, {"x": x, "y": y, "ids": ids % 3 - 1}


def test_non_row_major_layouts(tmp_path, patched_compiler):
    """Every intermediate stored with its dimensions reversed: kernels must address through strides."""
    import fluidml_xc.pipeline as pipeline
    real = pipeline.optimize

    def reversed_layouts(graph, spec, mode, costs, threads=1, timer=None):
        decisions = real(graph, spec, "plain", costs, threads, timer)
        decisions.layouts = {name: tuple(reversed(range(len(graph.tensors[name].shape)))) for name in graph.activations()
                             if name not in graph.outputs and len(graph.tensors[name].shape) > 1}
        return decisions
    patched_compiler.setattr(pipeline, "optimize", reversed_layouts)
    m, feeds = layout_model()
    got = compile_and_run(m, feeds, tmp_path, opt="plain", profile_runner=False)
    for name, expected in reference(m, feeds).items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("board", ["x86_64", "rpi4"])
def test_exp_sigmoid_erf_keep_nan_and_infinities(tmp_path, board):
    """The vectorized expf/erff clamp their argument; NaN must stay NaN and exp overflow must give inf."""
    require_emulator(board)
    x = np.array([np.nan, np.inf, -np.inf, 100.0, 89.0, 88.0, -100.0, 0.0, 1.5, -3.0, 5.0], np.float32)
    m = model([node("Exp", ["x"], ["e"]), node("Sigmoid", ["x"], ["s"]), node("Erf", ["x"], ["r"]),
               node("Tanh", ["x"], ["t"])], {"x": x}, ["e", "s", "r", "t"])
    check_model(tmp_path, m, {"x": x}, board=board, rtol=1e-5, atol=1e-6)


def test_float16_matmul_and_softmax_round_like_numpy(tmp_path):
    """float16 MatMul sums in float32 and rounds once, Softmax sums in float32 and divides: exactly numpy's
    results (summing in float16 drifts by several ulps at K=512)."""
    r = np.random.default_rng(7)
    a = r.random((4, 512)).astype(np.float16)
    b = r.random((512, 6)).astype(np.float16)
    x = (r.standard_normal((3, 40)) * 3).astype(np.float16)
    m = model([node("MatMul", ["a", "b"], ["y"]), node("Softmax", ["x"], ["s"], axis=-1)], {"a": a, "b": b, "x": x}, ["y", "s"])
    got = compile_and_run(m, {"a": a, "b": b, "x": x}, tmp_path, profile_runner=False)
    np.testing.assert_array_equal(got["y"], a @ b)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_array_equal(got["s"], e / e.sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_div_and_mod_never_trap(tmp_path, dtype):
    """Integer division by 0 (undefined in ONNX) and MIN / -1 must not kill the process: an If computed
    both ways may divide in the branch not taken. Defined lanes match numpy."""
    info = np.iinfo(dtype)
    x = np.array([7, -7 if info.min < 0 else 9, info.min, 5, 12], dtype)
    y = np.array([2, 3, -1 if info.min < 0 else 1, 0, 5], dtype)
    m = model([node("Div", ["x", "y"], ["d"]), node("Mod", ["x", "y"], ["r"], fmod=1)], {"x": x, "y": y}, ["d", "r"])
    got = compile_and_run(m, {"x": x, "y": y}, tmp_path, profile_runner=False)
    defined = y != 0
    want_d = (np.trunc(x[defined].astype(np.float64) / y[defined])).astype(np.int64).astype(dtype)
    np.testing.assert_array_equal(got["d"][defined], want_d)
    np.testing.assert_array_equal(got["r"][defined], np.fmod(x[defined], y[defined]))
