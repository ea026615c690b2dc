"""ai.onnx.ml SVMClassifier expanded at import into standard ops (and our PairwiseCoupling for probabilities),
following ONNX Runtime 1.32's kernel (svmclassifier.cc):

- support vectors (vectors_per_class): K = the kernel matrix of X against the support vectors (ml_ops'
  `kernel_matrix`: one MatMul, RBF's distance as |x|^2 - 2 x.v + |v|^2; LINEAR folds the support vectors into W at
  build time, X @ (V^T W), a linear model's cost); the one-vs-one decision value of each
  class pair (i, j), i < j, is K @ W + rho, where W's column holds class i's vectors' coefficients of row j - 1
  and class j's of row i (one MatMul for every pair, summed in float64 as ONNX Runtime sums it, so that a near-tie
  votes as there); a pair votes for i when its value is positive, else for j;
  the label is the class with the most votes (the first on a tie), also with probabilities and for two classes.
  Scores: with prob_a/prob_b, the pairwise probabilities 1 - logistic(A s + B), clamped to [1e-7, 1 - 1e-7] and
  coupled into one probability per class by ONNX Runtime's iterative solver (`fluidml.PairwiseCoupling`,
  ops/svm.py); without, the decision values ([rows, pairs]; two classes: [-s, s] (NONE), [logistic(-s),
  logistic(s)] (LOGISTIC), [1 - s, s] (SOFTMAX, SOFTMAX_ZERO), [probit(s), unset] (PROBIT), as ONNX Runtime 1.32
  gives them). Then the post transform (ml_transforms.py).
- no support vectors (the liblinear form): scores = X @ coefficients^T + rho[0] per class; the label is the first
  highest score's, except for two classes without probabilities: labels[1] when that score passes 0.5 (all
  coefficients >= 0) or 0 (mixed), ONNX Runtime's binary rule.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from ..opspec import OUR_DOMAIN
from .builder import NodeBuilder, attr
from .expanders import Scope, expands
from .ml_ops import ML_DOMAIN, OUTPUT_SHAPES, float_input, kernel_matrix, text_attr
from .ml_transforms import POST_TRANSFORMS, class_labels, gather_label, second_class

COUPLING = "PairwiseCoupling"
"""Our op (OUR_DOMAIN) coupling the pairwise probabilities into one per class (ops/svm.py)."""


def pair_weights(coefficients: np.ndarray, per_class: list[int]) -> np.ndarray:
    """W [vectors, pairs]: column (i, j) (i < j, in ONNX Runtime's order) holds class i's vectors' coefficients of
    row j - 1 and class j's of row i; 0 elsewhere."""
    starts = np.concatenate([[0], np.cumsum(per_class)]).astype(int)
    classes = len(per_class)
    w = np.zeros((int(starts[-1]), classes * (classes - 1) // 2), np.float32)
    p = 0
    for i in range(classes - 1):
        for j in range(i + 1, classes):
            w[starts[i]:starts[i + 1], p] = coefficients[j - 1, starts[i]:starts[i + 1]]
            w[starts[j]:starts[j + 1], p] = coefficients[i, starts[j]:starts[j + 1]]
            p += 1
    return w


def vote_matrix(classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(M [pairs, classes], base [classes]): votes = (decision > 0) @ M + base, since pair (i, j) votes for i when
    positive, else for j (class c is the j of c pairs)."""
    m = np.zeros((classes * (classes - 1) // 2, classes), np.float32)
    p = 0
    for i in range(classes - 1):
        for j in range(i + 1, classes):
            m[p, i], m[p, j] = 1.0, -1.0
            p += 1
    return m, np.arange(classes, dtype=np.float32)


@expands(ML_DOMAIN, "SVMClassifier")
def expand_svm_classifier(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    where = f"node {node_name!r} (SVMClassifier)"
    bld = NodeBuilder(node_name, scope.opset)
    labels = class_labels(where, attr(node, "classlabels_ints", None), attr(node, "classlabels_strings", None))
    x = float_input(bld, node, scope.tensors)
    name = text_attr(attr(node, "post_transform", b"NONE"))
    post = POST_TRANSFORMS.get(name)
    if x is None or post is None or labels is None or len(labels) < 2:
        return None
    rows, columns = scope.tensors[node.input[0]].shape
    classes, pairs = len(labels), len(labels) * (len(labels) - 1) // 2
    coef = np.asarray(attr(node, "coefficients", None) or [], np.float32)
    rho = np.asarray(attr(node, "rho", None) or [], np.float32)
    prob_a = [float(v) for v in attr(node, "prob_a", None) or []]
    prob_b = [float(v) for v in attr(node, "prob_b", None) or []]
    per_class = [int(v) for v in attr(node, "vectors_per_class", None) or []]
    out_label = node.output[0] if node.output and node.output[0] else None
    out_scores = node.output[1] if len(node.output) > 1 and node.output[1] else None
    if len(prob_a) != len(prob_b) or not rho.size:
        return None
    if sum(per_class) == 0:
        if coef.size != classes * columns:
            return None
        weights = bld.constant(coef.reshape(classes, columns).T.copy(), "coefficients")
        scores = bld.add("Add", [bld.add("MatMul", [x, weights])[0], bld.constant(rho[:1], "rho")])[0]
        if out_label:
            best = bld.add("ArgMax", [scores], axis=1, keepdims=0)[0]
            if classes == 2 and not prob_a:
                top = bld.add("ReduceMax", [scores], axes=[1], keepdims=0)[0] if scope.opset < 18 else \
                    bld.add("ReduceMax", [scores, bld.constant(np.array([1], np.int64), "axes")], keepdims=0)[0]
                threshold = 0.5 if bool((coef >= 0).all()) else 0.0
                passes = bld.add("GreaterOrEqual" if threshold else "Greater",
                                 [top, bld.constant(np.asarray([threshold], np.float32), "threshold")])[0]
                best = bld.add("Where", [passes, bld.constant(np.ones(1, np.int64), "one"), best])[0]
            gather_label(bld, labels, best, out_label)
        if out_scores:
            post(bld, scores, out_scores)
        return bld.nodes
    vectors = np.asarray(attr(node, "support_vectors", None) or [], np.float32)
    total = sum(per_class)
    if (len(per_class) != classes or vectors.size != total * columns or coef.size < (classes - 1) * total
            or rho.size < pairs or (prob_a and len(prob_a) < pairs)):
        return None
    kernel = text_attr(attr(node, "kernel_type", b"LINEAR"))
    w = pair_weights(coef[:(classes - 1) * total].reshape(classes - 1, total), per_class).astype(np.float64)
    if kernel == "LINEAR":  # K @ W = X @ (V^T W): the pairs' weights folded through the support vectors
        k, w = x, vectors.reshape(total, columns).T.astype(np.float64) @ w
    else:
        k = kernel_matrix(bld, x, vectors.reshape(total, columns), kernel, attr(node, "kernel_params", None))
    if k is None:
        return None
    exact = bld.add("Add", [bld.add("MatMul", [bld.add("Cast", [k], to=TensorProto.DOUBLE)[0],
                                               bld.constant(w, "pair_weights")])[0],
                            bld.constant(rho[:pairs].astype(np.float64), "rho")])[0]
    decision = bld.add("Cast", [exact], to=TensorProto.FLOAT)[0]
    if out_label:
        m, base = vote_matrix(classes)
        positive = bld.add("Cast", [bld.add("Greater", [exact, bld.constant(np.zeros(1, np.float64), "zero")])[0]],
                           to=TensorProto.FLOAT)[0]
        votes = bld.add("Add", [bld.add("MatMul", [positive, bld.constant(m, "votes")])[0], bld.constant(base, "base")])[0]
        gather_label(bld, labels, bld.add("ArgMax", [votes], axis=1, keepdims=0)[0], out_label)
    if not out_scores:
        return bld.nodes
    if prob_a:
        probabilities = bld.add(COUPLING, [decision], domain=OUR_DOMAIN, classes=classes, prob_a=prob_a[:pairs],
                                prob_b=prob_b[:pairs])[0]
        post(bld, probabilities, out_scores)
    elif classes == 2:
        second_class(bld, decision, rows, name, name in ("NONE", "LOGISTIC"), False, out_scores)
    else:
        post(bld, decision, out_scores)
    return bld.nodes


def coupling_shapes(node: onnx.NodeProto, inputs: list) -> dict:
    """PairwiseCoupling: [rows, classes] float32 from the pairwise decision values [rows, pairs]."""
    return {node.output[0]: (np.dtype(np.float32), (int(inputs[0].shape[0]), int(attr(node, "classes", 0))))}


OUTPUT_SHAPES[(OUR_DOMAIN, COUPLING)] = coupling_shapes
