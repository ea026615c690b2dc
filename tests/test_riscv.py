"""RISC-V boards (#30): the riscv64 target's machine specs (RV64GC scalar tiles, RVV 1.0 at the VLEN the
features give), lp64d objects, the example models against ONNX Runtime under qemu-riscv64 with and without V,
threads bit-identical at 1, 4 and 8, int8, the runner's and the C library's refusal of a smaller VLEN (and of no
V), and `boards detect` on the isa / uarch lines of a VisionFive 2, a BPI-F3 and a T-Head (RVV 0.7.1) board."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
from onnx import helper
import pytest

from fluidml_xc.examples import EXAMPLES, example_feeds
from fluidml_xc.target.arch import riscv_vlen
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from fluidml_xc.pipeline import import_graph
from modelrun import build, graph_model, reference, require_program, run
from test_cpu_targets import APP, cnn_model
from test_threads import int8_graph

BOARDS = ("qemu-riscv64", "qemu-riscv64-rvv")
EM_RISCV, EF_RISCV_FLOAT_ABI = 243, 0x6
EF_RISCV_FLOAT_ABI_DOUBLE = 0x4


def ort(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    import onnxruntime as ort_

    session = ort_.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def match_onnx(model: onnx.ModelProto, feeds: dict, got: dict[str, np.ndarray]) -> None:
    """`got` within 1e-4 of ONNX Runtime, with NaN exactly where onnx.reference has it (its padding multiplies a
    non-finite weight by the zeros, which ORT skips)."""
    want_ref = reference(model, feeds)
    for out, expected in ort(model, feeds).items():
        np.testing.assert_array_equal(np.isnan(got[out]), np.isnan(want_ref[out]), err_msg=f"NaN lanes of {out}")
        np.testing.assert_allclose(got[out], expected, rtol=1e-4, atol=1e-4, err_msg=out)


def test_board_specs_vector_length_and_tiles():
    """bpi-f3 (alias milkv-jupiter) and qemu-riscv64-rvv: RVV at VLEN 256, 16-float vectors (LMUL 2 register
    groups) and the vector register budget in groups; visionfive2 and qemu-riscv64: scalar RV64GC with the FP-register budget; qemu's -cpu follows."""
    assert get_board("milkv-jupiter").name == "bpi-f3" and get_board("vf2").name == "visionfive2"
    for name in ("bpi-f3", "qemu-riscv64-rvv"):
        board = get_board(name)
        spec = machine_spec(board)
        assert spec.triple == "riscv64-unknown-linux-gnu" and spec.vector_bits == 512 and riscv_vlen(spec.features) == 256
        assert {"+v", "+zvl256b", "+d"} <= set(spec.features.split(","))
        assert (spec.accumulators, spec.conv_accumulators) == (12, 10)
        zicond = ",zicond=true" if name == "bpi-f3" else ""  # LLVM's spacemit-x60 selects with czero (Zicond)
        assert board.target.emulator_args(spec.features) == ("-cpu", "rv64,v=true,vlen=256,elen=64,vext_spec=v1.0" + zicond)
    for name in ("visionfive2", "qemu-riscv64", "riscv64"):
        board = get_board(name)
        spec = machine_spec(board)
        assert spec.vector_bits == 128 and "+v" not in spec.features.split(",")
        assert (spec.accumulators, spec.conv_accumulators) == (4, 4)
        assert board.target.emulator_args(spec.features) == ()
    assert machine_spec(get_board("visionfive2")).cpu == "sifive-u74"
    assert machine_spec(get_board("bpi-f3")).cpu == "spacemit-x60"


def _probe(isa: str, uarch: str, model: str = "", mvendorid: str = "") -> str:
    cpu = "".join(f"processor\t: {i}\nhart\t\t: {i}\nisa\t\t: {isa}\nmmu\t\t: sv39\nuarch\t\t: {uarch}\n"
                  + (f"mvendorid\t: {mvendorid}\n" if mvendorid else "") + "\n" for i in range(4))
    return (f"@uname\nLinux 6.6.20 riscv64\n@long_bit\n64\n@model\n{model}\n@tegra\n@meminfo\n"
            f"MemTotal:        3959048 kB\n@cpuinfo\n{cpu}")


