"""Tree classifiers with string class labels (`classlabels_strings`), expanded at import: the same
TreeEnsembleClassifier over the class indices 0..n-1 (ops/trees.py lowers it), then its label output gathered from
the string labels (a string constant, docs/STRINGS.md). The scores are the classifier's own."""
from __future__ import annotations

import onnx
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
