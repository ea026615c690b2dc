"""Quantized integer ops (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) and the assorted ops
of ops/misc.py and frontend/subgraphs.py (ReverseSequence, TensorScatter, Det, Binarizer, ArrayFeatureExtractor,
TfIdfVectorizer, Scan, If) against onnx.reference, JIT-compiled on x86_64; integer results must
match exactly. One quantized model also runs under qemu-aarch64."""
from __future__ import annotations

import platform

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fluidml_xc.errors import InputError
from modelrun import compile_and_run, graph_model, jit_run, reference, require_emulator

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="JIT on x86_64")

rng = np.random.default_rng(11)


def model(nodes, feeds, outputs, consts=None, opset=21, extra_opsets=()):
    return graph_model(nodes, feeds, outputs, consts, opset, ir_version=10, extra_opsets=extra_opsets)


def check(got, want, exact=True, rtol=1e-5, atol=1e-5):
    for name, expected in want.items():
        expected = np.asarray(expected)
        assert got[name].shape == expected.shape, name
        assert got[name].dtype == expected.dtype, name
        if exact:
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected, rtol=rtol, atol=atol, err_msg=name)


def q(dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def test_matmul_integer():
    a, b = q(np.uint8, (2, 5, 7)), q(np.int8, (7, 6))
    feeds = {"a": a, "b": b, "a2": q(np.int8, (3, 4)), "b2": q(np.uint8, (2, 4, 5))}
    consts = {"azp": np.array(3, np.uint8), "bzp": q(np.int8, (6,)), "b2zp": np.array([7], np.uint8)}
    m = model([helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"]),
               helper.make_node("MatMulInteger", ["a2", "b2", "", "b2zp"], ["y2"]),
               helper.make_node("MatMulInteger", ["a", "b"], ["y3"])], feeds, ["y", "y2", "y3"], consts, opset=10)
    check(jit_run(m, feeds), reference(m, feeds))


def test_matmul_integer_per_row_a_zero_point():
    a, b, azp = q(np.uint8, (4, 3)), q(np.uint8, (3, 5)), q(np.uint8, (4,))
    m = model([helper.make_node("MatMulInteger", ["a", "b", "azp"], ["y"])], {"a": a, "b": b}, ["y"], {"azp": azp}, opset=10)
    want = (a.astype(np.int32) - azp.astype(np.int32)[:, None]) @ b.astype(np.int32)
    check(jit_run(m, {"a": a, "b": b}), {"y": want})


@pytest.mark.parametrize("dtype,scale_dtype", [(np.uint8, np.float32), (np.int8, np.float32), (np.int8, np.float16)])
def test_qlinear_matmul(dtype, scale_dtype):
    a, b = q(dtype, (2, 3, 8)), q(dtype, (8, 5))
    feeds = {"a": a, "b": b, "a_s": np.array([0.02], scale_dtype), "y_s": np.array([0.3], scale_dtype)}
    consts = {"a_zp": q(dtype, (1,)), "b_s": np.array([0.05], scale_dtype), "b_zp": q(dtype, (1,)), "y_zp": q(dtype, (1,))}
    m = model([helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])],
              feeds, ["y"], consts)
    check(jit_run(m, feeds), reference(m, feeds))


