"""Issue #26, the frontend of dynamic shapes: declared ranges (--input-shape LO..HI, --dim, --opt-shape, --max-dim)
and the import of a dynamic model as one graph of capacity shapes plus Tensor.dyn, checked against ONNX Runtime's
symbolic inference and against static imports at sizes inside the ranges."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from encoder_models import bert_like
from modelrun import cli, one_line_error
from fluidml_xc.errors import InputError
from fluidml_xc.frontend.dynamic import SIZE_DECIDED_COPIES, graph_at, ort_dims, tensor_at, to_expr
from fluidml_xc.frontend.ranges import DimSpec, ShapeRanges, parse_ranges, resolve_ranges, split_input_shapes
from fluidml_xc.pipeline import import_unchecked
from fluidml_xc.symbolic import Expr, Sym, SymRange, at, evaluate


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, dims, elem=TP.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def _cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["y"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["z"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, name="pool")]
    return _model(nodes, [_vi("x", [1, 3, "H", "W"])], [_vi("z", None)], [w])


# ---- sympy text -> Expr ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, reference", [
    ("floor(W/2 - 1/2) + 1", lambda w: (w - 1) // 2 + 1),
    ("ceiling(floor(W/2 - 1/2)/2)", lambda w: -(-((w - 1) // 2) // 2)),
    ("2*W + 3", lambda w: 2 * w + 3),
    ("Max(W, 7) - Min(W, 5)", lambda w: max(w, 7) - min(w, 5)),
    ("Mod(W, 3) + floor(W/3)", lambda w: w % 3 + w // 3),
    ("floor(3*W/4)", lambda w: 3 * w // 4),
])
def test_ort_dims_convert_exactly(text, reference):
    e = to_expr(text, {"W": "W"})
    assert isinstance(e, Expr)
    assert [evaluate(e, {"W": w}) for w in range(1, 200)] == [reference(w) for w in range(1, 200)]


@pytest.mark.parametrize("text", ["W/2", "unk__0 + 1", "sqrt(W)"])
def test_ort_dims_outside_integer_arithmetic_are_left_open(text):
    assert to_expr(text, {"W": "W"}) is None


# ---- flags -----------------------------------------------------------------------------------------

def test_flags_parse_into_ranges():
    shapes, ranged = split_input_shapes(["x=1x3x48x16..1024", "m=2x3"])
    assert shapes == {"m": (2, 3)} and ranged == {"x": (1, 3, 48, (16, 1024))}
    r = parse_ranges(ranged, ["W=16..1024@320", "H=48"], ["x=1x3x48x320"], ["steps=501"])
    assert r.dims == {"W": DimSpec(16, 1024, 320), "H": DimSpec(48, 48)}
    assert r.opt_shapes == {"x": (1, 3, 48, 320)} and r.max_dims == {"steps": 501}
    assert not ShapeRanges(max_dims={"steps": 5})  # a bound alone is no range: the build stays static


@pytest.mark.parametrize("texts, message", [
    (dict(dims=["W=9..3"]), "minimum 9 is above the maximum 3"),
    (dict(dims=["W=3..9@12"]), "optimization size 12 is outside 3..9"),
    (dict(dims=["W=3..9", "W=4..9"]), "--dim gives 'W' twice (W=3..9 and W=4..9): pass it once"),
    (dict(dims=["W=3..9@4", "W=3..9"]), "(W=3..9@4 and W=3..9)"),
    (dict(max_dims=["steps=0"]), "bad --max-dim"),
    (dict(shapes=["x=1x9..3"]), "range 9..3 has its minimum above its maximum"),
    (dict(shapes=["x=1x3..a"]), "each dim is a size (48) or a range"),
])
def test_bad_flags_are_one_line(texts, message):
    with pytest.raises(InputError, match=None) as err:
        _, ranged = split_input_shapes(texts.get("shapes", []))
        parse_ranges(ranged, texts.get("dims", []), [], texts.get("max_dims", []))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("shapes, ranges, message", [
    ({}, ShapeRanges(inputs={"x": (1, 3, (8, 64), 16)}), "gives dim 2 of input 'x' a range 8..64, but the model fixes it at 32"),
    ({}, ShapeRanges(dims={"T": DimSpec(1, 9)}), "--dim T=... names no dim of the model's inputs; the named dims are: W"),
    ({}, ShapeRanges(inputs={"nope": (1, 2)}), "'nope', which is not an input of the model"),
    ({}, ShapeRanges(dims={"W": DimSpec(8, 64)}, inputs={"x": (1, 3, 32, (16, 64))}),
     "gives 'W' 16..64, but --dim W=8..64 gives it 8..64"),
    ({"x": (1, 3, 32, 20)}, ShapeRanges(dims={"W": DimSpec(8, 64)}), "gives it 8..64"),
    ({}, ShapeRanges(dims={"W": DimSpec(8, 64)}, opt_shapes={"x": (1, 3, 32, 80)}), "size 80, outside its range 8..64"),
])
def test_range_conflicts_are_one_line(shapes, ranges, message):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 3, 32, "W"])], [_vi("y", None)])
    with pytest.raises(InputError) as err:
        resolve_ranges(model, shapes, ranges)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_max_dim_naming_nothing_is_refused_like_a_dim(tmp_path):
    """--max-dim Z=5 where no node or node output is Z: one line, exit 2, nothing written; a name that is the
    output of a node builds."""
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", [2, "N"])], [_vi("y", None)])
    onnx.save(model, tmp_path / "m.onnx")
    proc = cli("build", "m.onnx", "--dim", "N=2..8", "--max-dim", "Z=5", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 2 and "--max-dim Z=5 names no node or node output of the model" in one_line_error(proc)
    assert not (tmp_path / "out").exists()
    for name in ("relu", "y"):
        assert import_unchecked(model, ranges=ShapeRanges(dims={"N": DimSpec(2, 8)}, max_dims={name: 5})).symbols
    with pytest.raises(InputError, match="--max-dim Z=5 names no node"):
        import_unchecked(model, {"x": (2, 4)}, ranges=ShapeRanges(max_dims={"Z": 5}))


def test_commands_without_ranges_refuse_one_in_one_line():
    from fluidml_xc.frontend.input_shapes import parse_input_shapes

    with pytest.raises(InputError, match=r"range \(16\.\.64\) is taken by build only.*pass one size, e\.g\. x=1x64$"):
        parse_input_shapes(["x=1x16..64"])


def test_a_range_on_an_unnamed_dim_makes_a_symbol_and_opt_defaults_to_the_maximum():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, None])], [_vi("y", None)])
    r = resolve_ranges(model, {}, ShapeRanges(inputs={"x": (2, (3, 40))}))
    assert r.shapes == {"x": (2, Sym("x_1"))} and r.symbols == {"x_1": SymRange("x_1", 3, 40, 40)}
    r = resolve_ranges(model, {}, ShapeRanges(inputs={"x": (2, (3, 40))}, opt_shapes={"x": (2, 17)}))
    assert r.symbols == {"x_1": SymRange("x_1", 3, 40, 17)}


def test_one_value_keeps_the_build_static():
    """--dim W=20 imports exactly what --input-shape x=1x3x32x20 imports (no dyn, no symbols)."""
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 3, 32, "W"])], [_vi("y", [1, 3, 32, "W"])])
    by_dim = import_unchecked(model, ranges=ShapeRanges(dims={"W": DimSpec(20, 20)}))
    by_shape = import_unchecked(model, {"x": (1, 3, 32, 20)})
    assert not by_dim.symbols and all(t.dyn is None for t in by_dim.tensors.values())
    assert {k: t.shape for k, t in by_dim.tensors.items()} == {k: t.shape for k, t in by_shape.tensors.items()}


# ---- import ----------------------------------------------------------------------------------------

def _check_against_static(model, graph, sizes: list[dict[str, int]], shape_of):
    """Every tensor's dyn at each size equals the static import there; constants with dyn are its leading slice."""
    for env in sizes:
        static = import_unchecked(model, shape_of(env))
        names = lambda g: [n.name for n in g.nodes if not SIZE_DECIDED_COPIES.search(n.name)]  # noqa: E731
        assert names(static) == names(graph)
        for name, t in graph.tensors.items():
            s = tensor_at(static, name)
            if t.dyn:
                assert at(t.dyn, env) == tuple(s.shape), (name, t.dyn, env)
                if t.is_const:
                    np.testing.assert_array_equal(graph_at(graph, env).tensors[name].value, s.value)
            else:
                assert tuple(t.shape) == tuple(s.shape), name