def test_detect_reads_isa_and_uarch_and_refuses_rvv_071():
    from fluidml_xc.remote.detect import describe, match_boards, parse_probe
    from fluidml_xc.target.cpus import isa_extensions

    assert isa_extensions("rv64imafdcv_zicbom_zicsr_zba_zvl256b") >= {"i", "m", "a", "f", "d", "c", "v", "zicsr", "zba"}
    assert isa_extensions("rv64imafdcsu") == frozenset("imafdc") | {"su"}
    vf2 = parse_probe(_probe("rv64imafdc_zicntr_zicsr_zifencei_zihpm_zba_zbb", "sifive,u74-mc",
                             "StarFive VisionFive 2 v1.3B"))
    assert [b.name for b in match_boards(vf2)] == ["visionfive2", "riscv64"] and vf2.cpu == "sifive,u74-mc"
    k1 = parse_probe(_probe("rv64imafdcv_zicbom_zicboz_zicntr_zicond_zicsr_zifencei_zihintpause_zihpm_zfh_zfhmin_zca_"
                            "zcd_zba_zbb_zbc_zbs_zkt_zve32f_zve32x_zve64d_zve64f_zve64i_zvfh_zvfhmin", "spacemit,x60"))
    assert [b.name for b in match_boards(k1)] == ["bpi-f3", "riscv64"]
    no_v = parse_probe(_probe("rv64imafdc_zicsr", "spacemit,x60"))
    assert [b.name for b in match_boards(no_v)] == ["riscv64"]
    assert "not       bpi-f3 (spacemit-x60): this CPU lacks v" in describe("k1", no_v, match_boards(no_v))
    # a Lichee Pi 4A's vendor kernel shows `v` for its RVV 0.7.1 unit: never RVV 1.0 code, the no-vector build
    thead = parse_probe(_probe("rv64imafdcvsu", "thead,c910", "T-HEAD Light Lichee Pi 4A", "0x5b7"))
    text = describe("lpi4a", thead, match_boards(thead))
    assert [b.name for b in match_boards(thead)] == ["riscv64"]
    assert "board     riscv64 (boards/riscv64.toml)" in text
    assert "vector    RVV 0.7.1 (thead,c910): not RVV 1.0" in text


def test_objects_are_lp64d_and_rvv_uses_vectors(tmp_path):
    """model.o's ELF header: RISC-V, double-float ABI (what zig's musl links against); the RVV build's code
    holds vector instructions (vsetvli), its float multiply-adds on LMUL 2 register groups (target vector_lmul),
    the scalar build's none."""
    texts = {}
    for board in BOARDS:
        artifact = build(cnn_model(), tmp_path / board, board, profile_runner=False)
        data = (artifact / "model.o").read_bytes()
        machine = int.from_bytes(data[18:20], "little")
        flags = int.from_bytes(data[48:52], "little")
        assert machine == EM_RISCV and flags & EF_RISCV_FLOAT_ABI == EF_RISCV_FLOAT_ABI_DOUBLE, (board, hex(flags))
        dump = subprocess.run([require_program("llvm-objdump", "llvm"), "-d", "--mattr=+v", str(artifact / "model.o")],
                              capture_output=True, text=True, check=True).stdout
        texts[board] = dump
    assert "vsetvli" in texts["qemu-riscv64-rvv"] or "vsetivli" in texts["qemu-riscv64-rvv"]
    assert "vsetvli" not in texts["qemu-riscv64"] and "vsetivli" not in texts["qemu-riscv64"]
    assert re.search(r"vset\w+\s+\w+, \w+, e32, m2", texts["qemu-riscv64-rvv"])
    assert "vfmacc.vf" in texts["qemu-riscv64-rvv"]


