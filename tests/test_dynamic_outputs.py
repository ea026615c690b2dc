"""Outputs whose shape depends on the data (NonZero, Compress, Unique, NonMaxSuppression): bounded
buffers plus the actual dims written at run time (frontend/shapes.py, ops/dynamic.py).

Each op against onnx.reference on small graphs (JIT on x86_64, several attribute combinations, random
data, empty results), one build + run through the runner under qemu-aarch64 (and a C program using
fxc_output_shape), and the one-line error for a consumer that would need the real shape."""
from __future__ import annotations

import platform

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc.errors import InputError
from modelrun import graph_model, jit_run

on_x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="in-process JIT on x86_64")


def make_model(nodes, feeds, outputs, consts=None, opset=18):
    return graph_model(nodes, feeds, outputs, consts, opset, ir_version=None)


def reference(m, feeds):
    names = [o.name for o in m.graph.output]
    return dict(zip(names, ReferenceEvaluator(m).run(None, feeds)))


def check(m, feeds, skip=()):
    got, want = jit_run(m, feeds), reference(m, feeds)
    for name, expected in want.items():
        if name in skip:
            continue
        expected = np.asarray(expected)
        assert got[name].shape == expected.shape, (name, got[name].shape, expected.shape)
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)


rng = np.random.default_rng(11)


# ---------------------------------------------------------------------------------------------- NonZero
@on_x86
@pytest.mark.parametrize("x", [
    rng.integers(-1, 2, (3, 4)).astype(np.float32),
    rng.integers(0, 2, (2, 3, 4)).astype(np.int32),
    rng.integers(0, 2, (7,)).astype(np.bool_),
    np.zeros((2, 5), np.float32),                       # empty result
    np.ones((2, 1, 3), np.int64),
], ids=["f32", "i32_3d", "bool_1d", "empty", "all"])
def test_nonzero(x):
    check(make_model([helper.make_node("NonZero", ["x"], ["y"])], {"x": x}, ["y"]), {"x": x})


# ---------------------------------------------------------------------------------------------- Compress
@on_x86
@pytest.mark.parametrize("axis,xshape,clen", [(None, (3, 4), 12), (None, (3, 4), 5), (0, (4, 3), 4), (1, (2, 5, 3), 5),
                                               (-1, (2, 3, 4), 3), (2, (2, 3, 4), 4)])
@pytest.mark.parametrize("fill", ["random", "none", "all"])
def test_compress_runtime_condition(axis, xshape, clen, fill):
    x = rng.standard_normal(xshape).astype(np.float32)
    cond = {"random": rng.integers(0, 2, clen), "none": np.zeros(clen), "all": np.ones(clen)}[fill].astype(np.bool_)
    attrs = {} if axis is None else {"axis": axis}
    m = make_model([helper.make_node("Compress", ["x", "c"], ["y"], **attrs)], {"x": x, "c": cond}, ["y"])
    check(m, {"x": x, "c": cond})


@on_x86
def test_compress_constant_condition_is_static():
    x = rng.standard_normal((4, 3)).astype(np.float32)
    m = make_model([helper.make_node("Compress", ["x", "c"], ["y"], axis=0)], {"x": x}, ["y"],
                   {"c": np.array([1, 0, 1, 1], np.bool_)})
    check(m, {"x": x})


# ---------------------------------------------------------------------------------------------- Unique
def _unique_spec(x, axis, sorted_):
    """The ONNX spec's Unique (first-occurrence order for sorted=0), from numpy."""
    y, idx, inv, cnt = np.unique(x, True, True, True, axis=axis)
    inv = inv.reshape(-1)
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        idx, cnt, inv = idx[order], cnt[order], rank[inv]
        y = np.take(x.reshape(-1) if axis is None else x, idx, axis=0 if axis is None else axis)
    return [y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)]


@on_x86
@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("axis,shape,dtype", [(None, (12,), np.float32), (None, (3, 4), np.int64), (0, (6, 2), np.int32),
                                              (1, (2, 5, 2), np.float32), (-1, (3, 6), np.int64), (None, (1,), np.float32)])
