"""Per-node units and their cache (issue #27): a unit's key changes with everything its code depends on and
nothing else; a rebuild reuses every unit and gives the same model.o; a changed layer is emitted again alone and its
code, the same IR, is not compiled again; layers of the same shapes compile once (their constants are arguments) but
one whose code depends on its weights' values does not share; --no-cache touches no cache; the worker count does not
change model.o; the runner agrees with ONNX Runtime."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from fluidml_xc import build as build_mod
from fluidml_xc.build import BuildOptions, compile_graph
from fluidml_xc.emit import units
from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter
from fluidml_xc.emit.unit_build import FORK_MIN_UNITS
from fluidml_xc.errors import InputError
from fluidml_xc.pipeline import LowerOptions, import_graph, plan
from fluidml_xc.frontend.ranges import DimSpec, ShapeRanges
from fluidml_xc.ir import Graph
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import build, float_model, rand, reference, run


class FakeCache:
    """KernelCache's interface (target/kernel_cache.py) in memory, counting what a build asks."""

    def __init__(self):
        self.data: dict[str, bytes] = {}
        self.gets: list[str] = []
        self.puts: list[str] = []

    def get(self, key: str) -> bytes | None:
        assert len(key) == 64 and int(key, 16) >= 0
        self.gets.append(key)
        return self.data.get(key)

    def put(self, key: str, data: bytes) -> bool:
        assert len(key) == 64 and int(key, 16) >= 0
        self.puts.append(key)
        self.data[key] = bytes(data)
        return True


def _model(alpha: float = 0.1, scale: float = 1.0) -> onnx.ModelProto:
    """Conv (weights over the inline limit) -> LeakyRelu(alpha) -> MatMul (weights * scale) -> Softmax."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["r"], name="leaky", alpha=alpha),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "m"], ["y0"], name="fc"),
             helper.make_node("Softmax", ["y0"], ["y"], name="soft", axis=-1)]
    inits = {"w": rand(8, 3, 3, 3, seed=1), "b": rand(8, seed=2), "shape": np.array([1, 8 * 6 * 6], np.int64),
             "m": rand(8 * 6 * 6, 10, seed=3) * np.float32(scale)}
    return float_model(nodes, inits, {"x": np.zeros((1, 3, 6, 6), np.float32)}, ["y"])


def _keys(model: onnx.ModelProto | Graph, board: str = "x86_64-v3", parallel: bool = True, spec=None, edit=None) -> dict[str, str]:
    """Node name -> its unit's key on `board` (the build's plan; `edit(emitter)` changes the emitter first)."""
    spec = spec or machine_spec(get_board(board))
    planned = plan(model if isinstance(model, Graph) else import_graph(model), spec, LowerOptions())
    options = EmitOptions(layouts=dict(planned.decisions.layouts), loop_orders=dict(planned.decisions.loop_orders),
                          parallel=parallel, unit=True)
    emitter = ModuleEmitter(planned.graph, planned.plan, spec, options)
    if edit:
        edit(emitter)
    graph = emitter.graph
    return {graph.nodes[i].name: units.unit_key(units.view_digest(units.local_view(emitter, graph.nodes[i])), spec)
            for i in planned.plan.order if emitter.emits_function(graph.nodes[i])}


def _changed(a: dict[str, str], b: dict[str, str]) -> set[str]:
    return {name for name in a if a[name] != b.get(name)}


@pytest.fixture(scope="module")
def base_keys():
    return _keys(_model())


def test_key_is_stable_and_a_64_hex_digest(base_keys):
    assert base_keys == _keys(_model())
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in base_keys.values())
    assert len(set(base_keys.values())) == len(base_keys)


def test_an_attribute_or_a_weight_changes_its_own_unit_only(base_keys):
    assert _changed(base_keys, _keys(_model(alpha=0.2))) == {"conv"}  # LeakyRelu is the Conv's epilogue
    assert _changed(base_keys, _keys(_model(scale=2.0))) == {"fc"}


def test_layout_and_loop_order_change_the_key(base_keys):
    def relayout(emitter):
        out = next(n for n in emitter.graph.nodes if n.name == "conv").outputs[0]
        emitter.options.layouts[out] = (0, 2, 3, 1) if emitter.options.layouts.get(out) != (0, 2, 3, 1) else (0, 1, 2, 3)

    def reorder(emitter):
        emitter.options.loop_orders["fc"] = "reordered"
    assert "conv" in _changed(base_keys, _keys(_model(), edit=relayout))
    assert _changed(base_keys, _keys(_model(), edit=reorder)) == {"fc"}


def _dynamic_model() -> onnx.ModelProto:
    """MatMul + Relu on x[N, 16]."""
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                               helper.make_node("Relu", ["m"], ["y"], name="relu")], "dyn",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 8])],
                              [onnx.numpy_helper.from_array(rand(16, 8, seed=4), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_symbol_ranges_change_the_key():
    def keys(hi: int) -> dict[str, str]:
        return _keys(import_graph(_dynamic_model(), ranges=ShapeRanges(dims={"N": DimSpec(1, hi)})))
    assert keys(8) == keys(8)
    assert _changed(keys(8), keys(16)) == set(keys(8))


def test_spec_options_and_tools_change_every_key(base_keys, monkeypatch):
    spec = machine_spec(get_board("x86_64-v3"))
    for other in (dataclasses.replace(spec, cpu="x86-64-v2"), dataclasses.replace(spec, features=spec.features + ",-fma"),
                  dataclasses.replace(spec, accumulators=spec.accumulators - 1)):
        assert _changed(base_keys, _keys(_model(), spec=other)) == set(base_keys)
    assert _changed(base_keys, _keys(_model(), parallel=False)) == set(base_keys)
    monkeypatch.setattr(units, "package_digest", lambda: "0" * 64)
    assert _changed(base_keys, _keys(_model())) == set(base_keys)
    monkeypatch.undo()
    monkeypatch.setattr(units, "llvm_version", lambda: "0.0.1")
    assert _changed(base_keys, _keys(_model())) == set(base_keys)


def test_dtypes_numpy_codes_alike_have_other_keys():
    """ml_dtypes' float8_e4m3fn and float8_e4m3fnuz (and int4, float4_e2m1fn) share numpy's code '<V1': a Cast from
    one must not reuse the other's unit (their values differ by a factor of 2)."""
    import ml_dtypes

    names = ["float8_e4m3fn", "float8_e4m3fnuz", "int4", "float4_e2m1fn", "uint8"]
    described = [json.dumps(units.describe(np.dtype(getattr(ml_dtypes, n, np.uint8)))) for n in names]
    assert len(set(described)) == len(names)
    arrays = [json.dumps(units.describe(np.zeros(3, getattr(ml_dtypes, n)))) for n in names[:2]]
    assert arrays[0] != arrays[1]


