#!/usr/bin/env python3
"""Per-op sweep: single-op models at realistic sizes, ours against ONNX Runtime side by side.

    python benchmarks/ops.py [--only SUBSTR] [--runs 30] [--rounds 3] [--threads 1] [--align 64] [--markdown]
                             [--board x86_64]

Each case is checked against ORT first (max abs error against the output's magnitude), then timed:
ours = the JIT-compiled model called through ctypes into caller-owned buffers, aligned to --align bytes (64:
as runtime_c/runner.c allocates them on the board; numpy's own buffers sit anywhere 16 bytes apart, and a
vector load or store that straddles a cache line costs a second access); ORT = InferenceSession.run
with intra_op_num_threads = --threads and all graph optimizations. `rounds` rounds of `runs` calls of each,
ours and ORT alternating call by call (so a load change on a shared machine hits both); a ratio is the
median of the rounds' ratios of median times (ours / ORT: below 1 is faster).
Throughput is GFLOP/s for compute-bound ops, GB/s (bytes read + written once) for the rest.
"""
from __future__ import annotations

import argparse
import ctypes
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

rng = np.random.default_rng(7)


@dataclass
class Case:
    name: str
    op: str
    inputs: dict
    consts: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    flops: float = 0.0
    """0: a memory-bound op, judged in GB/s."""
    n_out: int = 1
    opset: int = 18
    const_order: tuple = ()
    """Input names of the node in order (graph inputs and constants; "" for an absent optional)."""

    def model(self) -> onnx.ModelProto:
        names = list(self.const_order) or [*self.inputs, *self.consts]
        outs = [f"y{i}" for i in range(self.n_out)]
        node = helper.make_node(self.op, names, outs, **self.attrs)
        ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in self.inputs.items()]
        inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in self.consts.items()]
        graph = helper.make_graph([node], self.name, ins, [helper.make_empty_tensor_value_info(o) for o in outs], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 9
        try:
            return onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except onnx.shape_inference.InferenceError:  # onnx 1.23 cannot infer MeanVarianceNormalization's function body
            return model


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def conv_flops(n, cin, cout, out_spatial, kernel, group=1):
    return 2.0 * n * cout * math.prod(out_spatial) * (cin // group) * math.prod(kernel)


def unary(op, shape=(4, 256, 56, 56), scale=2.0, **attrs):
    return Case(f"{op} {'x'.join(map(str, shape))}", op, {"x": f32(*shape, scale=scale)}, attrs=attrs)


def cases() -> list[Case]:
    c: list[Case] = []
    # ConvTranspose: the text-detection 2x2/s2, 3x3/s1, 4x4/s2, 1-D and grouped
    for (cin, h, cout, k, s, p, op_, g) in [(64, 80, 32, 2, 2, 0, 0, 1), (64, 56, 64, 3, 1, 1, 0, 1), (64, 40, 32, 4, 2, 1, 0, 1),
                                           (32, 28, 32, 3, 2, 1, 1, 1), (64, 28, 64, 3, 2, 1, 1, 4)]:
        c.append(Case(f"ConvTranspose 1x{cin}x{h}x{h} -> {cout} {k}x{k} s{s} p{p} op{op_} g{g}", "ConvTranspose",
                      {"x": f32(1, cin, h, h)}, {"w": f32(cin, cout // g, k, k, scale=0.1)},
                      {"strides": [s, s], "pads": [p, p, p, p], "output_padding": [op_, op_], "group": g},
                      flops=conv_flops(1, cin, cout, (h, h), (k, k), g)))  # per input pixel and tap
    c.append(Case("ConvTranspose1d 1x64x512 -> 32 k4 s2 p1", "ConvTranspose", {"x": f32(1, 64, 512)}, {"w": f32(64, 32, 4, scale=0.1)},
                  {"strides": [2], "pads": [1, 1]}, flops=2.0 * 64 * 32 * 512 * 4))
    # Conv shapes exporters write: 1-D as k x 1, Conv1d, Conv3d
    c.append(Case("Conv 5x1 over 1x64x512x1 -> 64", "Conv", {"x": f32(1, 64, 512, 1)}, {"w": f32(64, 64, 5, 1, scale=0.1)},
                  {"pads": [2, 0, 2, 0]}, flops=conv_flops(1, 64, 64, (512, 1), (5, 1))))
    c.append(Case("Conv1d 1x64x1024 -> 64 k3", "Conv", {"x": f32(1, 64, 1024)}, {"w": f32(64, 64, 3, scale=0.1)},
                  {"pads": [1, 1]}, flops=conv_flops(1, 64, 64, (1024,), (3,))))
    c.append(Case("Conv3d 1x16x16x32x32 -> 32 k3", "Conv", {"x": f32(1, 16, 16, 32, 32)}, {"w": f32(32, 16, 3, 3, 3, scale=0.1)},
                  {"pads": [1] * 6}, flops=conv_flops(1, 16, 32, (16, 32, 32), (3, 3, 3))))
    c.append(Case("Conv 3x3 1x64x56x56 -> 64", "Conv", {"x": f32(1, 64, 56, 56)}, {"w": f32(64, 64, 3, 3, scale=0.1)},
                  {"pads": [1] * 4}, flops=conv_flops(1, 64, 64, (56, 56), (3, 3))))
    # 1x1 Convs (ResNet bottlenecks: reduce, expand at 56x56, 14x14 and 7x7) and a 3x3 on a small image
    for cin, cout, h in ((256, 64, 56), (64, 256, 56), (512, 2048, 7), (256, 1024, 14), (1024, 256, 14), (2048, 512, 7)):
        c.append(Case(f"Conv 1x1 1x{cin}x{h}x{h} -> {cout}", "Conv", {"x": f32(1, cin, h, h)}, {"w": f32(cout, cin, 1, 1, scale=0.1)},
                      flops=conv_flops(1, cin, cout, (h, h), (1, 1))))
    # ResNet-50's stride-2 downsampling: 1x1 projections of the shortcut and the 3x3 of the first bottleneck
    for cin, cout, h, k in ((512, 1024, 28, 1), (1024, 2048, 14, 1), (512, 512, 14, 3)):
        c.append(Case(f"Conv {k}x{k} s2 1x{cin}x{h}x{h} -> {cout}", "Conv", {"x": f32(1, cin, h, h)},
                      {"w": f32(cout, cin, k, k, scale=0.05)}, {"strides": [2, 2], "pads": [k // 2] * 4},
                      flops=conv_flops(1, cin, cout, (h // 2, h // 2), (k, k))))
    c.append(Case("Conv 3x3 1x256x14x14 -> 256", "Conv", {"x": f32(1, 256, 14, 14)}, {"w": f32(256, 256, 3, 3, scale=0.05)},
                  {"pads": [1] * 4}, flops=conv_flops(1, 256, 256, (14, 14), (3, 3))))
    # activations and elementwise math
    for op in ("Tanh", "Sigmoid", "Exp", "Log", "Softplus", "Mish", "Selu", "Elu", "HardSwish", "Relu", "Erf", "Sqrt"):
        case = unary(op)
        if op in ("Log", "Sqrt"):
            case.inputs["x"] = np.abs(case.inputs["x"]) + 0.1
        c.append(case)
    c.append(Case("Gelu tanh 4x256x56x56", "Gelu", {"x": f32(4, 256, 56, 56)}, attrs={"approximate": "tanh"}, opset=20))
    c.append(Case("Pow x^3 4x256x56x56", "Pow", {"x": f32(4, 256, 56, 56)}, {"p": np.array(3.0, np.float32)}))
    c.append(Case("Add broadcast 4x256x56x56 + 256x1x1", "Add", {"x": f32(4, 256, 56, 56)}, {"b": f32(256, 1, 1)}))
    # normalisation, softmax, pooling
    c.append(Case("Softmax 4x12x128x128 last axis", "Softmax", {"x": f32(4, 12, 128, 128)}, attrs={"axis": -1}))
    c.append(Case("LogSoftmax 4x12x128x128 last axis", "LogSoftmax", {"x": f32(4, 12, 128, 128)}, attrs={"axis": -1}))
    c.append(Case("Softmax 4x12x128x128 axis 2", "Softmax", {"x": f32(4, 12, 128, 128)}, attrs={"axis": 2}))
    c.append(Case("LayerNormalization 8x128x768", "LayerNormalization", {"x": f32(8, 128, 768)}, {"g": f32(768), "b": f32(768)},
                  {"axis": -1}))
    c.append(Case("InstanceNormalization 8x64x56x56", "InstanceNormalization", {"x": f32(8, 64, 56, 56)}, {"g": f32(64), "b": f32(64)}))
    c.append(Case("BatchNormalization 8x64x56x56", "BatchNormalization", {"x": f32(8, 64, 56, 56)},
                  {"g": f32(64), "b": f32(64), "m": f32(64), "v": np.abs(f32(64)) + 0.5}))
    c.append(Case("GroupNormalization 8x64x56x56 g8", "GroupNormalization", {"x": f32(8, 64, 56, 56)}, {"g": f32(64), "b": f32(64)},
                  {"num_groups": 8}, opset=21))
    c.append(Case("MeanVarianceNormalization 8x64x56x56", "MeanVarianceNormalization", {"x": f32(8, 64, 56, 56)}))
    c.append(Case("MeanVarianceNormalization 8x64x56x56 axes [2, 3]", "MeanVarianceNormalization", {"x": f32(8, 64, 56, 56)},
                  attrs={"axes": [2, 3]}))
    c.append(Case("LpNormalization p2 8x128x768 axis -1", "LpNormalization", {"x": f32(8, 128, 768)}, attrs={"axis": -1, "p": 2}))
    c.append(Case("LRN size 5 1x64x56x56", "LRN", {"x": f32(1, 64, 56, 56)}, attrs={"size": 5, "alpha": 1e-4, "beta": 0.75}))
    c.append(Case("GlobalAveragePool 2x256x56x56", "GlobalAveragePool", {"x": f32(2, 256, 56, 56)}))
    c.append(Case("GlobalMaxPool 2x256x56x56", "GlobalMaxPool", {"x": f32(2, 256, 56, 56)}))
    c.append(Case("MaxPool 3x3 s2 1x64x112x112", "MaxPool", {"x": f32(1, 64, 112, 112)}, attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}))
    c.append(Case("AveragePool 3x3 s1 1x64x56x56", "AveragePool", {"x": f32(1, 64, 56, 56)}, attrs={"kernel_shape": [3, 3], "pads": [1] * 4}))
    # Inception-v2's pool branch: 3x3 stride 1 over 14x14 and 28x28 (its NHWC-free NCHW form)
    for cin, h in ((576, 14), (256, 28)):
        c.append(Case(f"AveragePool 3x3 s1 1x{cin}x{h}x{h}", "AveragePool", {"x": f32(1, cin, h, h)},
                      attrs={"kernel_shape": [3, 3], "pads": [1] * 4}))
    c.append(Case("LpPool 2x2 s2 1x64x56x56", "LpPool", {"x": f32(1, 64, 56, 56)}, attrs={"kernel_shape": [2, 2], "strides": [2, 2]}))
    # reductions over each axis
    for axes in ([0], [1], [2], [3], [2, 3]):
        c.append(Case(f"ReduceSum 8x64x56x56 axes {axes}", "ReduceSum", {"x": f32(8, 64, 56, 56)}, {"axes": np.array(axes, np.int64)},
                      {"keepdims": 1}))
    c.append(Case("ReduceMax 8x64x56x56 axes [3]", "ReduceMax", {"x": f32(8, 64, 56, 56)}, {"axes": np.array([3], np.int64)}, opset=18))
    c.append(Case("ReduceMax 8x128x768 axes [-1]", "ReduceMax", {"x": f32(8, 128, 768)}, {"axes": np.array([-1], np.int64)}))
    c.append(Case("ReduceMean 8x128x768 axes [-1]", "ReduceMean", {"x": f32(8, 128, 768)}, {"axes": np.array([-1], np.int64)}))
    c.append(Case("ArgMax 16x30000 axis 1", "ArgMax", {"x": f32(16, 30000)}, attrs={"axis": 1}))
    c.append(Case("TopK k=10 of 16x30000", "TopK", {"x": f32(16, 30000)}, {"k": np.array([10], np.int64)}, n_out=2))
    c.append(Case("TopK k=100 of 8x1000 axis 1", "TopK", {"x": f32(8, 1000)}, {"k": np.array([100], np.int64)}, n_out=2))
    # movement
    for mode in ("nearest", "linear", "cubic"):
        c.append(Case(f"Resize {mode} scales x2 4x64x80x80", "Resize", {"x": f32(4, 64, 80, 80)},
                      {"roi": np.array([], np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}, {"mode": mode}))
    c.append(Case("Resize nearest sizes 1x3x224x224 -> 320", "Resize", {"x": f32(1, 3, 224, 224)},
                  {"sizes": np.array([1, 3, 320, 320], np.int64)}, {"mode": "nearest"}, const_order=("x", "", "", "sizes")))
    for mode in ("constant", "reflect", "edge", "wrap"):
        c.append(Case(f"Pad {mode} 2x64x112x112 +3", "Pad", {"x": f32(2, 64, 112, 112)},
                      {"pads": np.array([0, 0, 3, 3, 0, 0, 3, 3], np.int64)}, {"mode": mode}, opset=19))
    c.append(Case("Transpose 8x128x12x64 -> 0213", "Transpose", {"x": f32(8, 128, 12, 64)}, attrs={"perm": [0, 2, 1, 3]}))
    c.append(Case("Concat 3x 4x64x56x56 axis 1", "Concat", {"a": f32(4, 64, 56, 56), "b": f32(4, 64, 56, 56), "c": f32(4, 64, 56, 56)},
                  attrs={"axis": 1}))
    c.append(Case("Slice 4x256x56x56 [:, 64:192, ::2]", "Slice", {"x": f32(4, 256, 56, 56)},
                  {"s": np.array([64, 0], np.int64), "e": np.array([192, 56], np.int64), "a": np.array([1, 2], np.int64),
                   "st": np.array([1, 2], np.int64)}))
    c.append(Case("Gather 30000x256 rows by 4096 ids", "Gather", {"ids": rng.integers(0, 30000, (8, 512)).astype(np.int64)},
                  {"table": f32(30000, 256)}, const_order=("table", "ids")))
    c.append(Case("GatherElements 64x4096 axis 1", "GatherElements", {"x": f32(64, 4096), "i": rng.integers(0, 4096, (64, 4096)).astype(np.int64)},
                  attrs={"axis": 1}))
    c.append(Case("GatherND 16x1024x64 by 16x512x1", "GatherND", {"x": f32(16, 1024, 64), "i": rng.integers(0, 1024, (16, 512, 1)).astype(np.int64)},
                  attrs={"batch_dims": 1}))
    c.append(Case("ScatterElements 64x4096 axis 1", "ScatterElements",
                  {"x": f32(64, 4096), "i": np.stack([rng.permutation(4096)[:1024] for _ in range(64)]).astype(np.int64), "u": f32(64, 1024)},
                  attrs={"axis": 1}))
    c.append(Case("ScatterND 1024x256 <- 512 rows", "ScatterND", {"x": f32(1024, 256), "i": rng.permutation(1024)[:512].reshape(512, 1).astype(np.int64),
                                                                   "u": f32(512, 256)}))
    # Einsum as exporters write it
    c.append(Case("Einsum bij,bjk->bik 24x128x64 @ 24x64x128", "Einsum", {"a": f32(24, 128, 64), "b": f32(24, 64, 128)},
                  attrs={"equation": "bij,bjk->bik"}, flops=2.0 * 24 * 128 * 64 * 128))
    c.append(Case("Einsum bhqd,bhkd->bhqk 2x12x128x64", "Einsum", {"q": f32(2, 12, 128, 64), "k": f32(2, 12, 128, 64)},
                  attrs={"equation": "bhqd,bhkd->bhqk"}, flops=2.0 * 2 * 12 * 128 * 128 * 64))
    c.append(Case("Einsum i,j->ij 4096 x 1024", "Einsum", {"a": f32(4096), "b": f32(1024)}, attrs={"equation": "i,j->ij"}))
    c.append(Case("MatMul 24x128x64 @ 24x64x128", "MatMul", {"a": f32(24, 128, 64), "b": f32(24, 64, 128)}, flops=2.0 * 24 * 128 * 64 * 128))
    # spectra of speech frames (real input, batched): the nominal 2.5 n log2 n flops of a real FFT per frame
    for n in (400, 512):
        c.append(Case(f"DFT onesided 1x100x{n}x1 axis 2", "DFT", {"x": f32(1, 100, n, 1)}, {"axis": np.array(2, np.int64)},
                      {"onesided": 1}, flops=2.5 * n * math.log2(n) * 100, opset=20, const_order=("x", "", "axis")))
        c.append(Case(f"STFT 1x16000 frame {n} hop 160 hann onesided", "STFT", {"x": f32(1, 16000, 1)},
                      {"step": np.array(160, np.int64), "w": np.hanning(n).astype(np.float32)}, {"onesided": 1},
                      flops=2.5 * n * math.log2(n) * ((16000 - n) // 160 + 1), opset=17))
    frame = helper.make_tensor_value_info("frame", onnx.TensorProto.FLOAT, [1, 400, 1])
    body = helper.make_graph([helper.make_node("DFT", ["frame", "", "axis"], ["spec"], onesided=1)], "body", [frame],
                             [helper.make_tensor_value_info("spec", onnx.TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(np.array(1, np.int64), "axis")])
    c.append(Case("Scan of a DFT per frame 1x100x400x1", "Scan", {"x": f32(1, 100, 400, 1)},
                  attrs={"body": body, "num_scan_inputs": 1, "scan_input_axes": [1], "scan_output_axes": [1]},
                  flops=2.5 * 400 * math.log2(400) * 100, opset=20))
    return c


def io_bytes(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
    return sum(a.nbytes for a in inputs) + sum(o.nbytes for o in outputs)


def aligned(array: np.ndarray, align: int) -> np.ndarray:
    """A copy of `array` whose data starts at a multiple of `align` bytes (of 16 plus 16 when align is 16,
    to show numpy's worst placement)."""
    raw = np.zeros(array.nbytes + 2 * max(align, 64), np.uint8)
    start = -raw.ctypes.data % max(align, 64) + (align if align < 64 else 0)
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def timed_pair(ours, theirs, runs: int, clock=time.perf_counter) -> tuple[float, float]:
    """Median times of `runs` calls of each, alternating which goes first."""
    ours(), theirs()
    times: dict = {ours: [], theirs: []}
    for i in range(runs):
        for fn in (ours, theirs) if i % 2 == 0 else (theirs, ours):
            t = clock()
            fn()
            times[fn].append(clock() - t)
    return float(np.median(times[ours])), float(np.median(times[theirs]))


def jit_with_conv_algo(model, board: str, conv_algo: str):
    """The JIT-compiled model as compile_model builds it, its convs under `conv_algo` (passes/winograd.py)."""
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.run.backend import JitModel
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    return JitModel(lower(import_graph(model, conv_algo=conv_algo), machine_spec(get_board(board)), LowerOptions()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="only cases whose name contains this")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--align", type=int, default=64, choices=(16, 32, 64),
                    help="alignment of our input and output buffers (default 64, the runner's; 16 and 32: "
                         "16 or 32 bytes past a 64-byte boundary)")
    ap.add_argument("--board", default="x86_64", help="the board our code is built for (x86_64-v3: AVX2 code on an "
                    "AVX-512 host; ORT still picks its kernels for the host)")
    ap.add_argument("--conv-algo", choices=("auto", "direct"), default="auto",
                    help="build's --conv-algo (direct: the Conv cases run the direct kernels' register tiles, not Winograd)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with the calling thread's CPU clock, not the wall clock (steadier on a busy machine; "
                         "--threads 1 only, where ORT also computes on the calling thread)")
    args = ap.parse_args()
    import onnxruntime as ort

    from fluidml_xc.run.backend import compile_model

    header = ("case", "ours ms", "ORT ms", "ours", "ORT", "ratio", "check")
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    else:
        print(f"{'case':58s} {'ours ms':>9s} {'ORT ms':>9s} {'ours':>12s} {'ORT':>12s} {'ratio':>6s}  check")
    ratios = []
    for case in cases():
        if args.only and args.only.lower() not in case.name.lower():
            continue
        model = case.model()
        try:
            jit = compile_model(model, args.board) if args.conv_algo == "auto" else jit_with_conv_algo(model, args.board, args.conv_algo)
        except Exception as exc:  # noqa: BLE001 - a case we cannot build is a row, not the end of the sweep
            print(f"{case.name:58s} build failed: {str(exc).splitlines()[0][:120]}", flush=True)
            continue
        arrays = [aligned(np.asarray(case.inputs[n], dtype=dt), args.align) for n, dt, _ in jit.input_specs]
        feeds = {**case.inputs, **{n: a for (n, _, _), a in zip(jit.input_specs, arrays)}}  # ORT reads the same buffers
        outs = [aligned(np.zeros(shape, dtype=dt), args.align) for _, dt, shape in jit.output_specs]
        in_ptrs = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        out_ptrs = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
        raw, arena = jit._arena()
        arena = ctypes.c_void_p(arena)

        def ours():
            jit._fn(in_ptrs, out_ptrs, arena)

        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

        def theirs():
            sess.run(None, feeds)

        ours()
        want = sess.run(None, feeds)
        errors = [float(np.max(np.abs(o.astype(np.float64) - w.astype(np.float64))) / max(1.0, float(np.max(np.abs(w)))))
                  if o.size else 0.0 for o, w in zip(outs, want)]
        check = "ok" if max(errors) < 1e-3 else f"ERR {max(errors):.2g}"
        if case.op == "TopK" and check != "ok":  # ties may order indices differently: compare the values only
            check = "ok" if np.allclose(outs[0], want[0], rtol=1e-5, atol=1e-6) else check
        clock = time.thread_time if args.cpu_time and args.threads == 1 else time.perf_counter
        rounds = [timed_pair(ours, theirs, args.runs, clock) for _ in range(args.rounds)]
        a, b = float(np.median([r[0] for r in rounds])), float(np.median([r[1] for r in rounds]))
        ratio = float(np.median([r[0] / r[1] for r in rounds]))
        ratios.append(ratio)
        if case.flops:
            rate_a, rate_b = f"{case.flops / a / 1e9:.1f} GFLOP/s", f"{case.flops / b / 1e9:.1f} GFLOP/s"
        else:
            nbytes = io_bytes(arrays, outs)
            rate_a, rate_b = f"{nbytes / a / 1e9:.1f} GB/s", f"{nbytes / b / 1e9:.1f} GB/s"
        row = (case.name, f"{a * 1e3:.3f}", f"{b * 1e3:.3f}", rate_a, rate_b, f"{ratio:.2f}", check)
        if args.markdown:
            print("| " + " | ".join(row) + " |", flush=True)
        else:
            print(f"{row[0]:58s} {row[1]:>9s} {row[2]:>9s} {row[3]:>12s} {row[4]:>12s} {row[5]:>6s}  {row[6]}", flush=True)
        del raw
    if ratios:
        print(f"\n{len(ratios)} cases, geo-mean ratio {math.exp(np.mean(np.log(ratios))):.2f}, "
              f"{sum(r > 1.25 for r in ratios)} over 1.25x, worst {max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
