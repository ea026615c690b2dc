"""The SiFive U74's hand-scheduled GEMM tile (#30, kernels/scalar_tile.py): the routine's encodings against llvm-mc,
its schedule (llvm-mca), the CPUs it is for, and MatMul / Gemm / Winograd built for visionfive2 against ONNX Runtime
under qemu-riscv64 (every K remainder of the 4-step loop, rows and columns not a multiple of the 5 x 5 tile, B
packed, read in place and gathered), the same bits at 1, 4 and 8 threads."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper

from fluidml_xc.kernels.depthwise_tile import SECTION, Band, encode as dw_encode, loop_iterations, program as dw_program, text as dw_text
from fluidml_xc.kernels.scalar_tile import SCALAR_TILES, ScalarTile, encode, program, scalar_tile, text
from modelrun import build, graph_model, run
from test_winograd import conv_model, force, rel_error

U74 = SCALAR_TILES["sifive-u74"]


def _tool(*names: str) -> str:
    for name in names:
        if shutil.which(name):
            return name
    pytest.skip(f"none of {', '.join(names)} installed")


@pytest.mark.parametrize("kk, b_step", [(k, 5) for k in (1, 2, 3, 4, 5, 7, 8, 9, 29, 256)] + [(9, 130), (29, 4096)])
def test_routine_encodes_as_llvm_mc_assembles_it(kk, b_step, tmp_path):
    """Every instruction word of the routine is what llvm-mc makes of its assembly text (flw/fsw/fld/fsd, fmadd.s,
    fmv.w.x, addi, the loop's bne back to its first step, ret; with B's K stride past the loads' offsets, the ld of
    the stride and the adds of the two B pointers taking turns)."""
    mc, objcopy = _tool("llvm-mc-22", "llvm-mc-19", "llvm-mc"), _tool("llvm-objcopy-22", "llvm-objcopy-19", "llvm-objcopy")
    code = program(U74, kk, 1, b_step)
    subprocess.run([mc, "-triple=riscv64", "-mattr=+f,+d", "-filetype=obj", "-o", str(tmp_path / "a.o")], input=text(code),
                   text=True, check=True)
    subprocess.run([objcopy, "-O", "binary", "--only-section=.text", str(tmp_path / "a.o"), str(tmp_path / "a.bin")], check=True)
    data = (tmp_path / "a.bin").read_bytes()
    assert list(struct.unpack(f"<{len(data) // 4}I", data)) == encode(code)
    fmadds = sum(op == "fmadd.s" for op, *_ in code)
    loop = (kk - 1) // U74.steps > 0
    assert fmadds == 25 * ((U74.steps if loop else 0) + kk - (kk - 1) // U74.steps * U74.steps)
    assert sum(op == "bne" for op, *_ in code) == loop


def test_loop_reaches_70_percent_in_llvm_mca_22():
    """The routine's loop (a 5 x 5 tile over 4 K steps, five A rows and B's panel advanced beside the last step's
    A loads) by the SiFive7 model of llvm-mca-22: >= 70% of one fmadd.s per cycle (docs/RISCV_KERNELS.md)."""
    mca = _tool("llvm-mca-22")
    lines = text(program(U74, 29, 1, 5)).splitlines()
    top = next(i for i, line in enumerate(lines) if line.endswith(":"))
    end = next(i for i, line in enumerate(lines) if line.startswith("bne"))
    out = subprocess.run([mca, "-mtriple=riscv64", "-mcpu=sifive-u74", "-iterations=200"],
                         input="\n".join(lines[top:end + 1]) + "\n", capture_output=True, text=True, check=True).stdout
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200
    assert 100 / cycles >= 0.70, cycles


def test_tile_is_for_the_u74_without_v_only():
    assert scalar_tile("riscv64-unknown-linux-gnu", "sifive-u74", "+m,+a,+f,+d,+c") == ScalarTile(5, 5, 4)
    assert scalar_tile("riscv64-unknown-linux-gnu", "sifive-u74", "+m,+a,+f,+d,+c,+v") is None
    assert scalar_tile("riscv64-unknown-linux-gnu", "sifive-u74", "+m,+a,+f,-d,+c") is None  # fld/fsd need D
    assert scalar_tile("riscv64-unknown-linux-gnu", "generic-rv64", "+m,+a,+f,+d,+c") is None
    assert scalar_tile("riscv64-unknown-linux-gnu", "spacemit-x60", "+m,+a,+f,+d,+c,+v,+zvl256b") is None
    assert scalar_tile("x86_64-unknown-linux-gnu", "sifive-u74", "") is None


def ort(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def _matches_onnxruntime_on_the_tile(model: onnx.ModelProto, feeds: dict, tmp_path, section: str = ".text.fxc_scalar_tile",
                                     **options) -> None:
    """`model` built for visionfive2 runs the routine (its section in model.o: allocated, executable, read-only) and
    gives ONNX Runtime's values under qemu."""
    from elftools.elf.constants import SH_FLAGS
    from elftools.elf.elffile import ELFFile

    artifact = build(model, tmp_path, "visionfive2", profile_runner=False, **options)
    with open(artifact / "model.o", "rb") as fh:
        flags = [sec["sh_flags"] for sec in ELFFile(fh).iter_sections() if sec.name == section]
    assert flags and all(f & SH_FLAGS.SHF_ALLOC and f & SH_FLAGS.SHF_EXECINSTR and not f & SH_FLAGS.SHF_WRITE
                         for f in flags), (section, flags)
    got = run(artifact, feeds)
    for out, want in ort(model, feeds).items():
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-4, err_msg=out)


