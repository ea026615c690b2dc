"""SVMClassifier, LinearClassifier and ZipMap (frontend/ml_svm.py, ml_ops.py, ml_transforms.py, zipmap.py,
ops/svm.py) against ONNX Runtime: skl2onnx's classifiers exported without options (so ending in ZipMap) - SVC with
each kernel, with and without probabilities, two and three classes; LinearSVC; LogisticRegression multinomial and
one-vs-rest; scaler pipelines - JIT-compiled on x86_64 and built for aarch64 and armv7 and run under qemu; every
post transform of both classifiers at node level; ZipMap as a list of dicts (Python backend, `run --outputs
FILE.json`) and as a float tensor plus label table in the C API."""
from __future__ import annotations

import json
import subprocess
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper

from fluidml_xc.run.backend import FxcBackend, compile_model
from modelrun import build, compile_and_run, proto_model

V = helper.make_tensor_value_info
ROWS = 24
POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _tensor(value) -> np.ndarray:
    """ORT's ZipMap output (a list of {label: probability}) as the compiled form, [rows, classes]."""
    if isinstance(value, list):
        return np.asarray([list(row.values()) for row in value], np.float32)
    return np.asarray(value)


def _same(got, want, name="", columns=None):
    for j, (g, w) in enumerate(zip(got, want)):
        w = _tensor(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (name, j, g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"{name} output {j}")
        else:
            cut = (slice(None), slice(0, columns)) if columns and g.ndim == 2 else slice(None)
            np.testing.assert_allclose(g[cut], w[cut], rtol=1e-4, atol=1e-5, err_msg=f"{name} output {j}")


def _data(classes: int):
    from sklearn.datasets import make_classification
    x, y = make_classification(300, 5, n_informative=3, n_redundant=1, n_classes=3, random_state=3)
    return x.astype(np.float32), y % classes


def _static(model: onnx.ModelProto, rows: int) -> onnx.ModelProto:
    for value in [*model.graph.input, *model.graph.output]:
        if value.type.HasField("tensor_type"):
            dims = value.type.tensor_type.shape.dim
            if dims and not dims[0].HasField("dim_value"):
                dims[0].dim_value = rows
    return model


def _estimator(kind: str):
    pytest.importorskip("sklearn")
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC, LinearSVC
    if kind.startswith("svc"):
        _, kernel, prob = kind.split("-")
        return SVC(kernel=kernel, probability=prob == "prob", degree=2, gamma=0.3, coef0=0.5, random_state=0)
    return {"linear_svc": LinearSVC(random_state=0), "logistic": LogisticRegression(max_iter=500),
            "logistic_ovr": OneVsRestClassifier(LogisticRegression(max_iter=500)),
            "scaler_svc": make_pipeline(StandardScaler(), SVC(probability=True, random_state=0)),
            "scaler_logistic": make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))}[kind]


