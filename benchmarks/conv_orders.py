#!/usr/bin/env python3
"""Channels-last 1x1 convs under both loop orders (co>px, px>co), A/B in one process (docs/CNN_OPS.md, "ResNet-50 on
AVX2: loop orders").

    python benchmarks/conv_orders.py [--cpu x86-64-v3] [--rounds 11] [--only 64>256,576>]

Per case a Conv + bias (+ residual Add) + Relu node with NHWC input, residual and output (as fluid stores ResNet-50's
activations), JIT-compiled for this machine (or --cpu) once per order. Every buffer starts on a 4 KiB boundary, as
the runtime's arena places them: numpy puts a large array 16 bytes past a page (glibc's mmap header), which splits
half of the 32-byte vector accesses across cache lines (co>px of 64@56 -> 256 and 128@28 -> 512 with their residual
ran 1.22-1.25x slower so, px>co 1.0-1.04x: the orders compared wrongly). Each round calls both kernels in turn (the order alternating), timed in this thread's CPU time;
printed: the least time per call of each, GFLOP/s, the median over rounds of the per-round ratio px>co / co>px
with its range, the order fluid's cost model picks, and the largest difference between the two outputs.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fluidml_xc.emit.measure import compile_node, page_aligned  # noqa: E402
from fluidml_xc.fluid.costs import Costs  # noqa: E402
from fluidml_xc.pipeline import import_graph  # noqa: E402
from fluidml_xc.target.boards import get_board  # noqa: E402
from fluidml_xc.target.machine import machine_spec  # noqa: E402

NHWC = (0, 2, 3, 1)
CASES = [  # name, C in, H = W, C out, residual (1x1 convs of ResNet-50, Inception-v2, MobileNetV2)
    ("64>256@56+res", 64, 56, 256, True), ("64>256@56", 64, 56, 256, False), ("64>64@56", 64, 56, 64, False),
    ("256>64@56", 256, 56, 64, False), ("256>128@56", 256, 56, 128, False), ("128>512@28+res", 128, 28, 512, True),
    ("512>128@28", 512, 28, 128, False), ("256>1024@14+res", 256, 14, 1024, True), ("1024>256@14", 1024, 14, 256, False),
    ("512>2048@7+res", 512, 7, 2048, True), ("2048>512@7", 2048, 7, 512, False), ("576>224@14", 576, 14, 224, False),
    ("576>96@14+res", 576, 14, 96, True), ("24>144@56", 24, 56, 144, False),
]
ORDERS = ("co>px", "px>co")


def conv_model(C: int, H: int, OC: int, residual: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    consts = [numpy_helper.from_array((rng.standard_normal((OC, C, 1, 1)) * 0.05).astype(np.float32), "w"),
              numpy_helper.from_array(rng.standard_normal(OC).astype(np.float32), "b")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv")]
    last = "c"
    if residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, OC, H, H]))
        nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
        last = "a"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    graph = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, OC, H, H])],
                              consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def kernel_buffers(graph, kernel, layouts) -> list[np.ndarray]:
    """The kernel's buffers, each on a 4 KiB boundary as in the arena (numpy's are 16 bytes off one)."""
    stored = []
    for name in kernel.names:
        t = graph.tensors[name]
        value = t.value if t.is_const else np.random.default_rng(3).standard_normal(t.shape).astype(np.float32)
        perm = layouts.get(name) if not t.is_const else None
        stored.append(page_aligned(np.ascontiguousarray(np.transpose(value, perm) if perm else value)))
    return stored


def time_pair(graph, kernels, layouts, reps: int, rounds: int) -> tuple[list[float], list[float], float]:
    """Two kernels of one node on their own page-aligned buffers, run once each, then timed A/B in thread CPU time,
    the order alternating per round: (least seconds per call of each, per-round ratios second / first, the largest
    difference between their outputs)."""
    bufs = [kernel_buffers(graph, kern, layouts) for kern in kernels]
    ptrs = [[ctypes.c_void_p(a.ctypes.data) for a in b] for b in bufs]
    for kern, p in zip(kernels, ptrs):
        kern.call(*p)
    diff = float(np.abs(bufs[0][-1] - bufs[1][-1]).max())
    ratios, least = [], [float("inf")] * 2
    for r in range(rounds):
        t = [0.0, 0.0]
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            t0 = time.thread_time()
            for _ in range(reps):
                kernels[i].call(*ptrs[i])
            t[i] = (time.thread_time() - t0) / reps
            least[i] = min(least[i], t[i])
        ratios.append(t[1] / t[0])
    return least, ratios, diff


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", help="LLVM CPU to compile for (default: this machine's x86-64 level)")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--only", help="comma-separated parts of case names")
    args = ap.parse_args()
    spec = machine_spec(get_board(None), args.cpu)
    print(f"{spec.cpu}, {spec.vector_bits}-bit vectors")
    for name, C, H, OC, residual in CASES:
        if args.only and not any(part in name for part in args.only.split(",")):
            continue
        graph = import_graph(conv_model(C, H, OC, residual))
        node = next(n for n in graph.nodes if n.op_type == "Conv")
        layouts = {t: NHWC for t, v in graph.tensors.items() if len(v.shape) == 4 and not v.is_const}
        picked = Costs(graph, spec).cost_and_order(node, layouts)[1]
        kernels = [compile_node(graph, node, spec, layouts, order) for order in ORDERS]
        flops = 2.0 * OC * C * H * H
        least, ratios, diff = time_pair(graph, kernels, layouts, max(3, int(1e8 / flops)), args.rounds)
        print(f"{name:16s} co>px {least[0] * 1e3:6.3f} ms {flops / least[0] / 1e9:4.0f} GFLOP/s  px>co {least[1] * 1e3:6.3f} ms "
              f"{flops / least[1] / 1e9:4.0f} GFLOP/s  px>co/co>px {statistics.median(ratios):.3f} [{min(ratios):.2f}-"
              f"{max(ratios):.2f}]  fluid picks {picked}  max diff {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