def _gemm_model() -> tuple[onnx.ModelProto, dict]:
    """MatMuls with constant B at K 1..9 and 29 (loop or not, 1 to 4 steps after it), M 5 / 7 / 12 and N 5 / 13 /
    17 (full tiles and the generic code's remainders); a Gemm with bias, alpha, beta and transB, one with transA, a
    batched MatMul (three products of 6 x 10 by 10 x 7); MatMuls of two
    inputs (B read in place: its rows 13 floats apart, and 130 apart: the stride in a register) and one of A by an
    input's transpose (B gathered)."""
    rng = np.random.default_rng(11)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    nodes, consts, feeds, outs = [], {}, {}, []
    for q, (m, kk, n) in enumerate([(5, 1, 5), (7, 2, 13), (12, 3, 17), (5, 4, 10), (10, 5, 5), (7, 6, 17), (12, 7, 13),
                                    (5, 8, 5), (11, 9, 12), (12, 29, 17)]):
        feeds[f"a{q}"], consts[f"b{q}"] = f(m, kk), f(kk, n)
        nodes.append(helper.make_node("MatMul", [f"a{q}", f"b{q}"], [f"m{q}"]))
        outs.append(f"m{q}")
    feeds["g"], consts["gw"], consts["gb"] = f(9, 31), f(14, 31), f(14)
    nodes.append(helper.make_node("Gemm", ["g", "gw", "gb"], ["gy"], alpha=0.5, beta=2.0, transB=1))
    feeds["t"], consts["tb"], feeds["ta"] = f(3, 6, 10), f(10, 7), f(12, 8)
    nodes += [helper.make_node("MatMul", ["t", "tb"], ["ty"]),
              helper.make_node("Gemm", ["ta", "gw8"], ["tz"], transA=1)]
    consts["gw8"] = f(12, 9)
    outs += ["ty", "tz"]
    feeds["p"], feeds["q"], feeds["r"], feeds["s"] = f(8, 11), f(11, 13), f(13, 11), f(11, 130)
    nodes += [helper.make_node("MatMul", ["p", "q"], ["pq"]), helper.make_node("Transpose", ["r"], ["rt"], perm=[1, 0]),
              helper.make_node("MatMul", ["p", "rt"], ["pr"]), helper.make_node("MatMul", ["p", "s"], ["ps"])]
    return graph_model(nodes, feeds, [*outs, "gy", "pq", "pr", "ps"], consts, 13), feeds


