"""The U74 depthwise band's checked Clip form (#30, kernels/depthwise_tile.py): `fmax.s` / `fmin.s` alone on the hot
path, a check value over rows 0 and R - 1 of every third output column, the exact routine over a band only when the
check is non-finite. Its words against llvm-mc, its loop by llvm-mca-22, and under qemu-riscv64 against ONNX Runtime:
NaN, +-inf (a NaN made only in a band's middle row by +inf and -inf, inf times a zero weight), -0, NCHW and
channels-last (6 and 3 columns per iteration, row pointers moved every column), Relu, a Clip with one bound, odd
widths, 1 / 4 / 8 threads; and with the exact routine replaced by one that poisons its band, that it runs only
where a NaN or an infinity is."""
from __future__ import annotations

import re
import struct
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper

from fluidml_xc.kernels import depthwise_tile as dt
from fluidml_xc.kernels.depthwise_tile import CHECK, SECTION, Band, checked_form, encode, loop_iterations, mode, program, text
from modelrun import build, graph_model, run
from test_riscv_u74 import _tool, ort

BANDS = {
    "nchw": Band(3, 28, 1, 1, frozenset(), 112, 112, 4, 4, True, True, True),
    "rows96": Band(3, 28, 1, 1, frozenset(), 28 * 384, 28 * 384, 384, 384, True, True, True),
    "rows144": Band(3, 56, 1, 1, frozenset(), 56 * 576, 56 * 576, 576, 576, True, True, True),
    "columns": Band(3, 28, 1, 1, frozenset({4}), 28 * 384, 384, 384, 28 * 384, True, True, True),
    "relu, zero row": Band(2, 13, 0, 2, frozenset({3}), 52, 60, 4, 4, True, False, True),
    "high only": Band(1, 7, 2, 0, frozenset({0, 1}), 28, 28, 4, 4, False, True, True),
    "odd width": Band(3, 31, 1, 1, frozenset({0}), 124, 124, 4, 4, True, True, True),
}


def loop_body(code: list) -> str:
    lines = text(code).splitlines()
    top = next(i for i, line in enumerate(lines) if line.endswith(":"))
    end = next(i for i, line in enumerate(lines) if line.startswith("bne"))
    return ".Lhot:\n" + "\n".join([*lines[top + 1:end], lines[end].rsplit(",", 1)[0] + ", .Lhot"]) + "\n"


@pytest.mark.parametrize("name", list(BANDS))
def test_checked_routine_encodes_as_llvm_mc_assembles_it(name, tmp_path):
    """The checked form's words are llvm-mc's; every tap once, no feq.s / fmv.x.w / sw on the way, a check of rows
    0 and R - 1 in every 3 consecutive output columns, a0 = fclass.s of the check value."""
    mc, objcopy = _tool("llvm-mc-22", "llvm-mc-19", "llvm-mc"), _tool("llvm-objcopy-22", "llvm-objcopy-19", "llvm-objcopy")
    band = BANDS[name]
    code = program(band, True)
    subprocess.run([mc, "-triple=riscv64", "-mattr=+f,+d", "-filetype=obj", "-o", str(tmp_path / "a.o")],
                   input=text(code), text=True, check=True)
    subprocess.run([objcopy, "-O", "binary", "--only-section=.text", str(tmp_path / "a.o"), str(tmp_path / "a.bin")], check=True)
    data = (tmp_path / "a.bin").read_bytes()
    assert list(struct.unpack(f"<{len(data) // 4}I", data)) == encode(code)
    assert not {"feq.s", "fmv.x.w", "sw", "or"} & {op for op, *_ in code}
    span = checked_form(band).span
    loops = [i for i, insn in enumerate(code) if insn[0] == "bne"]
    top, end = (code[loops[0]][3], loops[0]) if loops else (0, 0)
    repeat = [loop_iterations(band, span) if top <= i < end else 1 for i in range(len(code))]
    taps = sum(n for insn, n in zip(code, repeat) if insn[0] == "fmadd.s" and insn[1] != dt.CHECK)
    assert taps == 9 * band.rows * band.out_width
    checks = sum(n for insn, n in zip(code, repeat) if insn[0] == "fmadd.s" and insn[1] == dt.CHECK)
    assert checks >= band.out_width / 3
    stores = sum(n for insn, n in zip(code, repeat) if insn[0] == "fsw")
    assert stores == band.rows * band.out_width
    at = code.index(("fclass.s", 5, CHECK))
    assert code[at + 1] == ("andi", 10, 5, 0x381) and {op for op, *_ in code[at + 2:]} <= {"fld", "ld", "addi", "jalr"}