def test_bert_like_encoder_over_sequence_8_to_128():
    model = bert_like(layers=2)
    graph = import_unchecked(model, ranges=ShapeRanges(dims={"seq": DimSpec(8, 128, 37)}))
    assert graph.symbols == {"seq": SymRange("seq", 8, 128, 37)}
    t = graph.tensors
    seq = Sym("seq")
    assert t["input_ids"].dyn == (1, seq) and t["input_ids"].shape == (1, 128)
    assert t["l0_kh"].dyn == (1, 4, 8, seq) and t["l1_s"].dyn == (1, 4, seq, seq) and t["l1_s"].shape == (1, 4, 128, 128)
    assert t["posv"].is_const and t["posv"].dyn == (seq, 32)  # positions folded from the shape: a leading slice
    assert t["split_shape"].dyn is None and list(t["split_shape"].value) == [1, 128, 4, 8]  # a Reshape target
    ort = ort_dims(model, resolve_ranges(model, {}, ShapeRanges(dims={"seq": DimSpec(8, 128)})))
    for name, tensor in t.items():
        if name in ort and not tensor.is_const and None not in ort[name]:
            assert tuple(tensor.dyn or tensor.shape) == ort[name], name
    _check_against_static(model, graph, [{"seq": s} for s in (8, 37, 128, 9)],
                          lambda env: {"input_ids": (1, env["seq"]), "attention_mask": (1, env["seq"])})
    opt = graph_at(graph, {"seq": 37})
    assert opt.tensors["l0_s"].shape == (1, 4, 37, 37) and not opt.symbols


