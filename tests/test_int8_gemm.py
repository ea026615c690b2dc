"""The blocked int8 GEMM paths (kernels/qgemm.py) of MatMulInteger, QLinearMatMul, ConvInteger and
QLinearConv: odd sizes and tails of every block (rows, column blocks, k-pairs, output-row edges),
per-row / per-column / per-channel zero points (folded into packed weights, or into a per-column
correction when b - zb does not fit int8), int8 and uint8, run-time and float16 scales; results must
equal onnx.reference exactly, JIT on x86_64 and built for qemu-aarch64 and qemu-armv7."""
from __future__ import annotations

import platform

import numpy as np
import pytest
from onnx import helper

from modelrun import compile_and_run, graph_model, jit_run, reference, require_emulator

rng = np.random.default_rng(23)
on_x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="JIT on x86_64")


def model(nodes, feeds, outputs, consts=None, opset=13):
    return graph_model(nodes, feeds, outputs, consts, opset, ir_version=8)


def q(dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


ISAS = {"host": None, "avx2": {"+avx2", "+avx"}, "sse2": {"+sse2"}}


@pytest.fixture(params=list(ISAS))
def isa(request, patched_compiler):
    """The x86 kernel variants on this host: as the host has it (VNNI where present), pmaddwd on AVX2, SSE2."""
    from fluidml_xc.kernels import qgemm
    if ISAS[request.param] is not None:
        host = qgemm._host_flags()
        if not ISAS[request.param] <= host:
            pytest.skip(f"host lacks {request.param}")
        patched_compiler.setattr(qgemm, "target_flags", lambda k: frozenset(ISAS[request.param]))
    return request.param


def check(got, want):
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)


# (a shape, K, N, a dtype, b dtype, a zero point kind, b zero point kind)
MATMUL_CASES = [
    ((1, 1), 1, 1, np.uint8, np.int8, "scalar", "none"),
    ((5, 17), 17, 33, np.uint8, np.uint8, "scalar", "scalar"),        # uint8 B: correction per column
    ((13, 3), 3, 70, np.int8, np.int8, "row", "column"),                # int8 B - per-column zp: may not fit int8
    ((2, 3, 7, 40), 40, 31, np.uint8, np.int8, "none", "column"),     # batch rows folded, odd N tail
    ((9, 64), 64, 48, np.int8, np.uint8, "scalar", "column"),
    ((30, 33), 33, 17, np.uint8, np.int8, "scalar", "zero"),
]


def _zp(kind, dtype, n):
    return {"none": None, "scalar": q(dtype, ()), "zero": np.zeros((), dtype), "row": q(dtype, (n,)), "column": q(dtype, (n,))}[kind]


def matmul_model(case):
    """MatMulInteger (+ its numpy oracle: onnx.reference does not broadcast a per-row a zero point) and
    QLinearMatMul over the same operands: ((model, feeds, expected) x2)."""
    ashape, kk, n, adt, bdt, akind, bkind = case
    a, bmat = q(adt, ashape), q(bdt, (kk, n))
    azp, bzp = _zp(akind, adt, ashape[-2]), _zp(bkind, bdt, n)
    consts = {"b": bmat}
    ins = ["a", "b", "", ""]
    if azp is not None:
        consts["azp"], ins[2] = azp, "azp"
    if bzp is not None:
        consts["bzp"], ins[3] = bzp, "bzp"
    while not ins[-1]:
        ins.pop()
    feeds = {"a": a}
    mi = model([helper.make_node("MatMulInteger", ins, ["y"])], feeds, ["y"], consts)
    a32 = a.astype(np.int32) - (0 if azp is None else (azp.astype(np.int32)[:, None] if azp.ndim else azp.astype(np.int32)))
    want = {"y": np.matmul(a32, bmat.astype(np.int32) - (0 if bzp is None else bzp.astype(np.int32)))}
    # QLinearMatMul: per-tensor a zero point, per-column b scale and zero point
    consts = {"b": bmat, "a_s": np.array(0.03, np.float32), "qa_zp": q(adt, ()) if akind != "none" else np.zeros((), adt),
              "b_s": rng.uniform(0.01, 0.05, n).astype(np.float32) if bkind == "column" else np.array(0.02, np.float32),
              "qb_zp": bzp if bzp is not None else np.zeros((), bdt), "y_s": np.array(0.7, np.float32), "y_zp": q(adt, ())}
    mq = model([helper.make_node("QLinearMatMul", ["a", "a_s", "qa_zp", "b", "b_s", "qb_zp", "y_s", "y_zp"], ["yq"])], feeds, ["yq"], consts)
    return (mi, feeds, want), (mq, feeds, reference(mq, feeds))