@pytest.mark.qemu
@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", ["tiny_mlp", "tiny_cnn", "tiny_transformer"])
def test_examples_match_onnxruntime(name, board, tmp_path):
    model = EXAMPLES[name]()
    feeds = example_feeds(model)
    got = run(build(model, tmp_path, board, profile_runner=False), feeds)
    for out, want in ort(model, feeds).items():
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-5, err_msg=f"{name} {out} on {board}")


def _tiles_model() -> tuple[onnx.ModelProto, dict]:
    """MatMul (K 29: nine 3-step iterations and 2 left; N 40: a full and a partial panel), a 1x1 Conv over 17 input
    channels (5 iterations of 3 and 2 left), a 3x3 Conv, and a MobileNetV2 block (1x1 expand to 28 channels, Clip6,
    depthwise 3x3, Clip6, 1x1 project): every RISC-V register tile and its remainders."""
    rng = np.random.default_rng(5)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]),
             helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w3"], ["c3"], pads=[1] * 4),
             helper.make_node("Conv", ["e", "we"], ["e1"]), helper.make_node("Clip", ["e1", "lo", "hi"], ["e6"]),
             helper.make_node("Conv", ["e6", "wd", "bd"], ["d"], pads=[1] * 4, group=28),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]), helper.make_node("Conv", ["d6", "wp"], ["p"])]
    consts = {"b": f(29, 40), "w1": f(20, 17, 1, 1), "b1": f(20), "w3": f(24, 20, 3, 3), "we": f(28, 8, 1, 1),
              "wd": f(28, 1, 3, 3), "bd": f(28), "wp": f(12, 28, 1, 1), "lo": np.float32(0), "hi": np.float32(6)}
    feeds = {"a": f(7, 29), "x": f(1, 17, 9, 11), "e": f(1, 8, 10, 13)}
    return graph_model(nodes, feeds, ["m", "c3", "p"], consts, 13), feeds


@pytest.mark.qemu
@pytest.mark.parametrize("board, features", [*((b, None) for b in BOARDS), ("qemu-riscv64", "+v"),
                                             ("qemu-riscv64", "+v,+zvl512b")])
def test_register_tiles_and_remainders_match_onnxruntime(board, features, tmp_path):
    """The K steps per iteration (target/arch.py Arch.k_steps: 3), RVV's LMUL 2 tiles (target vector_lmul) at
    VLEN 256, 128 (+v alone) and 512, and the scalar build's fenced channels-last depthwise rows, with the
    remainders of K, of input channels and of a panel's columns, against ONNX Runtime."""
    model, feeds = _tiles_model()
    got = run(build(model, tmp_path, board, profile_runner=False, features=features), feeds)
    for out, want in ort(model, feeds).items():
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-4, err_msg=f"{out} on {board}")