def _export(kind: str, classes: int, rows: int = ROWS) -> tuple[onnx.ModelProto, dict]:
    """skl2onnx's model of `kind`, exported without options (ZipMap and all), rows made static."""
    from skl2onnx import to_onnx
    x, y = _data(classes)
    estimator = _estimator(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(x[:-rows], y[:-rows])
        model = to_onnx(estimator, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    return _static(model, rows), {model.graph.input[0].name: x[-rows:]}


def _same_maps(got: list[dict], want: list[dict]):
    """ZipMap rows: the same labels (ONNX Runtime orders string keys) with the same probabilities."""
    assert len(got) == len(want) and all(sorted(g) == sorted(w) for g, w in zip(got, want)), (got[:1], want[:1])
    np.testing.assert_allclose([[g[k] for k in sorted(g)] for g in got], [[w[k] for k in sorted(w)] for w in want],
                               rtol=1e-4, atol=1e-6)


SVC_KINDS = [f"svc-{k}-{p}" for k in ("linear", "poly", "rbf", "sigmoid") for p in ("prob", "votes")]


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("kind", [*SVC_KINDS, "linear_svc", "logistic", "logistic_ovr"])
def test_sklearn_classifier_matches_ort(kind, classes):
    model, feeds = _export(kind, classes)
    _same(compile_model(model)(feeds), _ort(model, feeds), f"{kind} {classes} classes")


@pytest.mark.parametrize("kind", ["scaler_svc", "scaler_logistic"])
def test_zipmap_pipeline_gives_ort_dicts(kind):
    """Through the Python backend the ZipMap output is a list of {label: probability}, as ONNX Runtime gives it."""
    model, feeds = _export(kind, 3)
    got = FxcBackend.prepare(model).run(feeds)
    want = _ort(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    _same_maps(got[1], want[1])


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
@pytest.mark.parametrize("kind,classes", [("svc-rbf-prob", 3), ("svc-poly-votes", 2), ("svc-sigmoid-votes", 3),
                                          ("logistic", 3)])
def test_sklearn_classifier_under_qemu_matches_ort(kind, classes, board, tmp_path):
    model, feeds = _export(kind, classes)
    got = compile_and_run(model, feeds, tmp_path, board=board)
    _same([got[o.name] for o in model.graph.output], _ort(model, feeds), f"{kind} on {board}")


# -- node level: every post transform --------------------------------------------------------------------------

def _svm_attributes(kind: str, classes: int) -> dict:
    """The SVMClassifier attributes skl2onnx writes for an SVC of `kind`."""
    model, _ = _export(kind, classes)
    node = next(n for n in model.graph.node if n.op_type == "SVMClassifier")
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "post_transform"}


def _per_post(op: str, attributes: dict, columns: int, features: int = 5) -> onnx.ModelProto:
    """One `op` node per post transform on the same X: outputs label_<post>, scores_<post>."""
    nodes = [helper.make_node(op, ["X"], [f"label_{p}", f"scores_{p}"], domain="ai.onnx.ml", post_transform=p,
                              **attributes) for p in POSTS]
    outputs = [v for p in POSTS for v in (V(f"label_{p}", TP.INT64, [ROWS]), V(f"scores_{p}", TP.FLOAT, [ROWS, columns]))]
    return proto_model(nodes, [V("X", TP.FLOAT, [ROWS, features])], outputs, opsets=(("", 17), ("ai.onnx.ml", 1)),
                       check=True)


def _check_posts(model: onnx.ModelProto, x: np.ndarray, name: str, probit_columns=None):
    got, want = compile_model(model)({"X": x}), _ort(model, {"X": x})
    for k, post in enumerate(POSTS):
        _same(got[2 * k:2 * k + 2], want[2 * k:2 * k + 2], f"{name} {post}",
              probit_columns if post == "PROBIT" else None)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("probabilities", [True, False], ids=["prob", "votes"])
def test_svm_classifier_post_transforms(classes, probabilities):
    """Probabilities: [rows, classes] through the transform; votes: the pairwise decision values ([rows, pairs]),
    two classes widened to [-s, s] (NONE) or [1 - s, s], PROBIT writing column 0 only."""
    attributes = _svm_attributes(f"svc-rbf-{'prob' if probabilities else 'votes'}", classes)
    columns = classes if probabilities or classes == 2 else classes * (classes - 1) // 2
    model = _per_post("SVMClassifier", attributes, columns)
    x, _ = _data(classes)
    _check_posts(model, x[:ROWS] * 0.5, "svm", None if probabilities or classes > 2 else 1)


@pytest.mark.parametrize("coefficients", ["mixed", "positive", "three"])
def test_svm_classifier_without_support_vectors(coefficients):
    """The liblinear form: scores = X w_c + rho[0]; two classes take labels[1] past 0 (mixed weights) or 0.5 (all
    positive), ONNX Runtime's binary rule."""
    rng = np.random.default_rng(5)
    classes = 3 if coefficients == "three" else 2
    coef = rng.standard_normal((classes, 5)).astype(np.float32) * 0.3
    coef = np.abs(coef) if coefficients == "positive" else coef
    attributes = dict(coefficients=coef.ravel().tolist(), rho=[0.1], kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0],
                      classlabels_ints=[4, 9, 2][:classes])
    model = _per_post("SVMClassifier", attributes, classes)
    _check_posts(model, rng.standard_normal((ROWS, 5)).astype(np.float32), coefficients)


@pytest.mark.parametrize("labels", [[3, 7, 11], [5, 8]], ids=["three", "one-column"])
def test_linear_classifier_post_transforms(labels):
    """Several columns: every transform; one column: labels by the score's sign, scores widened to [1 - s, s] (s
    through LOGISTIC when asked), PROBIT's written packed into the first rows values as ONNX Runtime does."""
    rng = np.random.default_rng(7)
    targets = len(labels) if len(labels) > 2 else 1
    columns = 2 if len(labels) == 2 else targets
    attributes = dict(coefficients=(rng.standard_normal(targets * 5) * 0.3).tolist(),
                      intercepts=(rng.standard_normal(targets) * 0.1).tolist(), classlabels_ints=labels)
    model = _per_post("LinearClassifier", attributes, columns)
    x = rng.standard_normal((ROWS, 5)).astype(np.float32)
    got, want = compile_model(model)({"X": x}), _ort(model, {"X": x})
    for k, post in enumerate(POSTS):
        g, w = got[2 * k:2 * k + 2], want[2 * k:2 * k + 2]
        if post == "PROBIT" and columns == 2:
            np.testing.assert_array_equal(g[0], w[0])
            np.testing.assert_allclose(g[1].ravel()[:ROWS], w[1].ravel()[:ROWS], rtol=1e-4, atol=1e-5, err_msg=post)
        else:
            _same(g, w, post)


# -- ZipMap in the C API and `run --outputs FILE.json` ---------------------------------------------------------

def _zipmap_model(labels: list) -> onnx.ModelProto:
    coef = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("LinearClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml",
                              coefficients=coef.ravel().tolist(), intercepts=[0.1, -0.2, 0.3], classlabels_ints=[0, 1, 2],
                              post_transform="SOFTMAX"),
             helper.make_node("ZipMap", ["scores"], ["probabilities"], domain="ai.onnx.ml",
                              **({"classlabels_strings": labels} if isinstance(labels[0], str) else {"classlabels_int64s": labels}))]
    key = TP.STRING if isinstance(labels[0], str) else TP.INT64
    zipped = helper.make_value_info("probabilities", helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(TP.FLOAT, []))))
    return proto_model(nodes, [V("X", TP.FLOAT, [3, 4])], [V("label", TP.INT64, [3]), zipped],
                       opsets=(("", 17), ("ai.onnx.ml", 1)), check=True)


