"""benchmarks/mca.py's cases: single-op (or single-block) ONNX models whose hot loops mca.py prices on every board,
and the forms the RISC-V boards run in MobileNetV2 and the light models (benchmarks/riscv_forms.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

rng = np.random.default_rng(3)


@dataclass
class Case:
    name: str
    kind: str  # "fp", "fp16" (build --precision fp16: float16 FMAs, docs/FP16.md) or "int8"
    model: onnx.ModelProto
    work: float = 0.0
    """FLOP (fp) or MAC (int8) of the whole op, for --measure; 0: not a single op."""
    conv_algo: str = "direct"
    """--conv-algo of the build: "auto" lets the cost model run 3x3 convs as Winograd (docs/WINOGRAD.md)."""
    precision: str = "fp32"
    """--precision of the build (fp16 cases: boards without float16 arithmetic report the refusal)."""
    channels_last: bool = False
    """Build with every activation channels-last (forced_channels_last): a form the optimizer does not pick for the
    single op."""


def _model(nodes, inputs: dict, consts: dict, outputs=("y",), opset=13) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()]
    graph = helper.make_graph(nodes, "mca", ins, [helper.make_empty_tensor_value_info(o) for o in outputs], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def f32(*shape):
    return (rng.standard_normal(shape) * 0.1).astype(np.float32)


def _mobilenet_block(cin: int, hidden: int, cout: int, hw: int):
    """MobileNetV2's block at hw x hw: 1x1 expand to `hidden`, Clip6, depthwise 3x3, Clip6, 1x1 project."""
    return _model(
        [helper.make_node("Conv", ["x", "w1"], ["e"]), helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
         helper.make_node("Conv", ["e6", "wd"], ["d"], pads=[1] * 4, group=hidden),
         helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]), helper.make_node("Conv", ["d6", "w2"], ["y"])],
        {"x": f32(1, cin, hw, hw)}, {"w1": f32(hidden, cin, 1, 1), "wd": f32(hidden, 1, 3, 3), "w2": f32(cout, hidden, 1, 1),
                                     "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)})


def cases() -> list[Case]:
    from bench_int8 import qlinear_conv, qlinear_matmul

    out = []
    out.append(Case("fp32 MatMul 64x256x256", "fp", _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                                           {"a": f32(64, 256)}, {"b": f32(256, 256)}), 2.0 * 64 * 256 * 256))
    out.append(Case("fp32 Conv 3x3 32->32 28x28 +Relu", "fp", _model(
        [helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1] * 4), helper.make_node("Relu", ["c"], ["y"])],
        {"x": f32(1, 32, 28, 28)}, {"w": f32(32, 32, 3, 3), "bias": f32(32)}), 2.0 * 32 * 32 * 9 * 28 * 28))
    # 1x1 convs: a flat image (row vectors, x86's 6 channels x 2 vectors) and a small one (channel vectors, packed input)
    for cin, cout, hw in ((256, 64, 56), (1024, 256, 14)):
        out.append(Case(f"fp32 Conv 1x1 {cin}->{cout} {hw}x{hw}", "fp", _model(
            [helper.make_node("Conv", ["x", "w"], ["y"])], {"x": f32(1, cin, hw, hw)}, {"w": f32(cout, cin, 1, 1)}),
            2.0 * cin * cout * hw * hw))
    out.append(Case("fp32 depthwise 3x3 NCHW 64x28x28 +Clip6", "fp", _model(
        [helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1] * 4, group=64),
         helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
        {"x": f32(1, 64, 28, 28)}, {"w": f32(64, 1, 3, 3), "bias": f32(64), "lo": np.array(0, np.float32),
                                    "hi": np.array(6, np.float32)}), 2.0 * 64 * 9 * 28 * 28))
    # the same without an activation (the U74's band routine without its Clip: docs/RISCV_KERNELS.md)
    out.append(Case("fp32 depthwise 3x3 NCHW 64x28x28", "fp", _model(
        [helper.make_node("Conv", ["x", "w", "bias"], ["y"], pads=[1] * 4, group=64)],
        {"x": f32(1, 64, 28, 28)}, {"w": f32(64, 1, 3, 3), "bias": f32(64)}), 2.0 * 64 * 9 * 28 * 28))
    # the same depthwise kept channels-last by Transposes around it (the optimizer may run the blocks below NCHW)
    out.append(Case("fp32 depthwise 3x3 channels-last 96x28x28 +Clip6", "fp", _model(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
         helper.make_node("Conv", ["xt", "w", "bias"], ["c"], pads=[1] * 4, group=96),
         helper.make_node("Clip", ["c", "lo", "hi"], ["d"]), helper.make_node("Transpose", ["d"], ["y"], perm=[0, 2, 3, 1])],
        {"x": f32(1, 28, 28, 96)}, {"w": f32(96, 1, 3, 3), "bias": f32(96), "lo": np.array(0, np.float32),
                                    "hi": np.array(6, np.float32)}), 2.0 * 96 * 9 * 28 * 28))
    # the same at stride 2 (MobileNetV2's features.2: 96 channels, 112x112 -> 56x56)
    out.append(Case("fp32 depthwise 3x3 stride 2 channels-last 96x112x112 +Clip6", "fp", _model(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
         helper.make_node("Conv", ["xt", "w", "bias"], ["c"], pads=[1] * 4, strides=[2, 2], group=96),
         helper.make_node("Clip", ["c", "lo", "hi"], ["d"]), helper.make_node("Transpose", ["d"], ["y"], perm=[0, 2, 3, 1])],
        {"x": f32(1, 112, 112, 96)}, {"w": f32(96, 1, 3, 3), "bias": f32(96), "lo": np.array(0, np.float32),
                                      "hi": np.array(6, np.float32)}), 2.0 * 96 * 9 * 56 * 56))
    # MobileNetV2 block: 1x1 expand, depthwise, 1x1 project; fluid keeps it channels-last (NHWC depthwise) on ARM,
    # NCHW on the X60 (its 1x1 project conv is slower channels-last there: docs/RISCV_KERNELS.md)
    out.append(Case("fp32 depthwise 3x3 NHWC (MobileNetV2 block) +Clip6", "fp", _mobilenet_block(16, 96, 24, 28), ))
    # the cost model's choice: Winograd on ARM (the hot loop is its GEMM tile over input channels), FLOP of the direct conv
    out.append(Case("fp32 Conv 3x3 64->64 28x28 (auto: Winograd GEMM)", "fp", _model(
        [helper.make_node("Conv", ["x", "w", "bias"], ["y"], pads=[1] * 4)],
        {"x": f32(1, 64, 28, 28)}, {"w": f32(64, 64, 3, 3), "bias": f32(64)}), 2.0 * 64 * 64 * 9 * 28 * 28, "auto"))
    # the same block at MobileNetV2's 56x56 stage (144 channels): its armv7 channels-last depthwise loop reloaded
    # hoisted input-row and pixel bases from the stack until each block took one address (docs/ARM_KERNELS.md)
    out.append(Case("fp32 depthwise 3x3 NHWC 144x56x56 (MobileNetV2 stage 2) +Clip6", "fp",
                    _mobilenet_block(24, 144, 24, 56), ))
    out += form_cases()  # forms the RISC-V boards run that the rows above do not have (benchmarks/riscv_forms.py)
    # A's rows 2 KB apart (past the loads' 12-bit offsets): BERT-tiny's output MatMul (docs/RISCV_KERNELS.md)
    out.append(Case("fp32 MatMul 128x512x128 (BERT-tiny output)", "fp", _model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": f32(128, 512)}, {"b": f32(512, 128)}), 2.0 * 128 * 512 * 128))
    # the same MatMul and Conv built with --precision fp16 (float16 FMAs in blocks added into float32, docs/FP16.md)
    out.append(Case("fp16 MatMul 64x256x256", "fp16", out[0].model, out[0].work, precision="fp16"))
    out.append(Case("fp16 Conv 3x3 32->32 28x28 +Relu", "fp16", out[1].model, out[1].work, precision="fp16"))
    out.append(Case("int8 QLinearMatMul 64x256x256", "int8", qlinear_matmul(64, 256, 256)[0], 64.0 * 256 * 256))
    out.append(Case("int8 QLinearConv 3x3 32->32 28x28", "int8", qlinear_conv(32, 32, 28, 28)[0], 32.0 * 32 * 9 * 28 * 28))
    return out


def form_cases() -> list:
    """benchmarks/mca.py's cases for forms the RISC-V boards run in MobileNetV2 and the light models: the stem (3x3
    stride 2, 3 input channels), a flat NCHW 1x1 conv into 24 channels (row vectors), a channels-last 1x1 conv
    between a MobileNetV2 block's depthwise convs at 14x14 (its input packed), a classifier's Gemm of one row;
    channels-last 1x1 convs (forced_channels_last) over 56x56 pixels (packed in chunks of pixel blocks) and into 16
    channels at 13x13 (unpacked: 8 input channels per iteration)."""
    out = []
    out.append(Case("fp32 Conv 3x3 s2 3->32 224x224 (stem) +Clip6", "fp", _model(
        [helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1] * 4, strides=[2, 2]),
         helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
        {"x": f32(1, 3, 224, 224)}, {"w": f32(32, 3, 3, 3), "bias": f32(32), "lo": np.array(0, np.float32),
                                     "hi": np.array(6, np.float32)}), 2.0 * 32 * 27 * 112 * 112))
    out.append(Case("fp32 Conv 1x1 144->24 56x56 (project)", "fp", _model(
        [helper.make_node("Conv", ["x", "w"], ["y"])], {"x": f32(1, 144, 56, 56)}, {"w": f32(24, 144, 1, 1)}),
        2.0 * 144 * 24 * 56 * 56))
    out.append(Case("fp32 Conv 1x1 NHWC 64->384->96 14x14 (MobileNetV2 block)", "fp", _mobilenet_block(64, 384, 96, 14)))
    out.append(Case("fp32 Gemm 1x1280 x 1280x1000 (classifier)", "fp", _model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)], {"a": f32(1, 1280)},
        {"b": f32(1000, 1280), "c": f32(1000)}), 2.0 * 1280 * 1000))
    for cin, cout, hw, how in ((256, 64, 56, "packed in chunks"), (480, 16, 13, "unpacked")):
        out.append(Case(f"fp32 Conv 1x1 NHWC {cin}->{cout} {hw}x{hw} ({how})", "fp", _model(
            [helper.make_node("Relu", ["x"], ["xr"]), helper.make_node("Conv", ["xr", "w"], ["y"])],
            {"x": f32(1, cin, hw, hw)}, {"w": f32(cout, cin, 1, 1)}), 2.0 * cin * cout * hw * hw, channels_last=True))
    return out


def forced_channels_last(optimize):
    """`optimize` (fluid.optimize) with every 4-D activation but the graph's inputs and outputs channels-last and the
    kernels' own loop orders: prices a form the optimizer does not pick for a small model (its inputs through an
    elementwise op)."""
    def forced(graph, *args, **kwargs):
        decisions = optimize(graph, *args, **kwargs)
        ends = set(graph.inputs) | set(graph.outputs)
        decisions.layouts = {name: (0, 2, 3, 1) for name, t in graph.tensors.items()
                             if len(t.shape) == 4 and not t.is_const and name not in ends}
        decisions.loop_orders, decisions.views = {}, []
        return decisions
    return forced