def _depthwise_model() -> tuple[onnx.ModelProto, dict]:
    """Depthwise 3x3 convs with bias and Clip6: channels-last (Transposes around them, so the optimizer keeps the
    convs NHWC) over 40 channels (V = 16: two units and 8 channels one by one) at stride 1 and 2 on an odd 11 x 13
    image, NCHW rows of 21 and 9 columns (RVV's edge blocks and row pairs at stride 1, plain rows at stride 2), and
    a 3x3 conv of 6 output channels (fewer than a vector: row vectors, with edge blocks on RVV)."""
    rng = np.random.default_rng(7)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2])]
    for i, stride in enumerate((1, 2)):
        nodes += [helper.make_node("Conv", ["xt", "wc", "bc"], [f"c{i}"], pads=[1] * 4, group=40, strides=[stride] * 2),
                  helper.make_node("Clip", [f"c{i}", "lo", "hi"], [f"k{i}"]),
                  helper.make_node("Transpose", [f"k{i}"], [f"y{i}"], perm=[0, 2, 3, 1])]
    for i, (name, stride) in enumerate((("r", 1), ("r", 2), ("s", 1))):
        nodes += [helper.make_node("Conv", [name, f"w{name}", f"b{name}"], [f"n{i}"], pads=[1] * 4, group=20, strides=[stride] * 2),
                  helper.make_node("Clip", [f"n{i}", "lo", "hi"], [f"z{i}"])]
    nodes += [helper.make_node("Conv", ["r", "wo"], ["o"], pads=[1] * 4), helper.make_node("Relu", ["o"], ["ro"])]
    consts = {"wc": f(40, 1, 3, 3), "bc": f(40), "wr": f(20, 1, 3, 3), "br": f(20), "ws": f(20, 1, 3, 3), "bs": f(20),
              "wo": f(6, 20, 3, 3), "lo": np.float32(0), "hi": np.float32(6)}
    feeds = {"x": f(1, 11, 13, 40), "r": f(1, 20, 10, 37), "s": f(1, 20, 7, 9)}
    return graph_model(nodes, feeds, ["y0", "y1", "z0", "z1", "z2", "ro"], consts, 13), feeds


@pytest.mark.qemu
@pytest.mark.parametrize("board, features", [*((b, None) for b in BOARDS), ("qemu-riscv64", "+v"),
                                             ("qemu-riscv64", "+v,+zvl512b")])
def test_depthwise_forms_match_onnxruntime(board, features, tmp_path, patched_compiler):
    """RVV's channels-last depthwise rows (weights kept in registers across a row, TargetForms.dw_rows) with their
    channel and column remainders at stride 1 and 2, and its NCHW rows with edge blocks and row pairs
    (TargetForms.edges), at VLEN 256, 128 and 512; the scalar build's depthwise forms on the same convs. The forms
    are checked to be the ones chosen."""
    from fluidml_xc.ops.conv import conv2d as conv
    forms, emit = set(), conv.emit_conv

    def record(c):
        forms.update(f for f in ("dw_rows", "edges") if getattr(c.plan.blocking, f))
        emit(c)
    patched_compiler.setattr(conv, "emit_conv", record)
    model, feeds = _depthwise_model()
    got = run(build(model, tmp_path, board, profile_runner=False, features=features), feeds)
    for out, want in ort(model, feeds).items():
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-4, err_msg=f"{out} on {board} {features}")
    vectors = features is not None or board == "qemu-riscv64-rvv"
    assert forms == ({"dw_rows", "edges"} if vectors else set()), (board, features, forms)


def test_cost_model_charges_an_lmul2_operation_two_cycles():
    """The X60's kernels run 16-float vectors as LMUL-2 register groups, each vfmacc / vle two cycles of a one-register
    one (llvm-mca's SpacemitX60): the same depthwise conv, MatMul and Add (same 16-lane kernels, same tiles) cost their
    vector work twice at VLEN 256 x LMUL 2 as at VLEN 512 x LMUL 1; memory and call costs stay. x86 charges 1."""
    from fluidml_xc.fluid.costs import AnalyticModel
    from fluidml_xc.kernels.conv_geometry import TargetForms

    spec = machine_spec(get_board("bpi-f3"))
    assert spec.vector_bits == 512 and riscv_vlen(spec.features) == 256
    rng = np.random.default_rng(3)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4, group=96), helper.make_node("MatMul", ["a", "b"], ["m"]),
             helper.make_node("Add", ["x", "x"], ["s"])]
    graph = import_graph(graph_model(nodes, {"x": f(1, 96, 28, 28), "a": f(64, 256)}, ["c", "m", "s"],
                                     {"w": f(96, 1, 3, 3), "b": f(256, 256)}, 13))
    models = {features: AnalyticModel(graph, 512, forms=TargetForms(spec.triple, 10, features))
              for features in (spec.features, "+m,+a,+f,+d,+c,+v,+zvl512b")}
    lmul2, lmul1 = models.values()
    assert (lmul2.vector_cycles, lmul1.vector_cycles) == (2, 1)
    assert AnalyticModel(graph, 256, forms=TargetForms("x86_64-unknown-linux-gnu")).vector_cycles == 1
    for node, compute_bound in zip(graph.nodes, (True, True, False)):
        two, one = lmul2.cost(node, {}), lmul1.cost(node, {})
        assert (1.5 if compute_bound else 1.0) * one < two < 2 * one, (node.op_type, two, one)


