#!/usr/bin/env python3
"""Channel-vector convs over channels-last inputs with the taps outermost or innermost (TargetForms.taps_outer), A/B
in one process (docs/CNN_OPS.md, "AVX2").

    python benchmarks/conv_taps.py [--cpu x86-64-v2] [--rounds 9] [--only 512@14]

Per case a Conv + bias + Relu node with NHWC input and output (as fluid stores ResNet-50's activations), JIT-compiled
for this machine (or --cpu) twice: with the taps innermost (one loop over the input channels, every tap inside it)
and outermost (each tap a loop over the input channels); whatever taps_outer would choose is overridden both ways.
Each round calls both kernels in turn (the order alternating), timed in this thread's CPU time (a loaded machine
preempts the thread without billing it); printed: the least time per call of each, the median over rounds of the
per-round ratio outer/inner with its range, and the largest difference between the two outputs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fluidml_xc.emit.measure import compile_node  # noqa: E402
from fluidml_xc.kernels import conv_geometry  # noqa: E402
from fluidml_xc.pipeline import import_graph  # noqa: E402
from fluidml_xc.target.boards import get_board  # noqa: E402
from fluidml_xc.target.machine import machine_spec  # noqa: E402
from conv_orders import time_pair  # noqa: E402

NHWC = (0, 2, 3, 1)
CASES = [  # name, C in, H = W, C out, kernel, stride, loop order (3x3 convs of ResNet-50, Inception-v2, VGG-19, ZFNet)
    ("512@14 s2", 512, 14, 512, 3, 2, "co>px"),
    ("256@28 s2", 256, 28, 256, 3, 2, "co>px"),
    ("128@56 s2", 128, 56, 128, 3, 2, "co>px"),
    ("256@14 s2", 256, 14, 256, 3, 2, "co>px"),
    ("512@14 s1", 512, 14, 512, 3, 1, "co>px"),
    ("512@12 s1", 512, 12, 512, 3, 1, "co>px"),
    ("64@56 s1", 64, 56, 64, 3, 1, "co>px"),
    ("96@28 s1", 96, 28, 128, 3, 1, "co>px"),
]


def conv_model(C: int, H: int, OC: int, k: int, s: int) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    consts = [numpy_helper.from_array((rng.standard_normal((OC, C, k, k)) * 0.05).astype(np.float32), "w"),
              numpy_helper.from_array(rng.standard_normal(OC).astype(np.float32), "b")]
    OH = (H + 2 * (k // 2) - k) // s + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[k // 2] * 4, strides=[s, s]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, OC, OH, OH])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", help="LLVM CPU to compile for (default: this machine's x86-64 level)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--only", help="cases whose name contains this")
    args = ap.parse_args()
    spec = machine_spec(get_board(None), args.cpu)
    chosen = conv_geometry.TargetForms.taps_outer
    print(f"{spec.cpu}, {spec.vector_bits}-bit vectors")
    for name, C, H, OC, k, s, order in CASES:
        if args.only and args.only not in name:
            continue
        graph = import_graph(conv_model(C, H, OC, k, s))
        node = next(n for n in graph.nodes if n.op_type == "Conv")
        layouts = {t: NHWC for t in ("x", "c", "y")}
        kernels = []
        for outer in (False, True):
            conv_geometry.TargetForms.taps_outer = lambda self, *a, outer=outer: outer
            kernels.append(compile_node(graph, node, spec, layouts, order))
        conv_geometry.TargetForms.taps_outer = chosen
        OH = (H + 2 * (k // 2) - k) // s + 1
        least, ratios, diff = time_pair(graph, kernels, layouts, max(3, int(2e8 / (2 * OC * C * k * k * OH * OH))),
                                        args.rounds)
        print(f"{name:10s} taps inner {least[0] * 1e3:7.3f} ms  outer {least[1] * 1e3:7.3f} ms  outer/inner "
              f"{statistics.median(ratios):.3f} [{min(ratios):.2f}-{max(ratios):.2f}]  max diff {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