CONV_CASES = [
    dict(x=(1, 2, 7, 6), w=(4, 2, 3, 3), attrs=dict(pads=[1, 0, 2, 1], strides=[2, 1])),
    dict(x=(2, 4, 6, 6), w=(4, 2, 2, 3), attrs=dict(group=2, dilations=[2, 1], auto_pad="SAME_UPPER")),
    dict(x=(1, 3, 9, 4), w=(2, 3, 4, 1), attrs=dict(strides=[2, 1], auto_pad="SAME_LOWER")),
    dict(x=(1, 2, 3, 40), w=(2, 2, 2, 33), attrs=dict(pads=[0, 3, 1, 2])),  # wider than MAX_UNROLLED_TAPS
    # rows wide enough for the vector blocks (x86: 8 columns), channel blocks of 4 and 2
    dict(x=(2, 4, 5, 29), w=(8, 2, 3, 3), attrs=dict(pads=[1, 2, 1, 1], group=2, dilations=[1, 2])),
    dict(x=(1, 3, 4, 41), w=(6, 3, 2, 4), attrs=dict(pads=[0, 1, 1, 2], strides=[1, 2])),
    dict(x=(1, 2, 5, 5, 6), w=(3, 2, 2, 3, 3), attrs=dict(pads=[1, 0, 1, 0, 1, 2], strides=[1, 2, 3])),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_integer(case):
    c = CONV_CASES[case]
    x, w = q(np.uint8, c["x"]), q(np.uint8, c["w"])
    feeds = {"x": x, "w": w}
    # onnx.reference broadcasts a per-channel w_zero_point for 2-D kernels only
    consts = {"xzp": np.array(128, np.uint8), "wzp": q(np.uint8, (c["w"][0],)) if len(c["w"]) == 4 else np.array(9, np.uint8)}
    m = model([helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], **c["attrs"]),
               helper.make_node("ConvInteger", ["x", "w"], ["y0"], **c["attrs"])], feeds, ["y", "y0"], consts, opset=10)
    check(jit_run(m, feeds), reference(m, feeds))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_conv(dtype):
    x, w = q(dtype, (1, 3, 6, 5)), q(np.int8, (4, 3, 3, 3))
    feeds = {"x": x}
    consts = {"x_s": np.array(0.05, np.float32), "x_zp": q(dtype, ()), "w": w,
              "w_s": rng.uniform(0.01, 0.03, 4).astype(np.float32), "w_zp": np.zeros(4, np.int8),
              "y_s": np.array(0.5, np.float32), "y_zp": q(dtype, ()), "bias": rng.integers(-500, 500, 4).astype(np.int32)}
    m = model([helper.make_node("QLinearConv", ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp", "bias"], ["y"],
                                pads=[1, 1, 1, 1])], feeds, ["y"], consts, opset=10)
    check(jit_run(m, feeds), reference(m, feeds))


def test_quantized_cross_aarch64(tmp_path):
    require_emulator("qemu-aarch64")
    a, b = q(np.int8, (3, 8)), q(np.int8, (8, 5))
    x, w = q(np.uint8, (1, 2, 5, 5)), q(np.uint8, (3, 2, 3, 3))
    feeds = {"a": a, "b": b, "x": x, "w": w}
    consts = {"s": np.array([0.02], np.float16), "zp": q(np.int8, (1,)), "xzp": np.array(100, np.uint8)}
    m = model([helper.make_node("QLinearMatMul", ["a", "s", "zp", "b", "s", "zp", "s", "zp"], ["y"]),
               helper.make_node("ConvInteger", ["x", "w", "xzp"], ["c"], pads=[1, 1, 1, 1])], feeds, ["y", "c"], consts)
    check(compile_and_run(m, feeds, tmp_path, "qemu-aarch64", profile_runner=False), reference(m, feeds))


