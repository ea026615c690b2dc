"""Stride-2 3x3 depthwise on the U74 (#30, kernels/depthwise_stride2.py): the band routine's words against llvm-mc, its
loop by llvm-mca-22 against the issue model the cost model prices it with, and under qemu-riscv64 against ONNX
Runtime: NCHW and channels-last (pointers moved every 4 columns, or every column past the immediates), odd and
even widths, pads 0 to 2 (zero rows, an unread last column), Relu, a Clip with one bound, no activation, NaN and
infinities (NaN kept, -0 as documented), 1 / 4 / 8 threads bit-identical."""
from __future__ import annotations

import re
import struct
import subprocess

import numpy as np
import pytest
from onnx import helper

from fluidml_xc.kernels import depthwise_stride2 as s2
from fluidml_xc.kernels.depthwise_tile import SECTION
from modelrun import build, graph_model, run
from test_riscv_u74 import _tool, ort

BANDS = {
    "channels-last 96": s2.Band(3, 112, 1, 0, frozenset(), 384, 384, True, True, True),
    "nchw, relu, zero row": s2.Band(3, 29, 1, 1, frozenset({0}), 4, 4, True, False, True),
    "576 channels": s2.Band(2, 14, 1, 1, frozenset({4}), 2304, 2304, True, True, True),
    "no activation, pad 2": s2.Band(1, 9, 2, 0, frozenset({0, 1}), 4, 4, False, False, False),
    "high only": s2.Band(3, 16, 0, 1, frozenset({6}), 4, 4, False, True, True),
}


def loop_body(code: list) -> str:
    lines = s2.text(code).splitlines()
    top = next(i for i, line in enumerate(lines) if line.endswith(":"))
    end = next(i for i, line in enumerate(lines) if line.startswith("bne"))
    return ".Lhot:\n" + "\n".join([*lines[top + 1:end], lines[end].rsplit(",", 1)[0] + ", .Lhot"]) + "\n"


@pytest.mark.parametrize("name", list(BANDS))
def test_routine_encodes_as_llvm_mc_assembles_it(name, tmp_path):
    """Words are llvm-mc's; every tap once, every output stored once."""
    mc, objcopy = _tool("llvm-mc-22", "llvm-mc-19", "llvm-mc"), _tool("llvm-objcopy-22", "llvm-objcopy-19", "llvm-objcopy")
    band = BANDS[name]
    code = s2.program(band)
    subprocess.run([mc, "-triple=riscv64", "-mattr=+f,+d", "-filetype=obj", "-o", str(tmp_path / "a.o")],
                   input=s2.text(code), text=True, check=True)
    subprocess.run([objcopy, "-O", "binary", "--only-section=.text", str(tmp_path / "a.o"), str(tmp_path / "a.bin")], check=True)
    data = (tmp_path / "a.bin").read_bytes()
    assert list(struct.unpack(f"<{len(data) // 4}I", data)) == s2.encode(code)
    loops = [i for i, insn in enumerate(code) if insn[0] == "bne"]
    top, end = (code[loops[0]][3], loops[0]) if loops else (0, 0)
    repeat = [s2._steady(band)[1] if top <= i < end else 1 for i in range(len(code))]
    assert sum(n for insn, n in zip(code, repeat) if insn[0] == "fmadd.s") == 9 * band.rows * band.out_width
    stores = sum(n for insn, n in zip(code, repeat) if insn[0] in ("sw", "fsw") and insn[2] != 2)
    assert stores == band.rows * band.out_width


def test_loop_cycles_are_llvm_mca_22s():
    """The issue model (`U74`, the cost model's price) gives llvm-mca-22's cycles for the loop within 3%."""
    mca = _tool("llvm-mca-22")
    for name in ("channels-last 96", "nchw, relu, zero row"):
        code = s2.program(BANDS[name])
        body = loop_body(code)
        out = subprocess.run([mca, "-mtriple=riscv64", "-mcpu=sifive-u74", "-iterations=200"], input=body,
                             capture_output=True, text=True, check=True).stdout
        cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200
        end = next(i for i, insn in enumerate(code) if insn[0] == "bne")
        machine = s2.U74()
        for _ in range(20):
            for insn in code[code[end][3]:end + 1]:
                machine.place(s2.dataflow(insn))
        assert machine.write_back / 20 == pytest.approx(cycles, rel=0.03), name