@on_x86
@pytest.mark.parametrize("case", range(len(MATMUL_CASES)))
def test_matmul_blocked(case, isa):
    for m, feeds, want in matmul_model(MATMUL_CASES[case]):
        check(jit_run(m, feeds), want)


@on_x86
@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16])
def test_qlinear_matmul_runtime_scales(scale_dtype, isa):
    a, bmat = q(np.uint8, (11, 19)), q(np.int8, (19, 37))
    feeds = {"a": a, "a_s": np.array([0.021], scale_dtype), "y_s": np.array([0.37], scale_dtype)}
    consts = {"b": bmat, "a_zp": np.array([131], np.uint8), "b_s": rng.uniform(0.01, 0.05, 37).astype(scale_dtype),
              "b_zp": q(np.int8, (37,)), "y_zp": np.array([3], np.uint8)}
    m = model([helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])], feeds, ["y"], consts, opset=21)
    check(jit_run(m, feeds), reference(m, feeds))


# (a shape, b shape, a dtype, b dtype, b zero point per column?)
RUNTIME_B_CASES = [
    ((2, 3, 5, 17), (2, 3, 17, 19), np.uint8, np.uint8, False),   # attention-like batches, odd K
    ((4, 9), (3, 9, 40), np.int8, np.int8, True),                  # A broadcast over B's batch
    ((2, 1, 13, 64), (1, 3, 64, 8), np.uint8, np.int8, False),    # both broadcast
    ((1, 1), (1, 1), np.int8, np.uint8, True),
]


@on_x86
@pytest.mark.parametrize("case", range(len(RUNTIME_B_CASES)))
def test_matmul_runtime_b(case, isa):
    ashape, bshape, adt, bdt, per_col = RUNTIME_B_CASES[case]
    a, bm = q(adt, ashape), q(bdt, bshape)
    n = bshape[-1]
    feeds = {"a": a, "b": bm, "azp": q(adt, ()), "bzp": q(bdt, (n,)) if per_col else q(bdt, ())}
    mi = model([helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])], feeds, ["y"], opset=10)
    check(jit_run(mi, feeds), reference(mi, feeds))
    feeds.update({"a_s": np.array(0.03, np.float32), "b_s": rng.uniform(0.01, 0.05, n).astype(np.float32) if per_col
                  else np.array(0.02, np.float32), "y_s": np.array(0.7, np.float32), "y_zp": q(adt, ())})
    mq = model([helper.make_node("QLinearMatMul", ["a", "a_s", "azp", "b", "b_s", "bzp", "y_s", "y_zp"], ["yq"])], feeds, ["yq"], opset=21)
    check(jit_run(mq, feeds), reference(mq, feeds))


# (x shape, w shape, attrs, x dtype, w dtype)
CONV_CASES = [
    ((1, 3, 9, 11), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1]), np.uint8, np.int8),                     # odd channels, edge blocks only
    ((2, 4, 6, 70), (7, 4, 3, 3), dict(pads=[1, 2, 0, 1]), np.uint8, np.uint8),                    # interior blocks + tail
    ((1, 6, 10, 75), (6, 3, 3, 2), dict(pads=[2, 0, 1, 1], strides=[2, 3], dilations=[1, 2], group=2), np.int8, np.int8),
    ((1, 5, 7, 40), (9, 5, 1, 1), {}, np.int8, np.uint8),                                            # 1x1
    ((1, 8, 12, 100), (16, 8, 5, 5), dict(auto_pad="SAME_UPPER", strides=[2, 2]), np.uint8, np.int8),
    ((1, 2, 3, 3), (3, 2, 2, 2), {}, np.uint8, np.int8),                                            # tiny
]


def conv_model(case, per_channel=True):
    xs, ws, attrs, xdt, wdt = case
    x, w = q(xdt, xs), q(wdt, ws)
    m_out = ws[0]
    wzp = q(wdt, (m_out,)) if per_channel else q(wdt, ())
    xzp = q(xdt, ())
    consts = {"w": w, "xzp": xzp, "wzp": wzp, "x_s": np.array(0.04, np.float32),
              "w_s": rng.uniform(0.002, 0.02, m_out).astype(np.float32), "y_s": np.array(0.9, np.float32),
              "y_zp": q(xdt, ()), "bias": rng.integers(-2000, 2000, m_out).astype(np.int32), "wzp0": np.zeros(m_out, wdt)}
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], **attrs),
             helper.make_node("ConvInteger", ["x", "w"], ["y0"], **attrs),
             helper.make_node("QLinearConv", ["x", "x_s", "xzp", "w", "w_s", "wzp0", "y_s", "y_zp", "bias"], ["yq"], **attrs)]
    feeds = {"x": x}
    return model(nodes, feeds, ["y", "y0", "yq"], consts, opset=10), feeds