def test_cnn_with_height_and_width_ranges_of_equal_bounds():
    """H and W take the same values at min/opt/max: tensors only matched (not named by ORT) are told apart at a probe."""
    model = _cnn()
    graph = import_unchecked(model, ranges=ShapeRanges(dims={"H": DimSpec(16, 64), "W": DimSpec(16, 64)}))
    H, W = Sym("H"), Sym("W")
    assert graph.tensors["x"].dyn == (1, 3, H, W)
    z = graph.tensors["z"]
    assert [evaluate(z.dyn[2], {"H": h}) for h in range(16, 65)] == [-(-((h - 1) // 2) // 2) for h in range(16, 65)]
    assert z.dyn[3].free() == {"W"} and z.shape == (1, 4, 16, 16)
    _check_against_static(model, graph, [{"H": h, "W": w} for h, w in ((16, 64), (33, 17), (64, 64))],
                          lambda env: {"x": (1, 3, env["H"], env["W"])})


def test_a_constant_computed_from_a_varying_size_is_refused():
    """y = x * len(x): the scalar folded from Shape differs per size and is no prefix: one line naming it."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Cast", ["s"], ["sf"], to=TP.FLOAT, name="cast"),
             helper.make_node("Mul", ["x", "sf"], ["y"], name="scale")]
    model = _model(nodes, [_vi("x", ["N"])], [_vi("y", ["N"])])
    with pytest.raises(InputError) as err:
        import_unchecked(model, ranges=ShapeRanges(dims={"N": DimSpec(2, 50)}))
    line = str(err.value)
    assert "'sf'" in line and "Mul node 'scale'" in line and "computed from the shape of a varying tensor" in line
    assert "--dim N=N" in line and "\n" not in line


def _pad_to_multiple(k: int) -> onnx.ModelProto:
    """y = x padded on W up to a multiple of k: pads = (k - W % k) % k, folded from Shape (a detector's idiom)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "two"], ["w"], axis=0, name="w"),
             helper.make_node("Mod", ["w", "four"], ["r"], name="mod"),
             helper.make_node("Sub", ["four", "r"], ["q"], name="sub"),
             helper.make_node("Mod", ["q", "four"], ["p"], name="mod4"),
             helper.make_node("Unsqueeze", ["p", "zero"], ["pu"], name="unsq"),
             helper.make_node("Concat", ["z5", "pu"], ["pads"], axis=0, name="concat"),
             helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant", name="pad")]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("two", 2), ("four", k), ("zero", [0]), ("z5", [0] * 5))]
    return _model(nodes, [_vi("x", [1, 2, "W"])], [_vi("y", None)], inits, opset=18)


@pytest.mark.parametrize("k, lo, hi", [(4, 12, 48), (3, 7, 37)])
def test_a_constant_equal_at_min_opt_max_is_checked_at_probe_sizes(k, lo, hi):
    """Padding to a multiple of 4 over W=12..48: pads are 0 at 12 and at 48 (opt = max) but 1 at the probe size 47;
    without a probe the build gave [1, 2, 13] at W=13 where ONNX Runtime gives [1, 2, 16]. To a multiple of 3 over
    7..37, pads are 2 at 7, 37 and the prime 31 too: the size next to it (30) tells. Refused in one line naming
    the constant."""
    with pytest.raises(InputError) as err:
        import_unchecked(_pad_to_multiple(k), ranges=ShapeRanges(dims={"W": DimSpec(lo, hi)}))
    line = str(err.value)
    assert "constant 'pads' (read by Pad node 'pad')" in line and "--dim W=N" in line and "\n" not in line


def test_ort_warnings_do_not_precede_the_error_line(tmp_path):
    """W = 4*floor(W/4) is what ORT cannot decide ('Unable to determine if ...' on its logger): the build's stderr is
    our one error line alone."""
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             (("sc", [1, 1, 1, 4], np.float32), ("i3", [3], np.int64), ("i4", [4], np.int64), ("z", [0], np.int64))]
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[1, 4], strides=[1, 4], name="pool"),
             helper.make_node("Resize", ["p", "", "sc"], ["r"], mode="nearest", name="resize"),
             helper.make_node("Shape", ["r"], ["rs"], name="shape"),
             helper.make_node("Slice", ["rs", "i3", "i4"], ["rw"], name="width"),
             helper.make_node("Slice", ["x", "z", "rw", "i3"], ["xc"], name="crop"),
             helper.make_node("Add", ["xc", "r"], ["y"], name="add")]
    onnx.save(_model(nodes, [_vi("x", [1, 2, 4, "W"])], [_vi("y", None)], inits, opset=18), tmp_path / "m.onnx")
    proc = cli("build", "m.onnx", "--dim", "W=12..48", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 2 and "constant 'rw' (read by Slice node 'crop')" in one_line_error(proc)
    assert "fxc_s0" not in proc.stderr


def test_probe_sizes_are_not_special():
    from fluidml_xc.frontend.dynamic import probe_sizes

    assert probe_sizes({"W": SymRange("W", 12, 48, 48)}) == [{"W": 47}, {"W": 46}]
    assert probe_sizes({"H": SymRange("H", 16, 64, 64), "W": SymRange("W", 16, 64, 64)}) == \
        [{"H": 61, "W": 59}, {"H": 60, "W": 58}]
    assert probe_sizes({"N": SymRange("N", 8, 24, 23)}) == [{"N": 19}, {"N": 18}]  # 23 is the opt
    assert probe_sizes({"N": SymRange("N", 8, 12, 12)}) == [{"N": 11}, {"N": 10}]
    assert probe_sizes({"N": SymRange("N", 8, 10, 10)}) == [{"N": 9}]  # no prime inside: an odd value, 8 and 10 taken
    assert probe_sizes({"N": SymRange("N", 2, 3, 3)}) == [{"N": 2}]  # every value imported already


def test_build_refuses_bad_ranges_in_one_line(tmp_path):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, "N"])], [_vi("y", [2, "N"])])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for args, part in ((["--input-shape", "x=2..4x5"], "but the model fixes it at 2"),
                       (["--dim", "N=9..3"], "the minimum 9 is above the maximum 3")):
        proc = cli("build", str(path), *args, "-o", "out", cwd=tmp_path)
        assert proc.returncode == 2 and part in one_line_error(proc)
        assert not (tmp_path / "out").exists()