def _clip_nan_model() -> tuple[onnx.ModelProto, dict]:
    """Clip6 fused into a channels-last depthwise conv (40 channels: two 16-lane units and 8 one by one), into an
    NCHW depthwise conv and into a 1x1 conv, and a plain Clip(-0.5, 1) over 37 values, fed NaN, +-inf, -0 and values
    on and around both bounds."""
    rng = np.random.default_rng(11)
    f = lambda *shape: (4 * rng.standard_normal(shape)).astype(np.float32)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 6.0, 6.0000005, -1e-38, 1e38, -0.5, 1.0],
                        np.float32)

    def sprinkle(a):
        flat = a.reshape(-1)
        flat[rng.choice(flat.size, 3 * specials.size, replace=False)] = np.tile(specials, 3)
        return a
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["xt", "wc", "bc"], ["c"], pads=[1] * 4, group=40),
             helper.make_node("Clip", ["c", "lo", "hi"], ["k"]),
             helper.make_node("Transpose", ["k"], ["y"], perm=[0, 2, 3, 1]),
             helper.make_node("Conv", ["r", "wr", "br"], ["n"], pads=[1] * 4, group=20),
             helper.make_node("Clip", ["n", "lo", "hi"], ["z"]),
             helper.make_node("Conv", ["r", "wp"], ["p"]), helper.make_node("Clip", ["p", "lo", "hi"], ["q"]),
             helper.make_node("Clip", ["e", "elo", "ehi"], ["ec"])]
    consts = {"wc": f(40, 1, 3, 3), "bc": f(40), "wr": f(20, 1, 3, 3), "br": f(20), "wp": f(24, 20, 1, 1),
              "lo": np.float32(0), "hi": np.float32(6), "elo": np.float32(-0.5), "ehi": np.float32(1)}
    feeds = {"x": sprinkle(f(1, 9, 11, 40)), "r": sprinkle(f(1, 20, 10, 21)), "e": sprinkle(f(37))}
    return graph_model(nodes, feeds, ["y", "z", "q", "ec"], consts, 13), feeds


@pytest.mark.qemu
@pytest.mark.parametrize("board, features", [("qemu-riscv64-rvv", None), ("qemu-riscv64", "+v"),
                                             ("qemu-riscv64-rvv", "+m,+a,+f,+d,+c,+v,+zvl256b,+zicond")])
def test_rvv_clip_keeps_nan_and_bounds(board, features, tmp_path):
    """RVV's Clip (vfmax / vfmin, NaN lanes put back from the bits; scalar edge pixels: fmax.s / fmin.s with a NaN's
    bits ORed back, branch-free: `czero` with the X60's Zicond, kernels/epilogue.py) fused into depthwise
    (channels-last rows, NCHW rows with scalar edge columns) and 1x1 convs (a plain Clip, the elementwise kernel's,
    beside them): NaN stays NaN, +-inf clamps, against onnx.reference."""
    model, feeds = _clip_nan_model()
    got = run(build(model, tmp_path, board, profile_runner=False, features=features), feeds)
    want = reference(model, feeds)
    for out in ("y", "z", "q", "ec"):
        assert np.isnan(want[out]).any() and np.isfinite(want[out]).any(), out
        np.testing.assert_array_equal(np.isnan(got[out]), np.isnan(want[out]), err_msg=f"NaN lanes of {out} on {board}")
        np.testing.assert_allclose(got[out], want[out], rtol=1e-4, atol=1e-4, err_msg=f"{out} on {board} {features}")


