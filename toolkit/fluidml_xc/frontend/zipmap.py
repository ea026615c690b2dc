"""ai.onnx.ml ZipMap: a [rows, classes] float tensor -> a sequence of maps {class label: probability}, one per row
(skl2onnx ends its classifiers in one by default).

Compiled as a structure over its input (as sequences.py compiles sequences): no node, no copy. The compiled model's
output is the probabilities tensor itself under ZipMap's output name; its descriptor ["zipmap", labels] (in the
artifact's manifest, `structures.outputs`) carries the labels, model.h lists them, and the Python backend and
`fluidml-xc run --outputs FILE.json` give each row back as a dict {label: probability} in the labels' order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import InputError
from .builder import attr
from .expanders import Scope, always, expands

ML_DOMAIN = "ai.onnx.ml"
ZIPMAP = "zipmap"
"""The descriptor's tag: ["zipmap", labels]."""


@dataclass(frozen=True)
class ZipMapValue:
    """A ZipMap's output: the probabilities tensor and the class labels of its columns (int or str)."""

    tensor: str
    labels: tuple


def labels_of(node: onnx.NodeProto) -> tuple:
    strings = attr(node, "classlabels_strings", None)
    if strings:
        return tuple(s.decode() if isinstance(s, bytes) else str(s) for s in strings)
    return tuple(int(v) for v in attr(node, "classlabels_int64s", None) or [])


@expands(ML_DOMAIN, "ZipMap", structure=True, claims=always)
def expand_zipmap(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto]:
    where = f"node {node_name!r} (ZipMap)"
    labels = labels_of(node)
    x = node.input[0] if node.input else ""
    t = scope.tensors.get(x)
    if t is None:
        raise InputError(f"{where} reads {x!r}, which is not a tensor the model computes: the model is malformed")
    if np.dtype(t.dtype) != np.float32 or len(t.shape) not in (1, 2) or not labels or t.shape[-1] != len(labels):
        raise InputError(f"{where}: its input {x!r} is {np.dtype(t.dtype).name} {list(t.shape)}; ZipMap takes float "
                         f"[rows, {len(labels)}] (one column per class label): check the model's classifier output")
    scope.structs[node.output[0]] = ZipMapValue(x, labels)
    return []


def zipmap_rows(labels, probabilities: np.ndarray) -> list[dict]:
    """The run-time value of a ZipMap output: per row {label: probability} (a [classes] tensor is one row)."""
    rows = np.asarray(probabilities, np.float32).reshape(-1, len(labels))
    return [dict(zip(labels, (float(v) for v in row))) for row in rows]


def output_labels(graph) -> tuple[tuple[int, tuple], ...]:
    """(index in graph.outputs, labels) of each ZipMap output (the C API's label tables)."""
    described = (graph.structures or {}).get("outputs", {})
    return tuple((index, tuple(described[name][1])) for index, name in enumerate(graph.outputs)
                 if isinstance(described.get(name), list) and described[name][0] == ZIPMAP)