def test_tensors_ort_does_not_name_are_matched_and_equal_ranges_told_apart(monkeypatch):
    """Without ORT's names every dim is matched against the known expressions; H and W have equal ranges, so
    min/opt/max cannot tell them apart and a fourth import at distinct values does."""
    import fluidml_xc.frontend.dynamic as dynamic

    monkeypatch.setattr(dynamic, "ort_dims", lambda model, resolved: {})
    calls = []
    real = dynamic.import_ranges

    def counting(model, resolved, importer):
        return real(model, resolved, lambda sizes: calls.append(sizes) or importer(sizes))
    monkeypatch.setattr(dynamic, "import_ranges", counting)
    import fluidml_xc.pipeline as pipeline
    monkeypatch.setattr(pipeline, "import_ranges", counting)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2], name="t"),
             helper.make_node("Relu", ["t"], ["y"], name="relu")]
    model = _model(nodes, [_vi("x", [1, 3, "H", "W"])], [_vi("y", None)])
    graph = import_unchecked(model, ranges=ShapeRanges(dims={"H": DimSpec(16, 64), "W": DimSpec(16, 64)}))
    assert graph.tensors["y"].dyn == (1, 3, Sym("W"), Sym("H")) and len(calls) == 4  # max, min (opt = max), 2 probes