@pytest.mark.qemu
@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("graph", ["cnn", "int8"])
def test_threads_bit_identical_at_1_4_8(graph, board, tmp_path):
    """A float CNN (Conv, MatMul) and an int8 graph (QLinearConv 3x3 + 1x1, QLinearMatMul, MatMulInteger: the
    generic widened k-pair block) built for 8 threads: 1, 4 and 8 threads give the same bytes, which match
    ONNX Runtime (the CNN) and ONNX's reference (the int8 graph: ONNX Runtime's u8 x s8 pair sums saturate on an
    x86 host without VNNI, so its int8 outputs depend on the host)."""
    if graph == "cnn":
        model = cnn_model()
        feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)}
    else:
        model, feeds = int8_graph()
    artifact = build(model, tmp_path, board, threads=8, profile_runner=False)
    assert json.loads((artifact / "manifest.json").read_text())["threads"] == 8
    results = {t: list(run(artifact, feeds, threads=t).values()) for t in (1, 4, 8)}
    for t in (4, 8):
        assert all(a.tobytes() == b.tobytes() for a, b in zip(results[1], results[t])), f"{t} threads differ from 1"
    oracle = ort if graph == "cnn" else reference
    for (out, want), got in zip(oracle(model, feeds).items(), results[1]):
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=out)
        else:
            assert np.abs(got.astype(np.int64) - want.astype(np.int64)).max() <= 1, out


