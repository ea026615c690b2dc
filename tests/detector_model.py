"""A PicoDet-like layout detector as paddle2onnx exports it (issue #27's build-time model): input 1x3x800x608, an
ESNet/ShuffleNetV2-like backbone of depthwise/pointwise blocks (channel split, shuffle) with strides to /32, an FPN
(nearest Resize x2 with Concat top-down, stride-2 depthwise with Add bottom-up, an extra /64 level), and 4 heads
(3 depthwise 3x3 + pointwise 1x1 pairs, then class and box convs): 100 Convs, random weights from a fixed seed.
Outputs: `scores` [1, N, CLASSES] (sigmoid) and `boxes` [1, N, 4 * BINS] over the N anchor points of all levels.

`yolov8n_like` is a YOLOv8n-sized detector (640x640, C2f blocks, SPPF, PAN, decoupled heads, DFL: 64 Convs).
`python tests/detector_model.py OUT.onnx [yolo]` writes one (benchmarks/build_time.py imports both)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUT = (1, 3, 800, 608)
STAGES = ((96, 3), (192, 7), (384, 3))
"""Backbone stages at /8, /16, /32: output channels and stride-1 blocks after the stride-2 one."""
INPUT_YOLO = (1, 3, 640, 640)
NECK = 128
CLASSES = 5
BINS = 8
"""Distribution bins per box side (GFL/PicoDet regression), so the box conv gives 4 * BINS channels."""


@dataclass
class _Net:
    """The graph under construction: nodes, initializers, a seeded generator and a name counter."""

    rng: np.random.Generator
    nodes: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    count: int = 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}_{self.count}"

    def const(self, value: np.ndarray, kind: str = "c") -> str:
        name = self.name(kind)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1, depthwise: bool = False,
             act: str | None = "HardSwish") -> str:
        group = cin if depthwise else 1
        fan_in = (cin // group) * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.05).astype(np.float32)
        y = self.node("Conv", [x, self.const(w, "w"), self.const(b, "b")], kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4, group=group)
        return self.node(act, [y]) if act else y


def _shuffle(net: _Net, x: str, channels: int, hw: tuple[int, int]) -> str:
    """ShuffleNet's channel shuffle as exporters write it: Reshape to 2 groups, swap, Reshape back."""
    r = net.node("Reshape", [x, net.const(np.array([1, 2, channels // 2, hw[0], hw[1]], np.int64), "shape")])
    t = net.node("Transpose", [r], perm=[0, 2, 1, 3, 4])
    return net.node("Reshape", [t, net.const(np.array([1, channels, hw[0], hw[1]], np.int64), "shape")])


def _block(net: _Net, x: str, channels: int, hw: tuple[int, int]) -> str:
    """ShuffleNetV2 unit: half the channels through pointwise -> depthwise -> pointwise, concatenated, shuffled."""
    half = channels // 2
    split = net.name("split")
    kept, branch = split + "_0", split + "_1"
    net.nodes.append(helper.make_node("Split", [x, net.const(np.array([half, half], np.int64), "split")],
                                      [kept, branch], name=split, axis=1))
    y = net.conv(branch, half, half)
    y = net.conv(y, half, half, 3, depthwise=True, act=None)
    y = net.conv(y, half, half)
    return _shuffle(net, net.node("Concat", [kept, y], axis=1), channels, hw)


def _down(net: _Net, x: str, cin: int, cout: int, hw: tuple[int, int]) -> str:
    """The stride-2 unit: a depthwise+pointwise branch and a pointwise+depthwise+pointwise one, concatenated."""
    half = cout // 2
    a = net.conv(x, cin, cin, 3, 2, depthwise=True, act=None)
    a = net.conv(a, cin, half)
    b = net.conv(x, cin, half)
    b = net.conv(b, half, half, 3, 2, depthwise=True, act=None)
    b = net.conv(b, half, half)
    return _shuffle(net, net.node("Concat", [a, b], axis=1), cout, hw)


def _dw_pw(net: _Net, x: str, channels: int, stride: int = 1) -> str:
    y = net.conv(x, channels, channels, 3, stride, depthwise=True, act=None)
    return net.conv(y, channels, channels, act="LeakyRelu")


def _neck(net: _Net, c3: str, c4: str, c5: str) -> list[str]:
    """CSP-PAN-like: laterals to NECK channels, top-down Resize + Concat + pointwise, bottom-up stride-2 + Add,
    and an extra /64 level: the 4 levels the heads read."""
    l3, l4, l5 = (net.conv(c, ch, NECK, act="LeakyRelu") for c, ch in zip((c3, c4, c5), (s[0] for s in STAGES)))
    scales = net.const(np.array([1, 1, 2, 2], np.float32), "scales")

    def up(x: str) -> str:
        return net.node("Resize", [x, "", scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                        nearest_mode="floor")
    p4 = _dw_pw(net, net.conv(net.node("Concat", [up(l5), l4], axis=1), 2 * NECK, NECK, act="LeakyRelu"), NECK)
    p3 = _dw_pw(net, net.conv(net.node("Concat", [up(p4), l3], axis=1), 2 * NECK, NECK, act="LeakyRelu"), NECK)
    n4 = net.node("Add", [_dw_pw(net, p3, NECK, 2), p4])
    n5 = net.node("Add", [_dw_pw(net, n4, NECK, 2), l5])
    return [p3, n4, n5, _dw_pw(net, n5, NECK, 2)]


def _head(net: _Net, x: str) -> tuple[str, str]:
    """3 depthwise + pointwise pairs, then the class scores (sigmoid) and box distributions, each [1, C, H*W]."""
    for _ in range(3):
        x = _dw_pw(net, x, NECK)
    flat = net.const(np.array([1, 0, -1], np.int64), "shape")
    cls = net.node("Sigmoid", [net.conv(x, NECK, CLASSES, act=None)])
    box = net.conv(x, NECK, 4 * BINS, act=None)
    return net.node("Reshape", [cls, flat]), net.node("Reshape", [box, flat])


def anchor_points() -> int:
    """N: the positions of the 4 levels (strides 8, 16, 32, 64; each stride-2 conv rounds up)."""
    h, w, total = INPUT[2], INPUT[3], 0
    for level in range(6):
        h, w = -(-h // 2), -(-w // 2)
        total += h * w if level >= 2 else 0
    return total


def detector(seed: int = 27) -> onnx.ModelProto:
    """The PicoDet-like detector: image [1, 3, 800, 608] -> scores [1, N, 5], boxes [1, N, 32] (N = 10105)."""
    net = _Net(np.random.default_rng(seed))
    x = net.conv("image", 3, 24, 3, 2)
    x = net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    features, cin, hw = [], 24, (INPUT[2] // 4, INPUT[3] // 4)
    for cout, blocks in STAGES:
        hw = (-(-hw[0] // 2), -(-hw[1] // 2))
        x = _down(net, x, cin, cout, hw)
        for _ in range(blocks):
            x = _block(net, x, cout, hw)
        features.append(x)
        cin = cout
    heads = [_head(net, level) for level in _neck(net, *features)]
    outputs = []
    for name, parts, channels in (("scores", [h[0] for h in heads], CLASSES), ("boxes", [h[1] for h in heads], 4 * BINS)):
        joined = net.node("Concat", parts, axis=2)
        net.nodes.append(helper.make_node("Transpose", [joined], [name], name=name, perm=[0, 2, 1]))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, anchor_points(), channels]))
    graph = helper.make_graph(net.nodes, "picodet_like", [helper.make_tensor_value_info("image", TensorProto.FLOAT, INPUT)],
                              outputs, net.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="fluidml-xc tests")
    model.ir_version = 8
    return model


def _silu_conv(net: _Net, x: str, cin: int, cout: int, k: int = 1, stride: int = 1) -> str:
    """Ultralytics' Conv (BatchNorm folded) with SiLU as exported: Conv, Sigmoid, Mul."""
    y = net.conv(x, cin, cout, k, stride, act=None)
    return net.node("Mul", [y, net.node("Sigmoid", [y])])


def _c2f(net: _Net, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
    """YOLOv8's C2f: a 1x1 conv split in two halves, N bottlenecks (two 3x3 convs) on the second, all concatenated."""
    half = cout // 2
    y = _silu_conv(net, x, cin, cout)
    split = net.name("split")
    parts = [split + "_0", split + "_1"]
    net.nodes.append(helper.make_node("Split", [y, net.const(np.array([half, half], np.int64), "split")], parts,
                                      name=split, axis=1))
    for _ in range(n):
        b = _silu_conv(net, _silu_conv(net, parts[-1], half, half, 3), half, half, 3)
        parts.append(net.node("Add", [parts[-1], b]) if shortcut else b)
    return _silu_conv(net, net.node("Concat", parts, axis=1), (2 + n) * half, cout)


def _sppf(net: _Net, x: str, channels: int) -> str:
    y = [_silu_conv(net, x, channels, channels // 2)]
    for _ in range(3):
        y.append(net.node("MaxPool", [y[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return _silu_conv(net, net.node("Concat", y, axis=1), 2 * channels, channels)


def _yolo_detect(net: _Net, levels: list[tuple[str, int]], classes: int, bins: int = 16) -> None:
    """Decoupled heads (box: 3x3, 3x3, 1x1 to 4 * BINS; class: 3x3, 3x3, 1x1) and the DFL as exported: softmax
    over the bins, a fixed 1x1 conv with weights 0..BINS-1. -> output0 [1, 4 + classes, N]."""
    boxes, scores = [], []
    flat = net.const(np.array([1, 0, -1], np.int64), "shape")
    for x, c in levels:
        box = _silu_conv(net, _silu_conv(net, x, c, 64, 3), 64, 64, 3)
        cls = _silu_conv(net, _silu_conv(net, x, c, classes, 3), classes, classes, 3)
        boxes.append(net.node("Reshape", [net.conv(box, 64, 4 * bins, act=None), flat]))
        scores.append(net.node("Reshape", [net.conv(cls, classes, classes, act=None), flat]))
    box = net.node("Concat", boxes, axis=2)
    n = sum((INPUT_YOLO[2] // s) * (INPUT_YOLO[3] // s) for s in (8, 16, 32))
    dist = net.node("Reshape", [box, net.const(np.array([1, 4, bins, n], np.int64), "shape")])
    prob = net.node("Softmax", [net.node("Transpose", [dist], perm=[0, 2, 1, 3])], axis=1)
    dfl = net.const(np.arange(bins, dtype=np.float32).reshape(1, bins, 1, 1), "dfl")
    sides = net.node("Reshape", [net.node("Conv", [prob, dfl]), net.const(np.array([1, 4, n], np.int64), "shape")])
    probs = net.node("Sigmoid", [net.node("Concat", scores, axis=2)])
    net.nodes.append(helper.make_node("Concat", [sides, probs], ["output0"], name="output0", axis=1))


def yolov8n_like(seed: int = 8, classes: int = 80) -> onnx.ModelProto:
    """A YOLOv8n-sized detector (width 0.25, depth 0.33): images [1, 3, 640, 640] -> output0 [1, 84, 8400];
    64 Convs, 3.2 M weights, random from a fixed seed."""
    net = _Net(np.random.default_rng(seed))
    x = _silu_conv(net, _silu_conv(net, "images", 3, 16, 3, 2), 16, 32, 3, 2)
    x = _c2f(net, x, 32, 32, 1, True)
    p3 = _c2f(net, _silu_conv(net, x, 32, 64, 3, 2), 64, 64, 2, True)
    p4 = _c2f(net, _silu_conv(net, p3, 64, 128, 3, 2), 128, 128, 2, True)
    p5 = _sppf(net, _c2f(net, _silu_conv(net, p4, 128, 256, 3, 2), 256, 256, 1, True), 256)
    scales = net.const(np.array([1, 1, 2, 2], np.float32), "scales")

    def up(t: str) -> str:
        return net.node("Resize", [t, "", scales], mode="nearest")
    n4 = _c2f(net, net.node("Concat", [up(p5), p4], axis=1), 384, 128, 1, False)
    o3 = _c2f(net, net.node("Concat", [up(n4), p3], axis=1), 192, 64, 1, False)
    o4 = _c2f(net, net.node("Concat", [_silu_conv(net, o3, 64, 64, 3, 2), n4], axis=1), 192, 128, 1, False)
    o5 = _c2f(net, net.node("Concat", [_silu_conv(net, o4, 128, 128, 3, 2), p5], axis=1), 384, 256, 1, False)
    _yolo_detect(net, [(o3, 64), (o4, 128), (o5, 256)], classes)
    graph = helper.make_graph(net.nodes, "yolov8n_like",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, INPUT_YOLO)],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + classes, 8400])],
                              net.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="fluidml-xc tests")
    model.ir_version = 8
    return model


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["yolo"]):
        sys.exit("usage: python tests/detector_model.py OUT.onnx [yolo]")
    onnx.save(yolov8n_like() if sys.argv[2:] else detector(), sys.argv[1])