def test_copies_a_pass_makes_only_at_larger_sizes_are_decided_at_the_capacity():
    """At seq 4 the token embedding is under rematerialize.REMAT_MIN_BYTES and is not recomputed, at 128 it is:
    the capacity graph keeps its copies, whose dims are the original's."""
    model = bert_like(layers=2)
    graph = import_unchecked(model, ranges=ShapeRanges(dims={"seq": DimSpec(4, 128)}))
    assert graph.tensors["x0#remat1"].dyn == (1, Sym("seq"), 32)
    small = import_unchecked(model, {"input_ids": (1, 4), "attention_mask": (1, 4)})
    assert not any("#remat" in n.name for n in small.nodes)
    _check_against_static(model, graph, [{"seq": 5}, {"seq": 128}],
                          lambda env: {"input_ids": (1, env["seq"]), "attention_mask": (1, env["seq"])})


def _static_export(seq: int = 16) -> onnx.ModelProto:
    """What a tracing exporter writes at one length: the length baked into reshape targets and position ids."""
    rng = np.random.default_rng(5)
    consts = {"pos_ids": np.arange(seq, dtype=np.int64)[None], "split": np.array([1, seq, 4, 8], np.int64),
              "merge": np.array([1, seq, -1], np.int64)}
    nodes = [helper.make_node("Constant", [], [k], name=k, value=numpy_helper.from_array(v, k)) for k, v in consts.items()]
    nodes += [helper.make_node("Gather", ["word", "input_ids"], ["tok"], name="tok"),
              helper.make_node("Gather", ["pos", "pos_ids"], ["posv"], name="posv"),
              helper.make_node("Add", ["tok", "posv"], ["x"], name="add"),
              helper.make_node("Reshape", ["x", "split"], ["x4"], name="split"),
              helper.make_node("Transpose", ["x4"], ["xt"], perm=[0, 2, 1, 3], name="heads"),
              helper.make_node("Softmax", ["xt"], ["p"], axis=2, name="softmax"),
              helper.make_node("Transpose", ["p"], ["pt"], perm=[0, 2, 1, 3], name="unheads"),
              helper.make_node("Reshape", ["pt", "merge"], ["y"], name="merge")]
    inits = [numpy_helper.from_array(rng.standard_normal((20, 32)).astype(np.float32), "word"),
             numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "pos")]
    return _model(nodes, [_vi("input_ids", [1, seq], TP.INT64)], [_vi("y", [1, seq, 32])], inits)