def test_a_cast_from_each_float8_has_its_own_unit_and_matches_onnx_reference(tmp_path):
    """Casts from float8_e4m3fn and float8_e4m3fnuz inputs of the same shape: other unit keys (one's cached object
    would give the other's values doubled), and both runs match onnx.reference."""
    import ml_dtypes
    from onnx import TensorProto
    from onnx.reference import ReferenceEvaluator

    from fluidml_xc.run.backend import compile_model

    bits = np.arange(1, 17, dtype=np.uint8) * 7
    keys = []
    for name, code, dtype in (("fn", TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
                              ("fnuz", TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz)):
        model = helper.make_model(helper.make_graph(
            [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT, name="cast")], "cast",
            [helper.make_tensor_value_info("x", code, [16])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])]),
            opset_imports=[helper.make_opsetid("", 21)])
        keys.append(_keys(model)["cast"])
        feeds = {"x": bits.view(dtype)}
        got = compile_model(model, board="x86_64", workdir=tmp_path / name)(feeds)
        np.testing.assert_array_equal(got[0], ReferenceEvaluator(model).run(None, feeds)[0], err_msg=name)
    assert keys[0] != keys[1]


def test_symbol_order_is_in_the_key():
    """Kernels read the run-time sizes by their position in graph.symbols (the inputs' order): a model whose inputs
    come in the other order gives the same node other code, so another key."""
    def two_inputs(order):
        ins = {"x": helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", 4]),
               "y": helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["S", 4])}
        return helper.make_model(helper.make_graph(
            [helper.make_node("Relu", ["x"], ["a"], name="rx"), helper.make_node("Relu", ["y"], ["b"], name="ry")], "g",
            [ins[n] for n in order], [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, ["B", 4]),
                                      helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, ["S", 4])]),
            opset_imports=[helper.make_opsetid("", 17)])
    ranges = ShapeRanges(dims={"B": DimSpec(1, 8), "S": DimSpec(1, 8)})
    keys = [_keys(import_graph(two_inputs(order), ranges=ranges))["ry"] for order in (["x", "y"], ["y", "x"])]
    assert keys[0] != keys[1]


