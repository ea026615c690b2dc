"""String class labels, expanded at import into a Gather of a string constant (docs/STRINGS.md):

- TreeEnsembleClassifier with `classlabels_strings`: the same classifier over the class indices 0..n-1
  (ops/trees.py lowers it), then its label output gathered from the string labels; the scores are its own;
- ArrayFeatureExtractor over a constant string tensor (skl2onnx's MLP, naive Bayes, k-NN and SGD classifiers pick
  their string label with it): Gather along the last axis over the flattened indices ([1, count] for a rank-1 X,
  as ONNX Runtime shapes it)."""
from __future__ import annotations

import onnx
import numpy as np
from onnx import helper

from .builder import NodeBuilder, attr
from .expanders import Scope, expands
from .ml_transforms import class_labels, gather_label

ML_DOMAIN = "ai.onnx.ml"


@expands(ML_DOMAIN, "TreeEnsembleClassifier")
def expand_string_labels(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    strings = attr(node, "classlabels_strings", None)
    if not strings:
        return None
    labels = class_labels(f"node {node_name!r} (TreeEnsembleClassifier)", None, strings)
    bld = NodeBuilder(node_name, scope.opset)
    out_label = node.output[0] if node.output and node.output[0] else ""
    index = bld.name("class_index") if out_label else ""
    relabeled = onnx.NodeProto()
    relabeled.CopyFrom(node)
    relabeled.name = bld.name("indices")
    del relabeled.attribute[:]
    relabeled.attribute.extend(a for a in node.attribute if a.name != "classlabels_strings")
    relabeled.attribute.append(helper.make_attribute("classlabels_int64s", list(range(len(labels)))))
    relabeled.output[0] = index
    bld.nodes.append(relabeled)
    if out_label:
        gather_label(bld, labels, index, out_label)
    return bld.nodes


@expands(ML_DOMAIN, "ArrayFeatureExtractor")
def expand_string_extractor(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    x = scope.tensors.get(node.input[0]) if len(node.input) == 2 else None
    indices = scope.tensors.get(node.input[1]) if x is not None else None
    if x is None or indices is None or not x.is_const or x.value.dtype.kind not in "OSU" or not x.shape:
        return None
    bld = NodeBuilder(node_name, scope.opset)
    flat = bld.add("Reshape", [node.input[1], bld.constant(np.array([-1], np.int64), "flat")])[0]
    if len(x.shape) == 1:
        picked = bld.add("Gather", [node.input[0], flat], axis=0)[0]
        bld.add("Reshape", [picked, bld.constant(np.array([1, -1], np.int64), "row")], [node.output[0]])
    else:
        bld.add("Gather", [node.input[0], flat], [node.output[0]], axis=len(x.shape) - 1)
    return bld.nodes