@pytest.mark.qemu
def test_gemm_tiles_match_onnxruntime_on_visionfive2(tmp_path):
    _matches_onnxruntime_on_the_tile(*_gemm_model(), tmp_path)


def _pointwise_model() -> tuple[onnx.ModelProto, dict]:
    """1x1 convs as the tile's GEMM: 17 -> 12 channels on 9 x 11 pixels of two images with bias and Relu (rows,
    pixels and K not multiples of the tile), 12 -> 20 with a residual Add + Relu (fused in the epilogue), and one
    at stride 2 (the direct kernel: not a GEMM)."""
    rng = np.random.default_rng(13)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]), helper.make_node("Add", ["c2", "res"], ["a2"]),
             helper.make_node("Relu", ["a2"], ["y"]), helper.make_node("Conv", ["r1", "w3"], ["z"], strides=[2, 2])]
    consts = {"w1": f(12, 17, 1, 1), "b1": f(12), "w2": f(20, 12, 1, 1), "w3": f(6, 12, 1, 1)}
    feeds = {"x": f(2, 17, 9, 11), "res": f(2, 20, 9, 11)}
    return graph_model(nodes, feeds, ["y", "z"], consts, 13), feeds


@pytest.mark.qemu
def test_pointwise_convs_match_onnxruntime_on_visionfive2(tmp_path):
    _matches_onnxruntime_on_the_tile(*_pointwise_model(), tmp_path)


def _im2col_model() -> tuple[onnx.ModelProto, dict]:
    """Direct convs as gathered panels and the tile (ops/conv/im2col.py): 3x3 pad 1 over two images, 7 -> 12
    channels (two blocks of 5 and 2 left) on 9 x 11 (two panels of 5 pixels and 1 left) with bias and Relu, then 3x3
    at stride 2 with asymmetric pads, 3x3 at dilation 2 with a residual Add + Relu, and 5x5 unpadded."""
    rng = np.random.default_rng(17)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["s2"], pads=[1, 0, 1, 2], strides=[2, 2]),
             helper.make_node("Conv", ["r1", "w3", "b3"], ["c3"], pads=[2, 2, 2, 2], dilations=[2, 2]),
             helper.make_node("Add", ["c3", "res"], ["a3"]), helper.make_node("Relu", ["a3"], ["y3"]),
             helper.make_node("Conv", ["r1", "w4"], ["y4"])]
    consts = {"w1": f(12, 7, 3, 3), "b1": f(12), "w2": f(11, 12, 3, 3), "w3": f(13, 12, 3, 3), "b3": f(13),
              "w4": f(10, 12, 5, 5)}
    feeds = {"x": f(2, 7, 9, 11), "res": f(2, 13, 9, 11)}
    return graph_model(nodes, feeds, ["r1", "s2", "y3", "y4"], consts, 13), feeds


@pytest.mark.qemu
def test_direct_convs_as_panels_match_onnxruntime_on_visionfive2(tmp_path):
    _matches_onnxruntime_on_the_tile(*_im2col_model(), tmp_path, conv_algo="direct")


@pytest.mark.qemu
@pytest.mark.parametrize("order", ["wino2", "wino4", "wimg4"])
def test_winograd_gemm_tiles_match_onnxruntime_on_visionfive2(order, tmp_path, patched_compiler):
    """Winograd's GEMM on the tile: 12 output channels (two 5-column panels and 2 left), 9 x 11 output pixels (tiles
    not a multiple of 5), a residual and Relu, 13 input channels (3 iterations of 4 steps and 1 left)."""
    force(patched_compiler, order)
    model = conv_model(13, 12, 9, 11, residual_relu=True)
    x = np.random.default_rng(2).standard_normal((1, 13, 9, 11)).astype(np.float32)
    artifact = build(model, tmp_path, "visionfive2", profile_runner=False)
    assert json.loads((artifact / "manifest.json").read_text())["optimizer"]["loop_orders"]["conv"] == order
    assert b".text.fxc_scalar_tile" in (artifact / "model.o").read_bytes()
    got = run(artifact, {"x": x})
    want = ort(model, {"x": x})
    assert rel_error(next(iter(got.values())), next(iter(want.values()))) < 1e-4


