"""Issue 24 regressions: NaN and infinities that reached the output as plausible finite numbers, each from the
route that dropped them (fused epilogues, Conv's padding, folded BatchNormalization / per-channel constants,
fast-math factoring, Clip bounds, ReduceLogSumExp, ArgMax), compared with onnx.reference (the rule) and, where
ONNX Runtime agrees, with it too; and the build's one warning line per non-finite weight or attribute."""
from __future__ import annotations

import struct

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from fluidml_xc.run.backend import compile_model
from modelrun import graph_model
from nancases import disagreement, Check, onnxruntime, reference

RNG = np.random.default_rng(24)
NAN, INF = float("nan"), float("inf")


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ours_follow_the_rule(model, feeds, ort_agrees: bool = True, check: Check = Check(loose=True)):
    got, want, ort = compile_model(model)(feeds), reference(model, feeds), onnxruntime(model, feeds)
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.isnan(w).any() or np.isinf(w).any(), "the case must produce a non-finite value"
        why = disagreement(g, w, check)
        assert why is None, f"output {i}: {why}"
        if ort_agrees:
            assert disagreement(ort[i], w, check) is None, f"ONNX Runtime departs: {disagreement(ort[i], w, check)}"
    return got


@pytest.mark.parametrize("alpha,beta", [(NAN, 1.0), (1.0, NAN), (1.0, INF), (INF, 1.0)])
def test_gemm_relu_with_a_non_finite_attribute(alpha, beta):
    """Gemm + Relu (fused: passes/epilogues.py) with alpha or beta NaN/Inf: the fused Relu kept 0 for NaN."""
    x = f32(4, 8)
    model = graph_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], alpha=alpha, beta=beta),
                         helper.make_node("Relu", ["g"], ["y"])], {"x": x}, ["y"], {"w": f32(8, 10), "b": f32(10)})
    _ours_follow_the_rule(model, {"x": x})


def test_matmul_bias_relu_with_a_nan_bias():
    x = f32(2, 5, 16)
    bias = f32(12)
    bias[[1, 7]] = NAN
    model = graph_model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
                         helper.make_node("Relu", ["a"], ["y"])], {"x": x}, ["y"], {"w": f32(16, 12), "b": bias})
    got = _ours_follow_the_rule(model, {"x": x})[0]
    assert np.isnan(got[..., [1, 7]]).all()


def test_gemm_alpha_byte_flipped_to_nan():
    """One flipped byte of a model file: Gemm's alpha 1.5 (0x3fc00000) becomes 0x7fc00000, a NaN."""
    x = f32(1, 8)
    model = graph_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], alpha=1.5), helper.make_node("Relu", ["g"], ["y"])],
                        {"x": x}, ["y"], {"w": f32(8, 10), "b": f32(10)})
    data = bytearray(model.SerializeToString())
    at = data.find(struct.pack("<f", 1.5))
    data[at + 3] ^= 0x40
    flipped = onnx.load_from_string(bytes(data))
    assert np.isnan(flipped.graph.node[0].attribute[0].f)
    got = _ours_follow_the_rule(flipped, {"x": x})[0]
    assert np.isnan(got).all()


def _small_cnn(w1: np.ndarray) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "w2", "b2"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["y"])]
    return graph_model(nodes, {"x": f32(1, 1, 6, 6)}, ["y"], {"w1": w1, "b1": f32(4), "w2": f32(10, 4), "b2": f32(10)})


@pytest.mark.parametrize("value", [NAN, INF])
def test_small_cnn_whose_conv_weight_is_non_finite(value):
    """A small CNN whose first Conv has NaN / Inf weights in one channel: the Gemm after it is NaN in every
    output, which its fused Relu turned into 0."""
    w1 = f32(4, 1, 3, 3)
    w1[2] = value
    model = _small_cnn(w1)
    x = f32(1, 1, 6, 6)
    got = _ours_follow_the_rule(model, {"x": x})[0]
    assert np.isnan(got).all()


@pytest.mark.parametrize("kernel,pads,strides,group", [([3, 3], [1, 1, 1, 1], [1, 1], 1), ([1, 3], [1, 0, 0, 1], [2, 2], 2),
                                                       ([3], [2, 1], [1], 1), ([3, 3], [1, 1, 1, 1], [1, 1], 8)])