def test_unique(sorted_, axis, shape, dtype):
    x = rng.integers(0, 3, shape).astype(dtype)
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    m = make_model([helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], **attrs)], {"x": x}, ["y", "i", "inv", "c"])
    got = jit_run(m, {"x": x})
    want = _unique_spec(x, None if axis is None else axis % len(shape), sorted_)
    for name, expected in zip(["y", "i", "inv", "c"], want):
        assert got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], expected.astype(got[name].dtype), err_msg=name)
    if sorted_ or axis in (None, 0) and len(shape) == 1:
        check(m, {"x": x})  # onnx.reference agrees with the spec here


@on_x86
@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_nan_and_signed_zero_as_numpy(sorted_):
    x = np.array([3, np.nan, 1, np.nan, 3, -0.0, 0.0, 2, 1], np.float32)
    m = make_model([helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=sorted_)], {"x": x}, ["y", "i", "inv", "c"])
    got = jit_run(m, {"x": x})
    for name, expected in zip(["y", "i", "inv", "c"], _unique_spec(x, None, sorted_)):
        np.testing.assert_array_equal(got[name], expected, err_msg=name)


# ---------------------------------------------------------------------------------------------- NonMaxSuppression
def _boxes(batches, n, center):
    xy = rng.random((batches, n, 2)).astype(np.float32)
    wh = (rng.random((batches, n, 2)) * 0.6).astype(np.float32)
    if center:
        return np.concatenate([xy, wh], -1)
    corners = np.concatenate([xy, xy + wh], -1)[..., [1, 0, 3, 2]]
    flip = rng.random((batches, n)) < 0.3  # some boxes with flipped corners
    corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    return corners.astype(np.float32)


@on_x86
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(3, 0.5, None), (10, 0.0, 0.3), (0, 0.5, 0.0), (50, 0.3, 2.0),
                                               (2, 0.7, 0.5), (None, None, None)])
def test_nms_against_reference(center, max_out, iou, score):
    b, c, n = 2, 3, 17
    boxes = _boxes(b, n, center)
    scores = rng.integers(0, 8, (b, c, n)).astype(np.float32) / 8  # many ties: lower index first
    consts, names = {}, ["boxes", "scores"]
    for name, value, dt in (("m", max_out, np.int64), ("iou", iou, np.float32), ("th", score, np.float32)):
        if value is None:
            break
        consts[name] = np.array([value], dt)
        names.append(name)
    node = helper.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)
    m = make_model([node], {"boxes": boxes, "scores": scores}, ["sel"], consts)
    feeds = {"boxes": boxes, "scores": scores}
    if max_out is None:  # onnx.reference cannot run without max_output_boxes_per_class: the default 0 selects nothing
        got = jit_run(m, feeds)["sel"]
        assert got.shape == (0, 3)
        return
    check(m, feeds)


@on_x86
def test_nms_runtime_max_output_and_thresholds():
    b, c, n = 1, 2, 25
    boxes, scores = _boxes(b, n, 0), rng.random((b, c, n)).astype(np.float32)
    feeds = {"boxes": boxes, "scores": scores, "m": np.array([4], np.int64), "iou": np.array([0.4], np.float32),
             "th": np.array([0.2], np.float32)}
    m = make_model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou", "th"], ["sel"])], feeds, ["sel"])
    from fluidml_xc.run.backend import compile_model

    fn = compile_model(m, None)
    for mv, thv in ((4, 0.2), (100, 0.0), (1, 0.9), (0, 0.1)):
        f = dict(feeds, m=np.array([mv], np.int64), th=np.array([thv], np.float32))
        want = reference(m, f)["sel"]
        got = fn(f)[0]
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------- consumers
@on_x86
def test_identity_and_cast_consumers_keep_the_actual_shape():
    x = rng.integers(0, 3, (10,)).astype(np.float32)
    nodes = [helper.make_node("Unique", ["x"], ["y", "i", "", "c"]), helper.make_node("Identity", ["y"], ["yy"]),
             helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT)]
    m = make_model(nodes, {"x": x}, ["yy", "cf", "i"])
    check(m, {"x": x})