def test_checked_loops_reach_70_percent_in_llvm_mca_22():
    """NCHW (3 columns per iteration) and row pointers (6) with Clip(0, 6): >= 70% of one fmadd.s per cycle by
    llvm-mca-22's SiFive7 model, the checks' multiply-adds not counted as work."""
    mca = _tool("llvm-mca-22")
    for name in ("nchw", "rows96"):
        body = loop_body(program(BANDS[name], True))
        work = sum(line.startswith("fmadd.s") and not line.startswith(f"fmadd.s f{CHECK},") for line in body.splitlines())
        out = subprocess.run([mca, "-mtriple=riscv64", "-mcpu=sifive-u74", "-iterations=200"], input=body,
                             capture_output=True, text=True, check=True).stdout
        cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200
        assert work / cycles >= 0.70, (name, work, cycles)


def _specials_model() -> tuple[onnx.ModelProto, dict]:
    """Depthwise 3x3 + Clip(0, 6) NCHW over 12 channels of 9 x 28 and 7 x 31 (bands of 3 rows; odd width), a Relu, a
    Clip with only an upper bound, channels-last with 96 channels (6 columns per iteration) and 144 (3), and one whose
    output columns are far apart (pointers moved every column). Channels 0-2: +inf in input row 3 and -inf in row 5 at
    columns 9, 10, 11 (each phase of the 3-column loop) with positive weights: NaN only in output row 4, the middle
    of the second band; channel 3: a NaN; channel 4: inf times a zero weight; channel 5: -0 inputs; the others and
    96 channels: a NaN at each phase of the 6-column loop; MobileNetV2 blocks (row pointers, 6 columns at 96 and 144
    channels) and planes read channels-last and written NCHW (rows at offsets from one pointer) with a NaN or an
    infinity in each phase; every other image finite."""
    rng = np.random.default_rng(30)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    x = f(1, 12, 9, 28)
    w = f(12, 1, 3, 3)
    for ch, col in zip(range(3), (9, 10, 11)):
        x[0, ch, 3, col], x[0, ch, 5, col] = np.inf, -np.inf
        w[ch] = np.abs(w[ch]) + 0.1
    x[0, 3, 6, 17] = np.nan
    x[0, 4, 1, 20], w[4, 0, 1, 1] = np.inf, 0.0
    x[0, 5, :, 5:9] = -0.0
    v = f(1, 6, 7, 31)
    v[0, 2, 3, 14] = np.nan
    h = f(1, 6, 28, 96)
    for col in range(9, 15):  # each phase of the 6-column loop
        h[0, col % 5, col, 6 * col] = np.nan
    g = f(1, 5, 56, 144)
    g[0, 2, 40, 7] = -np.inf
    m, n = f(1, 16, 28, 28), f(1, 24, 56, 56)
    for k, col in enumerate(range(9, 15)):  # MobileNetV2 blocks (channels-last): a NaN in each phase of the loop
        m[0, k % 16, 1 + 3 * k, col] = np.nan
        n[0, k, 2 + 9 * k, col + 30] = np.nan
    t96, t192 = f(1, 28, 28, 96), f(1, 14, 28, 192)  # read channels-last, written NCHW (walked transposed)
    for k, col in enumerate(range(9, 15)):
        t96[0, 1 + 4 * k, col, 5 * k], t192[0, 2 * k, col, 9 * k] = np.nan, np.inf
    feeds = {"x": x, "v": v, "h": h, "g": g, "m": m, "n": n, "t96": t96, "t192": t192}
    consts = {"w": w, "b": f(12), "wv": f(6, 1, 3, 3), "wh": f(96, 1, 3, 3), "bh": f(96), "wg": f(144, 1, 3, 3),
              "lo": np.array(0, np.float32), "hi": np.array(6, np.float32), "top": np.array(0.25, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], group=12, pads=[1] * 4),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["y1"]),
             helper.make_node("Conv", ["v", "wv"], ["c2"], group=6, pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["y2"]),
             helper.make_node("Conv", ["v", "wv"], ["c3"], group=6, pads=[1] * 4),
             helper.make_node("Clip", ["c3", "", "top"], ["y3"]),
             helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["ht", "wh", "bh"], ["c4"], group=96, pads=[1] * 4),
             helper.make_node("Clip", ["c4", "lo", "hi"], ["d4"]),
             helper.make_node("Transpose", ["d4"], ["y4"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["g"], ["gt"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["gt", "wg"], ["c5"], group=144, pads=[1] * 4),
             helper.make_node("Clip", ["c5", "lo", "hi"], ["d5"]),
             helper.make_node("Transpose", ["d5"], ["y5"], perm=[0, 2, 3, 1]),
             helper.make_node("Conv", ["ht", "wh"], ["c6"], group=96, pads=[1] * 4),
             helper.make_node("Clip", ["c6", "lo", "hi"], ["d6"]),
             helper.make_node("Transpose", ["d6"], ["y6"], perm=[0, 3, 2, 1])]
    for name, cin, hidden, cout in (("m", 16, 96, 24), ("n", 24, 144, 24)):
        nodes += [helper.make_node("Conv", [name, f"{name}1"], [f"{name}e"]),
                  helper.make_node("Clip", [f"{name}e", "lo", "hi"], [f"{name}6"]),
                  helper.make_node("Conv", [f"{name}6", f"{name}d"], [f"{name}c"], pads=[1] * 4, group=hidden),
                  helper.make_node("Clip", [f"{name}c", "lo", "hi"], [f"{name}k"]),
                  helper.make_node("Conv", [f"{name}k", f"{name}2"], [f"y{name}"])]
        consts |= {f"{name}1": f(hidden, cin, 1, 1), f"{name}d": f(hidden, 1, 3, 3), f"{name}2": f(cout, hidden, 1, 1)}
    for name, c in (("t96", 96), ("t192", 192)):
        nodes += [helper.make_node("Transpose", [name], [f"{name}t"], perm=[0, 3, 1, 2]),
                  helper.make_node("Conv", [f"{name}t", f"w{name}"], [f"c{name}"], group=c, pads=[1] * 4),
                  helper.make_node("Clip", [f"c{name}", "lo", "hi"], [f"y{name}"])]
        consts[f"w{name}"] = f(c, 1, 3, 3)
    return graph_model(nodes, feeds, ["y1", "y2", "y3", "y4", "y5", "y6", "ym", "yn", "yt96", "yt192"], consts, 13), feeds


@pytest.mark.qemu
def test_checked_clip_matches_onnxruntime_at_1_4_8_threads(tmp_path):
    """NaN where ONNX Runtime has NaN (the middle row's too), the rest its values; the same bits at 1, 4, 8 threads."""
    model, feeds = _specials_model()
    artifact = build(model, tmp_path, "visionfive2", threads=8, profile_runner=False)
    assert SECTION.encode() in (artifact / "model.o").read_bytes()
    results = {t: run(artifact, feeds, threads=t) for t in (1, 4, 8)}
    want = ort(model, feeds)
    assert np.isnan(want["y1"][0, :3, 4]).any() and not np.isnan(want["y1"][0, :3, [3, 5]]).any()
    for out in want:
        assert results[1][out].tobytes() == results[4][out].tobytes() == results[8][out].tobytes(), out
        np.testing.assert_array_equal(np.isnan(results[1][out]), np.isnan(want[out]), err_msg=out)
        np.testing.assert_allclose(results[1][out], want[out], rtol=1e-4, atol=1e-4, err_msg=out)


@pytest.mark.qemu
def test_exact_routine_runs_only_over_non_finite_bands(patched_compiler, tmp_path):
    """The exact routine replaced by one that stores a NaN at its band's first output: the NCHW outputs are ONNX
    Runtime's (finite) wherever the band had only finite inputs, and NaN at the first output of each band that held a
    NaN or an infinity."""
    exact = dt.program

    def poison(band, checked=False, span=None):
        if checked or not band.clip or mode(band) != "offsets":  # the out pointer at the band's first output
            return exact(band, checked, span)
        return [("addi", 5, 0, -1), ("sw", 5, 11, 0), ("jalr", 0, 1, 0)]
    patched_compiler.setattr(dt, "program", poison)
    model, feeds = _specials_model()
    got = run(build(model, tmp_path, "visionfive2", profile_runner=False), feeds)
    want = ort(model, feeds)
    flagged = {(ch, band) for ch in range(3) for band in range(3)} | {(3, 1), (3, 2), (4, 0)}
    y = got["y1"][0]
    for ch in range(12):
        for band in range(3):
            rows = slice(3 * band, 3 * band + 3)
            if (ch, band) in flagged:
                assert np.isnan(y[ch, 3 * band, 0]), (ch, band)
            else:
                np.testing.assert_allclose(y[ch, rows], want["y1"][0, ch, rows], rtol=1e-4, atol=1e-4, err_msg=f"{ch} {band}")


def test_checked_form_is_priced_as_llvm_mca_22_counts_it():
    """CHECKED_PIXEL_CYCLES (the cost model's price of a band with a Clip, kernels/depthwise_tile.py plane_cycles) is
    llvm-mca-22's cycles per pixel of each layout's loop within 1%: one pointer (NCHW), row pointers over 6 columns
    (96 channels) and over 3 (192), rows at offsets from one pointer moved every column (a plane walked transposed),
    row pointers moved every column; and 6 columns with each mix of pointers MobileNetV2 has within 1% of one price."""
    mca = _tool("llvm-mca-22")
    for layout, col, transposed in (("offsets", 4, False), ("6 columns", 384, False), ("3 columns", 768, False),
                                    ("6 columns, both sides moved every column", 10752, True), ("every column", 1536, False)):
        row = 384 if transposed else 28 * col
        band = Band(3, 28, 1, 1, frozenset(), row, row, col, col, True, True, True)
        assert dt.checked_layout(band) == layout
        body = loop_body(program(band, True))
        work = sum(line.startswith("fmadd.s") and not line.startswith(f"fmadd.s f{CHECK},") for line in body.splitlines())
        out = subprocess.run([mca, "-mtriple=riscv64", "-mcpu=sifive-u74", "-iterations=200"], input=body,
                             capture_output=True, text=True, check=True).stdout
        per_pixel = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200 / (work / 9)
        assert per_pixel == pytest.approx(dt.CHECKED_PIXEL_CYCLES[layout], rel=0.01), layout
        plane = [band]
        assert dt.plane_cycles(plane) == pytest.approx(dt.CALL_CYCLES[mode(band)] + 3 + 3 * 28 * dt.CHECKED_PIXEL_CYCLES[layout])
    for width, col, out_col in ((56, 576, 4), (112, 128, 4), (56, 576, 576), (28, 10752, 4)):  # NCHW out, lags, transposed
        x_row, out_row = (384, 112) if col > 2047 else (width * col, width * out_col)
        band = Band(3, width, 1, 1, frozenset(), x_row, out_row, col, out_col, True, True, True)
        assert dt.checked_layout(band) == "6 columns", (width, col, out_col)
        body = loop_body(program(band, True))
        out = subprocess.run([mca, "-mtriple=riscv64", "-mcpu=sifive-u74", "-iterations=200"], input=body,
                             capture_output=True, text=True, check=True).stdout
        per_pixel = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200 / 18
        assert per_pixel == pytest.approx(dt.CHECKED_PIXEL_CYCLES["6 columns"], rel=0.01), (width, col, out_col)
