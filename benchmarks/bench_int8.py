#!/usr/bin/env python3
"""Quantized int8 kernels against ONNX Runtime (single thread), side by side in one run.

    PYTHONPATH=toolkit python benchmarks/bench_int8.py [--runs 200] [--rounds 5] [--only NAME] [--board x86_64-v3]
        [--weight-bits 7]

Models: QLinearMatMul / MatMulInteger with constant weights (uint8 x int8, int8 x int8, per-column
zero points), QLinearConv 3x3 / 1x1 / strided / grouped, and a small quantized CNN made by
onnxruntime.quantization.quantize_static (QDQ -> QOperator format). Ours: the JIT'd fxc_model_run
called directly through ctypes (no Python per-call work beyond the call); ORT: InferenceSession.run
with intra_op_num_threads=1. Latency = median over `runs` after warm-up, `rounds` interleaved rounds;
the table prints the median ratio (ours / ORT) over the rounds and its min..max, and checks that our
outputs equal onnx.reference's (exact; a float output: max abs difference).
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

rng = np.random.default_rng(5)


def q(dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def make(nodes, feeds, outputs, consts, opset=13):
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def qlinear_matmul(m, k, n, adt=np.uint8, bdt=np.int8, per_col=False):
    a = q(adt, (m, k))
    consts = {"a_s": np.array(0.02, np.float32), "a_zp": np.array(7 if adt == np.uint8 else -3, adt),
              "b": q(bdt, (k, n)), "b_s": (rng.uniform(0.001, 0.003, n) if per_col else np.array(0.002)).astype(np.float32),
              "b_zp": (q(bdt, (n,)) // 8).astype(bdt) if per_col else np.array(0, bdt),
              "y_s": np.array(0.5, np.float32), "y_zp": np.array(3, adt)}
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    return make([node], {"a": a}, ["y"], consts), {"a": a}


def matmul_integer(m, k, n, adt=np.uint8, bdt=np.int8):
    a = q(adt, (m, k))
    consts = {"b": q(bdt, (k, n)), "a_zp": np.array(9, adt), "b_zp": np.array(2, bdt)}
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])
    return make([node], {"a": a}, ["y"], consts), {"a": a}


def qlinear_matmul_runtime(batch, m, k, n):
    """Both operands at run time (attention scores: [heads, seq, dim] x [heads, dim, seq])."""
    a, b = q(np.uint8, (batch, m, k)), q(np.uint8, (batch, k, n))
    consts = {"a_s": np.array(0.02, np.float32), "a_zp": np.array(128, np.uint8), "b_s": np.array(0.03, np.float32),
              "b_zp": np.array(120, np.uint8), "y_s": np.array(0.5, np.float32), "y_zp": np.array(3, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    return make([node], {"a": a, "b": b}, ["y"], consts), {"a": a, "b": b}


def qlinear_conv(c, m, h, w, kh=3, stride=1, pad=1, group=1, xdt=np.uint8, per_channel=True):
    x = q(xdt, (1, c, h, w))
    consts = {"x_s": np.array(0.02, np.float32), "x_zp": np.array(100 if xdt == np.uint8 else -5, xdt),
              "w": q(np.int8, (m, c // group, kh, kh)),
              "w_s": (rng.uniform(0.001, 0.003, m) if per_channel else np.array(0.002)).astype(np.float32),
              "w_zp": np.zeros(m if per_channel else (), np.int8),
              "y_s": np.array(0.3, np.float32), "y_zp": np.array(10, xdt), "bias": rng.integers(-3000, 3000, m).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp", "bias"], ["y"],
                            pads=[pad] * 4, strides=[stride] * 2, group=group)
    return make([node], {"x": x}, ["y"], consts), {"x": x}


def quantized_cnn():
    """A small float CNN quantized by onnxruntime.quantization.quantize_static (QOperator: QLinearConv)."""
    import tempfile

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    def conv(name, x, cin, cout, k, stride=1):
        w = (rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        return [helper.make_node("Conv", [x, name + "_w", name + "_b"], [name + "_c"], pads=[k // 2] * 4, strides=[stride] * 2),
                helper.make_node("Relu", [name + "_c"], [name])], {name + "_w": w, name + "_b": b}
    nodes, consts = [], {}
    prev, cin = "x", 3
    for i, (cout, k, s) in enumerate([(16, 3, 2), (32, 3, 1), (32, 3, 2), (64, 3, 1), (64, 1, 1), (64, 3, 2)]):
        n, c = conv(f"c{i}", prev, cin, cout, k, s)
        nodes += n
        consts.update(c)
        prev, cin = f"c{i}", cout
    nodes.append(helper.make_node("GlobalAveragePool", [prev], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    consts["fc_w"] = (rng.standard_normal((64, 10)) * 0.1).astype(np.float32)
    nodes.append(helper.make_node("MatMul", ["flat", "fc_w"], ["y"]))
    x = rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
    fm = make(nodes, {"x": x}, ["y"], consts)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": rng.uniform(0, 1, x.shape).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.data, None)
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "f.onnx", Path(d) / "q.onnx"
        onnx.save(fm, str(src))
        from onnxruntime.quantization.shape_inference import quant_pre_process
        pre = Path(d) / "p.onnx"
        quant_pre_process(str(src), str(pre))  # fuses Conv + Relu, so that the quantizer keeps Relu out
        src = pre
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QOperator,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                        op_types_to_quantize=["Conv", "MatMul"])
        qm = onnx.load(str(dst))
    return qm, {"x": x}


def hand_quantized_cnn():
    """QuantizeLinear -> 6 QLinearConv (uint8 activations, per-channel int8 weights, Relu folded into
    y_zero_point = 0) -> DequantizeLinear -> GlobalAveragePool: only int8 kernels between the ends."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q0"])]
    consts = {"xs": np.array(1 / 255, np.float32), "xz": np.array(0, np.uint8)}
    prev, cin = "q0", 3
    for i, (cout, k, s) in enumerate([(16, 3, 2), (32, 3, 1), (32, 3, 2), (64, 3, 1), (64, 1, 1), (64, 3, 2)]):
        consts.update({f"w{i}": q(np.int8, (cout, cin, k, k)), f"ws{i}": rng.uniform(0.001, 0.004, cout).astype(np.float32),
                       f"wz{i}": np.zeros(cout, np.int8), f"b{i}": rng.integers(-2000, 2000, cout).astype(np.int32),
                       f"ys{i}": np.array(0.05, np.float32), f"yz{i}": np.array(0, np.uint8)})
        xs = "xs" if i == 0 else f"ys{i - 1}"
        xz = "xz" if i == 0 else f"yz{i - 1}"
        nodes.append(helper.make_node("QLinearConv", [prev, xs, xz, f"w{i}", f"ws{i}", f"wz{i}", f"ys{i}", f"yz{i}", f"b{i}"], [f"q{i + 1}"],
                                      pads=[k // 2] * 4, strides=[s] * 2))
        prev, cin = f"q{i + 1}", cout
    nodes += [helper.make_node("DequantizeLinear", [prev, "ys5", "yz5"], ["f"]), helper.make_node("GlobalAveragePool", ["f"], ["y"])]
    x = rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
    return make(nodes, {"x": x}, ["y"], consts, opset=21), {"x": x}


CASES = {
    "qlinear_matmul 64x256x256 u8*s8": lambda: qlinear_matmul(64, 256, 256),
    "qlinear_matmul 128x768x768 u8*s8": lambda: qlinear_matmul(128, 768, 768),
    "qlinear_matmul 33x100x70 s8*s8 per-col": lambda: qlinear_matmul(33, 100, 70, np.int8, np.int8, per_col=True),
    "matmul_integer 128x512x512 u8*u8": lambda: matmul_integer(128, 512, 512, np.uint8, np.uint8),
    "qlinear_matmul runtime B 8x(128x64x128)": lambda: qlinear_matmul_runtime(8, 128, 64, 128),
    "qlinear_conv 64x64x3x3 56x56": lambda: qlinear_conv(64, 64, 56, 56),
    "qlinear_conv 32x64x3x3 s2 28x28": lambda: qlinear_conv(32, 64, 28, 28, stride=2),
    "qlinear_conv 128x128x1x1 14x14": lambda: qlinear_conv(128, 128, 14, 14, kh=1, pad=0),
    "qlinear_conv 64x64x3x3 g4 s8 28x28": lambda: qlinear_conv(64, 64, 28, 28, group=4, xdt=np.int8),
    "qlinear_conv depthwise 144x3x3 28x28": lambda: qlinear_conv(144, 144, 28, 28, group=144),
    "int8 cnn 3x64x64 (by hand, QLinearConv only)": hand_quantized_cnn,
    "quantized cnn 3x64x64 (quantize_static)": quantized_cnn,
}


def our_runner(model, board: str = "x86_64"):
    from fluidml_xc.run.backend import compile_model
    jit = compile_model(model, board)
    return jit


def seven_bit_weights(model):
    """The model with every constant int8 weight halved into [-64, 63] (onnxruntime.quantization's reduce_range
    range): what AVX2's exact pair sums (kernels/qgemm.py PAIR_SUM_LIMIT) take."""
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.INT8 and len(init.dims) >= 2:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) // 2, init.name))
    return model


def time_calls(fn, runs, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--board", default="x86_64", help="our code's board (x86_64-v3: AVX2 without VNNI; ORT still "
                    "picks its kernels for the host)")
    ap.add_argument("--weight-bits", type=int, choices=(7, 8), default=8,
                    help="7: int8 weights halved into [-64, 63] (reduce_range), where AVX2 runs exact pair sums")
    args = ap.parse_args()
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    print(f"{'model':42s} {'ours ms':>9s} {'ORT ms':>9s} {'ratio':>7s} {'(min..max)':>14s}  check")
    for name, build in CASES.items():
        if args.only and args.only not in name:
            continue
        model, feeds = build()
        if args.weight_bits == 7:
            model = seven_bit_weights(model)
        jit = our_runner(model, args.board)
        arrays = [np.ascontiguousarray(feeds[n], dtype=dt) for n, dt, _ in jit.input_specs]
        outs = [np.zeros(shape, dtype=dt) for _, dt, shape in jit.output_specs]
        in_ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        out_ptrs = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
        raw, arena = jit._arena()
        arena = ctypes.c_void_p(arena)

        def ours():
            jit._fn(in_ptrs, out_ptrs, arena)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

        def theirs():
            sess.run(None, feeds)
        ours()
        want = sess.run(None, feeds)
        try:
            ref = ReferenceEvaluator(model).run(None, feeds)
        except RuntimeError:  # onnx.reference lacks an old opset's kernel: the model converted to opset 21
            try:
                from onnx import version_converter
                ref = ReferenceEvaluator(version_converter.convert_version(model, 21)).run(None, feeds)
            except Exception:  # noqa: BLE001 - then ORT's outputs (its requantization rounds differently)
                ref = want
        if all(np.array_equal(o, r) for o, r in zip(outs, ref)):
            check = "exact"
        elif all(o.dtype.kind == "f" for o in outs):  # a float tail (GlobalAveragePool): summation order
            check = f"max|ours-ref|={max(float(np.abs(o - r).max()) for o, r in zip(outs, ref)):.3g}"
        else:
            check = "MISMATCH vs onnx.reference"
        ratios, ous, ots = [], [], []
        for _ in range(args.rounds):
            a, b = time_calls(ours, args.runs), time_calls(theirs, args.runs)
            ratios.append(a / b)
            ous.append(a)
            ots.append(b)
        print(f"{name:42s} {np.median(ous) * 1e3:9.3f} {np.median(ots) * 1e3:9.3f} {np.median(ratios):7.2f} "
              f"({min(ratios):5.2f}..{max(ratios):5.2f})  {check}", flush=True)
        del raw


if __name__ == "__main__":
    main()