@pytest.mark.qemu
def test_threads_bit_identical_at_1_4_8_on_visionfive2(tmp_path):
    """A MatMul + Relu, a direct 3x3 conv (panels), a 1x1 conv (the GEMM) and a depthwise 3x3 + Clip (bands) built for 8 threads: the same bytes at
    1, 4 and 8 threads, and ONNX Runtime's values."""
    rng = np.random.default_rng(4)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"]), helper.make_node("Relu", ["y"], ["z"]),
             helper.make_node("Conv", ["x", "w3"], ["c3"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Conv", ["r3", "w1"], ["c1"]),
             helper.make_node("Conv", ["r3", "wd"], ["cd"], group=16, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["cd", "lo", "hi"], ["d"])]
    feeds = {"a": f(64, 96), "x": f(1, 8, 24, 24)}
    model = graph_model(nodes, feeds, ["z", "c1", "d"], {"b": f(96, 83), "w3": f(16, 8, 3, 3), "w1": f(12, 16, 1, 1),
                                                         "wd": f(16, 1, 3, 3), "lo": np.array(0, np.float32),
                                                         "hi": np.array(6, np.float32)}, 13)
    artifact = build(model, tmp_path, "visionfive2", threads=8, profile_runner=False, conv_algo="direct")
    results = {t: run(artifact, feeds, threads=t) for t in (1, 4, 8)}
    for out, want in ort(model, feeds).items():
        assert results[1][out].tobytes() == results[4][out].tobytes() == results[8][out].tobytes(), out
        np.testing.assert_allclose(results[1][out], want, rtol=1e-4, atol=1e-4, err_msg=out)



def _depthwise_model() -> tuple[onnx.ModelProto, dict]:
    """3x3 depthwise convs as kernels/depthwise_tile.py's bands: 5 channels of two 11 x 30 images (bands of 3 rows
    and 2 left, the column loop) with bias and Clip(0, 6) over inputs holding NaN and inf; 10 and 9 rows of 7 and 13
    columns (1 row left; all 3-row bands), a Relu, no bias, asymmetric pads (0 or 2 zero rows and columns) and
    no activation; a Clip with only an upper bound; weights given at run time; a 1 x 2 output, and a 2 x 2 input
    padded by 2 (bands of zero rows, 4 x 4 out); and 20 channels kept channels-last by Transposes (row pointers,
    columns 20 floats apart) with a Clip over a NaN; 96 channels whose output columns are past 1023 bytes apart
    (the row pointers moved every column)."""
    rng = np.random.default_rng(23)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    x = f(2, 5, 11, 30)
    x[0, 1, 4, 7], x[1, 3, 0, 29], x[0, 2, 10, 0] = np.nan, np.inf, -np.inf
    feeds = {"x": x, "u": f(1, 4, 10, 7), "v": f(1, 3, 9, 13), "wr": f(3, 1, 3, 3)}
    consts = {"w1": f(5, 1, 3, 3), "b1": f(5), "w2": f(4, 1, 3, 3), "w3": f(3, 1, 3, 3), "b3": f(3),
              "lo": np.array(0, np.float32), "hi": np.array(6, np.float32), "top": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], group=5, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["y1"]),
             helper.make_node("Conv", ["u", "w2"], ["c2"], group=4, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y2"]),
             helper.make_node("Conv", ["v", "w3", "b3"], ["y3"], group=3, pads=[0, 2, 2, 0]),
             helper.make_node("Conv", ["v", "w3"], ["c4"], group=3, pads=[2, 0, 1, 1]),
             helper.make_node("Clip", ["c4", "", "top"], ["y4"]),
             helper.make_node("Conv", ["v", "wr"], ["y5"], group=3, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["t", "w6"], ["y6"], group=2),
             helper.make_node("Conv", ["s", "w6", "b6"], ["c7"], group=2, pads=[2, 2, 2, 2]),
             helper.make_node("Relu", ["c7"], ["y7"]),
             helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["ht", "w8", "b8"], ["c8"], group=20, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c8", "lo", "hi"], ["d8"]), helper.make_node("Transpose", ["d8"], ["y8"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["g"], ["gt"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["gt", "w9", "b9"], ["c9"], group=96, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c9", "lo", "hi"], ["d9"]), helper.make_node("Transpose", ["d9"], ["y9"], perm=[0, 2, 3, 1])]
    h = f(2, 10, 29, 20)
    h[1, 3, 5, 7] = np.nan
    feeds |= {"t": f(1, 2, 3, 4), "s": f(1, 2, 2, 2), "h": h, "g": f(1, 5, 14, 96)}
    consts |= {"w6": f(2, 1, 3, 3), "b6": f(2), "w8": f(20, 1, 3, 3), "b8": f(20), "w9": f(96, 1, 3, 3), "b9": f(96)}
    return graph_model(nodes, feeds, ["y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9"], consts, 13), feeds


