"""Range, the windows and MelWeightMatrix whose sizes come at run time (issue #29, ops/generators.py): data-dependent
outputs bounded by --max-dim NAME=N or '*=N', written dense at their actual length per run; elementwise ops with
scalar operands over them keep that length; a run whose size is above the bound fails in one line (RunCheckFailed
from the JIT, the runner's exit status 3, FXC_ERR_RUN). Against ONNX Runtime and onnx.reference: the JIT, a built
x86_64 runner and the CLI, one run each under qemu-aarch64 and qemu-armv7; with constant sizes the tensors stay
static (folded at build time)."""
from __future__ import annotations

import subprocess
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc.errors import InputError, RunCheckFailed, UnresolvedShape
from modelrun import cli, one_line_error


def V(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _c(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _ramp_model() -> onnx.ModelProto:
    """positions = Range(0, n, 1) (n an input); y = sqrt((Cast(positions) * x + 0.5)^2), both graph outputs."""
    nodes = [helper.make_node("Range", ["zero", "n", "one"], ["r"], name="ramp"),
             helper.make_node("Cast", ["r"], ["rf"], to=TP.FLOAT),
             helper.make_node("Mul", ["rf", "x"], ["m"]),
             helper.make_node("Add", ["m", "half"], ["a"]),
             helper.make_node("Mul", ["a", "a"], ["sq"]),
             helper.make_node("Sqrt", ["sq"], ["y"])]
    graph = helper.make_graph(nodes, "ramp", [V("x", TP.FLOAT, []), V("n", TP.INT64, [])],
                              [V("y", TP.FLOAT, None), V("r", TP.INT64, None)],
                              [_c("zero", np.int64(0)), _c("one", np.int64(1)), _c("half", np.float32(0.5))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _one(op, inputs, dtypes, attrs=None, opset=17, out_type=None) -> onnx.ModelProto:
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], name="gen", **(attrs or {}))
    graph = helper.make_graph([node], op, [V(n, t, []) for n, t in zip(names, dtypes)],
                              [V("y", out_type if out_type is not None else dtypes[0], None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _reference(model, feeds):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, feeds)


def _jit(model, max_dims):
    from fluidml_xc.run.backend import compile_model

    return compile_model(model, max_dims=max_dims)


def _same(got, want, rtol=0.0, atol=None):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        atol = (0 if not rtol else 1e-6) if atol is None else atol
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def test_range_into_arithmetic_against_onnxruntime():
    model, run = _ramp_model(), _jit(_ramp_model(), {"ramp": 48})
    for n in (0, 1, 5, 17, 48, -3):
        feeds = {"x": np.array(1.25, np.float32), "n": np.array(n, np.int64)}
        _same(run(feeds), _ort(model, feeds), rtol=1e-6)
    with pytest.raises(RunCheckFailed, match=r"^Range node 'ramp': this run's length .* above its bound of 48"):
        run({"x": np.array(1.0, np.float32), "n": np.array(49, np.int64)})


RANGES = [
    (TP.INT64, [(0, 7, 2), (5, 5, 1), (3, -4, -2), (0, 10, -1)]),
    (TP.INT32, [(10, 6, -3), (-7, 8, 5), (2, 9, 7)]),
    (TP.INT16, [(1, 12, 4)]),
    (TP.FLOAT, [(1.0, 5.0, 2.0), (0.1, 1.0, 0.3), (2.0, -1.5, -0.25)]),
    (TP.DOUBLE, [(0.5, 3.3, 0.7), (-1.0, 1.0, 0.125)]),
    (TP.FLOAT16, [(1.0, 5.0, 0.5), (3.0, 0.0, -0.75)]),
    (TP.BFLOAT16, [(1.0, 5.0, 2.0), (-2.0, 6.0, 1.5)]),
]


@pytest.mark.parametrize("elem,values", RANGES, ids=lambda v: str(v) if isinstance(v, int) else "")
def test_range_types_against_the_reference(elem, values):
    """Count and elements as ONNX's reference computes them, every type Range-27 takes (float16/bfloat16: stash_type
    float32, the default, and float64)."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    stashes = [{}, {"stash_type": TP.DOUBLE}] if elem in (TP.FLOAT16, TP.BFLOAT16) else [{}]
    for attrs in stashes:
        model = _one("Range", [0, 0, 0], [elem] * 3, attrs, opset=27)
        run = _jit(model, {"*": 64})
        for start, limit, delta in values:
            feeds = {f"i{k}": np.array(v, dtype) for k, v in enumerate((start, limit, delta))}
            _same(run(feeds), _reference(model, feeds))


def test_range_delta_zero_fails_the_run():
    run = _jit(_one("Range", [0, 0, 0], [TP.INT32] * 3), {"gen": 8})
    with pytest.raises(RunCheckFailed, match="or delta is 0"):
        run({"i0": np.array(0, np.int32), "i1": np.array(4, np.int32), "i2": np.array(0, np.int32)})


def test_int64_range_extremes_fail_the_bound_instead_of_trapping():
    """Counts past INT64_MAX (limit - start overflows, or INT64_MIN / -1, which traps as a signed division) saturate
    and fail the bound check in one line; a span that overflows int64 but has few steps counts exactly."""
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    model = _one("Range", [0, 0, 0], [TP.INT64] * 3)
    run = _jit(model, {"gen": 16})
    feed = lambda a, b, d: {"i0": np.array(a, np.int64), "i1": np.array(b, np.int64), "i2": np.array(d, np.int64)}  # noqa: E731
    for start, limit, delta in [(0, lo, -1), (lo, hi, 1), (hi, lo, -1), (lo, hi, 2)]:
        with pytest.raises(RunCheckFailed, match=r"above its bound of 16"):
            run(feed(start, limit, delta))
    for start, limit, delta in [(lo, hi, hi), (hi, lo, lo), (hi, lo, 1), (lo, hi, -5), (-3, 4, hi)]:
        want = np.array(range(start, limit, delta), np.int64)  # Python's exact integers (numpy's arange rounds here)
        _same(run(feed(start, limit, delta)), [want])


def test_constant_range_stays_static():
    from fluidml_xc.pipeline import import_graph

    model = _ramp_model()
    model.graph.initializer.append(_c("n", np.int64(6)))
    graph = import_graph(model)
    assert "Range" not in [n.op_type for n in graph.nodes]
    assert graph.tensors["r"].is_const and graph.tensors["r"].shape == (6,) and graph.tensors["y"].shape == (6,)
    assert not any(n.attrs.get("_dynamic_dims") for n in graph.nodes)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("out_type", [TP.FLOAT, TP.DOUBLE, TP.FLOAT16, TP.INT32])
def test_windows_with_a_runtime_size(op, periodic, out_type):
    model = _one(op, [0], [TP.INT64], {"periodic": periodic, "output_datatype": out_type}, out_type=out_type)
    run = _jit(model, {"*": 40})
    nan_at_1 = not periodic and out_type == TP.INT32  # 0 / 0 cast to int32: undefined (our rule gives 0)
    for size in (2, 9, 40) if nan_at_1 else (1, 2, 9, 40):
        feeds = {"i0": np.array(size, np.int64)}
        half = out_type == TP.FLOAT16  # the reference computes in float16 (a few ulps off); here in float64
        _same(run(feeds), _reference(model, feeds), rtol=1e-3 if half else 1e-6, atol=2e-3 if half else None)
    for size in (0, 41):
        with pytest.raises(RunCheckFailed, match=rf"^{op} node 'gen': this run's size is below 1 or above its bound "
                                                 r"of 40 \(--max-dim '\*=40'\)"):
            run({"i0": np.array(size, np.int64)})


@pytest.mark.parametrize("out_type", [TP.FLOAT, TP.DOUBLE, TP.BFLOAT16])
def test_mel_weight_matrix_with_runtime_sizes(out_type):
    model = _one("MelWeightMatrix", [0] * 5, [TP.INT32] * 3 + [TP.FLOAT] * 2, {"output_datatype": out_type},
                 out_type=out_type)
    run = _jit(model, {"gen": 300})
    for mels, dft, rate, lo, hi in ((8, 16, 8192, 0.0, 4096.0), (20, 256, 16000, 20.0, 7000.0), (5, 64, 8000, 100.0, 3000.0),
                                    (40, 512, 22050, 0.0, 11025.0)):
        feeds = {"i0": np.array(mels, np.int32), "i1": np.array(dft, np.int32), "i2": np.array(rate, np.int32),
                 "i3": np.array(lo, np.float32), "i4": np.array(hi, np.float32)}
        _same(run(feeds), _reference(model, feeds), rtol=1e-6)
        if out_type == TP.FLOAT:
            _same(run(feeds), _ort(model, feeds), rtol=1e-6)
    with pytest.raises(RunCheckFailed, match="MelWeightMatrix node 'gen'"):
        run({"i0": np.array(8, np.int32), "i1": np.array(600, np.int32), "i2": np.array(8000, np.int32),
             "i3": np.array(0, np.float32), "i4": np.array(4000, np.float32)})


def test_a_size_without_a_bound_names_max_dim_and_bind():
    with pytest.raises(UnresolvedShape) as info:
        _jit(_ramp_model(), None)
    text = str(info.value)
    assert "the shape of 'r' (Range node 'ramp')" in text and "--bind n=VALUE" in text
    assert text.endswith("or bound it with --max-dim ramp=N (--max-dim '*=N' bounds every such size)")


def test_named_bound_wins_over_the_default():
    from fluidml_xc.pipeline import import_graph
    from fluidml_xc.frontend.ranges import ShapeRanges

    graph = import_graph(_ramp_model(), ranges=ShapeRanges(max_dims={"*": 100, "r": 12}))
    assert graph.tensors["r"].shape == (12,) and graph.tensors["y"].shape == (12,)
    graph = import_graph(_ramp_model(), ranges=ShapeRanges(max_dims={"*": 100}))
    assert graph.tensors["r"].shape == (100,)


def test_other_consumers_are_refused_in_one_line():
    model = _ramp_model()
    model.graph.node.append(helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0))
    model.graph.output.append(V("s", TP.FLOAT, None))
    with pytest.raises(InputError, match=r"reads 'y', whose shape depends on the data \(Range node 'ramp'\)"):
        _jit(model, {"*": 8})


def test_cli_default_bound_and_the_runner_exit_status(tmp_path):
    from fluidml_xc.run.execute import run_artifact

    model = _ramp_model()
    onnx.save(model, str(tmp_path / "m.onnx"))
    proc = cli("build", "m.onnx", "-o", "art", "--max-dim", "*=16", "--no-profile-runner", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for n in (0, 3, 16):
        feeds = {"x": np.array(2.0, np.float32), "n": np.array(n, np.int64)}
        _same(list(run_artifact(tmp_path / "art", feeds).slots), _ort(model, feeds), rtol=1e-6)
    np.save(tmp_path / "x.npy", np.array(2.0, np.float32))
    np.save(tmp_path / "n.npy", np.array(17, np.int64))
    proc = subprocess.run([str(tmp_path / "art" / "runner"), "-i", str(tmp_path / "x.npy"), "-i", str(tmp_path / "n.npy"),
                           "-o", str(tmp_path / "y.npy"), "-o", str(tmp_path / "r.npy")], capture_output=True, text=True)
    assert proc.returncode == 3 and proc.stderr.strip().splitlines() == [
        "runner: error: Range node 'ramp': this run's length ceil((limit - start) / delta) is above its bound of 16, "
        "or delta is 0 (--max-dim '*=16'); the outputs are not valid: rebuild with a larger --max-dim '*=N'"]
    assert "FXC_ERR_RUN = -7" in (tmp_path / "art" / "model.h").read_text()
    proc = cli("build", "m.onnx", "-o", "art2", "--max-dim", "nothing=4", cwd=tmp_path)
    assert proc.returncode == 2 and "--max-dim nothing=4 names no node" in one_line_error(proc)


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_one_run_under_qemu(board, board_runner, tmp_path):
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.frontend.ranges import ShapeRanges
    from fluidml_xc.run.execute import run_artifact

    board = board_runner(board).board
    model = _ramp_model()
    model.graph.node.append(helper.make_node("HannWindow", ["n"], ["w"], name="hann", periodic=0))
    model.graph.output.append(V("w", TP.FLOAT, None))
    onnx.save(model, str(tmp_path / "m.onnx"))
    result = build_model(tmp_path / "m.onnx", BuildOptions(board=board, out_dir=tmp_path / "art", record_last=False,
                                                           profile_runner=False,
                                                           ranges=ShapeRanges(max_dims={"*": 24, "hann": 32})))
    feeds = {"x": np.array(0.75, np.float32), "n": np.array(11, np.int64)}
    _same(list(run_artifact(result.artifact, feeds, timeout=300).slots), _ort(model, feeds), rtol=1e-5)
    feeds["n"] = np.array(25, np.int64)  # above the Range's bound (24), within the window's (32)
    with pytest.raises(RunCheckFailed, match=r"^Range node 'ramp': .* \(--max-dim '\*=24'\)"):
        run_artifact(result.artifact, feeds, timeout=300)