def test_conv_padding_times_a_non_finite_weight(kernel, pads, strides, group):
    cin = cout = 8 if group == 8 else 4
    x = f32(1, cin, *([7] * len(kernel)))
    w = f32(cout, cin // group, *kernel)
    w.reshape(cout, -1)[::2, 0] = [NAN, INF, -INF, NAN][: (cout + 1) // 2] * (1 if cout <= 8 else 2)
    model = graph_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=kernel, pads=pads, strides=strides, group=group)],
                        {"x": x}, ["y"], {"w": w})
    _ours_follow_the_rule(model, {"x": x}, ort_agrees=False)


def test_batchnorm_with_an_infinite_scale_is_not_folded_into_the_conv():
    """Folding scale = inf into the weights turned (x - mean) * inf into a sum of +-inf products: NaN."""
    x = f32(1, 3, 6, 6)
    scale = np.array([1.0, INF, -INF, 0.5], np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "s", "sh", "m", "v"], ["y"])]
    model = graph_model(nodes, {"x": x}, ["y"], {"w": f32(4, 3, 3, 3), "b": f32(4), "s": scale, "sh": f32(4), "m": f32(4),
                                                 "v": np.abs(f32(4))})
    got = _ours_follow_the_rule(model, {"x": x}, ort_agrees=False)[0]
    assert np.isinf(got[0, 1:3]).all()


def test_batchnorm_node_with_infinite_scale_and_zero_variance():
    x = f32(2, 4, 5)
    x[0, 3, 0] = 0.25  # x == mean: (x - mean) * inf = NaN there, inf elsewhere
    params = {"s": np.array([INF, 1.0, -1.0, INF], np.float32), "sh": f32(4), "m": np.array([0, 0, 0, 0.25], np.float32),
              "v": np.array([1.0, 0.0, 0.0, 1.0], np.float32)}
    model = graph_model([helper.make_node("BatchNormalization", ["x", "s", "sh", "m", "v"], ["y"], epsilon=0.0)],
                        {"x": x}, ["y"], params)
    got = _ours_follow_the_rule(model, {"x": x}, ort_agrees=False)[0]
    assert np.isnan(got[0, 3, 0]) and np.isinf(got[0, 0]).all()


def test_conv_times_a_per_channel_constant_that_underflows_a_weight():
    """Mul by a per-channel constant folded into the conv weights: a denormal weight times 0.2 rounds to 0, and an
    infinite input then meets 0 (NaN) where the separate Mul gives -inf."""
    x = f32(1, 2, 5, 5)
    x[0, 0, 2, 2] = INF
    w = f32(3, 2, 3, 3)
    w[:, 0, 1, 1] = 1.4e-45
    scale = np.array([-0.2, 0.3, 1e-30], np.float32).reshape(1, 3, 1, 1)
    model = graph_model([helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]), helper.make_node("Mul", ["c", "s"], ["m"]),
                         helper.make_node("Relu", ["m"], ["y"])], {"x": x}, ["y"], {"w": w, "s": scale})
    _ours_follow_the_rule(model, {"x": x}, ort_agrees=False)


def test_gemm_infinite_weights_against_inputs_of_both_signs():
    """x * inf + y * inf with x, y of opposite signs is NaN; with nsz, LLVM factored it into (x + y) * inf."""
    a = np.array([[-0.78, 0.26, 0.25, -1.09, -0.37, -0.30, 0.26], [0.70, 0.51, 0.62, 2.38, 0.36, -0.92, 0.82]] * 2, np.float32)
    b = np.array([[1, 1, 1, 1, 1, INF, INF]], np.float32)
    model = graph_model([helper.make_node("Gemm", ["a", "b"], ["y"], transB=1)], {"a": a}, ["y"], {"b": b})
    got = _ours_follow_the_rule(model, {"a": a}, check=Check())[0]
    assert np.isnan(got).all()


@pytest.mark.parametrize("bound", ["constant", "input"])
def test_clip_with_a_nan_bound_is_nan(bound):
    x = f32(3, 4)
    lo = np.array(NAN, np.float32)
    feeds, consts = ({"x": x}, {"lo": lo}) if bound == "constant" else ({"x": x, "lo": lo}, {})
    model = graph_model([helper.make_node("Clip", ["x", "lo"], ["y"])], feeds, ["y"], consts)
    got = _ours_follow_the_rule(model, feeds, ort_agrees=False, check=Check())[0]
    assert np.isnan(got).all()