def _model():
    """Stride-2 depthwise convs: NCHW 12 channels of 13 x 29 (odd width: every column read) with Clip(0, 6), a NaN,
    +-inf and -0 inputs; 8 x 28 (even: the last column unread) with a Relu, pads 0 and 2 (zero rows, no loop), no
    bias; a Clip with only an upper bound and asymmetric pads; no activation; channels-last through Transposes
    with 96 channels (pointers moved every 4 columns) and 576 (every column), a NaN in each phase of the loop."""
    rng = np.random.default_rng(31)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    x = f(2, 12, 13, 29)
    x[0, 1, 4, 7], x[0, 2, 5, 12], x[1, 3, 0, 28], x[0, 4, 12, 0] = np.nan, np.inf, -np.inf, np.nan
    x[0, 5, :, 5:9] = -0.0
    v = f(1, 6, 8, 28)
    h = f(1, 30, 30, 96)
    for col in range(9, 17):
        h[0, col, col, 7 * col % 96] = np.nan
    g = f(1, 7, 14, 576)
    g[0, 3, 9, 100] = np.inf
    feeds = {"x": x, "v": v, "h": h, "g": g}
    consts = {"w": f(12, 1, 3, 3), "b": f(12), "wv": f(6, 1, 3, 3), "wh": f(96, 1, 3, 3), "bh": f(96),
              "wg": f(576, 1, 3, 3), "bg": f(576), "lo": np.array(0, np.float32), "hi": np.array(6, np.float32),
              "top": np.array(0.25, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], group=12, pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["y1"]),
             helper.make_node("Conv", ["v", "wv"], ["c2"], group=6, pads=[2, 0, 0, 2], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["y2"]),
             helper.make_node("Conv", ["v", "wv"], ["c3"], group=6, pads=[0, 1, 2, 0], strides=[2, 2]),
             helper.make_node("Clip", ["c3", "", "top"], ["y3"]),
             helper.make_node("Conv", ["x", "w", "b"], ["y4"], group=12, pads=[0, 2, 1, 1], strides=[2, 2]),
             helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["ht", "wh", "bh"], ["c5"], group=96, pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Clip", ["c5", "lo", "hi"], ["d5"]),
             helper.make_node("Transpose", ["d5"], ["y5"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["g"], ["gt"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["gt", "wg", "bg"], ["c6"], group=576, pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Clip", ["c6", "lo", "hi"], ["d6"]),
             helper.make_node("Transpose", ["d6"], ["y6"], perm=[0, 2, 3, 1])]
    return graph_model(nodes, feeds, ["y1", "y2", "y3", "y4", "y5", "y6"], consts, 13), feeds


@pytest.mark.qemu
def test_stride2_bands_match_onnxruntime_at_1_4_8_threads(patched_compiler, tmp_path):
    """Every conv runs the routine (recorded), NaN where ONNX Runtime has NaN, the rest its values; the same bits at
    1, 4 and 8 threads."""
    called = []
    call = s2.call

    def record(k, band, *args):
        called.append(band)
        return call(k, band, *args)
    patched_compiler.setattr(s2, "call", record)
    model, feeds = _model()
    artifact = build(model, tmp_path, "visionfive2", threads=8, profile_runner=False)
    assert SECTION.encode() in (artifact / "model.o").read_bytes()
    assert 4 in {b.x_col for b in called} and max(b.x_col for b in called) > 2047
    assert {(lay.in_shared, lay.out_shared) for lay in map(s2.layout, called)} >= {(True, True), (False, False)}
    assert {b.clip for b in called} == {True, False}
    results = {t: run(artifact, feeds, threads=t) for t in (1, 4, 8)}
    want = ort(model, feeds)
    assert np.isnan(want["y1"]).any() and np.isnan(want["y5"]).any()
    for out in want:
        assert results[1][out].tobytes() == results[4][out].tobytes() == results[8][out].tobytes(), out
        np.testing.assert_array_equal(np.isnan(results[1][out]), np.isnan(want[out]), err_msg=out)
        np.testing.assert_allclose(results[1][out], want[out], rtol=1e-4, atol=1e-4, err_msg=out)
