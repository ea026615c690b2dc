"""Tree ensembles (ops/trees.py, kernels/forest.py) against ONNX Runtime: skl2onnx's model kinds (random forest
classifier and regressor, gradient boosting, logistic regression, a scaler + tree pipeline) JIT-compiled on x86_64
and built for aarch64 and armv7 and run under qemu, and node-level models for every node mode, missing-value track,
aggregate, post transform and two-class rule, in both evaluators (the table walk and branch code)."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper

from fluidml_xc.errors import InputError
from fluidml_xc.run.backend import compile_model
from modelrun import compile_and_run, proto_model

V = helper.make_tensor_value_info
ROWS, FEATURES = 16, 6
RNG = np.random.default_rng(29)
EVALUATORS = {"walk": 0, "branches": 1 << 30}


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _same(got, want, name=""):
    for j, (g, w) in enumerate(zip(got, want)):
        if np.issubdtype(np.asarray(w).dtype, np.integer):
            np.testing.assert_array_equal(g, w, err_msg=f"{name} output {j}")
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{name} output {j}")


def _static(model: onnx.ModelProto, rows: int) -> onnx.ModelProto:
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_value = rows
    return model


def _data():
    from sklearn.datasets import make_classification
    x, y = make_classification(400, FEATURES, n_informative=4, n_classes=3, random_state=0)
    return x.astype(np.float32), y


def _sklearn_models() -> dict:
    pytest.importorskip("sklearn")
    from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier
    x, y = _data()
    return {
        "forest_classifier": (RandomForestClassifier(6, max_depth=5, random_state=0), y),
        "forest_regressor": (RandomForestRegressor(6, max_depth=5, random_state=0), x[:, 0] * 2 + y),
        "boosting_3_classes": (GradientBoostingClassifier(n_estimators=8, max_depth=3, random_state=0), y),
        "boosting_2_classes": (GradientBoostingClassifier(n_estimators=8, max_depth=3, random_state=0), y % 2),
        "boosting_regressor": (GradientBoostingRegressor(n_estimators=8, max_depth=3, random_state=0), x[:, 1] - y),
        "logistic": (LogisticRegression(max_iter=300), y),
        "scaler_tree": (make_pipeline(StandardScaler(), DecisionTreeClassifier(max_depth=6, random_state=0)), y),
    }


def _export(kind: str, rows: int = ROWS) -> tuple[onnx.ModelProto, dict]:
    from skl2onnx import to_onnx
    estimator, target = _sklearn_models()[kind]
    x, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(x, target)
        options = {"zipmap": False} if hasattr(estimator, "predict_proba") else None
        model = to_onnx(estimator, x[:1], options={id(estimator): options} if options else None,
                        target_opset={"": 17, "ai.onnx.ml": 3})
    return _static(model, rows), {model.graph.input[0].name: x[-rows:]}


KINDS = ["forest_classifier", "forest_regressor", "boosting_3_classes", "boosting_2_classes", "boosting_regressor",
         "logistic", "scaler_tree"]


@pytest.mark.parametrize("evaluator", sorted(EVALUATORS))
@pytest.mark.parametrize("kind", KINDS)
def test_sklearn_model_matches_ort(kind, evaluator, patched_compiler):
    from fluidml_xc.ops import trees
    patched_compiler.setattr(trees, "WALK_MIN_LEAVES", EVALUATORS[evaluator])
    model, feeds = _export(kind)
    _same(compile_model(model)(feeds), _ort(model, feeds), kind)


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
@pytest.mark.parametrize("kind", ["forest_classifier", "boosting_2_classes", "boosting_regressor", "scaler_tree"])
def test_sklearn_model_under_qemu_matches_ort(kind, board, tmp_path):
    model, feeds = _export(kind)
    got = compile_and_run(model, feeds, tmp_path, board=board)
    _same([got[o.name] for o in model.graph.output], _ort(model, feeds), f"{kind} on {board}")


# -- node-level models -------------------------------------------------------------------------------------------

def _forest(depth: int, trees: int, modes: list[str], seed: int, targets: int = 1, missing: bool = False):
    """Random complete trees: v1-3 node arrays (tree id, node id, feature, value, mode, children, missing track)
    and leaves as [(tree, node)]."""
    rng = np.random.default_rng(seed)
    cols = {k: [] for k in ("treeids", "nodeids", "featureids", "values", "modes", "truenodeids", "falsenodeids",
                            "missing_value_tracks_true")}
    leaves = []
    for t in range(trees):
        count = 2 ** (depth + 1) - 1
        for i in range(count):
            leaf = i >= 2 ** depth - 1
            mode = "LEAF" if leaf else modes[rng.integers(len(modes))]
            for key, value in (("treeids", t), ("nodeids", i), ("featureids", 0 if leaf else int(rng.integers(FEATURES))),
                               ("values", 0.0 if leaf else float(np.round(rng.standard_normal(), 1))), ("modes", mode),
                               ("truenodeids", 0 if leaf else 2 * i + 1), ("falsenodeids", 0 if leaf else 2 * i + 2),
                               ("missing_value_tracks_true", int(missing == "all" or (missing and rng.integers(2))))):
                cols[key].append(value)
            if leaf:
                leaves.append((t, i))
    return {f"nodes_{k}": v for k, v in cols.items()}, leaves


def _rows(seed: int) -> np.ndarray:
    x = np.round(np.random.default_rng(seed).standard_normal((ROWS, FEATURES)), 1).astype(np.float32)
    x[::5, 1] = np.nan
    x[2::7, 3] = np.nan
    return x


def _regressor(targets=2, aggregate="SUM", post="NONE", base=None, modes=("BRANCH_LEQ",), missing=False, seed=0,
               sparse=False, dtype=TP.FLOAT, depth=3, trees=4):
    nodes, leaves = _forest(depth, trees, list(modes), seed, targets, missing)
    rng = np.random.default_rng(seed + 1)
    tids, nids, ids, weights = [], [], [], []
    for t, i in leaves:
        for c in range(targets):
            if sparse and rng.integers(3) == 0:
                continue
            tids.append(t), nids.append(i), ids.append(c), weights.append(float(np.round(rng.standard_normal(), 2)))
    attrs = dict(nodes, target_treeids=tids, target_nodeids=nids, target_ids=ids, target_weights=weights,
                 n_targets=targets, aggregate_function=aggregate, post_transform=post)
    if base is not None:
        attrs["base_values"] = base
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    return proto_model([node], [V("X", dtype, [ROWS, FEATURES])], [V("Y", TP.FLOAT, [ROWS, targets])],
                       opsets=(("", 17), ("ai.onnx.ml", 3)), check=True)


def _classifier(labels=(0, 1, 2), classes=None, post="NONE", base=None, seed=0, positive=False, modes=("BRANCH_LEQ",),
                per_leaf=False):
    nodes, leaves = _forest(3, 5, list(modes), seed)
    rng = np.random.default_rng(seed + 2)
    classes = list(range(len(labels))) if classes is None else classes
    tids, nids, ids, weights = [], [], [], []
    for t, i in leaves:
        for c in ([classes[int(rng.integers(len(classes)))]] if per_leaf else classes):
            w = float(np.round(rng.random() if positive else rng.standard_normal(), 2)) / (5 if positive else 1)
            tids.append(t), nids.append(i), ids.append(c), weights.append(w)
    attrs = dict(nodes, class_treeids=tids, class_nodeids=nids, class_ids=ids, class_weights=weights,
                 classlabels_int64s=list(labels), post_transform=post)
    if base is not None:
        attrs["base_values"] = base
    node = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml", **attrs)
    return proto_model([node], [V("X", TP.FLOAT, [ROWS, FEATURES])],
                       [V("label", TP.INT64, [ROWS]), V("scores", TP.FLOAT, [ROWS, len(labels)])],
                       opsets=(("", 17), ("ai.onnx.ml", 3)), check=True)


def _check(model, seed=0, name=""):
    feeds = {"X": _rows(seed)}
    if model.graph.input[0].type.tensor_type.elem_type == TP.DOUBLE:
        feeds["X"] = feeds["X"].astype(np.float64)
    _same(compile_model(model)(feeds), _ort(model, feeds), name)


ALL_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


@pytest.mark.parametrize("evaluator", sorted(EVALUATORS))
@pytest.mark.parametrize("mode", [*ALL_MODES, "mixed"])
@pytest.mark.parametrize("missing", [False, True, "all"], ids=["nan-false", "nan-tracks", "nan-all-true"])
def test_node_modes_and_missing_values(mode, missing, evaluator, patched_compiler):
    from fluidml_xc.ops import trees
    patched_compiler.setattr(trees, "WALK_MIN_LEAVES", EVALUATORS[evaluator])
    modes = ALL_MODES if mode == "mixed" else (mode,)
    _check(_regressor(modes=modes, missing=missing, seed=len(mode)), seed=3, name=mode)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("base", [None, [0.5, -1.0]], ids=["no-base", "base"])
def test_aggregates_and_base_values(aggregate, sparse, base):
    _check(_regressor(aggregate=aggregate, sparse=sparse, base=base, seed=4), name=aggregate)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
def test_regressor_post_transforms(post):
    """Two targets get every transform; one target only PROBIT (ONNX Runtime's single-target rule)."""
    _check(_regressor(post=post, seed=5), name=post)
    _check(_regressor(targets=1, post=post, base=[0.25], seed=6), name=f"{post} one target")


def test_double_input_and_deep_trees():
    _check(_regressor(dtype=TP.DOUBLE, seed=7), name="double")
    _check(_regressor(depth=7, trees=3, seed=8, modes=("BRANCH_LT",)), name="depth 7")


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("base", [None, [0.1, -0.2, 0.3]], ids=["no-base", "base"])
def test_classifier_many_classes(post, base):
    _check(_classifier(labels=(4, 7, 9), post=post, base=base, seed=9), name=post)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "PROBIT"])