@pytest.mark.parametrize("op", ["Transpose", "Shape", "Add"])
def test_consumer_needing_the_real_shape_is_a_one_line_error(op):
    from fluidml_xc.pipeline import import_graph

    x = rng.standard_normal((3, 4)).astype(np.float32)
    second = {"Transpose": helper.make_node("Transpose", ["nz"], ["out"]),
              "Shape": helper.make_node("Shape", ["nz"], ["out"]),
              "Add": helper.make_node("Add", ["nz", "nz"], ["out"])}[op]
    m = make_model([helper.make_node("NonZero", ["x"], ["nz"]), second], {"x": x}, ["out"])
    with pytest.raises(InputError) as err:
        import_graph(m)
    message = str(err.value)
    assert "\n" not in message and op in message and "NonZero" in message and "graph outputs" in message


# ---------------------------------------------------------------------------------------------- qemu-aarch64
USER_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"
int main(void) {
    void *arena = aligned_alloc(FXC_ARENA_ALIGN, (FXC_ARENA_BYTES + FXC_ARENA_ALIGN) / FXC_ARENA_ALIGN * FXC_ARENA_ALIGN);
    static float x[FXC_X_SIZE];
    static int64_t nz[2 * FXC_X_SIZE];
    for (int i = 0; i < FXC_X_SIZE; i++) x[i] = (float)(i % 3 == 0);
    const void *ins[] = {x};
    void *outs[] = {nz};
    if (!FXC_HAS_DYNAMIC_OUTPUTS || !fxc_output_is_dynamic(0)) return 2;
    if (fxc_init(arena, FXC_ARENA_BYTES) != 0 || fxc_run(arena, ins, outs) != 0) return 3;
    const int64_t *dims = fxc_output_shape(arena, 0);
    printf("%lld %lld\n", (long long)dims[0], (long long)dims[1]);
    for (int64_t i = 0; i < dims[0] * dims[1]; i++) printf("%lld\n", (long long)nz[i]);
    return 0;
}
"""


@pytest.fixture
def aarch64(board_runner):
    return board_runner("qemu-aarch64").board


def test_build_and_run_under_qemu_aarch64(aarch64, tmp_path):
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.run.execute import run_artifact

    b, c, n = 1, 2, 12
    boxes, scores = _boxes(b, n, 0), rng.random((b, c, n)).astype(np.float32)
    x = rng.integers(0, 4, (9,)).astype(np.int64)
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou", "th"], ["sel"]),
             helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=1)]
    feeds = {"boxes": boxes, "scores": scores, "x": x}
    m = make_model(nodes, feeds, ["sel", "y", "i", "inv", "c"],
                   {"m": np.array([3], np.int64), "iou": np.array([0.3], np.float32), "th": np.array([0.1], np.float32)})
    path = tmp_path / "dyn.onnx"
    onnx.save(m, str(path))
    result = build_model(path, BuildOptions(board=aarch64, out_dir=tmp_path / "art", profile_runner=False, record_last=False))
    outs = {o.name: o for o in result.manifest.outputs}
    assert outs["sel"].shape == (b * c * 3, 3) and outs["sel"].dynamic_dims == (0,)
    assert outs["y"].shape == (9,) and outs["y"].dynamic_dims == (0,) and outs["inv"].dynamic_dims == ()
    got = run_artifact(result.artifact, feeds, timeout=300).outputs
    for name, expected in reference(m, feeds).items():
        assert got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)


def test_user_program_reads_actual_shape_under_qemu_aarch64(board_runner, tmp_path):
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.emit.link import compile_c_program

    x = np.zeros((3, 5), np.float32)
    m = make_model([helper.make_node("NonZero", ["x"], ["nz"])], {"x": x}, ["nz"])
    path = tmp_path / "nz.onnx"
    onnx.save(m, str(path))
    aarch64 = board_runner("qemu-aarch64")
    art = build_model(path, BuildOptions(board=aarch64.board, out_dir=tmp_path / "art", profile_runner=False, record_last=False)).artifact
    src = tmp_path / "app.c"
    src.write_text("#define FXC_X_SIZE 15\n" + USER_PROGRAM)
    target = get_board(aarch64.board).target
    exe = compile_c_program(target, "cortex-a72", [src], [art], [art / "libmodel.a", "-lm"], tmp_path / "app")
    out = aarch64.exec([exe], check=True).stdout
    values = [int(v) for v in out.split()]
    xs = (np.arange(15) % 3 == 0).astype(np.float32).reshape(3, 5)
    want = np.array(np.nonzero(xs), np.int64)
    assert values[:2] == list(want.shape) and values[2:] == want.reshape(-1).tolist()
