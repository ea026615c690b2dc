"""The whole-image Winograd form (issue #28, docs/WINOGRAD.md "The whole-image form"): a WinogradInput node writes the
transformed input V to a planned arena tensor, the conv reads it split over panels of output channels. Outputs
against ONNX Runtime (padding, odd sizes, groups, bias + residual + Relu, batch 2) natively and under qemu, the same
bits at every thread count, V in the memory plan, and --max-memory leaving the form out when V does not fit."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from modelrun import build, jit_run, require_emulator
from test_winograd import RTOL, conv_model, force, ort, rel_error, run_runner


def lowered(model, order: str | None, monkeypatch, board: str = "x86_64", threads: int = 1):
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    if order:
        force(monkeypatch, order)
    return lower(import_graph(model), machine_spec(get_board(board)), LowerOptions(threads=threads, parallel=threads > 1))


CASES = {
    "odd": dict(c=16, oc=20, h=10, w=9, pads=(1, 0, 1, 2)),
    "unpadded": dict(c=24, oc=40, h=9, w=11, pads=(0, 0, 0, 0)),
    "groups-residual-relu-batch2": dict(c=32, oc=40, h=11, w=9, pads=(1, 2, 0, 1), group=2, residual_relu=True, batch=2),
    "no-bias-chunks": dict(c=8, oc=8, h=40, w=38, bias=False),  # more tiles than one chunk
}


@pytest.mark.parametrize("order", ["wimg2", "wimg4", "wimg6"])
@pytest.mark.parametrize("case", list(CASES))
def test_whole_image_matches_ort(order, case, monkeypatch):
    args = CASES[case]
    model = conv_model(**args)
    low = lowered(model, order, monkeypatch)
    assert [n.op_type for n in low.graph.nodes][:2] == ["WinogradInput", "Conv"]
    assert low.decisions.loop_orders["conv"] == order
    x = np.random.default_rng(1).standard_normal((args.get("batch", 1), args["c"], args["h"], args["w"])).astype(np.float32)
    got = next(iter(jit_run(model, {"x": x}).values()))
    assert rel_error(got, ort(model, x)) < RTOL


def test_v_is_a_planned_arena_buffer(monkeypatch):
    """V[image][group][point][tile][channel] is an arena tensor: its exact bytes, live from the transform to the conv,
    apart from the conv's output while both live."""
    low = lowered(conv_model(32, 40, 11, 9, (1, 2, 0, 1), group=2, batch=2), "wimg4", monkeypatch)
    v = low.graph.tensors["conv.winograd_v"]
    assert v.shape == (2, 2, 36, 9, 16) and v.nbytes == 2 * 2 * 36 * 9 * 16 * 4
    plan = low.plan
    steps = [n.name for n in (low.graph.nodes[i] for i in plan.order)] if plan.order else [n.name for n in low.graph.nodes]
    assert plan.intervals["conv.winograd_v"] == (steps.index("conv.winograd_input"), steps.index("conv"))
    assert plan.arena_bytes >= v.nbytes
    conv = next(n for n in low.graph.nodes if n.op_type == "Conv")
    assert conv.inputs[-1] == "conv.winograd_v"


@pytest.mark.parametrize("board, threads, batch, oc, copies", [
    ("x86_64", 2, 1, 128, 2),  # one image, two 64-channel panels: a copy per thread
    ("x86_64", 4, 2, 256, 2),  # two images on 4 threads: two threads share each image
    ("x86_64", 4, 1, 96, 2),  # at most one copy per 64-channel panel
    ("x86_64", 2, 2, 128, 1),  # every thread has its own image
    ("x86_64", 1, 1, 128, 1),
    ("rpi4", 2, 1, 128, 1),  # the ARM boards' cores share a cache: one V, transformed by all threads
])
def test_v_copy_per_thread_where_caches_are_private(board, threads, batch, oc, copies, monkeypatch):
    """x86 (cores in cache domains they may not share): a threaded build gives each thread that shares an image its
    own copy of V, written by the transform's tile c and read by the conv's tile c (the pool's home shards run both
    on one thread), and records per tile which copy holds its image (`<conv>.winograd_copy`)."""
    low = lowered(conv_model(32, oc, 11, 9, (1, 2, 0, 1), batch=batch), "wimg4", monkeypatch, board, threads=threads)
    assert low.graph.tensors["conv.winograd_v"].shape == (batch * copies, 1, 36, 9, 32)
    transform = next(n for n in low.graph.nodes if n.op_type == "WinogradInput")
    assert transform.attrs["copies"] == copies
    held = low.graph.tensors.get("conv.winograd_copy")
    assert (held is None) if copies == 1 else (held.shape == (batch * copies,) and held.dtype == np.int32)