@on_x86
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_blocked(case, isa):
    m, feeds = conv_model(CONV_CASES[case])
    check(jit_run(m, feeds), reference(m, feeds))


def _qlinear_conv_oracle(x, xzp, w, wzp, bias, xs, ws, ys, yzp, pads):
    """QLinearConv with a per-channel w zero point (onnx.reference only broadcasts zero ones)."""
    xi = np.pad(x.astype(np.int64) - int(xzp), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    wi = w.astype(np.int64) - wzp.astype(np.int64)[:, None, None, None]
    n, c, h, wd = xi.shape
    m, _, kh, kw = w.shape
    oh, ow = h - kh + 1, wd - kw + 1
    acc = np.zeros((n, m, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            acc += np.einsum("nchw,mc->nmhw", xi[:, :, i:i + oh, j:j + ow], wi[:, :, i, j])
    acc = (acc + bias[None, :, None, None]).astype(np.int32)
    mult = ((np.float32(xs) * ws) / np.float32(ys)).astype(np.float64)
    info = np.iinfo(x.dtype)
    y = np.rint(acc.astype(np.float64) * mult[None, :, None, None] + float(yzp))
    return np.clip(y, info.min, info.max).astype(x.dtype)


@on_x86
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_qlinear_conv_per_channel_w_zero_point(xdt, isa):
    x, w = q(xdt, (1, 7, 9, 37)), q(np.int8, (10, 7, 3, 3))
    wzp, xzp, yzp = q(np.int8, (10,)), q(xdt, ()), q(xdt, ())
    ws = rng.uniform(0.002, 0.02, 10).astype(np.float32)
    bias = rng.integers(-2000, 2000, 10).astype(np.int32)
    consts = {"x_s": np.array(0.04, np.float32), "xzp": xzp, "w": w, "w_s": ws, "wzp": wzp,
              "y_s": np.array(0.9, np.float32), "y_zp": yzp, "bias": bias}
    m = model([helper.make_node("QLinearConv", ["x", "x_s", "xzp", "w", "w_s", "wzp", "y_s", "y_zp", "bias"], ["y"],
                                pads=[1, 0, 1, 2])], {"x": x}, ["y"], consts, opset=10)
    want = _qlinear_conv_oracle(x, xzp, w, wzp, bias, 0.04, ws, 0.9, yzp, [1, 0, 1, 2])
    check(jit_run(m, {"x": x}), {"y": want})


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_blocked_int8_cross(board, tmp_path):
    require_emulator(board)
    for case in (1, 2):
        for j, (mm, mfeeds, want) in enumerate(matmul_model(MATMUL_CASES[case])):
            check(compile_and_run(mm, mfeeds, tmp_path / f"mm{case}{j}", board, profile_runner=False), want)
    ashape, bshape, adt, bdt, _ = RUNTIME_B_CASES[1]
    feeds = {"a": q(adt, ashape), "b": q(bdt, bshape), "bzp": q(bdt, (bshape[-1],))}
    mi = model([helper.make_node("MatMulInteger", ["a", "b", "", "bzp"], ["y"])], feeds, ["y"], opset=10)
    check(compile_and_run(mi, feeds, tmp_path / "rt", board, profile_runner=False), reference(mi, feeds))
    for i in (1, 2, 5):  # row blocks (interior + edges), a strided grouped conv, pixel blocks across rows
        cm, cfeeds = conv_model(CONV_CASES[i])
        check(compile_and_run(cm, cfeeds, tmp_path / f"c{i}", board, profile_runner=False), reference(cm, cfeeds))
    x = q(np.uint8, (1, 3, 5, 23))  # depthwise: the plain vector-block path
    dw = model([helper.make_node("ConvInteger", ["x", "w", "xzp"], ["y"], pads=[1, 1, 1, 1], group=3)], {"x": x}, ["y"],
               {"w": q(np.uint8, (3, 1, 3, 3)), "xzp": q(np.uint8, ())}, opset=10)
    check(compile_and_run(dw, {"x": x}, tmp_path / "dw", board, profile_runner=False), reference(dw, {"x": x}))


def test_sdot_cross(tmp_path):
    """aarch64 with +dotprod (rpi5: sdot k-quads), run under qemu-aarch64 (its default cpu has dotprod)."""
    require_emulator("rpi5")
    for case in (1, 2):
        for j, (mm, mfeeds, want) in enumerate(matmul_model(MATMUL_CASES[case])):
            check(compile_and_run(mm, mfeeds, tmp_path / f"mm{case}{j}", "rpi5", profile_runner=False), want)
    for i in (0, 1, 2, 3):
        cm, cfeeds = conv_model(CONV_CASES[i])
        check(compile_and_run(cm, cfeeds, tmp_path / f"c{i}", "rpi5", profile_runner=False), reference(cm, cfeeds))


@on_x86
@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_qdq_relu_folded(same, xdt):
    """QLinearConv / QLinearMatMul -> DequantizeLinear -> Relu -> QuantizeLinear (ORT's QOperator models)
    folds into the QLinear node (passes/epilogues.py): a floor when the Q/DQ parameters match, else a
    256-entry table; exact either way."""
    from fluidml_xc.pipeline import import_graph
    from fluidml_xc.passes import run_passes

    x = q(xdt, (1, 6, 9, 20))
    zp = np.array(12 if xdt == np.uint8 else -7, xdt)
    consts = {"x_s": np.array(0.04, np.float32), "xzp": q(xdt, ()), "w": q(np.int8, (8, 6, 3, 3)),
              "w_s": rng.uniform(0.002, 0.02, 8).astype(np.float32), "wzp": np.zeros(8, np.int8),
              "y_s": np.array(0.5, np.float32), "y_zp": zp, "q_s": np.array(0.5 if same else 0.25, np.float32), "q_zp": zp,
              "b": q(np.int8, (20, 5)), "b_s": np.array(0.01, np.float32), "bzp": np.array(0, np.int8)}
    nodes = [helper.make_node("QLinearConv", ["x", "x_s", "xzp", "w", "w_s", "wzp", "y_s", "y_zp"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["c", "y_s", "y_zp"], ["cf"]), helper.make_node("Relu", ["cf"], ["cr"]),
             helper.make_node("QuantizeLinear", ["cr", "q_s", "q_zp"], ["cq"]),
             helper.make_node("QLinearMatMul", ["cq", "q_s", "q_zp", "b", "b_s", "bzp", "y_s", "y_zp"], ["m"]),
             helper.make_node("DequantizeLinear", ["m", "y_s", "y_zp"], ["mf"]), helper.make_node("Relu", ["mf"], ["mr"]),
             helper.make_node("QuantizeLinear", ["mr", "y_s", "y_zp"], ["y"])]
    m = model(nodes, {"x": x}, ["y"], consts, opset=21)
    graph = import_graph(m, None)
    run_passes(graph)
    assert sum(n.op_type == "Relu" for n in graph.nodes) == 0
    assert [n.op_type for n in graph.nodes] == ["QLinearConv", "QLinearMatMul"]
    epilogue = graph.nodes[0].attrs["_epilogue"]
    assert (epilogue.relu_floor is not None) == same and (epilogue.lut is not None) != same
    check(jit_run(m, {"x": x}), reference(m, {"x": x}))


@on_x86
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise(xdt, stride, isa):
    """Depthwise (one input channel per group: the plain vector-block path, blocks of 16, 8 and 4 lanes)."""
    x, w = q(xdt, (1, 4, 7, 45)), q(np.int8, (4, 1, 3, 3))
    consts = {"w": w, "xzp": q(xdt, ()), "wzp0": np.zeros(4, np.int8), "x_s": np.array(0.04, np.float32),
              "w_s": rng.uniform(0.002, 0.02, 4).astype(np.float32), "y_s": np.array(0.3, np.float32), "y_zp": q(xdt, ()),
              "bias": rng.integers(-500, 500, 4).astype(np.int32)}
    attrs = dict(pads=[1, 1, 1, 1], group=4, strides=[stride, stride])
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xzp"], ["y"], **attrs),
             helper.make_node("QLinearConv", ["x", "x_s", "xzp", "w", "w_s", "wzp0", "y_s", "y_zp", "bias"], ["yq"], **attrs)]
    m = model(nodes, {"x": x}, ["y", "yq"], consts, opset=10)
    check(jit_run(m, {"x": x}), reference(m, {"x": x}))


def test_relu_table_saturates_instead_of_wrapping():
    from fluidml_xc.passes.epilogues import relu_table
    table = relu_table(np.int8, 1.0, 0, 1e-30, 0)
    assert table[-1] == 127 and table[0] == 0
