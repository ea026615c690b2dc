"""ops/conv/shared_pointwise.py: x86's 1x1 convs over channels-last pixels as one kernel per tile and epilogue, its
extents read at run time (issue #27): the same bits as the per-layer kernel it replaces, ONNX Runtime's outputs,
every thread count alike, and layers of different shapes sharing one compiled object per code variant."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from fluidml_xc.build import BuildOptions, build_model
from fluidml_xc.emit import units
from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter
from fluidml_xc.ops.conv import conv2d
from fluidml_xc.pipeline import LowerOptions, import_graph, plan
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import float_model, rand, reference, require_emulator, run

LAYERS = [(144, "clip", False), (24, None, False), (40, "relu", False), (40, None, True), (37, "clip", False),
          (19, None, False), (64, "clip", True)]
"""(output channels, activation, residual): channels that are and are not multiples of the vectors and blocks."""


def chain(channels: int, hw: tuple[int, int], batch: int = 1, bias: bool = True):
    """Pointwise convs one after the other, fused with Clip / Relu and residual Adds."""
    inits, nodes, prev, c_prev = {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}, [], "x", channels
    for i, (co, act, res) in enumerate(LAYERS):
        co = c_prev if res else co
        inits[f"w{i}"] = rand(co, c_prev, 1, 1, seed=i) * 0.3
        ins = [prev, f"w{i}"]
        if bias:
            inits[f"b{i}"] = rand(co, seed=100 + i)
            ins.append(f"b{i}")
        nodes.append(helper.make_node("Conv", ins, [f"c{i}"], name=f"conv{i}"))
        out = f"c{i}"
        if res:
            nodes.append(helper.make_node("Add", [out, prev], [f"a{i}"]))
            out = f"a{i}"
        if act == "clip":
            nodes.append(helper.make_node("Clip", [out, "lo", "hi"], [f"y{i}"]))
            out = f"y{i}"
        elif act == "relu":
            nodes.append(helper.make_node("Relu", [out], [f"y{i}"]))
            out = f"y{i}"
        prev, c_prev = out, co
    feeds = {"x": rand(batch, channels, *hw, seed=7)}
    return float_model(nodes, inits, feeds, [prev]), feeds


def built(model, workdir, board: str = "x86_64", **options):
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "model.onnx"
    import onnx
    onnx.save(model, str(path))
    return build_model(path, BuildOptions(board=board, out_dir=workdir / "out", record_last=False, cache=False,
                                          **options))


@pytest.mark.parametrize("board,channels,hw,batch,bias", [
    ("x86_64", 24, (14, 14), 1, True), ("x86_64", 16, (7, 9), 1, True), ("x86_64", 40, (5, 5), 2, False),
    ("x86_64", 8, (28, 28), 1, True), ("rpi4", 24, (14, 14), 1, True), ("rpi5", 40, (5, 5), 2, False)])
def test_same_bits_as_the_per_layer_kernel_and_ort(tmp_path, monkeypatch, board, channels, hw, batch, bias):
    if board != "x86_64":
        require_emulator(board)
    model, feeds = chain(channels, hw, batch, bias)
    shared = built(model, tmp_path / "shared", board).artifact
    with monkeypatch.context() as m:
        m.setattr(conv2d, "shared_pointwise", lambda c: False)
        per_layer = built(model, tmp_path / "per_layer", board).artifact
    got, want = run(shared, feeds), run(per_layer, feeds)
    ref = reference(model, feeds)
    for name in ref:
        assert got[name].tobytes() == want[name].tobytes()
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-4)


def test_every_thread_count_gives_the_same_bits(tmp_path):
    model, feeds = chain(24, (28, 28))
    artifact = built(model, tmp_path, threads=4).artifact
    outs = [run(artifact, feeds, threads=t) for t in (1, 2, 3, 4)]
    for out in outs[1:]:
        assert all(out[name].tobytes() == outs[0][name].tobytes() for name in out)


def blocks_model():
    """MobileNetV2-like blocks (1x1 expand + Clip, 3x3 depthwise + Clip, 1x1 project) of other channel counts."""
    inits, nodes, prev, c_prev = {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}, [], "x", 16
    for i, (mid, co) in enumerate(((64, 32), (96, 64), (128, 96), (192, 24))):
        inits[f"e{i}"], inits[f"eb{i}"] = rand(mid, c_prev, 1, 1, seed=i) * 0.2, rand(mid, seed=10 + i)
        inits[f"d{i}"], inits[f"db{i}"] = rand(mid, 1, 3, 3, seed=20 + i), rand(mid, seed=30 + i)
        inits[f"p{i}"], inits[f"pb{i}"] = rand(co, mid, 1, 1, seed=40 + i) * 0.1, rand(co, seed=50 + i)
        nodes += [helper.make_node("Conv", [prev, f"e{i}", f"eb{i}"], [f"ec{i}"], name=f"expand{i}"),
                  helper.make_node("Clip", [f"ec{i}", "lo", "hi"], [f"ey{i}"]),
                  helper.make_node("Conv", [f"ey{i}", f"d{i}", f"db{i}"], [f"dc{i}"], group=mid, pads=[1, 1, 1, 1]),
                  helper.make_node("Clip", [f"dc{i}", "lo", "hi"], [f"dy{i}"]),
                  helper.make_node("Conv", [f"dy{i}", f"p{i}", f"pb{i}"], [f"pc{i}"], name=f"project{i}")]
        prev, c_prev = f"pc{i}", co
    feeds = {"x": rand(1, 16, 20, 20, seed=3)}
    return float_model(nodes, inits, feeds, [prev]), feeds


def pointwise_units(model, spec) -> dict[str, str]:
    """The IR text of each 1x1 conv's unit, by node name."""
    planned = plan(import_graph(model), spec, LowerOptions())
    options = EmitOptions(unit=True, parallel=True, layouts=planned.decisions.layouts,
                          loop_orders=planned.decisions.loop_orders)
    emitter = ModuleEmitter(planned.graph, planned.plan, spec, options)
    return {n.name: units.emit_unit(units.local_view(emitter, n), spec).ir_text for n in planned.graph.nodes
            if n.name.startswith(("expand", "project"))}


def test_layers_of_other_shapes_share_one_unit(tmp_path, monkeypatch):
    """The expand convs (Clip) of four channel counts emit one IR text, as do the project convs (no activation)
    between depthwise convs; the per-layer kernels emit one each. The whole model matches ONNX Runtime."""
    model, feeds = blocks_model()
    for board in ("x86_64-v3", "x86_64-v4", "rpi4"):
        spec = machine_spec(get_board(board))
        texts = pointwise_units(model, spec)
        assert len({texts[f"expand{i}"] for i in (1, 2, 3)}) == 1
        assert len({texts[f"project{i}"] for i in (0, 1, 2)}) == 1
        with monkeypatch.context() as m:
            m.setattr(conv2d, "shared_pointwise", lambda c: False)
            assert len(set(pointwise_units(model, spec).values())) == len(texts)
    got, ref = run(built(model, tmp_path, threads=2).artifact, feeds), reference(model, feeds)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-4)