@pytest.mark.qemu
def test_vlen256_runner_refuses_vlen128_in_one_line_and_scalar_build_runs_anywhere(tmp_path):
    """Code built for VLEN 256 is wrong on a VLEN-128 core: its runner refuses one (exit 4, one line) and a core
    without V; the RV64GC build runs on all three with the same outputs."""
    qemu = require_program("qemu-riscv64-static")
    cpus = {"vlen256": "rv64,v=true,vlen=256,vext_spec=v1.0", "vlen128": "rv64,v=true,vlen=128,vext_spec=v1.0",
            "no-v": "rv64"}
    x = np.random.default_rng(2).standard_normal((1, 8, 12, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rvv = build(cnn_model(), tmp_path / "rvv", "qemu-riscv64-rvv", profile_runner=False)
    scalar = build(cnn_model(), tmp_path / "scalar", "qemu-riscv64", profile_runner=False)

    def runner(artifact: Path, cpu: str) -> tuple[subprocess.CompletedProcess, np.ndarray | None]:
        out = tmp_path / f"y-{artifact.parent.name}-{cpu}.npy"
        proc = subprocess.run([qemu, "-cpu", cpus[cpu], str(artifact / "runner"), "-i", str(tmp_path / "x.npy"),
                               "-o", str(out)], capture_output=True, text=True, timeout=300)
        return proc, (np.load(out) if proc.returncode == 0 else None)

    proc, want = runner(rvv, "vlen256")
    assert proc.returncode == 0, proc.stderr
    for cpu, lacking in (("vlen128", "zvl256b (1 extension"), ("no-v", "v, zvl256b (2 extensions")):
        proc, _ = runner(rvv, cpu)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 4 and len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"runner: error: this CPU lacks {lacking}") and "VLEN" in lines[0], lines[0]
    for cpu in cpus:
        proc, got = runner(scalar, cpu)
        assert proc.returncode == 0, (cpu, proc.stderr)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.qemu
def test_c_library_init_returns_err_cpu_on_a_smaller_vlen(tmp_path):
    from fluidml_xc.emit.link import compile_c_program

    qemu = require_program("qemu-riscv64-static")
    artifact = build(cnn_model(), tmp_path, "qemu-riscv64-rvv", profile_runner=False)
    (tmp_path / "app.c").write_text(APP)
    exe = compile_c_program(get_board("qemu-riscv64-rvv").target, "", [tmp_path / "app.c"], [artifact],
                            [artifact / "libmodel.a"], tmp_path / "app")
    small = subprocess.run([qemu, "-cpu", "rv64,v=true,vlen=128,vext_spec=v1.0", str(exe)], capture_output=True,
                           text=True, timeout=60).stdout
    assert small.startswith("-5 this CPU lacks zvl256b") and "VLEN" in small, small
    fits = subprocess.run([qemu, "-cpu", "rv64,v=true,vlen=256,vext_spec=v1.0", str(exe)], capture_output=True,
                          text=True, timeout=60).stdout
    assert fits.startswith("0 -"), fits


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from sshd import start_server

    srv = start_server(tmp_path_factory.mktemp("sshd"))
    yield srv
    srv.stop()


@pytest.mark.ssh
@pytest.mark.qemu
def test_deploy_profile_verify_over_ssh_to_the_rvv_pseudo_board(server, tmp_path):
    """sshd on 127.0.0.1 as a board whose runners run through qemu-riscv64-static with V at VLEN 256 (the
    emulator's -cpu goes with the run plan); the profile says its emulated time is not the board's."""
    from modelrun import cli, matmul_relu_model
    from sshd import ssh_args

    (tmp_path / "ssh_config").write_text("")
    artifact = build(matmul_relu_model(3), tmp_path / "build", "qemu-riscv64-rvv")
    common = ssh_args(server, tmp_path / "ssh_config") + ["--base-dir", str(tmp_path / "board")]
    proc = cli("deploy", str(artifact), *common)
    assert proc.returncode == 0 and "qemu-riscv64-static" in proc.stdout, proc.stderr
    report_path = tmp_path / "profile.json"
    proc = cli("profile", str(artifact), *common, "--runs", "5", "--warmup", "1", "--json-out", str(report_path))
    assert proc.returncode == 0, proc.stderr
    assert "MatMul" in proc.stdout and "emulated timing is not the board's" in proc.stdout, proc.stdout
    report = json.loads(report_path.read_text())
    assert report["emulated"] and report["emulator"].startswith("qemu-riscv64-static")
    proc = cli("verify", str(artifact), *common)
    assert proc.returncode == 0 and " ok" in proc.stdout, proc.stderr


class _CannedBoard:
    """A board whose /proc/cpuinfo is a file of the test's: deploy's own shell snippet runs on it here."""

    label = "lpi4a"

    def __init__(self, cpuinfo: Path):
        self.cpuinfo = cpuinfo

    def run(self, argv, timeout=None, stdin=None):
        from fluidml_xc.remote.shell import LocalShell

        return LocalShell().run([a.replace("/proc/cpuinfo", str(self.cpuinfo)) for a in argv], timeout, stdin)


@pytest.mark.parametrize("uarch, mvendorid, isa", [("thead,c910", "0x5b7", "rv64imafdcv"),
                                                   ("", "0x5b7", "rv64imafdcv"),
                                                   ("", "", "rv64imafdc_xtheadvector")])
def test_deploy_refuses_rvv_code_on_a_t_head_core_before_uploading(tmp_path, uarch, mvendorid, isa):
    """A T-Head core's kernel may show `v`: its RVV 0.7.1 is refused for RVV 1.0 code (bpi-f3) in one line, by
    its uarch, its mvendorid or an xthead vector extension; the same core takes a build without V."""
    from fluidml_xc.errors import RemoteError
    from fluidml_xc.remote.artifact import load_artifact
    from fluidml_xc.remote.deploy import check_cpu

    lines = f"processor\t: 0\nisa\t\t: {isa}\n" + (f"uarch\t\t: {uarch}\n" if uarch else "") + (
        f"mvendorid\t: {mvendorid}\n" if mvendorid else "")
    (tmp_path / "cpuinfo").write_text(lines * 2)
    board = _CannedBoard(tmp_path / "cpuinfo")
    rvv = load_artifact(build(cnn_model(), tmp_path / "rvv", "bpi-f3", profile_runner=False))
    with pytest.raises(RemoteError, match=r"^lpi4a is a T-Head core \(.+\) whose vector unit is RVV 0\.7\.1.*"
                                          r"nothing uploaded: rebuild with --board riscv64"):
        check_cpu(board, rvv)
    check_cpu(board, load_artifact(build(cnn_model(), tmp_path / "gc", "riscv64", profile_runner=False)))


def test_run_plan_passes_the_vector_cpu_to_qemu(tmp_path):
    from fluidml_xc.remote.artifact import load_artifact
    from fluidml_xc.remote.fit import BoardFacts, plan_run

    artifact = load_artifact(build(cnn_model(), tmp_path, "qemu-riscv64-rvv", profile_runner=False))
    plan = plan_run(artifact, BoardFacts("x86_64", 64, None, frozenset({"qemu-riscv64-static"})), "b")
    assert plan.argv("/x/runner", ["--bench", "1"]) == [
        "qemu-riscv64-static", "-cpu", "rv64,v=true,vlen=256,elen=64,vext_spec=v1.0", "/x/runner", "--bench", "1"]


@pytest.mark.qemu
def test_named_rvv_build_runs_and_its_library_links(tmp_path):
    """A --name build for the RVV board: libdet.a beside libfxc_runtime.a, its runner under qemu with V matches
    ONNX Runtime, and a C program linking the library sees the refusal of a VLEN-128 CPU through det_init."""
    from fluidml_xc.emit.link import compile_c_program

    x = {"x": np.random.default_rng(4).standard_normal((1, 8, 12, 12)).astype(np.float32)}
    artifact = build(cnn_model(), tmp_path, "qemu-riscv64-rvv", name="det", profile_runner=False)
    assert (artifact / "libdet.a").is_file() and (artifact / "libfxc_runtime.a").is_file()
    got = run(artifact, x)
    np.testing.assert_allclose(got["y"], ort(cnn_model(), x)["y"], rtol=1e-4, atol=1e-5)
    (tmp_path / "app.c").write_text(APP.replace('"model.h"', '"det.h"').replace("FXC_ARENA", "DET_ARENA")
                                    .replace("fxc_init", "det_init").replace("FXC_ERR_CPU", "DET_ERR_CPU")
                                    .replace("fxc_strerror", "det_strerror"))
    exe = compile_c_program(get_board("qemu-riscv64-rvv").target, "", [tmp_path / "app.c"], [artifact],
                            [artifact / "libdet.a", artifact / "libfxc_runtime.a"], tmp_path / "app")
    out = subprocess.run([require_program("qemu-riscv64-static"), "-cpu", "rv64,v=true,vlen=128,vext_spec=v1.0",
                          str(exe)], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("-5 this CPU lacks zvl256b"), out


def test_rvv_refuses_a_qemu_that_cannot_run_it(monkeypatch):
    """Debian 12's qemu-riscv64 7.2 aborts on vfcvt.rtz: RVV artifacts refuse it in one line; RV64GC ones run."""
    from fluidml_xc.artifact import Manifest
    from fluidml_xc.errors import ToolchainError
    from fluidml_xc.run import execute

    monkeypatch.setattr(execute, "_qemu_major", lambda path: 7)
    monkeypatch.setattr(execute.shutil, "which", lambda name: f"/usr/bin/{name}")
    rvv = Manifest(target="riscv64", emulator="qemu-riscv64-static", features="+m,+a,+f,+d,+c,+v,+zvl256b",
                   inputs=(), outputs=())
    with pytest.raises(ToolchainError, match=r"qemu-riscv64-static 7 cannot run RVV code.*qemu-user 8 or later"):
        execute.emulator_command(rvv)
    scalar = Manifest(target="riscv64", emulator="qemu-riscv64-static", features="+m,+a,+f,+d,+c", inputs=(), outputs=())
    assert execute.emulator_command(scalar) == ["/usr/bin/qemu-riscv64-static"]