# -- misc ---------------------------------------------------------------------------------------------
def test_reverse_sequence_tensor_scatter_det():
    x = rng.standard_normal((5, 3, 2)).astype(np.float32)
    feeds = {"x": x, "lens": np.array([5, 0, 3], np.int64), "cache": rng.standard_normal((2, 3, 6, 4)).astype(np.float32),
             "upd": rng.standard_normal((2, 3, 3, 4)).astype(np.float32), "widx": np.array([4, 1], np.int64),
             "m": rng.standard_normal((2, 3, 4, 4)).astype(np.float32), "m1": rng.standard_normal((3, 3)).astype(np.float64)}
    nodes = [helper.make_node("ReverseSequence", ["x", "lens"], ["r0"], batch_axis=1, time_axis=0),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("ReverseSequence", ["xt", "lens"], ["r1"], batch_axis=0, time_axis=1),
             helper.make_node("TensorScatter", ["cache", "upd", "widx"], ["s0"], mode="circular"),
             helper.make_node("TensorScatter", ["cache", "upd", "widx"], ["s1"], axis=1),
             helper.make_node("TensorScatter", ["cache", "upd"], ["s2"]),
             helper.make_node("Det", ["m"], ["d0"]), helper.make_node("Det", ["m1"], ["d1"])]
    m = model(nodes, feeds, ["r0", "r1", "s0", "s2", "d0", "d1"], opset=24)
    # s1 (axis 1, linear) would write past the cache for batch 0 and is only checked to compile: drop it
    m.graph.node.remove(m.graph.node[4])
    check(jit_run(m, feeds), reference(m, feeds), exact=False)


def test_singular_det_is_zero():
    m = model([helper.make_node("Det", ["m"], ["d"])], {"m": np.zeros((2, 3, 3), np.float32)}, ["d"], opset=22)
    feeds = {"m": np.array([[[1, 2, 3], [2, 4, 6], [0, 1, 1]], [[0, 1, 0], [1, 0, 0], [0, 0, 2]]], np.float32)}
    np.testing.assert_allclose(jit_run(m, feeds)["d"], [0.0, -2.0], atol=1e-6)


def test_det_of_a_large_matrix_is_a_one_line_error():
    from fluidml_xc.errors import InputError
    m = model([helper.make_node("Det", ["m"], ["d"])], {"m": np.zeros((200, 200), np.float32)}, ["d"], opset=22)
    with pytest.raises(InputError, match=r"Det.*200x200.*n <= 128"):
        jit_run(m, {"m": np.eye(200, dtype=np.float32)})


def test_ml_binarizer_array_feature_extractor():
    feeds = {"x": rng.standard_normal((3, 4, 5)).astype(np.float32), "i": np.array([4, 0, 2], np.int64),
             "v": rng.integers(-5, 5, (2, 6)).astype(np.int32)}
    nodes = [helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", threshold=0.3),
             helper.make_node("Binarizer", ["v"], ["bv"], domain="ai.onnx.ml", threshold=-1.5),
             helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["a"], domain="ai.onnx.ml"),
             helper.make_node("ArrayFeatureExtractor", ["v", "i"], ["av"], domain="ai.onnx.ml")]
    m = model(nodes, feeds, ["b", "bv", "a", "av"], opset=18, extra_opsets=[("ai.onnx.ml", 3)])
    check(jit_run(m, feeds), reference(m, feeds))


@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", [0.5, 1.5, 2.0, 3.0, 0.25, 4.0, 1.0]),
                                          ("TFIDF", [0.5, 1.5, 2.0, 3.0, 0.25, 4.0, 1.0])])
def test_tfidf_vectorizer(mode, weights):
    feeds = {"x": np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int64), "y": np.array([2, 3, 5, 4, 5, 6, 7, 8, 6, 7], np.int32)}
    attrs = dict(max_gram_length=3, max_skip_count=2, min_gram_length=1, mode=mode, ngram_counts=[0, 4, 8],
                 ngram_indexes=[0, 1, 2, 3, 4, 6, 5], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 5])
    if weights:
        attrs["weights"] = weights
    nodes = [helper.make_node("TfIdfVectorizer", ["x"], ["tx"], **attrs), helper.make_node("TfIdfVectorizer", ["y"], ["ty"], **attrs)]
    m = model(nodes, feeds, ["tx", "ty"], opset=9)
    check(jit_run(m, feeds), reference(m, feeds) if weights is None else ort_run(m, feeds))