def test_depthwise_routine_encodes_as_llvm_mc_assembles_it(tmp_path):
    """The band routine's words (loop or not, zero rows, 1 to 3 rows, each activation form) are llvm-mc's."""
    mc, objcopy = _tool("llvm-mc-22", "llvm-mc-19", "llvm-mc"), _tool("llvm-objcopy-22", "llvm-objcopy-19", "llvm-objcopy")
    for band in (Band(3, 28, 1, 1, frozenset(), 112, 112, 4, 4, True, True, True),
                 Band(2, 13, 0, 2, frozenset({3}), 52, 60, 4, 4, True, False, True),
                 Band(1, 7, 2, 0, frozenset({0, 1}), 28, 28, 4, 4, False, True, True),
                 Band(3, 30, 1, 1, frozenset({0}), 120, 120, 4, 4, False, False, False),
                 Band(3, 28, 1, 1, frozenset(), 28 * 576, 28 * 576, 576, 576, True, True, True),
                 Band(2, 13, 1, 1, frozenset({3}), 13 * 768, 13 * 768, 768, 768, False, False, False),
                 Band(3, 28, 1, 1, frozenset({4}), 28 * 384, 384, 384, 28 * 384, True, True, True)):
        code = dw_program(band)
        subprocess.run([mc, "-triple=riscv64", "-mattr=+f,+d", "-filetype=obj", "-o", str(tmp_path / "a.o")],
                       input=dw_text(code), text=True, check=True)
        subprocess.run([objcopy, "-O", "binary", "--only-section=.text", str(tmp_path / "a.o"), str(tmp_path / "a.bin")],
                       check=True)
        data = (tmp_path / "a.bin").read_bytes()
        assert list(struct.unpack(f"<{len(data) // 4}I", data)) == dw_encode(code), band
        loops = [insn for insn in code if insn[0] == "bne"]
        top, end = (loops[0][3], code.index(loops[0])) if loops else (0, 0)
        iterations = loop_iterations(band) or 1
        fmadds = [op == "fmadd.s" for op, *_ in code]
        assert sum(fmadds) + (iterations - 1) * sum(fmadds[top:end]) == 9 * band.rows * band.out_width  # every tap once
        assert (band.width >= 13) == bool(loops)


@pytest.mark.qemu
def test_depthwise_bands_match_onnxruntime_on_visionfive2(tmp_path):
    _matches_onnxruntime_on_the_tile(*_depthwise_model(), tmp_path, SECTION)


@pytest.mark.qemu
def test_band_clip_keeps_nan_and_bounds_on_visionfive2(tmp_path):
    """test_riscv.py's Clip model (NaN, -NaN, +-inf, -0, values on and around the bounds) on visionfive2: its
    channels-last depthwise (40 channels, row pointers) and NCHW depthwise (20 channels) run the band routine, NaN
    stays NaN, the rest clamps as onnx.reference does (-0.0 may come out +0.0: fmax.s)."""
    from modelrun import reference
    from test_riscv import _clip_nan_model

    model, feeds = _clip_nan_model()
    artifact = build(model, tmp_path, "visionfive2", profile_runner=False)
    assert SECTION.encode() in (artifact / "model.o").read_bytes()
    got, want = run(artifact, feeds), reference(model, feeds)
    for out in ("y", "z"):
        assert np.isnan(want[out]).any() and np.isinf(feeds["x" if out == "y" else "r"]).any(), out
        np.testing.assert_array_equal(np.isnan(got[out]), np.isnan(want[out]), err_msg=out)
        np.testing.assert_allclose(got[out], want[out], rtol=1e-5, atol=1e-5, err_msg=out)


