"""build --precision fp16 (issue #28, docs/FP16.md): the graph narrowed to float16 (passes/precision.py), the float16
GEMM and Conv kernels summing in blocks added into float32 (kernels/half_blocks.py), run on rpi5 under qemu-aarch64
against ONNX Runtime's float32 outputs; refusals; the C API stays float."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper

from fluidml_xc.emit.link import compile_c_program
from fluidml_xc.examples import EXAMPLES
from fluidml_xc.passes.precision import HALF_ANCHORS
from fluidml_xc.pipeline import import_graph
from fluidml_xc.target.boards import get_board
from modelrun import cli, float_model, one_line_error, rand

pytestmark = pytest.mark.qemu

TOLERANCE = 5e-3
"""The fp16 build's worst error against ONNX Runtime's float32 outputs, as a fraction of the output's largest value
(|got - ort| <= TOLERANCE * max|ort|): about ten float16 roundings at the output's scale (docs/FP16.md)."""


def _ort(model: onnx.ModelProto, feeds: dict) -> dict:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def _check_half(got: dict, want: dict) -> None:
    for name, ref in want.items():
        assert got[name].dtype == np.float32 and got[name].shape == ref.shape, name
        err, scale = float(np.max(np.abs(got[name] - ref))), float(np.max(np.abs(ref)))
        assert err <= TOLERANCE * scale, f"{name}: max abs error {err:.3g} over {TOLERANCE} x {scale:.3g}"


def _cnn() -> tuple[onnx.ModelProto, dict]:
    """3x3 Conv (48 input channels: 432 terms, 14 blocks) + bias + Relu, 1x1 Conv with a residual Add, MaxPool,
    GlobalAveragePool, Gemm, Softmax."""
    x = rand(1, 48, 14, 14, seed=1)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]), helper.make_node("Add", ["c2", "r1"], ["a2"]),
             helper.make_node("MaxPool", ["a2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["logits"], transB=1), helper.make_node("Softmax", ["logits"], ["probs"])]
    inits = {"w1": rand(40, 48, 3, 3, seed=2) / 20, "b1": rand(40, seed=3) / 10, "w2": rand(40, 40, 1, 1, seed=4) / 6,
             "wg": rand(10, 40, seed=5), "bg": rand(10, seed=6)}
    return float_model(nodes, inits, {"x": x}, ["logits", "probs"]), {"x": x}


def _encoder() -> tuple[onnx.ModelProto, dict]:
    """MatMul (K = 300) + bias, LayerNormalization, attention-like MatMul of two activations, Softmax, Gemm."""
    x = rand(16, 300, seed=7)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("LayerNormalization", ["hb", "gamma", "beta"], ["n"], axis=-1),
             helper.make_node("Transpose", ["n"], ["nt"], perm=[1, 0]), helper.make_node("MatMul", ["n", "nt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "n"], ["ctx"]),
             helper.make_node("Gemm", ["ctx", "w2"], ["y"], alpha=0.5)]
    inits = {"w1": rand(300, 64, seed=8) / 17, "b1": rand(64, seed=9), "gamma": 1 + rand(64, seed=10) / 10,
             "beta": rand(64, seed=11) / 10, "w2": rand(64, 24, seed=12) / 8}
    return float_model(nodes, inits, {"x": x}, ["y", "p"]), {"x": x}


def test_the_pass_narrows_gemms_and_keeps_fragile_ops_in_float32():
    """Which ops run in float16 (docs/FP16.md's table); the inputs, outputs and fp32 builds stay float32."""
    model, _ = _encoder()
    graph = import_graph(model, precision="fp16")
    dtype = {n.name or n.op_type: (n.op_type, graph.tensors[n.outputs[0]].dtype.name) for n in graph.nodes}
    ops = {(op, dt) for op, dt in dtype.values()}
    # LayerNormalization stores float16 and computes in float32 inside; Softmax's float16 kernel would not: float32
    assert {("MatMul", "float16"), ("Gemm", "float16"), ("LayerNormalization", "float16"), ("Softmax", "float32")} <= ops
    assert all(dt == "float16" for op, dt in dtype.values() if op in HALF_ANCHORS)
    assert [graph.tensors[n].dtype.name for n in graph.inputs + graph.outputs] == ["float32"] * 3
    consts = [t for t in graph.tensors.values() if t.is_const and t.value.dtype.kind == "f"]
    used = {i for n in graph.nodes for i in n.inputs}
    assert {t.value.dtype.name for t in consts if t.name in used and t.shape == (300, 64)} == {"float16"}
    fp32 = import_graph(model)
    assert all(t.dtype.name != "float16" for t in fp32.tensors.values())


def test_constants_saturate_to_float16s_range():
    """A -1e9 attention mask in a float16 Add stays finite (-65504), not -inf."""
    x = rand(4, 8)
    model = float_model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "mask"], ["y"])],
                        {"w": rand(8, 8, seed=1), "mask": np.full((8,), -1e9, np.float32)}, {"x": x}, ["y"])
    graph = import_graph(model, precision="fp16")
    used = {i for n in graph.nodes for i in n.inputs}
    (mask,) = [graph.tensors[n] for n in used if n and graph.tensors[n].is_const and graph.tensors[n].shape == (8,)]
    assert mask.value.dtype == np.float16 and float(mask.value.min()) == -65504.0