@pytest.mark.parametrize("mode", ["IDF", "TFIDF"])
def test_tfidf_weights_follow_their_ngram_to_its_column(mode):
    """weights[i] belongs to the i-th n-gram, at column ngram_indexes[i] (ONNX Runtime; skl2onnx permutes the
    columns); onnx.reference weighs by column instead, so ONNX Runtime is the oracle."""
    feeds = {"x": np.array([[5, 6, 7, 7], [7, 9, 5, 5]], np.int64)}
    attrs = dict(max_gram_length=1, max_skip_count=0, min_gram_length=1, mode=mode, ngram_counts=[0],
                 ngram_indexes=[2, 0, 1], pool_int64s=[5, 6, 7], weights=[10.0, 20.0, 30.0])
    m = model([helper.make_node("TfIdfVectorizer", ["x"], ["t"], **attrs)], feeds, ["t"], opset=9)
    check(jit_run(m, feeds), ort_run(m, feeds))


def test_tfidf_weights_count_other_than_the_ngrams_is_one_line():
    feeds = {"x": np.array([[5, 6]], np.int64)}
    attrs = dict(max_gram_length=1, max_skip_count=0, min_gram_length=1, mode="TFIDF", ngram_counts=[0],
                 ngram_indexes=[2, 0, 1], pool_int64s=[5, 6, 7], weights=[1.0, 2.0, 3.0, 4.0])
    m = model([helper.make_node("TfIdfVectorizer", ["x"], ["t"], **attrs)], feeds, ["t"], opset=9)
    with pytest.raises(InputError, match="weights has 4 values, expected one per n-gram"):
        jit_run(m, feeds)

def _scan_body():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "w"], ["y_t"]),
         helper.make_node("ReduceSum", ["x_t"], ["r_t"], keepdims=0)],
        "body", [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("r_t", TensorProto.FLOAT, [])])
    return body


def test_scan_unrolled_and_if():
    feeds = {"init": rng.standard_normal(3).astype(np.float32), "xs": rng.standard_normal((3, 4)).astype(np.float32),
             "c": np.array(False), "a": rng.standard_normal(5).astype(np.float32)}
    consts = {"w": rng.standard_normal(3).astype(np.float32), "k": np.array(True)}
    then_g = helper.make_graph([helper.make_node("Neg", ["a"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [5])])
    else_g = helper.make_graph([helper.make_node("Abs", ["a"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [5])])
    nodes = [helper.make_node("Scan", ["init", "xs"], ["fin", "ys", "rs"], body=_scan_body(), num_scan_inputs=1,
                              scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[-1, 0], scan_output_directions=[0, 1]),
             helper.make_node("If", ["c"], ["i0"], then_branch=then_g, else_branch=else_g),
             helper.make_node("If", ["k"], ["i1"], then_branch=then_g, else_branch=else_g)]
    m = model(nodes, feeds, ["fin", "ys", "rs", "i0", "i1"], consts, opset=18)
    for cond in (False, True):  # onnx.reference's Scan knows no reversed directions: ONNX Runtime is the oracle
        feeds["c"] = np.array(cond)
        check(jit_run(m, feeds), ort_run(m, feeds), exact=False)


def test_loop_with_build_time_trip_count():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["acc_in", "x"], ["prod"]),
         helper.make_node("Add", ["prod", "i_f"], ["acc_out"]),
         helper.make_node("Neg", ["acc_out"], ["scan_t"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("scan_t", TensorProto.FLOAT, [4])])
    feeds = {"a0": rng.standard_normal(4).astype(np.float32), "x": rng.uniform(0.5, 1.5, 4).astype(np.float32)}
    consts = {"trips": np.array(5, np.int64), "go": np.array(True)}
    m = model([helper.make_node("Loop", ["trips", "go", "a0"], ["fin", "ys"], body=body)], feeds, ["fin", "ys"], consts, opset=18)
    check(jit_run(m, feeds), ort_run(m, feeds), exact=False)


def ort_run(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    m = onnx.shape_inference.infer_shapes(m)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in m.graph.output], sess.run(None, feeds)))