def test_cost_model_prices_depthwise_as_the_bands():
    """On the U74 (sifive-u74, the GEMM tile's CPU) a 3x3 depthwise conv costs its bands' llvm-mca-22 cycles
    (kernels/depthwise_tile.py plane_cycles) in the GEMM tile's unit, NCHW (one pointer) and channels-last (a
    pointer per row) alike; a scalar RISC-V CPU without the tile keeps the vector estimate."""
    from fluidml_xc.fluid.costs import CALL_NS, LINE, LINE_NS, SCALAR_TILE_CYCLES, VFMA_NS, AnalyticModel
    from fluidml_xc.kernels.conv_geometry import TargetForms
    from fluidml_xc.kernels.depthwise_tile import bands, plane_cycles
    from fluidml_xc.pipeline import import_graph
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    spec = machine_spec(get_board("visionfive2"))
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4, group=96)]
    graph = import_graph(graph_model(nodes, {"x": rng.standard_normal((1, 96, 28, 28)).astype(np.float32)}, ["c"],
                                     {"w": rng.standard_normal((96, 1, 3, 3)).astype(np.float32)}, 13))
    u74 = AnalyticModel(graph, spec.vector_bits, forms=TargetForms(spec.triple, 4, spec.features, cpu=spec.cpu))
    generic = AnalyticModel(graph, spec.vector_bits, forms=TargetForms(spec.triple, 4, spec.features, cpu="generic-rv64"))
    node, lanes = graph.nodes[0], spec.vector_bits // 32
    moved = 2 * 96 * 28 * 28 * 4 / LINE * LINE_NS * 0.25
    for layout, strides in (({}, (28, 1)), ({"x": (0, 2, 3, 1), "c": (0, 2, 3, 1)}, (28 * 96, 96))):
        plane = bands(28, 28, 28, 28, 1, 1, strides, strides, None)
        want = CALL_NS + 96 * plane_cycles(plane) * VFMA_NS / lanes / SCALAR_TILE_CYCLES + moved
        assert u74.cost(node, layout) == pytest.approx(want), layout
        assert generic.cost(node, layout) != pytest.approx(want), layout