def test_builds_in_two_threads_keep_their_own_jobs(tmp_path, monkeypatch):
    """Two builds in threads of one process, each forking workers, both pools created after both builds started:
    each pool's workers emit that build's units (the jobs are the pool's, not a module global)."""
    import threading

    from fluidml_xc.emit import unit_build

    models = {"a": _model(), "b": _three_convs()[0]}
    alone = {name: _compile(m, tmp_path, f"alone_{name}", monkeypatch, workers=1)[0] for name, m in models.items()}
    barrier, real = threading.Barrier(2), unit_build.ProcessPoolExecutor

    class Together(real):
        def __init__(self, *args, **kwargs):
            barrier.wait(60)
            super().__init__(*args, **kwargs)
    monkeypatch.setattr(unit_build, "ProcessPoolExecutor", Together)
    monkeypatch.setattr(build_mod, "kernel_cache", lambda: None)
    out = {}

    def build_in_thread(name):
        workdir = tmp_path / f"thread_{name}"
        workdir.mkdir()
        compile_graph(import_graph(models[name]), get_board("x86_64"),
                      BuildOptions(board="x86_64", threads=2, workers=2), workdir)
        out[name] = (workdir / "model.o").read_bytes()
    threads = [threading.Thread(target=build_in_thread, args=(name,)) for name in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert out == alone


def test_describe_refuses_what_it_does_not_know():
    with pytest.raises(TypeError, match="cannot describe"):
        units.describe(object())


def _compile(model: onnx.ModelProto, tmp: Path, name: str, monkeypatch, cache=None, **options):
    """compile_graph for x86_64 (three code variants) with `cache`: (model.o bytes, Compiled)."""
    monkeypatch.setattr(build_mod, "kernel_cache", lambda: cache)
    workdir = tmp / name
    workdir.mkdir()
    compiled = compile_graph(import_graph(model), get_board("x86_64"), BuildOptions(board="x86_64", threads=2, **options),
                             workdir)
    return (workdir / "model.o").read_bytes(), compiled


def test_rebuild_hits_every_unit_and_a_changed_layer_recompiles_alone(tmp_path, monkeypatch):
    cache = FakeCache()
    cold, first = _compile(_model(), tmp_path, "cold", monkeypatch, cache)
    units_per_variant = first.kernels.compiled // 3
    assert first.kernels.cached == 0 and units_per_variant == 3  # conv (with its LeakyRelu), fc, softmax
    warm, second = _compile(_model(), tmp_path, "warm", monkeypatch, cache)
    assert (second.kernels.cached, second.kernels.compiled) == (first.kernels.compiled, 0)
    assert warm == cold
    _, third = _compile(_model(scale=2.0), tmp_path, "changed", monkeypatch, cache)
    # the fc layer's other weights: emitted again, but its IR is the same (weights are arguments): no compile
    assert (third.kernels.cached, third.kernels.emitted, third.kernels.compiled) == (first.kernels.compiled - 3, 3, 0)


def test_no_cache_touches_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path / "cache"))

    def refuse():
        raise AssertionError("--no-cache opened the kernel cache")
    monkeypatch.setattr(build_mod, "kernel_cache", refuse)
    workdir = tmp_path / "w"
    workdir.mkdir()
    compiled = compile_graph(import_graph(_model()), get_board("x86_64"), BuildOptions(board="x86_64", cache=False), workdir)
    assert compiled.kernels.cached == 0 and compiled.kernels.compiled > 0
    assert not (tmp_path / "cache").exists()


def test_worker_count_and_cache_state_do_not_change_model_o(tmp_path, monkeypatch):
    one, alone = _compile(_model(), tmp_path, "one", monkeypatch, workers=1)
    two, forked = _compile(_model(), tmp_path, "two", monkeypatch, workers=2)
    assert alone.kernels.processes == 1 and forked.kernels.compiled >= FORK_MIN_UNITS and forked.kernels.processes > 1
    assert one == two


