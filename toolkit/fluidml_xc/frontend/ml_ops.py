"""ai.onnx.ml ops that skl2onnx writes for linear models, their normalization and encoders, expanded at import into standard ops (as
subgraphs.py does for control flow; tensor expansions in expanders.py's registry), so they fold, fuse and lower like the rest of the graph:

- Scaler: (X - offset) * scale
- LinearRegressor: X @ coefficients^T + intercepts (post_transform NONE)
- LinearClassifier: scores = X @ coefficients^T + intercepts, every post transform and ONNX Runtime's one-column
  binary form (ml_transforms.py); label = the class label (classlabels_ints) at the first maximum score
- Normalizer: each row over its MAX, L1 or L2 norm (rows whose norm is 0 copied)
- LabelEncoder (numeric keys and values), OneHotEncoder (integer categories), Imputer, FeatureVectorizer
- SVMRegressor: kernel matrix by MatMul, then the support coefficients and rho

Inputs of another dtype than float are cast to float first (as ONNX Runtime computes them). A variant
outside these (rank other than 2, string values) is left alone and reported as an unsupported op, or as a string
tensor, by the frontend; string class labels (`classlabels_strings`) make the label output a string tensor, a Gather of
the labels (ml_transforms.class_labels); tree classifiers with string labels: string_labels.py.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto

from ..errors import InputError
from .builder import NodeBuilder, attr
from .expanders import Scope, expands
from .ml_transforms import POST_TRANSFORMS, class_labels, gather_label, second_class

ML_DOMAIN = "ai.onnx.ml"


def float_input(bld: NodeBuilder, node: onnx.NodeProto, tensors: dict) -> str | None:
    """Input 0 as a rank-2 float tensor (cast when needed); None when it is not a known rank-2 tensor."""
    if not node.input or node.input[0] not in tensors:
        return None
    name = node.input[0]
    t = tensors[name]
    if len(t.shape) != 2:
        return None
    if np.dtype(t.dtype) == np.float32:
        return name
    return bld.add("Cast", [name], to=TensorProto.FLOAT)[0]


def text_attr(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "NONE")


@expands(ML_DOMAIN, "Scaler")
def expand_scaler(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    bld, tensors = NodeBuilder(node_name, scope.opset), scope.tensors
    x = float_input(bld, node, tensors)
    if x is None:
        return None
    offset = np.asarray(attr(node, "offset", None) or [0.0], np.float32)
    scale = np.asarray(attr(node, "scale", None) or [1.0], np.float32)
    centered = bld.add("Sub", [x, bld.constant(offset, "offset")])[0]
    bld.add("Mul", [centered, bld.constant(scale, "scale")], [node.output[0]])
    return bld.nodes


def _linear(bld: NodeBuilder, x: str, coefficients, intercepts, columns: int, targets: int) -> str | None:
    coef = np.asarray(coefficients or [], np.float32)
    if coef.size != targets * columns:
        return None
    scores = bld.add("MatMul", [x, bld.constant(coef.reshape(targets, columns).T.copy(), "coefficients")])[0]
    if intercepts:
        bias = np.asarray(intercepts, np.float32)
        if bias.size not in (1, targets):
            return None
        scores = bld.add("Add", [scores, bld.constant(bias, "intercepts")])[0]
    return scores


@expands(ML_DOMAIN, "LinearRegressor")
def expand_linear_regressor(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    bld, tensors = NodeBuilder(node_name, scope.opset), scope.tensors
    x = float_input(bld, node, tensors)
    if x is None or text_attr(attr(node, "post_transform", b"NONE")) != "NONE":
        return None
    targets = int(attr(node, "targets", 1))
    scores = _linear(bld, x, attr(node, "coefficients", None), attr(node, "intercepts", None),
                     tensors[node.input[0]].shape[1], targets)
    if scores is None:
        return None
    bld.add("Identity", [scores], [node.output[0]])
    return bld.nodes


@expands(ML_DOMAIN, "LinearClassifier")
def expand_linear_classifier(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """scores = X @ coefficients^T + intercepts. Several columns: label = the label at the first maximum score, the
    scores through the post transform. One column (ONNX Runtime's binary form, two labels): label = labels[1] where
    the score is positive, else labels[0]; the scores widen to [1 - s, s] (ml_transforms.second_class)."""
    bld, tensors = NodeBuilder(node_name, scope.opset), scope.tensors
    x = float_input(bld, node, tensors)
    labels = class_labels(f"node {node_name!r} (LinearClassifier)", attr(node, "classlabels_ints", None),
                          attr(node, "classlabels_strings", None))
    name = text_attr(attr(node, "post_transform", b"NONE"))
    post = POST_TRANSFORMS.get(name)
    if x is None or post is None or labels is None:
        return None
    intercepts = attr(node, "intercepts", None)
    rows, columns = tensors[node.input[0]].shape
    targets = len(attr(node, "coefficients", None) or []) // max(1, columns)
    if targets < 1 or (targets > 1 and targets != len(labels)):
        return None
    if targets == 1 and len(labels) != 2:
        raise InputError(f"node {node_name!r} (LinearClassifier): one coefficient row (a binary classifier) with "
                         f"{len(labels)} class labels; give exactly two (ONNX Runtime refuses other counts too)")
    scores = _linear(bld, x, attr(node, "coefficients", None), intercepts, columns, targets)
    if scores is None:
        return None
    out_label = node.output[0] if node.output and node.output[0] else None
    out_scores = node.output[1] if len(node.output) > 1 and node.output[1] else None
    if targets > 1:
        if out_label:
            gather_label(bld, labels, bld.add("ArgMax", [scores], axis=1, keepdims=0)[0], out_label)
        if out_scores:
            post(bld, scores, out_scores)
        return bld.nodes
    if out_label:
        high = bld.add("Greater", [bld.add("Reshape", [scores, bld.constant(np.array([-1], np.int64), "flat")])[0],
                                   bld.constant(np.zeros(1, np.float32), "zero")])[0]
        gather_label(bld, labels, bld.add("Cast", [high], to=TensorProto.INT64)[0], out_label)
    if out_scores:
        second_class(bld, scores, rows, name, False, True, out_scores)
    return bld.nodes


def _row_reduce(bld: NodeBuilder, op: str, x: str) -> str:
    """op over axis 1 with keepdims (axes an input from ReduceSum 13 / ReduceMax 18 on)."""
    if bld.opset >= (13 if op == "ReduceSum" else 18):
        return bld.add(op, [x, bld.constant(np.array([1], np.int64), "axes")], keepdims=1)[0]
    return bld.add(op, [x], axes=[1], keepdims=1)[0]


NORMS: dict[str, Callable[[NodeBuilder, str], str]] = {
    "MAX": lambda bld, x: _row_reduce(bld, "ReduceMax", x),
    "L1": lambda bld, x: _row_reduce(bld, "ReduceSum", bld.add("Abs", [x])[0]),
    "L2": lambda bld, x: bld.add("Sqrt", [_row_reduce(bld, "ReduceSum", bld.add("Mul", [x, x])[0])])[0],
}


@expands(ML_DOMAIN, "Normalizer")
def expand_normalizer(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """Each row divided by its largest value (MAX), its sum of magnitudes (L1) or its Euclidean norm (L2); a row
    whose divisor is 0 is copied (ONNX Runtime's rule)."""
    bld = NodeBuilder(node_name, scope.opset)
    x = float_input(bld, node, scope.tensors)
    norm = NORMS.get(text_attr(attr(node, "norm", b"MAX")))
    if x is None or norm is None:
        return None
    divisor = norm(bld, x)
    zero = bld.add("Equal", [divisor, bld.constant(np.zeros(1, np.float32), "zero")])[0]
    bld.add("Where", [zero, x, bld.add("Div", [x, divisor])[0]], [node.output[0]])
    return bld.nodes


def _reduce_last(bld: NodeBuilder, op: str, x: str) -> str:
    """op over the last axis, dropped."""
    if bld.opset >= (13 if op == "ReduceSum" else 18):
        return bld.add(op, [x, bld.constant(np.array([-1], np.int64), "axes")], keepdims=0)[0]
    return bld.add(op, [x], axes=[-1], keepdims=0)[0]


def _attr_values(node: onnx.NodeProto, name: str) -> np.ndarray | None:
    """A list attribute (NAME_int64s / NAME_floats) or NAME_tensor as an array; None when absent or strings."""
    for suffix in ("_int64s", "_floats", "_tensor"):
        value = attr(node, name + suffix, None)
        if isinstance(value, onnx.TensorProto):
            value = onnx.numpy_helper.to_array(value)
            if value.dtype.kind in "OSU":
                return None
            return value.reshape(-1)
        if value is not None and len(value):
            return np.asarray(value, np.int64 if suffix == "_int64s" else np.float32)
    return None


@expands(ML_DOMAIN, "LabelEncoder")
def expand_label_encoder(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """Numeric keys -> numeric values: the first key equal to x picks its value, else the default (string keys or
    values are string tensors, left to the frontend)."""
    bld = NodeBuilder(node_name, scope.opset)
    keys, values = _attr_values(node, "keys"), _attr_values(node, "values")
    if keys is None or values is None or len(keys) != len(values) or node.input[0] not in scope.tensors:
        return None
    x = node.input[0]
    if np.dtype(scope.tensors[x].dtype) != keys.dtype:
        return None
    default = attr(node, "default_tensor", None)
    if isinstance(default, onnx.TensorProto):
        fallback = onnx.numpy_helper.to_array(default).reshape(-1)[:1].astype(values.dtype)
    else:
        fallback = np.asarray([attr(node, "default_int64", -1) if values.dtype == np.int64
                               else attr(node, "default_float", -0.0)], values.dtype)
    hits = bld.add("Equal", [bld.unsqueeze(x, -1), bld.constant(keys, "keys")])[0]
    as_int = bld.add("Cast", [hits], to=TensorProto.INT32)[0]
    first = bld.add("ArgMax", [as_int], axis=-1, keepdims=0)[0]
    found = bld.add("Cast", [_reduce_last(bld, "ReduceMax", as_int)], to=TensorProto.BOOL)[0]
    picked = bld.add("Gather", [bld.constant(values, "values"), first], axis=0)[0]
    bld.add("Where", [found, picked, bld.constant(fallback, "default")], [node.output[0]])
    return bld.nodes


@expands(ML_DOMAIN, "OneHotEncoder")
def expand_one_hot_encoder(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """Integer categories: out[..., j] = 1.0 where x equals category j (a value of no category: a zero row, as with
    zeros=1; zeros=0, where ONNX Runtime fails the run on such a value, is left unsupported)."""
    bld = NodeBuilder(node_name, scope.opset)
    cats = attr(node, "cats_int64s", None)
    if not cats or not int(attr(node, "zeros", 1)) or node.input[0] not in scope.tensors:
        return None
    x = node.input[0]
    if np.dtype(scope.tensors[x].dtype).kind not in "iuf":
        return None
    values = bld.add("Cast", [x], to=TensorProto.INT64)[0] if np.dtype(scope.tensors[x].dtype) != np.int64 else x
    hits = bld.add("Equal", [bld.unsqueeze(values, -1), bld.constant(np.asarray(cats, np.int64), "cats")])[0]
    bld.add("Cast", [hits], [node.output[0]], to=TensorProto.FLOAT)
    return bld.nodes


@expands(ML_DOMAIN, "Imputer")
def expand_imputer(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """Per column, values equal to the replaced value (NaN: NaN values) become the imputed value of that column."""
    bld = NodeBuilder(node_name, scope.opset)
    if not node.input or node.input[0] not in scope.tensors:
        return None
    x, dtype = node.input[0], np.dtype(scope.tensors[node.input[0]].dtype)
    floats, ints = attr(node, "imputed_value_floats", None), attr(node, "imputed_value_int64s", None)
    if floats and dtype.kind == "f":
        imputed, replaced = np.asarray(floats, dtype), float(attr(node, "replaced_value_float", 0.0))
    elif ints and dtype == np.int64:
        imputed, replaced = np.asarray(ints, np.int64), int(attr(node, "replaced_value_int64", 0))
    else:
        return None
    if np.isnan(replaced):
        hit = bld.add("IsNaN", [x])[0]
    else:
        hit = bld.add("Equal", [x, bld.constant(np.asarray([replaced], dtype), "replaced")])[0]
    bld.add("Where", [hit, bld.constant(imputed, "imputed"), x], [node.output[0]])
    return bld.nodes


@expands(ML_DOMAIN, "FeatureVectorizer")
def expand_feature_vectorizer(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """The inputs as float [rows, dims] (rank 1: one row, as ONNX Runtime reads it), each cut or zero-padded to its inputdimensions
    entry, concatenated along the columns."""
    bld = NodeBuilder(node_name, scope.opset)
    dims = attr(node, "inputdimensions", None) or []
    if len(dims) != len(node.input) or any(n not in scope.tensors for n in node.input):
        return None
    parts = []
    for name, width in zip(node.input, dims):
        t = scope.tensors[name]
        if len(t.shape) not in (1, 2):
            return None
        col = name if np.dtype(t.dtype) == np.float32 else bld.add("Cast", [name], to=TensorProto.FLOAT)[0]
        col = bld.unsqueeze(col, 0) if len(t.shape) == 1 else col
        have = t.shape[-1] if len(t.shape) == 2 else 1
        if have > width:
            col = bld.add("Slice", [col, bld.constant(np.array([0], np.int64), "starts"),
                                    bld.constant(np.array([width], np.int64), "ends"),
                                    bld.constant(np.array([1], np.int64), "axes")])[0]
        elif have < width:
            col = bld.add("Pad", [col, bld.constant(np.array([0, 0, 0, width - have], np.int64), "pads")])[0]
        parts.append(col)
    bld.add("Concat", parts, [node.output[0]], axis=1)
    return bld.nodes


def kernel_matrix(bld: NodeBuilder, x: str, vectors: np.ndarray, kernel: str, params) -> str | None:
    """K[rows, vectors] of an SVM kernel: LINEAR x.v, POLY (gamma x.v + coef0)^degree, RBF exp(-gamma |x - v|^2)
    (as |x|^2 - 2 x.v + |v|^2), SIGMOID tanh(gamma x.v + coef0)."""
    gamma, coef0, degree = (list(params or []) + [0.0, 0.0, 0.0])[:3]
    dot = bld.add("MatMul", [x, bld.constant(vectors.T.copy(), "support_vectors")])[0]
    if kernel == "LINEAR":
        return dot
    if kernel == "RBF":
        x2 = _row_reduce(bld, "ReduceSum", bld.add("Mul", [x, x])[0])
        v2 = bld.constant((vectors.astype(np.float64) ** 2).sum(axis=1).astype(np.float32), "norms")
        dist = bld.add("Add", [bld.add("Sub", [x2, bld.add("Mul", [dot, bld.constant(np.float32(2.0), "two")])[0]])[0], v2])[0]
        dist = bld.add("Max", [dist, bld.constant(np.float32(0.0), "zero")])[0]
        return bld.add("Exp", [bld.add("Mul", [dist, bld.constant(np.float32(-gamma), "gamma")])[0]])[0]
    affine = bld.add("Add", [bld.add("Mul", [dot, bld.constant(np.float32(gamma), "gamma")])[0],
                             bld.constant(np.float32(coef0), "coef0")])[0]
    if kernel == "SIGMOID":
        return bld.add("Tanh", [affine])[0]
    if kernel == "POLY":
        return bld.add("Pow", [affine, bld.constant(np.float32(int(degree)), "degree")])[0]
    return None


@expands(ML_DOMAIN, "SVMRegressor")
def expand_svm_regressor(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """sum_i coefficients[i] K(x, support_vectors[i]) + rho (n_supports 0: the linear x.coefficients + rho);
    one_class: 1 where that is positive, else -1. Post transform NONE only."""
    bld = NodeBuilder(node_name, scope.opset)
    x = float_input(bld, node, scope.tensors)
    if x is None or text_attr(attr(node, "post_transform", b"NONE")) != "NONE":
        return None
    columns = scope.tensors[node.input[0]].shape[1]
    coef = np.asarray(attr(node, "coefficients", None) or [], np.float32)
    rho = np.asarray((attr(node, "rho", None) or [0.0])[:1], np.float32)
    supports = int(attr(node, "n_supports", 0))
    if supports > 0:
        vectors = np.asarray(attr(node, "support_vectors", None) or [], np.float32)
        if vectors.size != supports * columns or coef.size != supports:
            return None
        k = kernel_matrix(bld, x, vectors.reshape(supports, columns), text_attr(attr(node, "kernel_type", b"LINEAR")),
                           attr(node, "kernel_params", None))
        if k is None:
            return None
        score = bld.add("MatMul", [k, bld.constant(coef.reshape(supports, 1), "coefficients")])[0]
    elif coef.size == columns:
        score = bld.add("MatMul", [x, bld.constant(coef.reshape(columns, 1), "coefficients")])[0]
    else:
        return None
    score = bld.add("Add", [score, bld.constant(rho, "rho")])[0]
    if int(attr(node, "one_class", 0)):
        positive = bld.add("Greater", [score, bld.constant(np.zeros(1, np.float32), "zero")])[0]
        score = bld.add("Where", [positive, bld.constant(np.ones(1, np.float32), "one"),
                                  bld.constant(-np.ones(1, np.float32), "minus_one")])[0]
    bld.add("Identity", [score], [node.output[0]])
    return bld.nodes


def _tree_rows(x) -> int | None:
    return int(x.shape[0]) if len(x.shape) == 2 else 1 if len(x.shape) == 1 else None


def _regressor_shapes(node: onnx.NodeProto, inputs: list) -> dict:
    """Y [rows, n_targets]: float32 for v1-3, X's dtype for TreeEnsemble 5."""
    x = inputs[0]
    rows = _tree_rows(x)
    if rows is None:
        return {}
    dtype = np.dtype(x.dtype) if node.op_type == "TreeEnsemble" else np.dtype(np.float32)
    return {node.output[0]: (dtype, (rows, int(attr(node, "n_targets", 1))))}


def _classifier_shapes(node: onnx.NodeProto, inputs: list) -> dict:
    """label [rows] int64 (integer labels) and scores [rows, labels] float32."""
    rows, labels = _tree_rows(inputs[0]), attr(node, "classlabels_int64s", None)
    if rows is None or not labels:
        return {}
    out = {node.output[0]: (np.dtype(np.int64), (rows,))}
    if len(node.output) > 1:
        out[node.output[1]] = (np.dtype(np.float32), (rows, len(labels)))
    return out


def _extractor_shapes(node: onnx.NodeProto, inputs: list) -> dict:
    """ArrayFeatureExtractor: X's shape with the last dim the indices' count ([1, count] for a rank-1 X), whatever
    their values (ONNX's inference leaves it open)."""
    x, indices = (inputs + [None, None])[:2]
    if x is None or indices is None or not x.shape:
        return {}
    count = int(np.prod(indices.shape, dtype=np.int64))
    return {node.output[0]: (np.dtype(x.dtype), (*x.shape[:-1], count) if len(x.shape) > 1 else (1, count))}


OUTPUT_SHAPES: dict[tuple[str, str], Callable[[onnx.NodeProto, list], dict]] = {
    (ML_DOMAIN, "TreeEnsembleRegressor"): _regressor_shapes,
    (ML_DOMAIN, "TreeEnsemble"): _regressor_shapes,
    (ML_DOMAIN, "TreeEnsembleClassifier"): _classifier_shapes,
    (ML_DOMAIN, "ArrayFeatureExtractor"): _extractor_shapes,
}
"""Output (dtype, shape) per op whose shapes ONNX's inference leaves open, from the node's input tensors (None where
absent) and the attributes: the importer would otherwise run the node in onnx.reference on stand-in inputs (slow for
a big forest, endless for a cyclic one, impossible for integer indices)."""