def test_dynamic_sequence_rewrites_a_static_export():
    """benchmarks/dynamic_models.dynamic_sequence: same outputs as the export at its length, any length in ORT,
    and one graph over 3..16 that matches static imports of the copy."""
    import importlib.util
    from pathlib import Path

    import onnxruntime as ort

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "dynamic_models.py"
    spec = importlib.util.spec_from_file_location("dynamic_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    static = _static_export()
    dyn = module.dynamic_sequence(static)
    assert dyn.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "seq"
    ids = np.random.default_rng(0).integers(0, 20, (1, 16))
    run = lambda m, x: ort.InferenceSession(m.SerializeToString()).run(None, {"input_ids": x})[0]  # noqa: E731
    np.testing.assert_array_equal(run(dyn, ids), run(static, ids))
    assert run(dyn, ids[:, :5]).shape == (1, 5, 32)
    graph = import_unchecked(dyn, ranges=ShapeRanges(dims={"seq": DimSpec(3, 16)}))
    assert graph.tensors["y"].dyn == (1, Sym("seq"), 32)
    _check_against_static(dyn, graph, [{"seq": 3}, {"seq": 7}, {"seq": 16}], lambda env: {"input_ids": (1, env["seq"])})


def test_plan_decides_over_min_opt_max_and_plans_the_capacity(monkeypatch):
    """The layouts are chosen over the range (fluid/range_choice.py on graph_at's sizes), the memory plan is the
    static build's at the maximum. (The support check is skipped: which ops take run-time sizes is the kernels'.)"""
    import fluidml_xc.pipeline as pipeline
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    monkeypatch.setattr(pipeline, "check_supported", lambda graph: None)
    spec = machine_spec(get_board("x86_64-v3"))
    model = bert_like()
    graph = import_unchecked(model, ranges=ShapeRanges(dims={"seq": DimSpec(8, 128, 37)}))
    planned = pipeline.plan(graph, spec)
    assert set(planned.range_choice.ratios) == {"min", "opt", "max"} and planned.range_choice.worst >= 1.0
    static = pipeline.plan(import_unchecked(model, {"input_ids": (1, 128), "attention_mask": (1, 128)}), spec)
    assert planned.plan.arena_bytes == static.plan.arena_bytes
    assert planned.graph.tensors["l0_s"].dyn == (1, 4, Sym("seq"), Sym("seq"))


def test_a_dim_two_expressions_fit_at_min_and_max_is_settled_at_a_probe_size():
    """With opt = max only two sizes are imported: N and 2*(floor((N - 1)/2) + 1) both give 8 and 128 there; a
    third import at a size no other used (127) tells them apart."""
    from fluidml_xc.frontend.dynamic import Point, attach_dyn
    from fluidml_xc.frontend.ranges import Resolved
    from fluidml_xc.ir import Graph, Node, Tensor

    def graph(n: int) -> Graph:
        half = (n - 1) // 2 + 1
        tensors = {"x": Tensor("x", np.float32, (n,)), "h": Tensor("h", np.float32, (half,)), "y": Tensor("y", np.float32, (n,))}
        return Graph("g", tensors, [Node("MaxPool", "pool", ["x"], ["h"]), Node("Relu", "relu", ["x"], ["y"])],
                     ["x"], ["h", "y"], 17)
    N = Sym("N")
    half = to_expr("floor(N/2 - 1/2) + 1", {"N": "N"})
    resolved = Resolved({"x": (N,)}, {"N": SymRange("N", 8, 128, 128)})
    probes = []

    def probe():
        probes.append(127)
        return [Point("probe0", {"N": 127}, graph(127))]
    g = attach_dyn([Point("max", {"N": 128}, graph(128)), Point("min", {"N": 8}, graph(8))], {"h": (half,)}, resolved, probe)
    assert g.tensors["y"].dyn == (N,) and g.tensors["h"].dyn == (half,) and probes == [127]