def test_units_runner_matches_onnx_runtime(tmp_path):
    model = _model()
    x = rand(1, 3, 6, 6, seed=9)
    artifact = build(model, tmp_path, "x86_64", profile_runner=False, threads=2, cache=False)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(artifact, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)


def test_kernel_cache_on_disk_serves_a_rebuild(tmp_path, monkeypatch):
    """The build's own cache (target/kernel_cache.py under $FLUIDML_XC_CACHE): a second build compiles nothing."""
    from fluidml_xc.target.kernel_cache import KernelCache

    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path / "cache"))
    workdirs = []
    for name in ("cold", "warm"):
        workdirs.append(tmp_path / name)
        workdirs[-1].mkdir()
        compiled = compile_graph(import_graph(_model()), get_board("qemu-aarch64"), BuildOptions(board="qemu-aarch64"),
                                 workdirs[-1])
        assert (compiled.kernels.cached > 0) == (name == "warm") and (compiled.kernels.compiled > 0) == (name == "cold")
    assert KernelCache().stats().entries > 0
    assert (workdirs[0] / "model.o").read_bytes() == (workdirs[1] / "model.o").read_bytes()


def test_a_dying_worker_costs_time_not_the_build(tmp_path, monkeypatch):
    """A worker killed mid-unit (os._exit): the build's process compiles what the pool lost, same model.o."""
    import os

    from fluidml_xc.emit import unit_build

    parent, original = os.getpid(), unit_build.emit_group

    def dies_in_a_worker(jobs):
        if os.getpid() != parent:
            os._exit(3)
        return original(jobs)
    one, _ = _compile(_model(), tmp_path, "one", monkeypatch, workers=1)
    monkeypatch.setattr(unit_build, "emit_group", dies_in_a_worker)
    two, compiled = _compile(_model(), tmp_path, "two", monkeypatch, workers=2)
    assert compiled.kernels.processes == 1 and one == two


def test_a_worker_dead_before_every_unit_is_sent_costs_time_not_the_build(tmp_path, monkeypatch):
    """The pool breaks while the units are still being handed out (a worker died at its first unit while this
    process sent the second): the units not sent are emitted and compiled here, same model.o (before: the
    BrokenProcessPool of the second submit ended the build, under load)."""
    from concurrent.futures.process import BrokenProcessPool

    from fluidml_xc.emit import unit_build

    class BreaksAtTheSecondUnit(unit_build.ProcessPoolExecutor):
        sent = 0

        def submit(self, fn, *args, **kwargs):
            if fn is unit_build._forked_emit:
                BreaksAtTheSecondUnit.sent += 1
                if BreaksAtTheSecondUnit.sent > 1:
                    raise BrokenProcessPool("a child process terminated abruptly")
            return super().submit(fn, *args, **kwargs)
    one, _ = _compile(_model(), tmp_path, "one", monkeypatch, workers=1)
    monkeypatch.setattr(unit_build, "ProcessPoolExecutor", BreaksAtTheSecondUnit)
    two, _ = _compile(_model(), tmp_path, "two", monkeypatch, workers=2)
    assert BreaksAtTheSecondUnit.sent > 1 and one == two


def _daemon_build(conn, model_bytes: bytes, workdir: str) -> None:
    try:
        compiled = compile_graph(import_graph(onnx.load_from_string(model_bytes)), get_board("x86_64"),
                                 BuildOptions(board="x86_64", cache=False, workers=2), Path(workdir))
        conn.send(compiled.kernels.processes)
    except BaseException as error:  # noqa: BLE001  (sent to the test, which fails with it)
        conn.send(repr(error))