@pytest.mark.parametrize("make", [_cnn, _encoder], ids=["cnn", "encoder"])
def test_fp16_models_on_rpi5_match_onnxruntime(make, tmp_path, board_runner):
    model, feeds = make()
    rpi5 = board_runner("rpi5")
    artifact = rpi5.build(model, tmp_path, precision="fp16", profile_runner=False)
    from modelrun import run

    _check_half(run(artifact, feeds), _ort(model, feeds))
    manifest = json.loads((artifact / "manifest.json").read_text())
    weights = sum(int(np.prod(i.dims)) * 4 for i in model.graph.initializer)
    assert manifest["weights_bytes"] <= 0.55 * weights  # the float32 weights stored as float16
    assert [t["dtype"] for t in manifest["inputs"] + manifest["outputs"]] == ["float32"] * len(manifest["inputs"] + manifest["outputs"])


def test_long_reductions_sum_in_float32_blocks(tmp_path, board_runner):
    """K = 4096 ReLU-like (positive-mean) terms: float16 sums over all of K drift to 1e-2 of the result (the sum
    grows, each term rounds against it), the blocks of kernels/half_blocks.py stay within TOLERANCE."""
    x = np.abs(rand(8, 4096, seed=21))
    model = float_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"w": (np.abs(rand(4096, 16, seed=22)) / 64).astype(np.float32)},
                        {"x": x}, ["y"])
    from modelrun import run

    _check_half(run(board_runner("rpi5").build(model, tmp_path, precision="fp16", profile_runner=False), {"x": x}),
                _ort(model, {"x": x}))


