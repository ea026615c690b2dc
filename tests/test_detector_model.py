"""The PicoDet-like detector and the YOLOv8n-sized one that benchmarks/build_time.py builds (tests/detector_model.py,
issue #27): valid ONNX of the promised structure and size, and ONNX Runtime runs them."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort

from detector_model import BINS, CLASSES, INPUT, INPUT_YOLO, anchor_points, detector, yolov8n_like


def test_detector_is_valid_onnx_of_the_promised_structure():
    model = detector()
    onnx.checker.check_model(model, full_check=True)
    ops = Counter(n.op_type for n in model.graph.node)
    assert 95 <= ops["Conv"] <= 110, ops
    depthwise = [n for n in model.graph.node if n.op_type == "Conv" and onnx.helper.get_attribute_value(
        next(a for a in n.attribute if a.name == "group")) > 1]
    assert len(depthwise) >= 30
    assert ops["Resize"] == 2 and ops["Concat"] >= 2 and ops["Add"] >= 2
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == list(INPUT)
    assert detector().SerializeToString() == model.SerializeToString()


def test_detector_runs_in_onnxruntime():
    session = ort.InferenceSession(detector().SerializeToString(), providers=["CPUExecutionProvider"])
    image = np.random.default_rng(0).standard_normal(INPUT).astype(np.float32)
    scores, boxes = session.run(["scores", "boxes"], {"image": image})
    assert scores.shape == (1, anchor_points(), CLASSES) and boxes.shape == (1, anchor_points(), 4 * BINS)
    assert anchor_points() == 100 * 76 + 50 * 38 + 25 * 19 + 13 * 10
    assert np.isfinite(boxes).all() and ((scores >= 0) & (scores <= 1)).all()
    assert scores.std() > 0.01 and boxes.std() > 0.01


def test_yolov8n_like_is_valid_and_runs_in_onnxruntime():
    model = yolov8n_like()
    onnx.checker.check_model(model, full_check=True)
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["Conv"] == 64 and ops["Split"] == 8 and ops["MaxPool"] == 3
    assert 3.0e6 < sum(np.prod(t.dims) for t in model.graph.initializer) < 3.3e6
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"images": np.random.default_rng(0).standard_normal(INPUT_YOLO).astype(np.float32)})
    assert out.shape == (1, 84, 8400) and np.isfinite(out).all()
    assert ((out[:, 4:] >= 0) & (out[:, 4:] <= 1)).all() and (out[:, :4] >= 0).all() and (out[:, :4] <= 15).all()