def test_a_daemonic_process_builds_alone(tmp_path):
    """A build in a pool's worker or a conformance case worker (daemonic: may not start children) compiles its
    units in that process, even when workers are asked for."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    worker = ctx.Process(target=_daemon_build, args=(child, _model().SerializeToString(), str(tmp_path)), daemon=True)
    worker.start()
    try:
        assert parent.poll(300), "the daemonic build did not finish"
        assert parent.recv() == 1
    finally:
        worker.join(10)
    assert (tmp_path / "model.o").stat().st_size > 0


def _three_convs() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> three Convs of the same shapes: c1 and c2 with other finite weights (the same code: weights are the
    unit's arguments), c3 with a NaN weight (its conv plan depends on the weights being finite: other code)."""
    w3 = rand(16, 8, 3, 3, seed=2)
    w3[2, 1, 0, 0] = np.nan
    nodes = [helper.make_node("Conv", ["x", f"w{i}"], [f"y{i}"], pads=[1, 1, 1, 1], name=f"c{i}") for i in (1, 2, 3)]
    inits = {"w1": rand(16, 8, 3, 3, seed=1), "w2": rand(16, 8, 3, 3, seed=3), "w3": w3}
    model = float_model(nodes, inits, {"x": np.zeros((1, 8, 10, 10), np.float32)}, ["y1", "y2", "y3"])
    return model, {"x": rand(1, 8, 10, 10, seed=7)}


def test_layers_of_the_same_shapes_compile_once_and_match_onnx_runtime(tmp_path, monkeypatch):
    model, feeds = _three_convs()
    _, compiled = _compile(model, tmp_path, "counts", monkeypatch, FakeCache())
    assert (compiled.kernels.emitted, compiled.kernels.compiled) == (9, 6)  # 3 variants x (c1 = c2, c3)
    artifact = build(model, tmp_path / "a", "x86_64", profile_runner=False, threads=2, cache=False)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run(artifact, feeds)
    for name, expected in zip(("y1", "y2"), want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)
    # c3 against onnx.reference: it multiplies the padded zeros by the NaN tap too (ORT skips padded taps)
    np.testing.assert_allclose(got["y3"], reference(model, feeds)["y3"], rtol=1e-5, atol=1e-5)
    assert np.isnan(got["y3"][0, 2, 0]).all() and not np.isnan(got["y2"]).any()


def test_code_by_ir_hash_gives_the_no_cache_model_o(tmp_path, monkeypatch):
    """A cold build (objects by IR hash), a warm one, a model changed in one layer's weights (its code found by
    its IR hash, not compiled) and the same builds without a cache: the same model.o."""
    cache = FakeCache()
    cold, _ = _compile(_model(), tmp_path, "cold", monkeypatch, cache)
    warm, _ = _compile(_model(), tmp_path, "warm", monkeypatch, cache)
    changed, shared = _compile(_model(scale=2.0), tmp_path, "changed", monkeypatch, cache)
    assert shared.kernels.compiled == 0
    assert cold == warm == _compile(_model(), tmp_path, "none", monkeypatch, None)[0]
    assert changed == _compile(_model(scale=2.0), tmp_path, "none2", monkeypatch, None)[0] != cold


def test_names_do_not_change_a_unit_and_errors_name_the_model(monkeypatch):
    renamed, inner = _model(), {"c", "r", "f", "y0"}
    for node in renamed.graph.node:
        node.name = "other_" + node.name
        node.input[:] = ["other_" + n if n in inner else n for n in node.input]
        node.output[:] = ["other_" + n if n in inner else n for n in node.output]
    assert sorted(_keys(renamed).values()) == sorted(_keys(_model()).values())
    spec = machine_spec(get_board("x86_64-v3"))
    planned = plan(import_graph(_model()), spec, LowerOptions())
    emitter = ModuleEmitter(planned.graph, planned.plan, spec, EmitOptions(unit=True))
    view = units.local_view(emitter, next(n for n in planned.graph.nodes if n.name == "fc"))
    assert view.node.name == "u.n0" and "f" not in view.graph.tensors

    def fails(self, node, step):
        raise InputError(f"node {node.name!r}: input {node.inputs[0]!r} is bad")
    monkeypatch.setattr(units.ModuleEmitter, "node_function", fails)
    with pytest.raises(InputError, match="node 'fc': input 'f' is bad"):
        units.emit_unit(view, spec)


