"""String class labels (issue #29): scikit-learn classifiers trained on string targets and exported by skl2onnx with
its default options (classlabels_strings, or an ArrayFeatureExtractor over the string classes; ZipMap keyed by the
strings) against ONNX Runtime - every classifier
kind, two and three classes, JIT on x86_64, runners under qemu for aarch64 and armv7, and `run --outputs F.json`."""
from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper

from fluidml_xc.run.backend import FxcBackend, compile_model
from fluidml_xc.run.execute import run_artifact
from modelrun import build, proto_model, require_emulator

ROWS = 24
NAMES = np.array(["cat", "dög", "émile bird"])
KINDS = ["logistic", "svc-prob", "svc-votes", "linear_svc", "forest", "boosting", "tree", "extra_trees", "mlp",
         "naive_bayes", "knn", "sgd", "ridge"]


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _estimator(kind: str):
    pytest.importorskip("sklearn")
    from sklearn.ensemble import ExtraTreesClassifier, GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression, RidgeClassifier, SGDClassifier
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import SVC, LinearSVC
    from sklearn.tree import DecisionTreeClassifier
    return {"logistic": LogisticRegression(max_iter=500), "svc-prob": SVC(probability=True, random_state=0),
            "svc-votes": SVC(), "linear_svc": LinearSVC(random_state=0),
            "forest": RandomForestClassifier(10, max_depth=4, random_state=0),
            "boosting": GradientBoostingClassifier(n_estimators=10, random_state=0),
            "tree": DecisionTreeClassifier(max_depth=3, random_state=0),
            "extra_trees": ExtraTreesClassifier(5, max_depth=4, random_state=0),
            "mlp": MLPClassifier((16,), max_iter=300, random_state=0), "naive_bayes": GaussianNB(),
            "knn": KNeighborsClassifier(), "sgd": SGDClassifier(random_state=0), "ridge": RidgeClassifier()}[kind]


def export(kind: str, classes: int) -> tuple[onnx.ModelProto, dict]:
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    x, y = make_classification(300, 5, n_informative=3, n_redundant=1, n_classes=3, random_state=3)
    x = x.astype(np.float32)
    estimator = _estimator(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(x[:-ROWS], NAMES[y[:-ROWS] % classes])
        model = to_onnx(estimator, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = ROWS
    return model, {model.graph.input[0].name: x[-ROWS:]}


def _scores(value) -> np.ndarray:
    """A ZipMap's list of {label: probability} as [rows, labels] in sorted label order, or the tensor."""
    if isinstance(value, list):
        return np.array([[row[k] for k in sorted(row)] for row in value], np.float32)
    return np.asarray(value)


def _same(got: list, want: list, name: str) -> None:
    assert [str(v) for v in got[0]] == [str(v) for v in want[0]], name
    assert set(str(v) for v in want[0]) - {str(v) for v in NAMES} == set(), name
    if isinstance(want[1], list):
        assert [sorted(row) for row in got[1]] == [sorted(row) for row in want[1]], name
    np.testing.assert_allclose(_scores(got[1]), _scores(want[1]), rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_string_labelled_classifier_matches_onnxruntime(kind, classes):
    model, feeds = export(kind, classes)
    _same(FxcBackend.prepare(model).run(feeds), _ort(model, feeds), f"{kind} {classes}")


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
@pytest.mark.parametrize("kind,classes", [("logistic", 3), ("svc-prob", 3), ("forest", 2), ("boosting", 3), ("mlp", 3)])
def test_string_labelled_classifier_under_qemu_matches_onnxruntime(kind, classes, board, tmp_path):
    require_emulator(board)
    model, feeds = export(kind, classes)
    want = _ort(model, feeds)
    got = run_artifact(build(model, tmp_path, board, profile_runner=False), feeds).outputs
    assert got["output_label"].tolist() == want[0].tolist()
    np.testing.assert_allclose(got["output_probability"], _scores(want[1]), rtol=1e-4, atol=1e-5)


def test_run_outputs_json_gives_string_labels_and_maps(tmp_path):
    from fluidml_xc.cli import main
    model, feeds = export("forest", 3)
    artifact = build(model, tmp_path)
    np.savez(tmp_path / "feed.npz", **feeds)
    assert main(["run", str(artifact), "--inputs", str(tmp_path / "feed.npz"), "--outputs", str(tmp_path / "out.json")]) == 0
    data = json.loads((tmp_path / "out.json").read_text())
    label, maps = _ort(model, feeds)
    assert data["output_label"] == label.tolist()
    assert [list(row) for row in data["output_probability"]] == [list(NAMES)] * ROWS
    np.testing.assert_allclose(_scores(data["output_probability"]), _scores(maps), rtol=1e-5, atol=1e-6)


V = helper.make_tensor_value_info


@pytest.mark.parametrize("op", ["SVMClassifier", "LinearClassifier", "TreeEnsembleClassifier"])
def test_string_labels_at_node_level(op):
    """One node per classifier with classlabels_strings (non-ASCII and empty labels): the label tensor is ONNX
    Runtime's."""
    labels = ["cat", "", "été"]
    if op == "TreeEnsembleClassifier":
        attributes = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                          nodes_values=[0.0, 0.0, 0.0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
                          nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0, 0],
                          class_nodeids=[1, 2, 2], class_ids=[2, 0, 1], class_weights=[1.0, 0.4, 0.6])
    else:
        coef = np.random.default_rng(1).standard_normal(6).round(2).tolist()
        attributes = (dict(coefficients=coef, intercepts=[0.1, -0.2, 0.0]) if op == "LinearClassifier" else
                      dict(coefficients=coef, rho=[0.1], kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0]))
    node = helper.make_node(op, ["X"], ["label", "scores"], domain="ai.onnx.ml", classlabels_strings=labels, **attributes)
    model = proto_model([node], [V("X", TP.FLOAT, [6, 2])], [V("label", TP.STRING, [6]), V("scores", TP.FLOAT, [6, 3])],
                        opsets=(("", 17), ("ai.onnx.ml", 1)), check=True)
    x = np.random.default_rng(2).standard_normal((6, 2)).astype(np.float32)
    got, want = compile_model(model)({"X": x}), _ort(model, {"X": x})
    assert [str(v) for v in got[0]] == [str(v) for v in want[0]] and len(set(want[0].tolist())) > 1, (got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
