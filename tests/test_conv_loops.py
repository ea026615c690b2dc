"""Conv rows as loops, not copies (#27, ConvPlan.border_loop): the padded rows above and below the interior run as
one loop with their tap ranges from the build-time tables, so a conv padded on both sides emits no more code than
the same conv padded on one side; row pairs (aarch64) take their odd interior row into that loop. Channels-last
depthwise rows run their tiles of P in a loop however narrow the row and the columns outside the tiles as one loop of
single pixels with guarded taps (ConvPlan.edge_loop), so a row's code does not grow with its width; their padded
rows read a zero row (ConvPlan.zero_rows), so every row runs the interior's code, emitted once. Outputs against
onnx.reference, bit-identical across thread counts (rows split at run time), on x86_64, aarch64 and armv7 (built
with --conv-algo direct: these are the direct kernels' rows, tests/test_winograd.py tests Winograd's).
Channel-vector blocks at 16 lanes: a strided (NCHW) store takes three instructions a lane from one base pointer, a bias
vector one load, and a rest block of channels computes only the vectors it stores."""
from __future__ import annotations

import numpy as np
import pytest
import onnx
from onnx import helper

from fluidml_xc.ops.conv import conv2d, depthwise
from fluidml_xc.ops.conv.shared_depthwise import ZERO_CHANNELS
from fluidml_xc.kernels.conv_plan import BORDER_LOOP_ROWS, EDGE_LOOP_SHARE, ZERO_ROW_BYTES, conv_shape, plan_conv
from fluidml_xc.kernels.conv_geometry import TargetForms
from fluidml_xc.pipeline import LowerOptions, import_graph, lower
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec, machine_specs
from modelrun import compile_and_run, float_model, rand, reference, require_emulator

RTOL, ATOL = 1e-4, 1e-5


def assert_close(got, want, name=""):
    """Within float32 rounding of sums of this size: atol scales with the output's largest magnitude (the reference,
    onnx.reference in numpy float32, rounds its own sums in an order that depends on the host's SIMD level)."""
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(want).max(initial=0))), err_msg=name)