@pytest.mark.parametrize("base", [None, [0.3], [0.2, 0.2]], ids=["no-base", "base1", "base2"])
@pytest.mark.parametrize("weights", ["one-class-positive", "one-class-mixed", "two-classes", "one-per-leaf"])
def test_classifier_two_classes(post, base, weights):
    """ONNX Runtime's binary rules: one class's weights (all positive: threshold 0.5 and 1 - p; mixed: threshold 0)
    or both classes' weights (on every leaf, or one class per leaf: whether class 1 is scored then depends on the
    row), with 0, 1 or 2 base values."""
    classes = [0, 1] if weights in ("two-classes", "one-per-leaf") else [0]
    model = _classifier(labels=(3, 8), classes=classes, post=post, base=base, seed=10,
                        positive=weights == "one-class-positive", per_leaf=weights == "one-per-leaf")
    feeds = {"X": _rows(0)}
    got, want = compile_model(model)(feeds), _ort(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    narrow = weights != "two-classes" and len(base or []) != 2  # rows whose class 1 is unscored: ORT writes one column
    if weights == "one-per-leaf":
        narrow = narrow and (post == "PROBIT" or base == [0.3])
    cols = 1 if narrow and (post == "PROBIT" or weights == "one-per-leaf") else 2
    np.testing.assert_allclose(got[1][:, :cols], want[1][:, :cols], rtol=1e-5, atol=1e-5)


def _v5(modes: list[int], members: list[float], aggregate=1, post=0, targets=2) -> onnx.ModelProto:
    """One tree of three branches (node 0 -> node 1 (true), node 2 (false)), four leaves."""
    f32 = lambda name, values: helper.make_tensor(name, TP.FLOAT, [len(values)], values)  # noqa: E731
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=targets, aggregate_function=aggregate,
        post_transform=post, tree_roots=[0], nodes_featureids=[0, 1, 2],
        nodes_modes=helper.make_tensor("m", TP.UINT8, [3], modes), nodes_splits=f32("s", [0.5, -0.3, 1.0]),
        nodes_truenodeids=[1, 0, 2], nodes_trueleafs=[0, 1, 1], nodes_falsenodeids=[2, 1, 3],
        nodes_falseleafs=[0, 1, 1], nodes_missing_value_tracks_true=[1, 0, 1],
        leaf_targetids=[0, 1, 0, 1], leaf_weights=f32("w", [1.5, -2.0, 0.25, 3.0]),
        **({"membership_values": f32("mv", members)} if members else {}))
    return proto_model([node], [V("X", TP.FLOAT, [ROWS, FEATURES])], [V("Y", TP.FLOAT, [ROWS, targets])],
                       opsets=(("", 21), ("ai.onnx.ml", 5)), check=True)