USER_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"
int main(void) {
    void *arena = aligned_alloc(FXC_ARENA_ALIGN, (FXC_ARENA_BYTES + FXC_ARENA_ALIGN - 1) / FXC_ARENA_ALIGN * FXC_ARENA_ALIGN);
    static float input[1 * 3 * 32 * 32], probs[10];
    if (fxc_input_specs[0].dtype != FXC_DTYPE_FLOAT32 || fxc_output_specs[0].dtype != FXC_DTYPE_FLOAT32) return 5;
    if (fxc_input_specs[0].nbytes != sizeof input || fxc_output_specs[0].nbytes != sizeof probs) return 6;
    for (int i = 0; i < 3 * 32 * 32; i++) input[i] = (float)((i * 7919) % 200 - 100) / 100.0f;
    const void *ins[] = {input};
    void *outs[] = {probs};
    if (fxc_init(arena, FXC_ARENA_BYTES) != 0) return 3;
    if (fxc_run(arena, ins, outs) != 0) return 4;
    for (int i = 0; i < 10; i++) printf("%.9g\n", probs[i]);
    return 0;
}
"""


def test_the_c_api_stays_float(tmp_path, board_runner):
    """model.h of an fp16 build: float32 inputs and outputs (specs, sizes, the header's table); a C program passing
    float buffers gets ONNX Runtime's values within TOLERANCE."""
    rpi5 = board_runner("rpi5")
    model = EXAMPLES["tiny_cnn"]()
    artifact = rpi5.build(model, tmp_path, precision="fp16", profile_runner=False)
    header = (artifact / "model.h").read_text()
    assert '[0] "input" float32 [1, 3, 32, 32]' in header and '[0] "probs" float32 [1, 10]' in header
    assert "float16" not in header.split("#ifndef FXC_DTYPE_DEFINED")[0]
    src = tmp_path / "app.c"
    src.write_text(USER_PROGRAM)
    exe = compile_c_program(get_board("rpi5").target, "cortex-a76", [src], [artifact], [artifact / "libmodel.a", "-lm"], tmp_path / "app")
    got = np.array([float(v) for v in rpi5.exec([exe], check=True).stdout.split()], dtype=np.float32)
    x = (((np.arange(3 * 32 * 32) * 7919) % 200 - 100) / 100.0).astype(np.float32).reshape(1, 3, 32, 32)
    _check_half({"probs": got.reshape(1, 10)}, {"probs": _ort(model, {"input": x})["probs"]})


@pytest.mark.parametrize("board", ["rpi4", "x86_64"])
def test_boards_without_float16_arithmetic_refuse(board, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(EXAMPLES["tiny_mlp"](), str(path))
    proc = cli("build", str(path), "--board", board, "--precision", "fp16", "-o", str(tmp_path / "out"))
    line = one_line_error(proc)
    assert proc.returncode == 2 and "float16 vector arithmetic" in line and "rpi5" in line and "drop --precision fp16" in line
    assert not (tmp_path / "out").exists()


def test_accuracy_needs_fp16(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(EXAMPLES["tiny_mlp"](), str(path))
    proc = cli("build", str(path), "--board", "rpi5", "--accuracy")
    assert proc.returncode == 2 and "add --precision fp16" in one_line_error(proc)


def test_accuracy_report_compares_with_the_fp32_build(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(EXAMPLES["tiny_cnn"](), str(path))
    out = tmp_path / "half"
    proc = cli("build", str(path), "--board", "rpi5", "--precision", "fp16", "-o", str(out), "--no-profile-runner",
               "--accuracy", "--accuracy-samples", "2", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "precision fp16" in cli("inspect", cwd=tmp_path).stdout  # build/.last names the fp16 artifact
    assert not (tmp_path / "half.fp32" / "runner_prof").exists()
    report = json.loads(proc.stdout)["accuracy"]
    assert report["samples"] == 2 and report["reference"] == f"{out}.fp32" and (tmp_path / "half.fp32" / "runner").is_file()
    (probs,) = report["outputs"]
    assert probs["name"] == "probs" and probs["top1_agreement"] == 1.0 and 0 < probs["rel_err"] <= TOLERANCE
    half, full = (json.loads((d / "manifest.json").read_text()) for d in (out, tmp_path / "half.fp32"))
    assert "precision" not in full and set(half["precision"]["weights"]) == {"float16"}
    assert half["weights_bytes"] * 2 == full["weights_bytes"] and half["memory"]["arena_bytes"] < full["memory"]["arena_bytes"]
    shown = cli("inspect", str(out)).stdout
    assert f"precision fp16: weights {half['weights_bytes']:,} B" in shown


def test_a_reduction_that_varies_at_run_time(tmp_path, board_runner):
    """MatMul over K in 1..300 (--dim): the float16 blocks run to the run-time K (whole blocks, then the rest)."""
    from fluidml_xc.run.execute import run_artifact

    board_runner("rpi5")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [5, "k"]),
         helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, ["k", 20])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [5, 20])]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    proc = cli("build", str(path), "--board", "rpi5", "--precision", "fp16", "--dim", "k=1..300", "-o", str(tmp_path / "a"),
               "--no-profile-runner")
    assert proc.returncode == 0, proc.stderr
    for k in (1, 33, 300):
        feeds = {"a": rand(5, k, seed=k), "b": rand(k, 20, seed=k + 1)}
        _check_half(run_artifact(tmp_path / "a", feeds).outputs, _ort(model, feeds))


def _clip_conv(high: float) -> tuple[onnx.ModelProto, dict]:
    """Conv -> Clip(0, high): the Clip fused into the Conv's epilogue with its bounds as build-time floats."""
    x = rand(1, 8, 6, 6, seed=1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    inits = {"w": rand(8, 8, 3, 3, seed=2), "lo": np.array(0, np.float32), "hi": np.array(high, np.float32)}
    return float_model(nodes, inits, {"x": x}, ["y"]), {"x": x}


def _scalar_attributes() -> tuple[onnx.ModelProto, dict, dict]:
    """Gemm alpha 1e5, LeakyRelu alpha 1e6, HardSigmoid alpha = beta = 1e5 in float16 nodes: each saturates to 65504
    (the float32 answers overflow float16 anyway); the expected outputs computed with the saturated values."""
    x, w = rand(4, 16, seed=5), rand(16, 8, seed=3) / 1e3
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y1"], alpha=1e5), helper.make_node("MatMul", ["x", "w"], ["g"]),
             helper.make_node("LeakyRelu", ["g"], ["y2"], alpha=1e6),
             helper.make_node("HardSigmoid", ["g"], ["y3"], alpha=1e5, beta=1e5)]
    g = x.astype(np.float64) @ w
    want = {"y1": 65504 * g, "y2": np.where(g < 0, 65504 * g, g), "y3": np.clip(65504 * g + 65504, 0, 1)}
    return float_model(nodes, {"w": w}, {"x": x}, list(want)), {"x": x}, {k: v.astype(np.float32) for k, v in want.items()}


def _clip_fused_1e5() -> tuple[onnx.ModelProto, dict, dict]:
    model, feeds = _clip_conv(1e5)
    return model, feeds, _ort(model, feeds)


@pytest.mark.parametrize("make", [_clip_fused_1e5, _scalar_attributes], ids=["fused_clip_1e5", "attributes"])
def test_build_time_scalars_saturate_like_constants(make, tmp_path, board_runner):
    """A Clip bound of 1e5 fused into a Conv, Gemm's, LeakyRelu's and HardSigmoid's attributes beyond +-65504: the
    float16 constants saturate as constant tensors do (the build used to stop with an internal error, exit 70), the
    build warns once, and the outputs are the saturated computation's within the float16 tolerance."""
    from modelrun import run

    model, feeds, want = make()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    board_runner("rpi5")
    proc = cli("build", str(path), "--board", "rpi5", "--precision", "fp16", "-o", str(tmp_path / "a"), "--no-profile-runner")
    assert proc.returncode == 0, proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert "saturates" in warning and "65504" in warning
    _check_half(run(tmp_path / "a", feeds), want)


def test_fullfp16_turned_off_by_features_or_cpu_refuses(tmp_path):
    """rpi5 with --features=-fullfp16 (the features string ends "+fullfp16,-fullfp16": the last mention decides) or
    --cpu cortex-a72: refused in one line naming the flag, exit 2, nothing written."""
    path = tmp_path / "m.onnx"
    onnx.save(EXAMPLES["tiny_mlp"](), str(path))
    for flags, named in ((["--features=-fullfp16"], "--features"), (["--cpu", "cortex-a72"], "--cpu")):
        proc = cli("build", str(path), "--board", "rpi5", *flags, "--precision", "fp16", "-o", str(tmp_path / "out"))
        line = one_line_error(proc)
        assert proc.returncode == 2 and "float16 vector arithmetic" in line and f"drop {named}" in line, line
        assert not (tmp_path / "out").exists()


def test_bad_accuracy_inputs_are_refused_before_the_build(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(EXAMPLES["tiny_mlp"](), str(path))
    (tmp_path / "bad.npz").write_text("not an npz")
    for flags, named in ((["--accuracy", "--accuracy-samples", "0"], "--accuracy-samples 0"),
                         (["--accuracy", str(tmp_path / "none.npz")], "--accuracy"),
                         (["--accuracy", str(tmp_path / "bad.npz")], "bad.npz")):
        proc = cli("build", str(path), "--board", "rpi5", "--precision", "fp16", "-o", str(tmp_path / "out"), *flags,
                   cwd=tmp_path)
        assert proc.returncode == 2 and named in one_line_error(proc)
        assert not (tmp_path / "out").exists() and not (tmp_path / "build").exists()


def test_fleet_builds_keep_the_precision(tmp_path, capsys):
    """fleet/builds.py: an fp16 artifact is not reused for an fp32 request nor the other way round; a rebuild of an
    fp16 artifact for another board stays fp16, and one for a board without float16 arithmetic is refused in one
    line, as build refuses it."""
    from fluidml_xc.errors import InputError
    from fluidml_xc.fleet.builds import artifacts_for, build_once
    from fluidml_xc.fleet.inventory import FleetHost

    path = tmp_path / "m.onnx"
    onnx.save(EXAMPLES["tiny_mlp"](), str(path))
    out = tmp_path / "m-rpi5"
    modes = []
    for options in ({"precision": "fp16"}, {"precision": "fp16"}, {}, {"precision": "fp16"}):
        artifact = build_once(path, "rpi5", out, options)
        modes.append((artifact.manifest.precision or {}).get("mode", "fp32"))
    assert modes == ["fp16", "fp16", "fp32", "fp16"]
    assert [line.split()[0] for line in capsys.readouterr().err.splitlines()] == ["building", "using", "building", "building"]
    hosts = [FleetHost("a", "127.0.0.1", board="rpi5"), FleetHost("b", "127.0.0.1", board="rpi4")]
    with pytest.raises(InputError, match="--precision fp16 needs float16 vector arithmetic, which board 'rpi4'"):
        artifacts_for(hosts, str(out))
    assert not (tmp_path / "m-rpi4").exists()