def test_layers_of_the_same_shapes_emit_once_and_give_the_same_model_o(tmp_path, monkeypatch):
    """Three 1x1 Convs: c1 and c2 (other finite weights, one bias) share one emission per variant (units.Sharing: c2's
    packed weights computed from its own); c3 (a NaN weight: another blind digest) is emitted itself. model.o is the bytes of a build
    that emits every unit, and the unit Sharing derives is the one c2's own emission gives."""
    from fluidml_xc.emit import unit_build

    w3 = rand(16, 8, 1, 1, seed=2)
    w3[2, 1] = np.nan
    nodes = [helper.make_node("Conv", ["x", f"w{i}", "b"], [f"y{i}"], name=f"c{i}") for i in (1, 2, 3)]
    inits = {"w1": rand(16, 8, 1, 1, seed=1), "w2": rand(16, 8, 1, 1, seed=3), "w3": w3, "b": rand(16, seed=5)}
    model = float_model(nodes, inits, {"x": np.zeros((1, 8, 10, 10), np.float32)}, ["y1", "y2", "y3"])
    calls = []
    original = units.ModuleEmitter.node_function
    monkeypatch.setattr(units.ModuleEmitter, "node_function", lambda self, node, step: calls.append(node) or original(self, node, step))
    shared, _ = _compile(model, tmp_path, "shared", monkeypatch, None, workers=1)
    assert len(calls) == 6  # 3 variants x (c1 for c1 and c2, c3)
    emit_shared = unit_build.emit_shared
    monkeypatch.setattr(unit_build, "emit_shared", lambda view, spec: (emit_shared(view, spec)[0], None))
    alone, _ = _compile(model, tmp_path, "alone", monkeypatch, None, workers=1)
    assert len(calls) == 6 + 9 and shared == alone

    spec = machine_spec(get_board("x86_64-v3"))
    planned = plan(import_graph(model), spec, LowerOptions())
    emitter = ModuleEmitter(planned.graph, planned.plan, spec, EmitOptions(unit=True, parallel=True))
    views = {n.name: units.local_view(emitter, n) for n in planned.graph.nodes}
    digests = {name: units.blind_digest(view) for name, view in views.items()}
    assert digests["c1"] == digests["c2"] != digests["c3"]
    first, sharing = units.emit_shared(views["c1"], spec)
    own = units.emit_unit(views["c2"], spec)
    assert sharing.recipes and sharing.apply(views["c2"]) == own and own.arguments != first.arguments
    assert units.emit_shared(views["c3"], spec)[1] is None


def test_sharing_refuses_derived_constants_that_would_merge():
    """Two derived arguments whose bytes are equal in the other view: its own emission would pass one argument, so
    Sharing gives None (the unit is emitted)."""
    same = lambda value: value * 0  # noqa: E731
    unit = units.EmittedUnit("ir", {"a": b"1", "b": b"2"}, ("a", "b"), None)
    view = units.UnitView(Graph("unit", {"u.t0": dataclasses.replace(_tensor(), value=np.ones(64, np.float32))}, [],
                                [], [], 13), units.LocalPlan({}, 64), EmitOptions(), ())
    assert units.Sharing(unit, ((0, same, ("u.t0",)), (1, same, ("u.t0",)))).apply(view) is None
    assert units.Sharing(unit, ((0, same, ("u.t0",)),)).apply(view).arguments[1] == "b"


def _tensor():
    from fluidml_xc.ir import Tensor
    return Tensor("u.t0", np.dtype(np.float32), (64,))


def test_a_derived_constant_that_lost_its_origin_stops_sharing():
    """A kernel that opted in but whose derived array reached its constants without its origin (a memo of constants
    or a copy in between) gives no recipes: the units of its blind digest are emitted each."""
    from types import SimpleNamespace

    from llvmlite import ir

    from fluidml_xc.emit.unit_args import ConstantArgs
    from fluidml_xc.kernels.derived import derived, values_derived

    fn = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f")
    weights = SimpleNamespace(name="u.t1", value=np.arange(128, dtype=np.float32))
    kernel = SimpleNamespace()
    values_derived(kernel)
    kept = derived(kernel, np.negative, weights)
    args = ConstantArgs(fn, kernel, 64)
    args.get(kept.tobytes(), kept.origin)
    assert [(i, names) for i, _, names in args.recipes(set())] == [(0, ("u.t1",))]
    lost = derived(kernel, np.positive, weights)
    args.get(np.ascontiguousarray(lost).tobytes())  # arrives as a plain array
    assert args.recipes(set()) is None