@pytest.mark.parametrize("modes,members", [([0, 1, 3], []), ([6, 2, 6], [1.0, -3.0, 2.0, np.nan, 4.0, 1.0, np.nan]),
                                           ([4, 5, 6], [2.0, np.nan])], ids=["compare", "member", "eq-member"])
@pytest.mark.parametrize("aggregate", [1, 0, 3])
def test_tree_ensemble_v5(modes, members, aggregate):
    model = _v5(modes, members, aggregate)
    x = _rows(11)
    x[::3, 0], x[1::4, 2], x[2::5, 0] = 1.0, 1.0, 2.0
    _same(compile_model(model)({"X": x}), _ort(model, {"X": x}) if 6 not in modes else _reference(model, x), "v5")


def _reference(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """onnx.reference for MEMBER sets: ONNX Runtime tests integer members its own way (docs/CLASSIC_ML.md); the
    sets above hold no 0.0, where the reference stops reading a set."""
    from onnx.reference import ReferenceEvaluator
    y = ReferenceEvaluator(model).run(None, {"X": x})[0]
    return [np.where(np.abs(y) == np.finfo(np.float32).max, 0, y)]  # MIN/MAX of no leaf: 0 (ONNX Runtime's rule)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("onnx_opset", [11, 17, 21])
def test_normalizer(norm, onnx_opset):
    """skl2onnx's multinomial logistic regression ends in Normalizer L1; zero rows are copied, as ORT does."""
    node = helper.make_node("Normalizer", ["X"], ["Y"], domain="ai.onnx.ml", norm=norm)
    model = proto_model([node], [V("X", TP.FLOAT, [4, 3])], [V("Y", TP.FLOAT, [4, 3])],
                        opsets=(("", onnx_opset), ("ai.onnx.ml", 1)), check=True)
    x = np.array([[1, -2, 3], [0, 0, 0], [-1, -2, -4], [0.5, 0, -0.5]], np.float32)
    _same(compile_model(model)({"X": x}), _ort(model, {"X": x}), norm)


def test_forest_rows_split_over_threads(tmp_path):
    """A forest big enough to split its rows into tiles, built for 4 threads and run by the runner: ORT's results,
    and the manifest lists the node among its parallel ops."""
    import json

    from sklearn.ensemble import RandomForestRegressor
    from skl2onnx import to_onnx
    x, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = to_onnx(RandomForestRegressor(40, max_depth=8, random_state=0).fit(x, x[:, 0] + y), x[:1],
                        target_opset={"": 17, "ai.onnx.ml": 3})
    model = _static(model, 400)
    feeds = {model.graph.input[0].name: x[:400]}
    from modelrun import build, run
    artifact = build(model, tmp_path, threads=4)
    got = run(artifact, feeds)
    np.testing.assert_allclose(got[model.graph.output[0].name], _ort(model, feeds)[0], rtol=1e-5, atol=1e-5)
    parallel = json.loads((artifact / "manifest.json").read_text())["parallel_ops"]
    assert parallel.get("TreeEnsembleRegressor", [1])[0] > 1, parallel


def test_cyclic_tree_is_a_one_line_error():
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", nodes_treeids=[0, 0],
                            nodes_nodeids=[0, 1], nodes_featureids=[0, 0], nodes_values=[0.0, 0.0],
                            nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ"], nodes_truenodeids=[1, 0],
                            nodes_falsenodeids=[1, 0], target_treeids=[0], target_nodeids=[1], target_ids=[0],
                            target_weights=[1.0])
    model = proto_model([node], [V("X", TP.FLOAT, [2, 2])], [V("Y", TP.FLOAT, [2, 1])],
                        opsets=(("", 17), ("ai.onnx.ml", 3)), check=True)
    with pytest.raises(InputError) as err:
        compile_model(model)({"X": np.zeros((2, 2), np.float32)})
    assert "twice" in str(err.value) and "\n" not in str(err.value), err.value
