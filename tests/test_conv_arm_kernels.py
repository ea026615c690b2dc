"""ARM-only float conv kernel forms (docs/ARM_KERNELS.md), run under qemu-user against onnx.reference:
aarch64 row vectors whose first and last vector of a row read zeros shifted in for the padding (edge
blocks); aarch64 depthwise rows in pairs (output rows sharing input rows, accumulators starting from a
loaded bias, bit-identical across threads); aarch64 channels-last depthwise over pairs of channel vectors
(st1 of two vectors per pixel) with the odd vector and single channels after them; armv7 channels-last
depthwise one kernel row at a time; armv7 depthwise rows with each tap a lane of the channel's weight
vectors (vmla.f32 q, q, d[x]) and vfma for the other float multiply-adds; and the cost model's view of
these forms (fluid/costs.py through kernels/conv_geometry.py's TargetForms)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import onnx
from onnx import helper

from modelrun import compile_and_run, float_model, rand, reference, require_emulator

RTOL, ATOL = 1e-4, 1e-5


def row_convs():
    """NCHW convs on row vectors: padded, dilated, 5x5, grouped with 2 channels per group, rows of 8-13."""
    N = helper.make_node
    lo, hi = np.array(0.0, np.float32), np.array(0.6, np.float32)
    inits = {"w1": rand(12, 1, 3, 3, seed=1), "b1": rand(12, seed=2), "w2": rand(12, 1, 3, 3, seed=3),
             "w3": rand(12, 1, 5, 5, seed=4), "w4": rand(12, 3, 3, 3, seed=5), "b4": rand(12, seed=6),
             "w5": rand(12, 1, 3, 3, seed=7), "lo": lo, "hi": hi}
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], group=12, pads=[1, 1, 1, 1]),
             N("Clip", ["c1", "lo", "hi"], ["y1"]),
             N("Conv", ["x", "w2"], ["y2"], group=12, pads=[2, 2, 2, 2], dilations=[2, 2]),
             N("Conv", ["x", "w3"], ["y3"], group=12, pads=[2, 2, 2, 2]),
             N("Conv", ["x", "w4", "b4"], ["y4"], group=4, pads=[1, 1, 1, 1]),
             N("Conv", ["x", "w5"], ["y5"], group=12, pads=[0, 2, 1, 0])]
    return float_model(nodes, inits, {"x": rand(1, 12, 7, 13, seed=8)}, ["y1", "y2", "y3", "y4", "y5"])


def mobilenet_block(channels: int):
    """1x1 expand, Clip6, depthwise 3x3, Clip6, 1x1 project: --opt fluid runs the depthwise channels-last."""
    N = helper.make_node
    six = (np.array(0.0, np.float32), np.array(6.0, np.float32))
    inits = {"w1": rand(channels, 8, 1, 1, seed=11), "wd": rand(channels, 1, 3, 3, seed=12), "bd": rand(channels, seed=13),
             "w2": rand(8, channels, 1, 1, seed=14), "lo": six[0], "hi": six[1]}
    nodes = [N("Conv", ["x", "w1"], ["e"]), N("Clip", ["e", "lo", "hi"], ["e6"]),
             N("Conv", ["e6", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], group=channels),
             N("Clip", ["d", "lo", "hi"], ["d6"]), N("Conv", ["d6", "w2"], ["y"])]
    return float_model(nodes, inits, {"x": rand(1, 8, 14, 14, seed=15)}, ["y"])


def ir_text(m, board: str) -> str:
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    return lower(import_graph(m), machine_spec(get_board(board)), LowerOptions(opt="fluid", parallel=False)).ir_text


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_row_vector_convs(board, tmp_path):
    require_emulator(board)
    m = row_convs()
    if board == "qemu-armv7":  # the depthwise rows take their taps as lanes of weight vectors
        text = ir_text(m, board)
        assert re.search(r'asm\s+"", "=r,0"', text) and "llvm.fma.v4f32" in text
    feeds = {"x": rand(1, 12, 7, 13, seed=8)}
    got, want = compile_and_run(m, feeds, tmp_path, board), reference(m, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("channels", [44, 46])
def test_channels_last_depthwise_pairs(channels, tmp_path):
    """44 channels: 5 pairs of vectors and one vector; 46: and two single channels."""
    require_emulator("qemu-aarch64")
    m = mobilenet_block(channels)
    assert "llvm.aarch64.neon.st1x2.v4f32" in ir_text(m, "qemu-aarch64")
    feeds = {"x": rand(1, 8, 14, 14, seed=15)}
    got = compile_and_run(m, feeds, tmp_path, "qemu-aarch64", opt="fluid")
    np.testing.assert_allclose(got["y"], reference(m, feeds)["y"], rtol=RTOL, atol=1e-4)


def test_channels_last_depthwise_armv7_rows(tmp_path):
    """armv7 channels-last depthwise: the accumulators pass through an empty asm after each kernel row (no
    spill); 46 channels: 11 vectors and two single channels, against onnx.reference under qemu-armv7."""
    require_emulator("qemu-armv7")
    m = mobilenet_block(46)
    assert re.search(r'asm sideeffect\s+"", "=w,0"', ir_text(m, "qemu-armv7"))
    feeds = {"x": rand(1, 8, 14, 14, seed=15)}
    got = compile_and_run(m, feeds, tmp_path, "qemu-armv7", opt="fluid")
    np.testing.assert_allclose(got["y"], reference(m, feeds)["y"], rtol=RTOL, atol=1e-4)


def wide_depthwise_blocks() -> onnx.ModelProto:
    """Two MobileNetV2-like blocks over 144 channels at 28x28: the depthwise 3x3 at stride 1 and at stride 2, with
    bias, channels-last under --opt fluid."""
    N = helper.make_node
    six = (np.array(0.0, np.float32), np.array(6.0, np.float32))
    inits = {"w1": rand(144, 8, 1, 1, seed=41), "lo": six[0], "hi": six[1], "w2": rand(8, 144, 1, 1, seed=46)}
    nodes = [N("Conv", ["x", "w1"], ["e"]), N("Clip", ["e", "lo", "hi"], ["e6"])]
    for i, stride in ((1, 1), (2, 2)):
        inits.update({f"wd{i}": rand(144, 1, 3, 3, seed=41 + 2 * i), f"bd{i}": rand(144, seed=42 + 2 * i)})
        src = "e6" if i == 1 else "d1"
        nodes += [N("Conv", [src, f"wd{i}", f"bd{i}"], [f"c{i}"], pads=[1, 1, 1, 1], group=144, strides=[stride, stride]),
                  N("Clip", [f"c{i}", "lo", "hi"], [f"d{i}"])]
    nodes.append(N("Conv", ["d2", "w2"], ["y"]))
    return float_model(nodes, inits, {"x": rand(1, 8, 28, 28, seed=47)}, ["y"])


def innermost_loops(obj: bytes) -> list[list[str]]:
    """The innermost loops (a backward branch enclosing no other) of an ARM object, as instruction lists."""
    import shutil
    import subprocess
    import tempfile

    objdump = shutil.which("llvm-objdump")
    assert objdump, "llvm-objdump is needed (Debian package llvm)"
    with tempfile.NamedTemporaryFile(suffix=".o") as fh:
        fh.write(obj)
        fh.flush()
        text = subprocess.run([objdump, "-d", "--no-show-raw-insn", fh.name], capture_output=True, text=True, check=True).stdout
    insns = [(int(a, 16), s.strip()) for a, s in re.findall(r"^\s*([0-9a-f]+):\s+(.*)$", text, re.M)]
    spans = []
    for i, (addr, insn) in enumerate(insns):
        target = re.match(r"b\w*\s+(?:0x)?([0-9a-f]+)\s*<", insn)
        if target and int(target.group(1), 16) <= addr:
            spans.append((int(target.group(1), 16), addr))
    inner = [s for s in spans if not any(s[0] <= o[0] and o[1] <= s[1] and o != s for o in spans)]
    return [[insn for a, insn in insns if lo <= a <= hi] for lo, hi in inner]


def test_channels_last_depthwise_armv7_no_stack(tmp_path):
    """armv7 channels-last depthwise: one input and one output address per block, so no 4-pixel block loop (36
    `vfma`) touches the stack (at 144 channels LLVM kept a base per input row and pixel and reloaded them: 6-24 stack
    instructions per block); outputs against onnx.reference under qemu-armv7 and bit-identical at 1, 2 and 4 threads."""
    import json
    import subprocess

    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import compile_module, machine_spec
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from modelrun import build
    m = wide_depthwise_blocks()
    spec = machine_spec(get_board("qemu-armv7"))
    obj = compile_module(lower(import_graph(m), spec, LowerOptions(opt="fluid", parallel=False)).ir_text, spec)
    blocks = [body for body in innermost_loops(obj) if sum(i.startswith("vfma.f32") for i in body) >= 36]
    assert len(blocks) >= 2
    assert all(not any("[sp" in i or ", sp," in i for i in body) for body in blocks)
    require_emulator("qemu-armv7")
    feeds = {"x": rand(1, 8, 28, 28, seed=47)}
    artifact = build(m, tmp_path, "qemu-armv7", threads=4, opt="fluid", profile_runner=False)
    manifest = json.loads((artifact / "manifest.json").read_text())
    np.save(tmp_path / "x.npy", feeds["x"])
    got = {}
    for threads in (1, 2, 4):
        subprocess.run([manifest["emulator"], str(artifact / "runner"), "-i", str(tmp_path / "x.npy"), "-o",
                        str(tmp_path / f"y{threads}.npy"), "--threads", str(threads)], check=True, timeout=600, capture_output=True)
        got[threads] = np.load(tmp_path / f"y{threads}.npy")
    assert got[1].tobytes() == got[2].tobytes() == got[4].tobytes()
    np.testing.assert_allclose(got[1], reference(m, feeds)["y"], rtol=RTOL, atol=1e-4)


def depthwise_rows():
    """NCHW depthwise with bias: 3x3 +Clip6 (28 interior rows), 5x5 (pairs without lane weights), strided
    (single rows), 2 channels of 321 rows (rows split over threads: chunks of odd length), and 3x3 dilated
    along the row (two columns of edge vectors carried from pair to pair)."""
    N = helper.make_node
    six = (np.array(0.0, np.float32), np.array(6.0, np.float32))
    inits = {"w1": rand(64, 1, 3, 3, seed=21), "b1": rand(64, seed=22), "w2": rand(64, 1, 5, 5, seed=23),
             "b2": rand(64, seed=24), "w3": rand(64, 1, 3, 3, seed=25), "b3": rand(64, seed=26), "lo": six[0], "hi": six[1]}
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], group=64, pads=[1, 1, 1, 1]), N("Clip", ["c1", "lo", "hi"], ["y1"]),
             N("Conv", ["x", "w2", "b2"], ["y2"], group=64, pads=[2, 2, 2, 2]),
             N("Conv", ["x", "w3", "b3"], ["y3"], group=64, pads=[1, 1, 1, 1], strides=[2, 2]),
             N("Conv", ["x4", "w4", "b4"], ["y4"], group=2, pads=[1, 1, 1, 1]),
             N("Conv", ["x", "w5", "b5"], ["y5"], group=64, pads=[1, 2, 1, 2], dilations=[1, 2])]
    inits.update({"w4": rand(2, 1, 3, 3, seed=28), "b4": rand(2, seed=29), "w5": rand(64, 1, 3, 3, seed=31), "b5": rand(64, seed=32)})
    return float_model(nodes, inits, {"x": rand(1, 64, 30, 21, seed=27), "x4": rand(1, 2, 321, 100, seed=30)}, ["y1", "y2", "y3", "y4", "y5"])


def test_depthwise_row_pairs_across_threads(tmp_path):
    """The pairs (a fence asm between tiles, bias splats loaded per accumulator, edge vectors carried from pair
    to pair, taps as llvm.fma, rows stored by st1 of 3 and 4 vectors) match onnx.reference, and 1 and 3 threads
    (rows split at run time, so a pair or a single row may take any row) agree bit for bit."""
    import json
    import subprocess

    from modelrun import build
    require_emulator("qemu-aarch64")
    m = depthwise_rows()
    text = ir_text(m, "qemu-aarch64")
    assert re.search(r'asm sideeffect\s+"", ""', text) and re.search(r'asm\s+"", "=r,0"', text)
    assert all(f in text for f in ("llvm.fma.v4f32", "llvm.aarch64.neon.st1x3.v4f32.p0", "llvm.aarch64.neon.st1x4.v4f32.p0"))
    feeds = {"x": rand(1, 64, 30, 21, seed=27), "x4": rand(1, 2, 321, 100, seed=30)}
    artifact = build(m, tmp_path, "qemu-aarch64", threads=3, profile_runner=False)
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert "Conv" in {op["type"] for op in manifest["ops"] if op["name"] in manifest["parallel_ops"]}
    ins = []
    for spec in manifest["inputs"]:
        np.save(tmp_path / f"{spec['name']}.npy", feeds[spec["name"]])
        ins += ["-i", str(tmp_path / f"{spec['name']}.npy")]
    results = {}
    for threads in (1, 3):
        outs = [tmp_path / f"y{i}-{threads}.npy" for i in range(5)]
        subprocess.run([manifest["emulator"], str(artifact / "runner"), *ins,
                        *[a for o in outs for a in ("-o", str(o))], "--threads", str(threads)],
                       check=True, timeout=600, capture_output=True)
        results[threads] = [np.load(o) for o in outs]
    want = reference(m, feeds)
    for i, name in enumerate(want):
        assert results[1][i].tobytes() == results[3][i].tobytes(), name
        np.testing.assert_allclose(results[1][i], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("board", ["x86_64-v3", "qemu-aarch64", "qemu-armv7"])  # v3: the same forms on any host
def test_cost_model_sees_the_kernels_forms(board, monkeypatch):
    """fluid/geometry.py's ConvGeometry, built from the graph node and the strides the kernel got, holds the plan the
    kernel runs on each target (kernels/conv_plan.py plan_conv answers both): the same shape and blocking (kind, R,
    U, P, row pairs, lanes of weight vectors, the channels-last depthwise units)."""
    from fluidml_xc.fluid.geometry import conv_geometry
    from fluidml_xc.kernels.conv_geometry import TargetForms
    from fluidml_xc.ops.conv import conv2d as conv

    seen = []
    emit = conv.emit_conv

    def record(c):
        seen.append((c.plan, c.k))
        emit(c)
    monkeypatch.setattr(conv, "emit_conv", record)
    ir_text(row_convs(), board)
    ir_text(mobilenet_block(44), board)
    kinds = set()
    for plan, k in seen:
        strides = {op.name: op.strides for op in (*k.inputs, *k.outputs) if op is not None}
        geo = conv_geometry(k.graph, k.node, strides.get, k.vector_bits, TargetForms(str(k.module.triple), k.conv_accumulators))
        kinds.add(plan.blocking.kind)
        assert geo.plan.shape == plan.shape and geo.blocking == plan.blocking, k.node.name
    assert {"rows", "depthwise_c"} <= kinds
    pairs = [plan.blocking.row_pairs for plan, _ in seen]
    assert any(pairs) == (board == "qemu-aarch64")