def test_conv_fused_clip_with_a_nan_bound():
    x = f32(1, 2, 5, 5)
    model = graph_model([helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
                        {"x": x}, ["y"], {"w": f32(3, 2, 3, 3), "lo": np.array(0.0, np.float32), "hi": np.array(NAN, np.float32)})
    _ours_follow_the_rule(model, {"x": x}, ort_agrees=False)


def test_reduce_log_sum_exp_of_infinities():
    x = f32(4, 5)
    x[0, 1] = INF
    x[1, :] = -INF
    x[2, 3] = NAN
    model = graph_model([helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)], {"x": x}, ["y"],
                        {"axes": np.array([1], np.int64)}, opset=18)
    got = _ours_follow_the_rule(model, {"x": x}, check=Check())[0]
    assert got[0] == INF and got[1] == -INF and np.isnan(got[2])


@pytest.mark.parametrize("op,attrs", [("ArgMax", {"axis": 1}), ("ArgMin", {"axis": 1}), ("ArgMax", {"axis": 1, "select_last_index": 1}),
                                      ("Hardmax", {"axis": 1})])
def test_nan_is_the_extreme_for_argmax_argmin_hardmax(op, attrs):
    x = np.array([[1.0, NAN, 5.0, NAN], [INF, -INF, 0.0, 2.0], [NAN, 3.0, -1.0, 7.0]], np.float32)
    model = graph_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"])
    got, want = compile_model(model)({"x": x})[0], reference(model, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


def test_build_warns_once_per_non_finite_weight_and_attribute(tmp_path, capsys):
    from fluidml_xc.build import BuildOptions, build_model
    w = f32(4, 3, 3, 3)
    w[0, 0, 0, 0], w[1, 0, 0, 0] = NAN, -INF
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv\n1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["l"], name="act", alpha=INF), helper.make_node("Add", ["l", "k"], ["y"])]
    model = graph_model(nodes, {"x": f32(1, 3, 5, 5)}, ["y"], {"w": w, "k": np.array(1.0, np.float32)})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    result = build_model(path, BuildOptions(out_dir=tmp_path / "out", record_last=False, profile_runner=False))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines == ["fluidml-xc: warning: initializer 'w' (used by Conv node 'conv\\n1') holds 1 NaN, 1 -Inf of 108 values; "
                     "the build keeps it, and the outputs it reaches may be NaN or infinite",
                     "fluidml-xc: warning: attribute alpha of LeakyRelu node 'act' = inf; "
                     "the build keeps it, and the outputs it reaches may be NaN or infinite"]
    assert (result.artifact / "manifest.json").exists()


def test_a_finite_model_builds_without_warnings(capsys):
    x = f32(2, 3)
    compile_model(graph_model([helper.make_node("Gemm", ["x", "w"], ["y"], alpha=0.5)], {"x": x}, ["y"], {"w": f32(3, 4)}))
    assert capsys.readouterr().err == ""


def test_constant_nodes_and_subgraphs_are_checked():
    from fluidml_xc.frontend.nonfinite import nonfinite_findings
    then = helper.make_graph([helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(np.array([NAN], np.float32)))],
                             "then", [], [helper.make_empty_tensor_value_info("t")])
    other = helper.make_graph([helper.make_node("Constant", [], ["e"], value_float=1.0)], "else", [],
                              [helper.make_empty_tensor_value_info("e")])
    model = graph_model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other),
                         helper.make_node("Constant", [], ["k"], name="k", value_floats=[1.0, -INF])],
                        {"c": np.array(True)}, ["y", "k"])
    assert nonfinite_findings(model) == [
        "attribute value of Constant node #0 (in then_branch of If node 'branch') holds 1 NaN of 1 value",
        "attribute value_floats of Constant node 'k' holds 1 -Inf of 2 values"]


@pytest.mark.parametrize("op,attrs", [("RNN", {}), ("GRU", {}), ("LSTM", {}), ("GRU", {"linear_before_reset": 1})])
def test_recurrent_cells_carry_nan_through_time(op, attrs):
    """A NaN input at one step makes that sequence's state NaN from then on: the cells' tanh clamped its
    argument with maxnum/minnum, which dropped it (Relu, HardSigmoid and clip did the same; onnx.reference has none
    of those for RNN)."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    seq, batch, inp, hidden = 4, 2, 3, 5
    x = f32(seq, batch, inp)
    x[1, 0, 2] = NAN
    model = graph_model([helper.make_node(op, ["x", "w", "r"], ["y", "h"], hidden_size=hidden, **attrs)], {"x": x}, ["y", "h"],
                        {"w": f32(1, gates * hidden, inp), "r": f32(1, gates * hidden, hidden)})
    got = _ours_follow_the_rule(model, {"x": x}, ort_agrees=False, check=Check(rtol=1e-4, atol=1e-5))
    assert np.isnan(got[0][1:, 0, 0]).all() and not np.isnan(got[0][:, 0, 1]).any()
