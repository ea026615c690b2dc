"""What a warm rebuild reuses (issue #27): the optimizer's decisions and the memory plan (plan_cache.py) and the
glue's object (emit/link.glue_key) and the merged model object (emit/link.model_object_key), both in the kernel
cache; every input they depend on changes the key (a change
seen as a miss, never as a wrong reuse)."""
from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
from onnx import helper

from modelrun import float_model
from fluidml_xc import build as build_module, plan_cache
from fluidml_xc.build import BuildOptions, build_model
from fluidml_xc.emit import link
from fluidml_xc.fluid.cost_cache import target_key
from fluidml_xc.pipeline import LowerOptions, import_graph, plan
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from fluidml_xc.timings import Stopwatch


def _cnn(seed: int = 0):
    """Conv 3x3 -> Relu -> Conv 1x1 -> Add (residual) on a 1x8x10x10 image: the optimizer picks loop orders."""
    rng = np.random.default_rng(seed)
    inits = {"W1": rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "B1": rng.standard_normal(8).astype(np.float32),
             "W2": rng.standard_normal((8, 8, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "W2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["c2", "x"], ["y"], name="add")]
    return float_model(nodes, inits, {"x": np.zeros((1, 8, 10, 10), np.float32)}, ["y"])


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def planned_calls(monkeypatch):
    """The number of times plan_cache ran the optimizer (pipeline.plan)."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[2])
        return plan(*args, **kwargs)
    monkeypatch.setattr(plan_cache, "plan", counted)
    return calls


def _graph_changes(graph):
    """Copies of `graph`, each with one thing the optimizer reads changed."""
    def changed(edit):
        g = copy.deepcopy(graph)
        edit(g)
        return g
    conv = next(i for i, n in enumerate(graph.nodes) if n.op_type == "Conv")
    const = next(name for name, t in graph.tensors.items() if t.is_const and t.value.size > 8)
    first_out = graph.nodes[0].outputs[0]

    def weight(g):
        value = g.tensors[const].value.copy()
        value.flat[0] += 1.0
        g.tensors[const] = dataclasses.replace(g.tensors[const], value=value)

    def attribute(g):
        g.nodes[conv] = dataclasses.replace(g.nodes[conv], attrs={**g.nodes[conv].attrs, "_probe": 1})
    return {"constant": changed(weight), "attribute": changed(attribute),
            "shape": changed(lambda g: g.tensors.__setitem__(first_out, dataclasses.replace(
                g.tensors[first_out], shape=(1, 8, 10, 11)))),
            "dtype": changed(lambda g: g.tensors.__setitem__(first_out, dataclasses.replace(
                g.tensors[first_out], dtype=np.dtype(np.float16)))),
            "op": changed(lambda g: g.nodes.__setitem__(-1, dataclasses.replace(g.nodes[-1], op_type="Sub"))),
            "name": changed(lambda g: setattr(g, "name", "other"))}


def test_every_component_changes_the_key(cache_env, monkeypatch):
    graph = import_graph(_cnn())
    spec = machine_spec(get_board("x86_64"))
    base = LowerOptions()
    keys = {"base": plan_cache.plan_key(graph, spec, base)}
    assert plan_cache.plan_key(copy.deepcopy(graph), spec, base) == keys["base"]  # the content, not the object
    keys.update({f"graph {what}": plan_cache.plan_key(g, spec, base) for what, g in _graph_changes(graph).items()})
    keys["other board"] = plan_cache.plan_key(graph, machine_spec(get_board("rpi4")), base)
    for field, value in (("cpu", "x86-64-v2"), ("features", "+avx2"), ("vector_bits", 128), ("alignment", 16),
                         ("accumulators", 8), ("pack_vector_bits", 128)):
        keys[f"spec {field}"] = plan_cache.plan_key(graph, dataclasses.replace(spec, **{field: value}), base)
    keys["--opt greedy"] = plan_cache.plan_key(graph, spec, dataclasses.replace(base, opt="greedy"))
    keys["threads 4"] = plan_cache.plan_key(graph, spec, dataclasses.replace(base, threads=4))
    measure = dataclasses.replace(base, costs="measure")
    keys["--costs measure"] = plan_cache.plan_key(graph, spec, measure)
    costs = cache_env / "costs" / f"{target_key(spec.triple, spec.cpu)}.json"
    costs.parent.mkdir(parents=True)
    costs.write_text(json.dumps({"format": 1, "entries": {}}))
    keys["measured costs file"] = plan_cache.plan_key(graph, spec, measure)
    costs.write_text(json.dumps({"format": 1, "entries": {"k": {"ms": 1.0}}}))
    keys["measured costs changed"] = plan_cache.plan_key(graph, spec, measure)
    assert plan_cache.plan_key(graph, spec, base) == keys["base"]  # analytic costs do not read that file
    monkeypatch.setattr(plan_cache, "host_can_run", lambda triple, cpu: False)
    keys["measured on a board only"] = plan_cache.plan_key(graph, spec, measure)
    monkeypatch.setattr(plan_cache, "package_digest", lambda: "0" * 64)
    keys["package sources"] = plan_cache.plan_key(graph, spec, base)
    monkeypatch.setattr(plan_cache, "tool_versions", lambda: {"llvm": "0.0", "llvmlite": "0.0"})
    keys["tool versions"] = plan_cache.plan_key(graph, spec, base)
    same = {k: [o for o, v in keys.items() if v == key and o != k] for k, key in keys.items()}
    assert not any(same.values()), same


def test_a_hit_is_the_plan_and_a_change_misses(cache_env, planned_calls):
    graph = import_graph(_cnn())
    spec = machine_spec(get_board("x86_64"))
    store = plan_cache.plan_store()
    assert store.root == cache_env / "plans"
    cold = plan_cache.cached_plan(graph, spec, LowerOptions(), store, Stopwatch())
    warm = plan_cache.cached_plan(graph, spec, LowerOptions(), store, Stopwatch())
    assert (cold.hit, warm.hit, len(planned_calls)) == (False, True, 1)
    assert cold.planned.decisions.loop_orders, "the optimizer should decide something for the test model"
    assert warm.planned.decisions == cold.planned.decisions and warm.planned.plan == cold.planned.plan
    assert [n.op_type for n in warm.planned.graph.nodes] == [n.op_type for n in cold.planned.graph.nodes]
    four = plan_cache.cached_plan(graph, spec, LowerOptions(threads=4), store, Stopwatch())
    other = plan_cache.cached_plan(import_graph(_cnn(seed=1)), spec, LowerOptions(), store, Stopwatch())
    assert (four.hit, other.hit, len(planned_calls)) == (False, False, 3)
    assert plan_cache.cached_plan(graph, spec, LowerOptions(), None, Stopwatch()).hit is False
    assert len(planned_calls) == 4 and store.stats().entries == 3


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_entry_is_planned_again(cache_env, planned_calls, damage):
    graph = import_graph(_cnn())
    spec = machine_spec(get_board("x86_64"))
    store = plan_cache.plan_store()
    plan_cache.cached_plan(graph, spec, LowerOptions(), store, Stopwatch())
    path = store.path(plan_cache.plan_key(graph, spec, LowerOptions()))
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2] if damage == "truncate" else data[:-1] + bytes([data[-1] ^ 1]))
    again = plan_cache.cached_plan(graph, spec, LowerOptions(), store, Stopwatch())
    assert not again.hit and len(planned_calls) == 2 and path.is_file()
    assert plan_cache.cached_plan(graph, spec, LowerOptions(), store, Stopwatch()).hit


def test_warm_build_reuses_the_plan_byte_identically(cache_env, tmp_path, planned_calls, monkeypatch):
    compiled = []
    compile_c, merge = link._compile, build_module._merge_units
    monkeypatch.setattr(link, "_compile", lambda *args, **kw: compiled.append(args[2].name) or compile_c(*args, **kw))
    monkeypatch.setattr(build_module, "_merge_units", lambda *args: compiled.append("merge") or merge(*args))
    model = tmp_path / "cnn.onnx"
    model.write_bytes(_cnn().SerializeToString())
    common = dict(board="x86_64", profile_runner=False, record_last=False)
    cold = build_model(model, BuildOptions(out_dir=tmp_path / "cold", **common))
    warm = build_model(model, BuildOptions(out_dir=tmp_path / "warm", **common))
    assert compiled.count("model_glue.c") == compiled.count("merge") == 1  # found by the warm build (the rest: the runtime)
    fresh = build_model(model, BuildOptions(out_dir=tmp_path / "fresh", cache=False, **common))
    assert compiled.count("model_glue.c") == compiled.count("merge") == 2
    assert [r.timings.plan_cached for r in (cold, warm, fresh)] == [False, True, False]
    assert len(planned_calls) == 2 and plan_cache.plan_store().stats().entries == 1
    for name in sorted(p.name for p in (tmp_path / "fresh").iterdir()):
        assert (tmp_path / "warm" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name
    assert "(plan cached)" in warm.timings.table() and "(plan cached)" not in cold.timings.table()
    assert warm.timings.to_json()["plan_cached"] is True


def test_every_component_changes_the_glue_key(tmp_path, monkeypatch):
    source = tmp_path / "src"
    source.mkdir()
    (source / "model_glue.c").write_text('#include "model.h"\nint fxc_probe(void) { return MODEL_PROBE; }\n')
    (source / "model.h").write_text("#define MODEL_PROBE 1\n")
    target = get_board("x86_64").target

    def key() -> str:
        return link.glue_key(target, source / "model_glue.c", source)
    keys = {"base": key()}
    assert key() == keys["base"]
    (source / "model_glue.c").write_text('#include "model.h"\nint fxc_probe(void) { return MODEL_PROBE + 1; }\n')
    keys["glue source"] = key()
    (source / "model.h").write_text("#define MODEL_PROBE 2\n")
    keys["header"] = key()
    (source / "other.h").write_text("\n")
    keys["another header"] = key()
    target = get_board("rpi4").target
    keys["target"] = key()
    monkeypatch.setattr(link, "C_FLAGS", (*link.C_FLAGS, "-O3"))
    keys["flags"] = key()
    monkeypatch.setattr(link.metadata, "version", lambda name: "0.0.0")
    keys["zig version"] = key()
    assert len(set(keys.values())) == len(keys), keys


def test_every_component_changes_the_model_object_key(monkeypatch):
    target = get_board("x86_64").target
    base = dict(target=target, objects=[b"unit 1", b"unit 2"], weights=b"w" * 64, symbol="fxc_weights_0", alignment=64,
                labels=[("fxc_c_1", 0), ("fxc_c_2", 32)])
    changes = {"object bytes": dict(objects=[b"unit 1", b"unit 3"]), "object order": dict(objects=[b"unit 2", b"unit 1"]),
               "weights": dict(weights=b"w" * 63 + b"x"), "symbol": dict(symbol="fxc_weights_1"),
               "alignment": dict(alignment=32), "label offset": dict(labels=[("fxc_c_1", 0), ("fxc_c_2", 0)]),
               "label name": dict(labels=[("fxc_c_1", 0), ("fxc_c_3", 32)]), "target": dict(target=get_board("rpi4").target)}
    keys = {"base": link.model_object_key(**base)}
    keys.update({what: link.model_object_key(**{**base, **change}) for what, change in changes.items()})
    monkeypatch.setattr(link.metadata, "version", lambda name: "0.0.0")
    keys["zig version"] = link.model_object_key(**base)
    assert len(set(keys.values())) == len(keys), keys


def test_a_dynamic_plan_round_trips_with_its_range_choice(cache_env, planned_calls):
    from onnx import TensorProto, numpy_helper

    from fluidml_xc.frontend.ranges import ShapeRanges

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    dynamic = import_graph(model, ranges=ShapeRanges(inputs={"x": ((1, 32), 8)}))
    assert dynamic.symbols
    spec, store = machine_spec(get_board("x86_64")), plan_cache.plan_store()
    cold = plan_cache.cached_plan(dynamic, spec, LowerOptions(), store, Stopwatch())
    warm = plan_cache.cached_plan(dynamic, spec, LowerOptions(), store, Stopwatch())
    assert (cold.hit, warm.hit, len(planned_calls)) == (False, True, 1)
    assert warm.planned.range_choice == cold.planned.range_choice and warm.planned.range_choice is not None
    assert warm.planned.decisions.summary() == cold.planned.decisions.summary() and warm.planned.plan == cold.planned.plan
    narrower = import_graph(model, ranges=ShapeRanges(inputs={"x": ((1, 16), 8)}))
    assert not plan_cache.cached_plan(narrower, spec, LowerOptions(), store, Stopwatch()).hit
