"""ai.onnx.ml nodes are read at the ai.onnx.ml version the model imports, not the default domain's
(frontend/domains.py): skl2onnx writes ai.onnx.ml 1 beside ai.onnx 21. Lowered ml ops at such pairs of
versions against ONNX Runtime; ml ops we do not lower get the one-line unsupported-op error, not a schema error."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper

from fluidml_xc.frontend.domains import Opsets
from fluidml_xc.run.backend import compile_model
from modelrun import proto_model

V = helper.make_tensor_value_info
RNG = np.random.default_rng(24)


def _model(nodes, inputs, outputs, opsets) -> onnx.ModelProto:
    return proto_model(nodes, inputs, outputs, opsets=opsets, name="ml", check=True)


def _pipeline(opsets) -> onnx.ModelProto:
    """Scaler -> LinearClassifier (label, softmax scores) and LinearRegressor, Binarizer and ArrayFeatureExtractor
    (lowered ml ops) on the scaled features."""
    coef = RNG.standard_normal((3, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Scaler", ["X"], ["scaled"], domain="ai.onnx.ml", offset=[0.5, -1.0, 0.25, 2.0],
                         scale=[1.5, 0.5, 2.0, 0.75]),
        helper.make_node("LinearClassifier", ["scaled"], ["label", "scores"], domain="ai.onnx.ml",
                         coefficients=coef.ravel().tolist(), intercepts=[0.1, -0.2, 0.3], multi_class=1,
                         classlabels_ints=[3, 7, 11], post_transform="SOFTMAX"),
        helper.make_node("LinearRegressor", ["scaled"], ["value"], domain="ai.onnx.ml",
                         coefficients=RNG.standard_normal(8).astype(np.float32).tolist(), intercepts=[1.0, -0.5], targets=2),
        helper.make_node("Binarizer", ["scaled"], ["bits"], domain="ai.onnx.ml", threshold=0.2),
        helper.make_node("ArrayFeatureExtractor", ["scaled", "columns"], ["picked"], domain="ai.onnx.ml"),
    ]
    return _model(nodes, [V("X", TP.FLOAT, [5, 4]), V("columns", TP.INT64, [2])],
                  [V("label", TP.INT64, [5]), V("scores", TP.FLOAT, [5, 3]), V("value", TP.FLOAT, [5, 2]),
                   V("bits", TP.FLOAT, [5, 4]), V("picked", TP.FLOAT, [5, 2])], opsets)


@pytest.mark.parametrize("opsets", [(("", 21), ("ai.onnx.ml", 1)), (("", 13), ("ai.onnx.ml", 3)), (("", 9), ("ai.onnx.ml", 5))],
                         ids=["onnx21-ml1", "onnx13-ml3", "onnx9-ml5"])
def test_lowered_ml_ops_at_their_own_domain_version_match_ort(opsets):
    model = _pipeline(opsets)
    feeds = {"X": RNG.standard_normal((5, 4)).astype(np.float32), "columns": np.array([3, 1], np.int64)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = compile_model(model)(feeds)
    for name, w, g in zip(["label", "scores", "value", "bits", "picked"], want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)


def _tree_classifier() -> onnx.NodeProto:
    return helper.make_node(
        "TreeEnsembleClassifier", ["X"], ["label", "probabilities"], domain="ai.onnx.ml",
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_values=[0.5, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 1], class_weights=[1.0, 1.0],
        classlabels_int64s=[0, 1], post_transform="NONE")


def test_tree_classifier_of_ml_opset_1_beside_onnx_21_matches_ort():
    """skl2onnx's tree classifier: read at ai.onnx.ml 21 it was 'deprecated since version 5' (a schema error); read
    at its own version it compiles (ops/trees.py)."""
    model = _model([_tree_classifier()], [V("X", TP.FLOAT, [3, 2])],
                   [V("label", TP.INT64, [3]), V("probabilities", TP.FLOAT, [3, 2])], (("", 21), ("ai.onnx.ml", 1)))
    feeds = {"X": np.array([[0.2, 1.0], [0.7, -1.0], [0.5, 0.0]], np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want, compile_model(model)(feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_label_encoder_attributes_of_its_own_version(tmp_path):
    """LabelEncoder-4's default_tensor in a model importing no default domain (read at version 1 it was an
    'Unrecognized attribute'): an int64 -> string encoder, its default from default_tensor."""
    node = helper.make_node("LabelEncoder", ["x"], ["names"], domain="ai.onnx.ml", keys_int64s=[1, 2],
                            values_strings=["cat", "dog"],
                            default_tensor=helper.make_tensor("d", TP.STRING, [1], [b"?"]))
    model = _model([node], [V("x", TP.INT64, [2])], [V("names", TP.STRING, [2])], (("ai.onnx.ml", 4),))
    assert compile_model(model)({"x": np.array([2, 3], np.int64)})[0].tolist() == ["dog", "?"]


def test_opsets_per_domain():
    model = _model([], [V("x", TP.FLOAT, [1])], [V("x", TP.FLOAT, [1])], (("ai.onnx", 21), ("ai.onnx.ml", 1)))
    opsets = Opsets.of_model(model)
    assert (opsets.default, opsets.version(""), opsets.version("ai.onnx"), opsets.version("ai.onnx.ml")) == (21, 21, 21, 1)
    assert opsets.version("ai.onnx.preview.training") == onnx.defs.C.schema_version_map()["ai.onnx.preview.training"][1]
    assert Opsets.of_model(helper.make_model(helper.make_graph([], "g", [], []), opset_imports=[])).default == 1