def test_cost_model_prices_channels_last_depthwise_by_its_taps():
    """The depthwise convs the bands do not take (here 5x5, channels-last) cost the channels-last block's 3x3 figure
    per channel and pixel in proportion to their window's taps (a 5x5 window 25 / 9 of it); a 3x3 at stride 2 costs
    kernels/depthwise_stride2.py's bands (fluid/depthwise_costs.py stride2_plane_cycles)."""
    from fluidml_xc.fluid.costs import CALL_NS, LINE, LINE_NS, SCALAR_TILE_CYCLES, VFMA_NS, AnalyticModel
    from fluidml_xc.fluid.depthwise_costs import U74_CHANNELS_LAST_CYCLES, stride2_plane_cycles
    from fluidml_xc.kernels import depthwise_stride2
    from fluidml_xc.kernels.conv_geometry import TargetForms
    from fluidml_xc.pipeline import import_graph
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    spec = machine_spec(get_board("visionfive2"))
    rng = np.random.default_rng(6)
    nhwc = {"x": (0, 2, 3, 1), "c": (0, 2, 3, 1)}
    for k, stride, pad in ((5, 1, 2), (3, 2, 1)):
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[pad] * 4, strides=[stride] * 2, group=96)]
        graph = import_graph(graph_model(nodes, {"x": rng.standard_normal((1, 96, 28, 28)).astype(np.float32)}, ["c"],
                                         {"w": rng.standard_normal((96, 1, k, k)).astype(np.float32)}, 13))
        model = AnalyticModel(graph, spec.vector_bits, forms=TargetForms(spec.triple, 4, spec.features, cpu=spec.cpu))
        out = 28 // stride
        moved = 96 * (28 * 28 + out * out) * 4 / LINE * LINE_NS * 0.25
        cycles = 96 * out * out * U74_CHANNELS_LAST_CYCLES * k * k / 9
        if stride == 2:
            plane = depthwise_stride2.bands(28, 28, out, out, 1, 1, (28 * 96, 96), (out * 96, 96), None)
            cycles = 96 * stride2_plane_cycles(plane)
            assert cycles < 0.7 * 96 * out * out * U74_CHANNELS_LAST_CYCLES
        want = CALL_NS + cycles * VFMA_NS / (spec.vector_bits // 32) / SCALAR_TILE_CYCLES + moved
        assert model.cost(graph.nodes[0], nhwc) == pytest.approx(want), (k, stride)


def _activations_model() -> tuple[onnx.ModelProto, dict]:
    """MobileNetV2's stem (3x3 stride 2, 3 -> 12 channels, pads 1) with Clip6, a 1x1 expand 12 -> 17 with Clip6,
    a 1x1 conv 17 -> 12 with a leaky Relu, a 3x3 conv 12 -> 11 with Clip(-0.5, 0.5): the
    activations the GEMM tile's epilogue applies (kernels/matmul_blocked.py Problem.activation); one input NaN."""
    rng = np.random.default_rng(19)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    lo, hi = np.float32(0), np.float32(6)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Clip", ["c0", "lo", "hi"], ["s0"]),
             helper.make_node("Conv", ["s0", "w1", "b1"], ["c1"]), helper.make_node("Clip", ["c1", "lo", "hi"], ["s1"]),
             helper.make_node("Conv", ["s1", "w2"], ["c2"]), helper.make_node("LeakyRelu", ["c2"], ["y2"], alpha=0.1),
             helper.make_node("Conv", ["y2", "w3"], ["c3"], pads=[1] * 4),
             helper.make_node("Clip", ["c3", "l3", "h3"], ["y3"])]
    consts = {"w0": f(12, 3, 3, 3), "b0": f(12), "w1": f(17, 12, 1, 1), "b1": f(17), "w2": f(12, 17, 1, 1),
              "w3": f(11, 12, 3, 3), "lo": lo, "hi": hi, "l3": np.float32(-0.5), "h3": np.float32(0.5)}
    x = f(1, 3, 21, 23)
    x[0, 1, 7, 9] = np.nan
    return graph_model(nodes, {"x": x}, ["s1", "y2", "y3"], consts, 13), {"x": x}


@pytest.mark.qemu
def test_clip_and_leaky_relu_convs_run_the_tile_on_visionfive2(tmp_path, patched_compiler):
    """Convs with a fused Clip or leaky Relu run the GEMM tile (1x1: ops/conv/pointwise.py, 3x3: im2col.py; before,
    the generic conv kernel, MobileNetV2's stem 62% of peak by llvm-mca-22 against the tile's 70.4%) and keep ONNX's
    values, NaN included."""
    from fluidml_xc.ops.conv import conv2d as conv
    taken, pointwise, im2col = [], conv.emit_pointwise_gemm, conv.emit_im2col_gemm

    def record(name, fn):
        def emit(k, *args):
            done = fn(k, *args)
            taken.append((name, done))
            return done
        return emit
    patched_compiler.setattr(conv, "emit_pointwise_gemm", record("pointwise", pointwise))
    patched_compiler.setattr(conv, "emit_im2col_gemm", record("im2col", im2col))
    model, feeds = _activations_model()
    artifact = build(model, tmp_path, "visionfive2", profile_runner=False, conv_algo="direct")
    got = run(artifact, feeds)
    for out, want in ort(model, feeds).items():
        np.testing.assert_array_equal(np.isnan(got[out]), np.isnan(want), err_msg=f"NaN lanes of {out}")
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-4, err_msg=out)
    assert sorted(name for name, done in taken if done) == ["im2col", "im2col", "pointwise", "pointwise"], taken