def one_conv(pads, group: int, x_shape, oc: int, k: int = 3, **attrs):
    c = x_shape[1]
    return float_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=pads, group=group, **attrs)],
                       {"w": rand(oc, c // group, k, k, seed=1), "b": rand(oc, seed=2)}, {"x": rand(*x_shape, seed=3)}, ["y"])


def instructions(model, board: str, opt: str, spec=None) -> int:
    spec = spec or machine_spec(get_board(board))
    text = lower(import_graph(model, conv_algo="direct"), spec, LowerOptions(opt=opt, parallel=False)).ir_text
    return sum(1 for line in text.splitlines() if line.startswith("  ") and not line.lstrip().startswith(";"))


@pytest.mark.parametrize("board,group,opt", [("x86_64-v3", 1, "plain"), ("x86_64-v3", 16, "fluid"),
                                             ("qemu-aarch64", 1, "plain"), ("qemu-armv7", 1, "fluid")])
def test_rows_padded_on_both_sides_cost_no_more_code_than_one_side(board, group, opt):
    """Each row needs its code once for the interior and once for the padded rows, however many sides are padded
    (before: a copy per side, 1.4x the code)."""
    both = instructions(one_conv([1, 1, 1, 1], group, (1, 16, 31, 29), 16), board, opt)
    top = instructions(one_conv([1, 1, 0, 1], group, (1, 16, 31, 29), 16), board, opt)
    assert both <= top, (both, top)


def _plan(pads, k=3, strides=(1, 1), group=1, triple="x86_64-unknown-linux-gnu", H=30):
    W = 20
    oh = (H + pads[0] + pads[2] - k) // strides[0] + 1
    ow = (W + pads[1] + pads[3] - k) // strides[1] + 1
    C = 8
    s = conv_shape(((1, C, H, W), (C * H * W, H * W, W, 1)), ((1, 8, oh, ow), (8 * oh * ow, oh * ow, ow, 1)),
                   ((8, C // group, k, k), (C // group * k * k, k * k, k, 1)), None, strides, (1, 1), pads[:2], group)
    return plan_conv(s, TargetForms(triple, 16), dtype="float32", V=4 if "armv7" in triple else 8, w_const=True,
                     finite=True)


def test_border_loop_rule():
    """Rows padded on both sides loop, from BORDER_LOOP_ROWS rows on; one side alone (a stride-2 conv over an even
    size) stays the one peeled row with its constant taps; armv7's depthwise rows, whose taps are lanes of constant
    weight vectors, keep their constant tap ranges."""
    assert _plan([1, 1, 1, 1]).border_loop
    assert not _plan([1, 1, 1, 1], H=BORDER_LOOP_ROWS - 1).border_loop
    assert _plan([2, 2, 2, 2], k=5).border_loop
    assert not _plan([1, 1, 1, 1], strides=(2, 2), H=60).border_loop
    assert not _plan([0, 0, 0, 0]).border_loop
    assert not _plan([1, 1, 1, 1], group=8, triple="armv7-unknown-linux-gnueabihf").border_loop


def _convs():
    """Padded on both sides (3x3 dense, depthwise, 5x5, asymmetric, dilated) over 33 rows, over 3 rows (too few
    for the loop), and a stride-2 conv padded on one side."""
    N = helper.make_node
    inits = {"w1": rand(24, 8, 3, 3, seed=1), "b1": rand(24, seed=2), "w2": rand(8, 1, 3, 3, seed=3), "b2": rand(8, seed=4),
             "w3": rand(16, 8, 5, 5, seed=5), "w4": rand(8, 1, 3, 3, seed=6), "w5": rand(16, 8, 3, 3, seed=7),
             "b5": rand(16, seed=8), "w6": rand(16, 8, 3, 3, seed=9)}
    nodes = [N("Conv", ["x", "w1", "b1"], ["y1"], pads=[1, 1, 1, 1]),
             N("Conv", ["x", "w2", "b2"], ["y2"], pads=[1, 1, 1, 1], group=8),
             N("Conv", ["x", "w3"], ["y3"], pads=[2, 2, 2, 2]),
             N("Conv", ["x", "w4"], ["y4"], pads=[2, 1, 1, 0], group=8),
             N("Conv", ["x", "w5", "b5"], ["y5"], pads=[2, 2, 2, 2], dilations=[2, 2]),
             N("Conv", ["s", "w6"], ["y6"], pads=[1, 1, 1, 1]),
             N("Conv", ["x", "w5", "b5"], ["y7"], pads=[1, 1, 1, 1], strides=[2, 2])]
    feeds = {"x": rand(1, 8, 33, 18, seed=10), "s": rand(2, 8, 3, 12, seed=11)}
    return float_model(nodes, inits, feeds, [f"y{i}" for i in range(1, 8)]), feeds


@pytest.mark.parametrize("board,opt", [("x86_64", "plain"), ("x86_64", "fluid"), ("qemu-aarch64", "fluid"),
                                       ("qemu-armv7", "plain")])
def test_border_rows_loop_matches_reference_at_any_thread_count(tmp_path, board, opt):
    require_emulator(board) if board != "x86_64" else None
    model, feeds = _convs()
    want = reference(model, feeds)
    runs = [compile_and_run(model, feeds, tmp_path / f"t{t}", board, opt=opt, threads=t, profile_runner=False, conv_algo="direct")
            for t in (1, 3)]
    for name, expected in want.items():
        assert_close(runs[0][name], expected, name)
        assert runs[0][name].tobytes() == runs[1][name].tobytes(), name


def test_row_pairs_odd_interior_row_joins_the_border_loop(tmp_path):
    """aarch64 depthwise rows in pairs without lane weights (5x5): an odd number of interior rows, its last row
    run in the border loop; 1 and 3 threads agree bit for bit and match onnx.reference."""
    require_emulator("qemu-aarch64")
    model = one_conv([2, 2, 2, 2], 16, (1, 16, 29, 21), 16, k=5)
    feeds = {"x": rand(1, 16, 29, 21, seed=3)}
    want = reference(model, feeds)["y"]
    runs = [compile_and_run(model, feeds, tmp_path / f"t{t}", "qemu-aarch64", opt="plain", threads=t,
                            profile_runner=False)["y"] for t in (1, 3)]
    assert_close(runs[0], want)
    assert runs[0].tobytes() == runs[1].tobytes()


@pytest.mark.parametrize("oc,c,hw,ratio", [(128, 32, 12, 1.55), (80, 64, 20, 2.5), (48, 16, 9, 2.4)])
def test_channel_vectors_at_16_lanes_emit_less_ir(oc, c, hw, ratio):
    """x86-64-v4's 16-lane channel blocks (NCHW output, bias) against aarch64's 4 lanes for the same conv: at most
    `ratio` times its IR (with a rest block of channels, 80 = 2 x 32 + 16 and 48 = 32 + 16, one more copy of the
    conv). Before: 1.75x, 2.86x and 2.62x (each lane's store address computed afresh, bias inserted lane by lane,
    a rest block's unused second vector computed); 20 columns are 4 blocks of 5 on aarch64, whose 2 interior ones
    loop (ConvKernel.block_runs), 2 of 10 with a padded column each on x86-64-v4."""
    model = one_conv([1, 1, 1, 1], 1, (1, c, hw, hw), oc)
    v4 = instructions(model, "x86_64", "plain", machine_specs(get_board("x86_64"))[0])
    arm = instructions(model, "qemu-aarch64", "plain")
    assert v4 <= arm * ratio, (v4, arm)


def test_narrow_row_interior_blocks_loop():
    """A row of at most 4 pixel tiles runs in balanced fixed blocks; those whose pixels all have the whole kernel row
    run as one loop (ConvKernel.block_runs): x86-64-v3's stride-2 row of 20 columns (5 + 3 x 5, the first padded)
    emits no more code than its row of 10 (5 + 5). Before: 1.9x, a copy of the block per 5 columns."""
    wide = instructions(one_conv([1, 1, 1, 1], 1, (1, 16, 12, 40), 16, strides=[2, 2]), "x86_64-v3", "plain")
    narrow = instructions(one_conv([1, 1, 1, 1], 1, (1, 16, 12, 20), 16, strides=[2, 2]), "x86_64-v3", "plain")
    assert wide <= 1.05 * narrow, (wide, narrow)


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64"])
def test_narrow_row_block_loops_match_reference_at_any_thread_count(tmp_path, board):
    """Narrow rows whose interior blocks loop (both sides padded at stride 1, stride 2, a fused residual and Relu):
    outputs match onnx.reference, 1 and 3 threads (rows split at run time) bit for bit."""
    if board != "x86_64":
        require_emulator(board)
    N = helper.make_node
    inits = {"w1": rand(24, 16, 3, 3, seed=1) * 0.2, "b1": rand(24, seed=2), "w2": rand(16, 24, 3, 3, seed=3) * 0.2,
             "w3": rand(16, 16, 3, 3, seed=5) * 0.2}
    nodes = [N("Conv", ["x", "w1", "b1"], ["y1"], pads=[1, 1, 1, 1]),
             N("Conv", ["y1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             N("Conv", ["x", "w3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]), N("Add", ["c3", "c2"], ["a3"]),
             N("Relu", ["a3"], ["y3"])]
    feeds = {"x": rand(1, 16, 10, 40, seed=4)}
    model = float_model(nodes, inits, feeds, ["y1", "c2", "y3"])
    want = reference(model, feeds)
    runs = [compile_and_run(model, feeds, tmp_path / f"t{t}", board, opt="plain", threads=t, profile_runner=False,
                            conv_algo="direct") for t in (1, 3)]
    for name, expected in want.items():
        assert_close(runs[0][name], expected, name)
        assert runs[0][name].tobytes() == runs[1][name].tobytes(), name


def test_channel_vectors_rest_blocks_and_strided_stores_match_reference(tmp_path):
    """Rest blocks of one vector and of a vector and a half (80, 40 channels), strided NCHW stores with a fused
    Relu and residual, on the widest x86 variant this machine runs: outputs match onnx.reference."""
    N = helper.make_node
    inits = {"w1": rand(80, 24, 3, 3, seed=1) * 0.2, "b1": rand(80, seed=2), "w2": rand(40, 80, 3, 3, seed=3) * 0.1,
             "b2": rand(40, seed=4), "w3": rand(40, 40, 3, 3, seed=5) * 0.1}
    nodes = [N("Conv", ["x", "w1", "b1"], ["y1"], pads=[1, 1, 1, 1]),
             N("Conv", ["y1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             N("Conv", ["c2", "w3"], ["c3"], pads=[1, 1, 1, 1]), N("Add", ["c3", "c2"], ["a3"]), N("Relu", ["a3"], ["y3"])]
    feeds = {"x": rand(1, 24, 14, 13, seed=6)}
    model = float_model(nodes, inits, feeds, ["y1", "y3"])
    want = reference(model, feeds)
    got = compile_and_run(model, feeds, tmp_path, "x86_64", opt="plain", profile_runner=False)
    for name, expected in want.items():
        assert_close(got[name], expected, name)


def _dw_plan(W, triple="x86_64-unknown-linux-gnu", V=8, strides=(1, 1), dils=(1, 1), pads=(1, 1), k=3, H=30, C=16):
    """plan_conv of a channels-last depthwise conv of C channels over H x W."""
    oh = (H + 2 * pads[0] - dils[0] * (k - 1) - 1) // strides[0] + 1
    ow = (W + 2 * pads[1] - dils[1] * (k - 1) - 1) // strides[1] + 1
    s = conv_shape(((1, C, H, W), (C * H * W, 1, W * C, C)), ((1, C, oh, ow), (C * oh * ow, 1, ow * C, C)),
                   ((C, 1, k, k), (k * k, k * k, k, 1)), None, strides, dils, pads, C)
    return plan_conv(s, TargetForms(triple, 16 if "x86" in triple else 32), dtype="float32", V=V, w_const=True,
                     finite=True)


def test_edge_loop_rule():
    """Depthwise rows with a tile of P and at most EDGE_LOOP_SHARE of their columns outside the tiles loop over those
    columns (20 = 1 + 2 x 8 + 3: 4 of 20; 12 = 1 + 8 + 3: 4 of 12); a row with a larger share (17 = 1 + 8 + 8: 9
    of 17) or no tile keeps its blocks of constant taps; strided and dilated rows alike."""
    plan = _dw_plan(20)
    assert plan.form == "depthwise_c" and plan.edge_loop and plan.col_blocks == (1, 2)
    assert (20 - 2 * plan.blocking.P) <= EDGE_LOOP_SHARE * 20
    assert _dw_plan(12).edge_loop and not _dw_plan(17).edge_loop and not _dw_plan(7).edge_loop
    assert _dw_plan(61, strides=(2, 2)).edge_loop and not _dw_plan(33, strides=(2, 2)).edge_loop
    assert _dw_plan(29, dils=(2, 2), pads=(2, 2)).col_blocks == (2, 3)
    assert _dw_plan(29, triple="aarch64-unknown-linux-gnu", V=4).edge_loop
    assert not _plan([1, 1, 1, 1], H=30).edge_loop  # dense convs keep their blocks


def _inverted_block(W: int, C: int = 64) -> onnx.ModelProto:
    """1x1 expand, 3x3 depthwise, 1x1 project over 9 x W: the optimizer lays the depthwise conv channels-last."""
    N = helper.make_node
    inits = {"w1": rand(C, 16, 1, 1, seed=1), "w2": rand(C, 1, 3, 3, seed=2), "w3": rand(16, C, 1, 1, seed=3)}
    nodes = [N("Conv", ["x", "w1"], ["a"]), N("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1], group=C), N("Conv", ["b", "w3"], ["y"])]
    return float_model(nodes, inits, {"x": rand(1, 16, 9, W)}, ["y"])


@pytest.mark.parametrize("board", ["x86_64-v3", "qemu-aarch64"])
def test_depthwise_row_code_does_not_grow_with_its_width(board):
    """An inverted residual block over 20 columns emits at most 5 % more code than over 60 (before: 1.42x on
    x86_64-v3, 1.54x on aarch64, its 20 columns each in a block of constant taps)."""
    narrow, wide = (instructions(_inverted_block(W), board, "fluid") for W in (20, 60))
    assert narrow <= 1.05 * wide, (narrow, wide)


def _depthwise_convs():
    """Inverted blocks (1x1, depthwise, 1x1: the depthwise convs laid channels-last) whose depthwise rows take the
    edge loop: 3x3 padded, stride 2, dilation 2, 5x5 with asymmetric pads, and 36 channels (a rest of vectors and
    of single channels) over an odd width with a fused Clip."""
    N = helper.make_node
    inits = {"e": rand(32, 16, 1, 1, seed=1), "e5": rand(36, 16, 1, 1, seed=2), "lo": np.float32(-0.5), "hi": np.float32(0.7),
             "w1": rand(32, 1, 3, 3, seed=3), "b1": rand(32, seed=4), "w2": rand(32, 1, 3, 3, seed=5),
             "w3": rand(32, 1, 3, 3, seed=6), "w4": rand(32, 1, 5, 5, seed=7), "w5": rand(36, 1, 3, 3, seed=8),
             "b5": rand(36, seed=9), **{f"p{i}": rand(16, 36 if i == 5 else 32, 1, 1, seed=10 + i) for i in range(1, 6)}}
    nodes = [N("Conv", ["x", "e"], ["a"]), N("Conv", ["z", "e5"], ["a5"]),
             N("Conv", ["a", "w1", "b1"], ["d1"], pads=[1, 1, 1, 1], group=32),
             N("Conv", ["a", "w2"], ["d2"], pads=[1, 1, 1, 1], strides=[2, 2], group=32),
             N("Conv", ["a", "w3"], ["d3"], pads=[2, 2, 2, 2], dilations=[2, 2], group=32),
             N("Conv", ["a", "w4"], ["d4"], pads=[2, 1, 1, 2], group=32),
             N("Conv", ["a5", "w5", "b5"], ["c5"], pads=[1, 1, 1, 1], group=36), N("Clip", ["c5", "lo", "hi"], ["d5"]),
             *(N("Conv", [f"d{i}", f"p{i}"], [f"y{i}"]) for i in range(1, 6))]
    feeds = {"x": rand(1, 16, 11, 61, seed=20), "z": rand(1, 16, 7, 27, seed=21)}
    return float_model(nodes, inits, feeds, [f"y{i}" for i in range(1, 6)]), feeds


@pytest.mark.parametrize("board", ["x86_64", "x86_64-v3", "qemu-aarch64", "qemu-armv7"])
def test_depthwise_edge_loop_matches_reference_at_any_thread_count(tmp_path, board, patched_compiler):
    """The edge columns' loop and the tiles' loop of depthwise rows (borders, strides 1 and 2, dilation, odd
    widths, rest channels) match onnx.reference; 1 and 3 threads agree bit for bit; each depthwise conv was emitted
    with the edge loop (x86_64: every variant, v4's 16 lanes too)."""
    require_emulator(board) if not board.startswith("x86_64") else None
    looped = set()
    emit_conv = conv2d.emit_conv

    def recording(c):
        if c.plan.edge_loop:
            looped.add((c.plan.shape.G, c.plan.shape.OW, c.plan.shape.KW, c.plan.shape.sw, c.plan.shape.dw))
        emit_conv(c)
    patched_compiler.setattr(conv2d, "emit_conv", recording)
    model, feeds = _depthwise_convs()
    want = reference(model, feeds)
    runs = [compile_and_run(model, feeds, tmp_path / f"t{t}", board, opt="fluid", threads=t, profile_runner=False,
                            conv_algo="direct") for t in (1, 3)]
    assert looped == {(32, 61, 3, 1, 1), (32, 31, 3, 2, 1), (32, 61, 3, 1, 2), (32, 60, 5, 1, 1), (36, 27, 3, 1, 1)}, looped
    for name, expected in want.items():
        assert_close(runs[0][name], expected, name)
        assert runs[0][name].tobytes() == runs[1][name].tobytes(), name


def test_zero_rows_rule():
    """A padded channels-last depthwise conv reads a zero row of (W - 1) x the column stride + the channels rounded
    to vectors; unpadded rows, armv7's settled blocks and rows wider than ZERO_ROW_BYTES keep their own code."""
    assert _dw_plan(20).zero_rows == 19 * 16 + 16
    assert _dw_plan(20, C=20).zero_rows == 19 * 20 + 24
    assert _dw_plan(20, pads=(0, 1)).zero_rows == 0
    assert _dw_plan(20, triple="armv7-unknown-linux-gnueabihf", V=4).zero_rows == 0
    wide = ZERO_ROW_BYTES // (4 * 16) + 1
    assert _dw_plan(wide - 2).zero_rows and not _dw_plan(wide).zero_rows
    assert not _plan([1, 1, 1, 1]).zero_rows  # dense convs keep their border rows


def _padded_block(pads, C: int = 32) -> onnx.ModelProto:
    """1x1 expand, 3x3 depthwise with `pads`, 1x1 project over 14 x 14 (the depthwise conv laid channels-last)."""
    N = helper.make_node
    inits = {"w1": rand(C, 16, 1, 1, seed=1), "w2": rand(C, 1, 3, 3, seed=2), "w3": rand(16, C, 1, 1, seed=3)}
    nodes = [N("Conv", ["x", "w1"], ["a"]), N("Conv", ["a", "w2"], ["b"], pads=pads, group=C), N("Conv", ["b", "w3"], ["y"])]
    return float_model(nodes, inits, {"x": rand(1, 16, 14, 14)}, ["y"])


@pytest.mark.parametrize("board", ["x86_64-v3", "qemu-aarch64"])
def test_depthwise_zero_rows_emit_one_copy_of_a_row(board):
    """Padding rows costs a depthwise conv no code: padded on every side it emits at most 3% more than with its rows
    unpadded (before: 2.3x on x86_64-v3 and on aarch64, the top and the bottom rows each with a copy of the row's
    code)."""
    def depthwise_instructions(pads) -> int:
        text = lower(import_graph(_padded_block(pads), conv_algo="direct"), machine_spec(get_board(board)),
                     LowerOptions(opt="fluid", parallel=False)).ir_text
        body = text[text.index('define internal void @"op1"'):]
        body = body[:body.index("\n}")]
        return sum(1 for line in body.splitlines() if line.startswith("  "))
    padded, unpadded = (depthwise_instructions(pads) for pads in ([1, 1, 1, 1], [0, 1, 0, 1]))
    assert padded <= 1.03 * unpadded, (padded, unpadded)


@pytest.mark.parametrize("board", ["x86_64-v3", "qemu-aarch64"])
def test_depthwise_zero_rows_keep_padding_semantics(tmp_path, board, patched_compiler):
    """Padded kernel rows read zeros, as ONNX's explicit padding: an infinite weight gives NaN where its tap lies
    in the padding and an infinite input in the first and last rows stays where the windows reach it, against
    onnx.reference (NaN where it has NaN); 7 rows (two of them padded) and 14, strides 1 and 2."""
    require_emulator(board) if not board.startswith("x86_64") else None
    N = helper.make_node
    w = rand(32, 1, 3, 3, seed=4)
    w[3, 0, 0, 1] = np.inf
    w[5, 0, 2, 2] = -np.inf
    x = rand(1, 16, 14, 14, seed=5)
    inits = {"e": rand(32, 16, 1, 1, seed=6), "w": w, "b": rand(32, seed=7), "p": rand(8, 32, 1, 1, seed=8)}
    nodes = [N("Conv", ["x", "e"], ["a"]), N("Conv", ["a", "w", "b"], ["d1"], pads=[1, 1, 1, 1], group=32),
             N("Conv", ["a", "w"], ["d2"], pads=[1, 1, 1, 1], strides=[2, 2], group=32),
             N("Conv", ["d1", "p"], ["y1"]), N("Conv", ["d2", "p"], ["y2"])]
    x[0, :, 0, 3] = np.inf
    x[0, :, 13, 7] = np.inf
    model = float_model(nodes, inits, {"x": x}, ["y1", "y2"])
    want = reference(model, {"x": x})
    zero_rows = []
    emit_conv = conv2d.emit_conv

    def recording(c):
        zero_rows.append(c.plan.zero_rows)
        emit_conv(c)
    patched_compiler.setattr(conv2d, "emit_conv", recording)
    got = compile_and_run(model, {"x": x}, tmp_path, board, opt="fluid", threads=1, profile_runner=False,
                          conv_algo="direct")
    assert sorted(zero_rows) == [0, 0, 0, 13 * 32 + 32, 13 * 32 + 32], zero_rows
    for name, expected in want.items():
        assert np.array_equal(np.isnan(got[name]), np.isnan(expected)), name
        finite = np.isfinite(expected)
        assert np.array_equal(got[name][~finite & ~np.isnan(expected)], expected[~finite & ~np.isnan(expected)]), name
        assert_close(got[name][finite], expected[finite], name)


@pytest.mark.parametrize("shared", [False, True])
def test_depthwise_zero_rows_are_one_block_in_the_program(tmp_path, monkeypatch, shared):
    """Every unit and code variant reads one zero row, as large as the widest row asks for: a common symbol that the
    model object's relocatable link merges (x86_64: three variants of five depthwise convs, the widest 61 columns of
    32 channels: (61 - 1) x 32 + 32 floats), hidden (a model in a shared library keeps its own). The shared depthwise
    kernel (ops/conv/shared_depthwise.py) reads the same block, ZERO_CHANNELS floats long at least."""
    from elftools.elf.elffile import ELFFile

    model, feeds = _depthwise_convs()
    if not shared:
        monkeypatch.setattr(conv2d, "shared_depthwise", lambda c: False)
    compile_and_run(model, feeds, tmp_path, "x86_64", opt="fluid", threads=1, profile_runner=False, conv_algo="direct",
                    cache=False)  # the patched kernel's units are not keyed apart
    [model_o] = tmp_path.rglob("model.o")
    with open(model_o, "rb") as fh:
        symbols = [(s.name, s["st_size"], s["st_shndx"], s["st_other"]["visibility"])
                   for s in ELFFile(fh).get_section_by_name(".symtab").iter_symbols() if s.name.startswith(depthwise.ZERO_ROWS)]
    size = max((60 * 32 + 32) * 4, ZERO_CHANNELS * 4 if shared else 0)
    assert symbols == [(depthwise.ZERO_ROWS, size, "SHN_COMMON", "STV_HIDDEN")], symbols
