#!/usr/bin/env python3
"""Write vad.onnx, the worked example of docs/MODELS.md: a small voice-activity model laid out as exporters
write speech models (Silero VAD's shape), with names as torch.onnx.export gives them.

    python benchmarks/make_vad.py [OUT.onnx]                    # default: vad.onnx here
    python benchmarks/make_vad.py --fastgelu vad_ort.onnx       # the encoder's Relu as com.microsoft FastGelu

Inputs: `input` float [batch, samples] (dynamic), `sr` int64 scalar (the sample rate), `state` float
[2, batch, 16] (the recurrent state; `batch` shared with `input`). An `If` on `sr == 16000` halves the
audio to 8 kHz (Slice with step 2) or passes it on, so its branches' shapes differ. Then 64-sample
frames (Reshape to [batch, -1, 64]), a MatMul + ReLU encoder, the mean over frames, the state mixed in
(Tanh), a MatMul + Sigmoid head. Outputs: `output` [batch, 1] (speech probability), `stateN` [2, batch, 16].
Random weights, seed 0. With --fastgelu the encoder's Relu is a `com.microsoft` FastGelu, as in a model saved
from an optimizing ONNX Runtime session: the unsupported-op case of docs/MODELS.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
HIDDEN = 16
FRAME = 64


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _branches() -> tuple[onnx.GraphProto, onnx.GraphProto]:
    """then: 16 kHz audio down to 8 kHz (every second sample); else: the audio as it is."""
    then = helper.make_graph(
        [helper.make_node("Slice", ["input", "/Constant_1_output_0", "/Constant_2_output_0", "/Constant_3_output_0",
                                    "/Constant_4_output_0"], ["/Slice_output_0"], name="/Slice")],
        "then_branch", [], [helper.make_tensor_value_info("/Slice_output_0", TensorProto.FLOAT, None)],
        [_const("/Constant_1_output_0", np.array([0], np.int64)),
         _const("/Constant_2_output_0", np.array([np.iinfo(np.int64).max], np.int64)),
         _const("/Constant_3_output_0", np.array([1], np.int64)), _const("/Constant_4_output_0", np.array([2], np.int64))])
    other = helper.make_graph(
        [helper.make_node("Identity", ["input"], ["/Identity_output_0"], name="/Identity")],
        "else_branch", [], [helper.make_tensor_value_info("/Identity_output_0", TensorProto.FLOAT, None)])
    return then, other


def vad(fastgelu: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    then, other = _branches()
    inits = [
        _const("/Constant_output_0", np.array(16000, np.int64)),
        _const("/Constant_5_output_0", np.array([0, -1, FRAME], np.int64)),
        _const("encoder.weight", (rng.standard_normal((FRAME, HIDDEN)) * 0.2).astype(np.float32)),
        _const("decoder.weight", (rng.standard_normal((HIDDEN, 1)) * 0.5).astype(np.float32)),
        _const("decoder.bias", np.zeros(1, np.float32)),
        _const("/Constant_6_output_0", np.array([0], np.int64)),
    ]
    nodes = [
        helper.make_node("Equal", ["sr", "/Constant_output_0"], ["/Equal_output_0"], name="/Equal"),
        helper.make_node("If", ["/Equal_output_0"], ["/If_output_0"], then_branch=then, else_branch=other, name="/If"),
        helper.make_node("Reshape", ["/If_output_0", "/Constant_5_output_0"], ["/Reshape_output_0"], name="/Reshape"),
        helper.make_node("MatMul", ["/Reshape_output_0", "encoder.weight"], ["/encoder/MatMul_output_0"],
                         name="/encoder/MatMul"),
        (helper.make_node("FastGelu", ["/encoder/MatMul_output_0"], ["/encoder/Relu_output_0"], name="/encoder/FastGelu",
                          domain="com.microsoft") if fastgelu else
         helper.make_node("Relu", ["/encoder/MatMul_output_0"], ["/encoder/Relu_output_0"], name="/encoder/Relu")),
        helper.make_node("ReduceMean", ["/encoder/Relu_output_0"], ["/ReduceMean_output_0"], axes=[1], keepdims=0,
                         name="/ReduceMean"),
        helper.make_node("ReduceMean", ["state"], ["/ReduceMean_1_output_0"], axes=[0], keepdims=0, name="/ReduceMean_1"),
        helper.make_node("Add", ["/ReduceMean_output_0", "/ReduceMean_1_output_0"], ["/Add_output_0"], name="/Add"),
        helper.make_node("Tanh", ["/Add_output_0"], ["/Tanh_output_0"], name="/Tanh"),
        helper.make_node("Unsqueeze", ["/Tanh_output_0", "/Constant_6_output_0"], ["/Unsqueeze_output_0"],
                         name="/Unsqueeze"),
        helper.make_node("Concat", ["/Unsqueeze_output_0", "/Unsqueeze_output_0"], ["stateN"], axis=0, name="/Concat"),
        helper.make_node("MatMul", ["/Tanh_output_0", "decoder.weight"], ["/decoder/MatMul_output_0"],
                         name="/decoder/MatMul"),
        helper.make_node("Add", ["/decoder/MatMul_output_0", "decoder.bias"], ["/decoder/Add_output_0"],
                         name="/decoder/Add"),
        helper.make_node("Sigmoid", ["/decoder/Add_output_0"], ["output"], name="/Sigmoid"),
    ]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "samples"]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, []),
              helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", HIDDEN])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1]),
               helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "batch", HIDDEN])]
    graph = helper.make_graph(nodes, "main_graph", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("com.microsoft", 1)] if fastgelu else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="pytorch", producer_version="2.5.0")
    onnx.checker.check_model(model, full_check=not fastgelu)
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("vad.onnx"))
    parser.add_argument("--fastgelu", action="store_true", help="the encoder's Relu as com.microsoft FastGelu")
    args = parser.parse_args()
    out = args.out
    onnx.save(vad(args.fastgelu), str(out))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