APP = r"""
#include <stdio.h>
#include "model.h"
static unsigned char arena[FXC_ARENA_BYTES] __attribute__((aligned(FXC_ARENA_ALIGN)));
int main(void) {
    float x[12], p[9]; int64_t label[3];
    for (int i = 0; i < 12; i++) x[i] = (float)(i % 5) * 0.25f - 0.5f;
    const void *in[1] = {x}; void *out[2] = {label, p};
    if (fxc_init(arena, sizeof arena) != FXC_OK || fxc_run(arena, in, out) != FXC_OK) return 1;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < FXC_OUTPUT1_NUM_LABELS; c++) printf("%d %s %.6f\n", r, fxc_output1_labels[c], p[r * 3 + c]);
    return 0;
}
"""


def test_zipmap_labels_in_the_c_api(tmp_path):
    """model.h declares the label table of the ZipMap output; a C program reads the probabilities with it."""
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.target.boards import get_board
    model = _zipmap_model(["cat", "dog", "b\"ird"])
    artifact = build(model, tmp_path)
    header = (artifact / "model.h").read_text()
    assert "extern const char *const fxc_output1_labels[FXC_OUTPUT1_NUM_LABELS];" in header
    assert "#define FXC_OUTPUT1_NUM_LABELS 3" in header
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["structures"]["outputs"] == {"probabilities": ["zipmap", ["cat", "dog", "b\"ird"]]}
    assert [o["name"] for o in manifest["outputs"]] == ["label", "probabilities"]
    (tmp_path / "app.c").write_text(APP)
    exe = compile_c_program(get_board("x86_64").target, manifest["cpu"], [tmp_path / "app.c"], [artifact],
                            [artifact / "libmodel.a", "-lpthread"], tmp_path / "app")
    lines = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    x = ((np.arange(12) % 5) * 0.25 - 0.5).astype(np.float32).reshape(3, 4)
    want = _ort(model, {"X": x})[1]
    got = [{} for _ in range(3)]
    for line in lines:
        row, label, value = line.split(" ")
        got[int(row)][label] = float(value)
    _same_maps(got, want)
    from fluidml_xc.cli import main
    assert main(["verify", str(artifact)]) == 0  # ONNX Runtime's maps (string keys sorted) by label



def test_a_zipmap_output_listed_twice_gets_a_label_table_per_slot(tmp_path):
    model = _zipmap_model([7, 8, 9])
    model.graph.output.append(model.graph.output[1])
    header = (build(model, tmp_path) / "model.h").read_text()
    for index in (1, 2):
        assert f"extern const int64_t fxc_output{index}_labels[FXC_OUTPUT{index}_NUM_LABELS];" in header
        assert f"#define FXC_OUTPUT{index}_NUM_LABELS 3" in header

def test_run_outputs_json_gives_zipmap_dicts(tmp_path):
    from fluidml_xc.cli import main
    model = _zipmap_model([10, 20, 30])
    artifact = build(model, tmp_path)
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    np.savez(tmp_path / "feed.npz", X=x)
    assert main(["run", str(artifact), "--inputs", str(tmp_path / "feed.npz"), "--outputs", str(tmp_path / "out.json")]) == 0
    data = json.loads((tmp_path / "out.json").read_text())
    label, probabilities = _ort(model, {"X": x})
    assert data["label"] == label.tolist()
    assert [list(row) for row in data["probabilities"]] == [["10", "20", "30"]] * 3
    _same_maps(data["probabilities"], [{str(k): v for k, v in row.items()} for row in probabilities])
    assert main(["run", str(artifact), "--inputs", str(tmp_path / "feed.npz"), "--outputs", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as saved:
        assert saved["probabilities"].shape == (3, 3)