@pytest.mark.parametrize("order, batch, copies", [("wimg2", 1, 3), ("wimg4", 1, 3), ("wimg4", 2, 2), ("wimg2", 4, 1)])
def test_same_bits_at_every_thread_count(order, batch, copies, tmp_path, patched_compiler):
    """A 4-thread build (copies of V for the threads that share an image, at most one per 64-channel panel) run on 1,
    2 and 4 threads: the same bits as a 1-thread build; on one thread each image is transformed once."""
    force(patched_compiler, order)
    model = conv_model(64, 160, 24, 24, batch=batch)
    x = np.random.default_rng(4).standard_normal((batch, 64, 24, 24)).astype(np.float32)
    art = build(model, tmp_path / "t4", threads=4)
    manifest = json.loads((art / "manifest.json").read_text())
    if copies > 1:
        assert manifest["parallel_ops"]["conv"] == manifest["parallel_ops"]["conv.winograd_input"] == [batch, 1, copies]
    else:
        assert "conv.winograd_copy" not in json.dumps(manifest)
    one = run_runner(build(model, tmp_path / "t1", threads=1), x)
    for t in (1, 2, 4):
        assert np.array_equal(run_runner(art, x, t), one)
    assert rel_error(one, ort(model, x)) < RTOL


def test_copies_under_an_applications_uneven_ranges(tmp_path, patched_compiler):
    """An application's parallel_for that hands a 3-copy conv's tiles out as [0, 1) and [1, 3) on one thread: the
    transform fills copy 0 and, for tiles 1 and 2 together, copy 1, and the conv's tile 2 reads copy 1 as recorded
    (tests/c/app_pfor.c with THREADS 0): the runner's bytes."""
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.target.boards import get_board

    force(patched_compiler, "wimg4")
    model = conv_model(64, 160, 24, 24)
    art = build(model, tmp_path / "art", threads=4)
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["parallel_ops"]["conv.winograd_input"] == [1, 1, 3]
    x = np.random.default_rng(5).standard_normal((1, 64, 24, 24)).astype(np.float32)
    want = run_runner(art, x, 1)
    c_dir = Path(__file__).resolve().parent / "c"
    exe = compile_c_program(get_board("x86_64").target, manifest["cpu"], [c_dir / "app_pfor.c"], [art, c_dir],
                            [art / "libmodel.a", "-lpthread"], tmp_path / "app_pfor")
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    proc = subprocess.run([str(exe), "0", str(tmp_path / "x.bin"), str(tmp_path / "y.bin")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "y.bin").read_bytes() == want.tobytes()


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
@pytest.mark.parametrize("order", ["wimg2", "wimg4"])
def test_arm_under_qemu(board, order, tmp_path, patched_compiler):
    require_emulator(board)
    force(patched_compiler, order)
    model = conv_model(16, 20, 10, 9, (1, 0, 1, 2), residual_relu=True, group=2, batch=2)
    x = np.random.default_rng(3).standard_normal((2, 16, 10, 9)).astype(np.float32)
    art = build(model, tmp_path, board, threads=2)
    assert json.loads((art / "manifest.json").read_text())["optimizer"]["loop_orders"]["conv"] == order
    assert rel_error(run_runner(art, x), ort(model, x)) < RTOL


def test_budget_leaves_out_v_that_does_not_fit():
    from fluidml_xc.kernels.winograd import ALLOWED_ATTR, WHOLE_ATTR
    from fluidml_xc.passes.winograd import mark_winograd, v_bytes
    from fluidml_xc.pipeline import import_graph

    graph = import_graph(conv_model(256, 256, 14, 14, bias=False), conv_algo="direct")
    node = graph.nodes[0]
    weights, activations = 256 * 256 * 9 * 4, 2 * 256 * 14 * 14 * 4
    assert mark_winograd(graph) == {"conv": 4} and node.attrs[WHOLE_ATTR] == (4, 2)
    assert v_bytes(graph, node, 2) == 16 * 49 * 256 * 4
    room = weights + activations + int(weights * 16 / 9) - weights  # F(2x2)'s growth, nothing for V
    assert mark_winograd(graph, max_bytes=room + 1000) == {"conv": 2}
    assert node.attrs[ALLOWED_ATTR] == (2,) and WHOLE_ATTR not in node.attrs
    assert mark_winograd(graph, max_bytes=room + v_bytes(graph, node, 2)) == {"conv": 2} and node.attrs[WHOLE_ATTR] == (2,)
    mark_winograd(graph, max_bytes=room + v_bytes(graph, node, 2), copies=2)
    assert WHOLE_ATTR not in node.attrs  # two copies of V do not fit where one does
    mark_winograd(graph, max_bytes=room + 2 * v_bytes(graph, node, 2), copies=2)
    assert node.attrs[WHOLE_ATTR] == (2,)


def test_max_memory_build_falls_back(tmp_path):
    """256x14x14: the cost model runs the whole-image form; a --max-memory with room for the model and F(2x2)'s
    weights but not for V gives a build without V (blocked Winograd or direct), and `inspect` shows V when it is there."""
    from modelrun import cli

    model = conv_model(256, 256, 14, 14)
    art = build(model, tmp_path / "auto")
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["optimizer"]["loop_orders"]["conv"].startswith("wimg")
    shown = cli("inspect", str(art))
    assert shown.returncode == 0 and "whole image: V" in shown.stdout and "conv.winograd_v" in shown.stdout
    weights, activations = 256 * 256 * 9 * 4 + 256 * 4, 2 * 256 * 14 * 14 * 4
    tight = build(model, tmp_path / "tight", max_memory=weights + activations + int(256 * 256 * 9 * 4 * 7 / 9) + 1000)
    manifest = json.loads((tight / "manifest.json").read_text())
    assert not manifest["optimizer"]["loop_orders"]["conv"].startswith("wimg")
    assert "conv.winograd_input" not in json.dumps(manifest)


@pytest.mark.parametrize("m", [2, 4])
def test_channels_last_nodes_against_numpy(m):
    """Each node alone (JIT) with channels-last input or output: WinogradInput's V equals the numpy transform of the
    padded tiles, and the conv's output equals A^T (sum_c U V) A + bias from that V, in either layout."""
    from fluidml_xc.fluid.winograd_split import split_whole_image
    from fluidml_xc.kernels.winograd import TRANSFORMS, transform_weights
    from fluidml_xc.pipeline import import_graph
    from modelrun import jit_node

    graph = split_whole_image(import_graph(conv_model(16, 24, 9, 7, (1, 0, 1, 2))), {"conv": f"wimg{m}"})
    transform, conv = graph.nodes
    nhwc = (0, 2, 3, 1)
    x, v = jit_node(graph, transform, {"x": nhwc})
    assert np.array_equal(v, jit_node(graph, transform, {})[1])
    t, a = TRANSFORMS[m], m + 2
    oh, ow = graph.tensors["y"].shape[2:]
    th, tw = -(-oh // m), -(-ow // m)
    padded = np.zeros((1, 16, th * m + 2, tw * m + 2))
    padded[:, :, 1:10, 0:7] = x["x"][:, :, :, :min(7, tw * m + 2)]
    want = np.stack([np.einsum("ik,nckl,jl->ijnc", t.BT, padded[:, :, i * m:i * m + a, j * m:j * m + a], t.BT)
                     for i in range(th) for j in range(tw)], axis=3).reshape(a * a, 1, th * tw, 16)
    assert np.abs(v[0, 0] - want[:, 0]).max() < 1e-4 * np.abs(want).max()
    logical, y = jit_node(graph, conv, {"y": nhwc}, f"wimg{m}")
    assert np.array_equal(y, jit_node(graph, conv, {}, f"wimg{m}")[1])
    u = transform_weights(logical["w"], m).astype(np.float64)
    mm = np.einsum("ptc,pco->pto", logical[conv.inputs[-1]][0, 0].astype(np.float64), u).reshape(a, a, th, tw, 24)
    full = np.einsum("ki,ijhwo,lj->ohkwl", t.AT, mm, t.AT).reshape(24, th * m, tw * m)[:, :oh, :ow]
    full += logical["b"].reshape(-1, 1, 1)
    assert np.abs(y[0] - full).max() < 1e-4 * np.abs(full).max()


def test_plan_cache_hit_restores_the_split(tmp_path, monkeypatch):
    """A warm plan (fluid/optimize.py apply_views with the loop orders) gives the same two nodes and the same V."""
    from fluidml_xc import plan_cache
    from fluidml_xc.pipeline import LowerOptions, import_graph
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec
    from fluidml_xc.timings import Stopwatch

    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path / "cache"))
    graph, spec, store = import_graph(conv_model(256, 256, 14, 14)), machine_spec(get_board("x86_64")), plan_cache.plan_store()
    cold = plan_cache.cached_plan(graph, spec, LowerOptions(), store, Stopwatch())
    warm = plan_cache.cached_plan(graph, spec, LowerOptions(), store, Stopwatch())
    assert (cold.hit, warm.hit) == (False, True)
    assert [n.op_type for n in warm.planned.graph.nodes] == [n.op_type for n in cold.planned.graph.nodes] == ["WinogradInput", "Conv"]
    assert warm.planned.plan.offsets == cold.planned.plan.offsets and "conv.winograd_v" in warm.planned.plan.offsets
