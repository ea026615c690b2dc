"""Conv and pooling over dims that vary at run time (issue #26): each graph is compiled once (tests/dynamic_harness.py)
and run against onnx.reference at the minimum, the maximum and sizes between (odd sizes, sizes that are not a multiple
of the vector width, 1 where the range allows); the feeds' capacity padding is NaN, so a kernel that reads past an
actual extent shows it."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from dynamic_harness import DynamicCase
from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter
from fluidml_xc.errors import InputError
from fluidml_xc.kernels.epilogue import EPILOGUE_ATTR, Epilogue
from fluidml_xc.planning import PlanOptions, plan_memory
from fluidml_xc.symbolic import Sym, SymRange, floordiv
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import compile_module, machine_spec
from onnx import TensorProto, helper, numpy_helper

F32 = np.float32
N_, H_, W_ = Sym("N"), Sym("H"), Sym("W")
NHWC = (0, 2, 3, 1)


def out_dim(size, k: int, stride: int = 1, pad_total: int = 0, dil: int = 1):
    return floordiv(size + pad_total - (k - 1) * dil - 1, stride) + 1


def weights(case: DynamicCase, name: str, oc: int, cig: int, kh: int, kw: int | None = None, seed: int = 0):
    rng = np.random.default_rng(seed)
    shape = (oc, cig, kh) if kw is None else (oc, cig, kh, kw)
    return (case.const(f"{name}_w", rng.standard_normal(shape).astype(F32)),
            case.const(f"{name}_b", rng.standard_normal(oc).astype(F32)))


def feed(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def check_sizes(run, envs, inputs) -> None:
    """run.check at every env; inputs: name -> function of env giving the actual shape."""
    for i, env in enumerate(envs):
        run.check(env, {name: feed(shape(env), i) for name, shape in inputs.items()}, rtol=1e-4, atol=1e-4)


def fused(case: DynamicCase, x, w, b, residual, dims, attrs, activation: str, params=()) -> str:
    """Conv with an epilogue the kernel applies (residual add, then the activation), the reference as separate nodes."""
    inputs = [x, w, b] + ([residual] if residual else [])
    (y,) = case.node("Conv", inputs, [(F32, dims)], attrs)
    case.graph.nodes[-1].attrs[EPILOGUE_ATTR] = Epilogue(activation, tuple(params), residual is not None)
    nodes = [helper.make_node("Conv", [x, w, b], ["ref_conv"], **attrs)]
    last = "ref_conv"
    if residual:
        nodes.append(helper.make_node("Add", [last, residual], ["ref_add"]))
        last = "ref_add"
    if activation == "relu":
        nodes.append(helper.make_node("Relu", [last], [y]))
    else:
        lo, hi = (case.const(f"clip_{n}", np.array(v, F32)) for n, v in zip(("lo", "hi"), params))
        nodes.append(helper.make_node("Clip", [last, lo, hi], [y]))
    case.onnx_nodes[-1:] = nodes
    return y


W_SIZES = (1, 2, 7, 13, 16, 29, 40)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("oc", [16, 3], ids=["channel_vectors", "row_vectors"])
def test_conv_width_varies(stride, oc):
    """3x3, pads 1: the left column keeps its tap start, the interior is a run-time range, the right columns' taps are
    clamped to the actual width; channel vectors (16 output channels) and row vectors (3, wide loads at stride 2)."""
    case = DynamicCase({"W": SymRange("W", 1, 40, 16)})
    x = case.input("x", F32, (1, 5, 6, W_))
    w, b = weights(case, "c", oc, 5, 3, 3)
    case.node("Conv", [x, w, b], [(F32, (1, oc, out_dim(6, 3, stride, 2), out_dim(W_, 3, stride, 2)))],
              {"pads": [1, 1, 1, 1], "strides": [stride, stride]})
    run = case.compile()
    check_sizes(run, [{"W": v} for v in W_SIZES], {"x": lambda e: (1, 5, 6, e["W"])})


@pytest.mark.parametrize("oc,kernel,pads,stride", [(8, 5, 2, 1), (16, 3, 1, 2), (2, 3, 0, 1), (24, 1, 0, 1)],
                         ids=["5x5", "3x3s2", "rows_unpadded", "pointwise"])
def test_conv_batch_height_width_vary(oc, kernel, pads, stride):
    """N, H and W all vary: images beyond the actual batch and rows beyond the actual height are never touched."""
    ranges = {"N": SymRange("N", 1, 3, 2), "H": SymRange("H", 5, 19, 8), "W": SymRange("W", 5, 23, 8)}
    case = DynamicCase(ranges)
    x = case.input("x", F32, (N_, 4, H_, W_))
    w, b = weights(case, "c", oc, 4, kernel, kernel)
    dims = (N_, oc, out_dim(H_, kernel, stride, 2 * pads), out_dim(W_, kernel, stride, 2 * pads))
    case.node("Conv", [x, w, b], [(F32, dims)], {"pads": [pads] * 4, "strides": [stride, stride]})
    run = case.compile()
    envs = [{"N": 1, "H": 5, "W": 5}, {"N": 3, "H": 19, "W": 23}, {"N": 2, "H": 6, "W": 11}, {"N": 1, "H": 13, "W": 8},
            {"N": 3, "H": 9, "W": 17}]
    check_sizes(run, envs, {"x": lambda e: (e["N"], 4, e["H"], e["W"])})


@pytest.mark.parametrize("oc", [32, 3])
def test_pointwise_flat_height_varies(oc):
    """A 1x1 conv whose width is fixed runs flat (one row of H * W pixels) with a run-time pixel count."""
    case = DynamicCase({"H": SymRange("H", 1, 48, 16)})
    x = case.input("x", F32, (1, 8, H_, 20))
    w, b = weights(case, "c", oc, 8, 1, 1)
    case.node("Conv", [x, w, b], [(F32, (1, oc, H_, 20))])
    run = case.compile()
    check_sizes(run, [{"H": v} for v in (1, 2, 5, 16, 31, 48)], {"x": lambda e: (1, 8, e["H"], 20)})


@pytest.mark.parametrize("layout,low", [(None, 12), (NHWC, 12), (NHWC, 1)],
                         ids=["rows_pixels_outer", "pixels_across_rows", "pixels_across_narrow_rows"])
def test_pointwise_over_varying_rows(layout, low):
    """A 1x1 conv whose height and width vary keeps the flat kernel's blocking: NCHW row vectors walk each row with
    pixel tiles outermost; channel vectors over channels-last pixels tile the actual pixels across row ends (a tile
    across one row end from two bases, across several (rows from `low` = 1 pixel on) with each pixel's row and
    column at run time), the residual read at the same spots."""
    ranges = {"N": SymRange("N", 1, 2, 1), "H": SymRange("H", low, 30, 16), "W": SymRange("W", low, 30, 16)}
    case = DynamicCase(ranges)
    x = case.input("x", F32, (N_, 8, H_, W_))
    r = case.input("r", F32, (N_, 24, H_, W_))
    w0, b0 = weights(case, "c0", 16, 8, 1, 1, seed=3)
    (t,) = case.node("Conv", [x, w0, b0], [(F32, (N_, 16, H_, W_))], output=False)
    w, b = weights(case, "c", 24, 16, 1, 1)
    fused(case, t, w, b, r, (N_, 24, H_, W_), {}, "relu")
    run = case.compile(layouts={t: layout} if layout else None)
    envs = [{"N": 1, "H": low, "W": low}, {"N": 2, "H": 30, "W": 30}, {"N": 2, "H": 13, "W": 29}, {"N": 1, "H": 21, "W": 17},
            {"N": 2, "H": 25, "W": 12}] + ([{"N": 2, "H": 7, "W": 1}, {"N": 1, "H": 5, "W": 3}, {"N": 2, "H": 9, "W": 7}] if low < 12 else [])
    check_sizes(run, envs, {"x": lambda e: (e["N"], 8, e["H"], e["W"]), "r": lambda e: (e["N"], 24, e["H"], e["W"])})


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_nchw_width_varies(stride):
    case = DynamicCase({"W": SymRange("W", 2, 37, 16)})
    x = case.input("x", F32, (1, 6, 7, W_))
    w, b = weights(case, "dw", 6, 1, 3, 3)
    case.node("Conv", [x, w, b], [(F32, (1, 6, out_dim(7, 3, stride, 2), out_dim(W_, 3, stride, 2)))],
              {"pads": [1, 1, 1, 1], "strides": [stride, stride], "group": 6})
    run = case.compile()
    check_sizes(run, [{"W": v} for v in (2, 3, 9, 16, 25, 37)], {"x": lambda e: (1, 6, 7, e["W"])})


def test_channels_last_chain_parallel():
    """The layouts the optimizer picks for a MobileNet block: conv to channels-last, channels-last depthwise (stride
    2), pointwise back to NCHW; big enough at the capacity to split into parallel tiles over run-time rows."""
    ranges = {"H": SymRange("H", 3, 40, 24), "W": SymRange("W", 3, 40, 24)}
    case = DynamicCase(ranges)
    x = case.input("x", F32, (1, 8, H_, W_))
    w1, b1 = weights(case, "c1", 32, 8, 3, 3, seed=1)
    (t,) = case.node("Conv", [x, w1, b1], [(F32, (1, 32, H_, W_))], {"pads": [1, 1, 1, 1]}, output=False)
    w2, b2 = weights(case, "dw", 32, 1, 3, 3, seed=2)
    oh, ow = out_dim(H_, 3, 2, 2), out_dim(W_, 3, 2, 2)
    (u,) = case.node("Conv", [t, w2, b2], [(F32, (1, 32, oh, ow))], {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 32},
                     output=False)
    w3, b3 = weights(case, "pw", 24, 32, 1, 1, seed=3)
    case.node("Conv", [u, w3, b3], [(F32, (1, 24, oh, ow))])
    run = case.compile(layouts={t: NHWC, u: NHWC})
    assert "fxc_parallel_for" in run.ir_text
    envs = [{"H": 3, "W": 3}, {"H": 40, "W": 40}, {"H": 17, "W": 9}, {"H": 24, "W": 24}, {"H": 5, "W": 33}]
    check_sizes(run, envs, {"x": lambda e: (1, 8, e["H"], e["W"])})


@pytest.mark.parametrize("activation,params", [("relu", ()), ("clip", (0.0, 6.0))])
def test_fused_epilogue_width_varies(activation, params):
    case = DynamicCase({"W": SymRange("W", 1, 30, 8)})
    x = case.input("x", F32, (1, 4, 5, W_))
    r = case.input("r", F32, (1, 16, 5, W_))
    w, b = weights(case, "c", 16, 4, 3, 3)
    fused(case, x, w, b, r, (1, 16, 5, W_), {"pads": [1, 1, 1, 1]}, activation, params)
    run = case.compile()
    check_sizes(run, [{"W": v} for v in (1, 4, 9, 17, 30)],
                {"x": lambda e: (1, 4, 5, e["W"]), "r": lambda e: (1, 16, 5, e["W"])})


def test_conv1d_width_varies():
    """A 1-D conv over a text line (CRNN-like), dilation 2, stride 1."""
    case = DynamicCase({"W": SymRange("W", 5, 64, 32)})
    x = case.input("x", F32, (1, 6, W_))
    w, b = weights(case, "c", 12, 6, 3)
    case.node("Conv", [x, w, b], [(F32, (1, 12, W_))], {"pads": [2, 2], "dilations": [2]})
    run = case.compile()
    check_sizes(run, [{"W": v} for v in (5, 6, 13, 40, 64)], {"x": lambda e: (1, 6, e["W"])})


@pytest.mark.parametrize("oc,group,pads,dil", [(8, 2, [0, 1, 2, 0], 2), (4, 4, [2, 0, 1, 2], 1)],
                         ids=["grouped_dilated", "depthwise_asymmetric"])
def test_conv_asymmetric_pads_grouped_varies(oc, group, pads, dil):
    """End pads unlike the begin pads, dilation 2, groups of 2 channels: the right and bottom tap ranges follow the
    actual size."""
    case = DynamicCase({"H": SymRange("H", 5, 17, 8), "W": SymRange("W", 6, 21, 8)})
    x = case.input("x", F32, (1, 4, H_, W_))
    w, b = weights(case, "c", oc, 4 // group, 3, 3)
    dims = (1, oc, out_dim(H_, 3, 1, pads[0] + pads[2], dil), out_dim(W_, 3, 1, pads[1] + pads[3], dil))
    case.node("Conv", [x, w, b], [(F32, dims)], {"pads": pads, "group": group, "dilations": [dil, dil]})
    run = case.compile()
    envs = [{"H": 5, "W": 6}, {"H": 17, "W": 21}, {"H": 8, "W": 13}, {"H": 11, "W": 7}, {"H": 16, "W": 20}]
    check_sizes(run, envs, {"x": lambda e: (1, 4, e["H"], e["W"])})


def test_kx1_conv_height_varies():
    """A k x 1 conv over one column runs along the row (the column as one row of H pixels), H varying."""
    case = DynamicCase({"H": SymRange("H", 3, 50, 16)})
    x = case.input("x", F32, (1, 6, H_, 1))
    w, b = weights(case, "c", 16, 6, 5, 1)
    case.node("Conv", [x, w, b], [(F32, (1, 16, out_dim(H_, 5, 2, 4), 1))], {"pads": [2, 0, 2, 0], "strides": [2, 1]})
    run = case.compile()
    check_sizes(run, [{"H": v} for v in (3, 4, 11, 32, 50)], {"x": lambda e: (1, 6, e["H"], 1)})


def test_conv3d_generic_varies():
    """Rank 5 takes the generic nest: tap ranges at run time along the varying depth."""
    case = DynamicCase({"D": SymRange("D", 1, 9, 4)})
    x = case.input("x", F32, (1, 2, Sym("D"), 4, 5))
    w, b = weights(case, "c", 3, 2, 3)
    w = case.const("c3_w", np.random.default_rng(5).standard_normal((3, 2, 3, 3, 3)).astype(F32))
    case.node("Conv", [x, w, b], [(F32, (1, 3, Sym("D"), 4, 5))], {"pads": [1] * 6})
    run = case.compile()
    check_sizes(run, [{"D": v} for v in (1, 2, 5, 9)], {"x": lambda e: (1, 2, e["D"], 4, 5)})


def test_same_pads_that_follow_the_size_are_refused():
    """auto_pad SAME at stride 2 pads an odd width differently from an even one: one line naming the fix."""
    case = DynamicCase({"W": SymRange("W", 4, 9, 8)})
    x = case.input("x", F32, (1, 2, 4, W_))
    w, b = weights(case, "c", 8, 2, 3, 3)
    case.node("Conv", [x, w, b], [(F32, (1, 8, 2, floordiv(W_ + 1, 2)))], {"auto_pad": "SAME_UPPER", "strides": [2, 2]})
    with pytest.raises(InputError, match="auto_pad=SAME_UPPER.*explicit pads"):
        case.compile()


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_arm_forms_emit(board):
    """The aarch64 / armv7 forms over varying dims (no edge blocks, armv7 taps as lanes, aarch64's paired
    channels-last depthwise vectors) emit valid IR; running them is the cross-target tests' part."""
    ranges = {"H": SymRange("H", 3, 30, 16), "W": SymRange("W", 3, 30, 16)}
    case = DynamicCase(ranges)
    x = case.input("x", F32, (1, 16, H_, W_))
    w1, b1 = weights(case, "dw", 16, 1, 3, 3)
    (t,) = case.node("Conv", [x, w1, b1], [(F32, (1, 16, H_, W_))], {"pads": [1] * 4, "group": 16}, output=False)
    w2, b2 = weights(case, "dw2", 16, 1, 3, 3, seed=4)
    case.node("Conv", [t, w2, b2], [(F32, (1, 16, H_, W_))], {"pads": [1] * 4, "group": 16})
    plan = plan_memory(case.graph, PlanOptions(reuse=False, inplace=False, reorder=False))
    spec = machine_spec(get_board(board))
    text = ModuleEmitter(case.graph, plan, spec, EmitOptions(parallel=True, layouts={t: NHWC})).emit()
    assert compile_module(text, spec)[:4] == b"\x7fELF"


POOL_ENVS = [{"H": 26, "W": 33}, {"H": 2, "W": 9}, {"H": 13, "W": 17}, {"H": 7, "W": 24}, {"H": 3, "W": 2}]


@pytest.mark.parametrize("op,attrs,low", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 1),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, 2),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, 1),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}, 1),
    ("LpPool", {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 0, 1]}, 2),
], ids=["max3s2", "max2ceil", "avg3", "avg3s2_include_pad", "lp"])
@pytest.mark.parametrize("channels", [3, 16], ids=["columns", "channels_last"])
def test_window_pool_varies(op, attrs, low, channels):
    """Pools over varying height and width: vectors over output columns (NCHW) or over channels (channels-last, 16
    channels stored innermost), border windows clamped to the actual input, run-time divisors; from the smallest
    size the window allows (`low`) to the capacity."""
    ranges = {"H": SymRange("H", low, 26, 8), "W": SymRange("W", low, 33, 8)}
    case = DynamicCase(ranges)
    x = case.input("x", F32, (1, 4, H_, W_))
    w, b = weights(case, "c", channels, 4, 1, 1)
    (t,) = case.node("Conv", [x, w, b], [(F32, (1, channels, H_, W_))], output=False)
    (kh, kw), (sh, sw) = attrs["kernel_shape"], attrs["strides"]
    pads, ceil = attrs.get("pads", [0, 0, 0, 0]), attrs.get("ceil_mode", 0)
    dims = (out_dim(H_ + ceil * (sh - 1), kh, sh, pads[0] + pads[2]), out_dim(W_ + ceil * (sw - 1), kw, sw, pads[1] + pads[3]))
    if channels == 16:  # the pool reads and writes channels-last; a 1x1 conv brings its result back to NCHW
        (u,) = case.node(op, [t], [(F32, (1, channels, *dims))], attrs, output=False)
        w2, b2 = weights(case, "back", 5, channels, 1, 1, seed=7)
        case.node("Conv", [u, w2, b2], [(F32, (1, 5, *dims))])
        run = case.compile(layouts={t: NHWC, u: NHWC})
    else:
        case.node(op, [t], [(F32, (1, channels, *dims))], attrs)
        run = case.compile()
    envs = [{"H": low, "W": low}] + [e for e in POOL_ENVS if min(e.values()) >= low]
    check_sizes(run, envs, {"x": lambda e: (1, 4, e["H"], e["W"])})


def test_maxpool_indices_varies():
    """MaxPool's Indices are flat positions in the actual input (row-major over the actual sizes)."""
    case = DynamicCase({"W": SymRange("W", 3, 21, 8)})
    x = case.input("x", F32, (2, 3, 5, W_))
    case.node("MaxPool", [x], [(F32, (2, 3, 3, out_dim(W_, 3, 2, 2))), (np.int64, (2, 3, 3, out_dim(W_, 3, 2, 2)))],
              {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
    run = case.compile()
    check_sizes(run, [{"W": v} for v in (3, 4, 10, 17, 21)], {"x": lambda e: (2, 3, 5, e["W"])})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("layout", [None, NHWC], ids=["nchw", "channels_last"])
def test_global_pool_varies(op, layout):
    """Global pools reduce the actual pixels only and divide by their run-time count; the batch varies too."""
    ranges = {"N": SymRange("N", 1, 3, 1), "H": SymRange("H", 1, 20, 8), "W": SymRange("W", 1, 20, 8)}
    case = DynamicCase(ranges)
    x = case.input("x", F32, (N_, 4, H_, W_))
    w, b = weights(case, "c", 16, 4, 1, 1)
    (t,) = case.node("Conv", [x, w, b], [(F32, (N_, 16, H_, W_))], output=False)
    case.node(op, [t], [(F32, (N_, 16, 1, 1))])
    run = case.compile(layouts={t: layout} if layout else None)
    envs = [{"N": 1, "H": 1, "W": 1}, {"N": 3, "H": 20, "W": 20}, {"N": 2, "H": 5, "W": 13}, {"N": 1, "H": 17, "W": 3}]
    check_sizes(run, envs, {"x": lambda e: (e["N"], 4, e["H"], e["W"])})


def _block_model(dims) -> onnx.ModelProto:
    """A MobileNet-like CNN over an input of `dims` (ints or dim names): stem 3x3 stride 2, BatchNorm, Clip (ReLU6),
    depthwise 3x3, pointwise 1x1 with a residual Add, Relu, a strided depthwise, average and max pools, a global
    average pool."""
    rng = np.random.default_rng(11)

    def init(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(F32), name)
    inits = [init("w1", (16, 3, 3, 3)), init("b1", (16,)), init("dw", (16, 1, 3, 3)), init("pw", (16, 16, 1, 1)),
             init("pb", (16,)), init("dw2", (16, 1, 3, 3)), init("w3", (24, 16, 1, 1)), init("b3", (24,)),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(F32), "s"), init("bb", (16,)), init("bm", (16,)),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(F32), "bv"),
             numpy_helper.from_array(np.array(0, F32), "lo"), numpy_helper.from_array(np.array(6, F32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "s", "bb", "bm", "bv"], ["bn"]),
             helper.make_node("Clip", ["bn", "lo", "hi"], ["a1"]),
             helper.make_node("Conv", ["a1", "dw"], ["d1"], group=16, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d1", "pw", "pb"], ["p1"]),
             helper.make_node("Add", ["p1", "a1"], ["r1"]),
             helper.make_node("Relu", ["r1"], ["a2"]),
             helper.make_node("Conv", ["a2", "dw2"], ["d2"], group=16, strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d2", "w3", "b3"], ["p2"]),
             helper.make_node("AveragePool", ["p2"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["ap"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("GlobalAveragePool", ["mp"], ["y"])]
    graph = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 24, 1, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 4])
def test_cnn_through_the_pipeline(threads):
    """The whole build path (ranges import, fused epilogues, the optimizer's layouts, memory plan, threads) on a CNN
    with batch, height and width varying, against ONNX Runtime at the minimum, the maximum and sizes between."""
    import ctypes

    import onnxruntime as ort
    from fluidml_xc.frontend.ranges import parse_ranges, split_input_shapes
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.symbolic import at
    from fluidml_xc.target.jit import jit_engine

    model = _block_model(["N", 3, "H", "W"])
    shapes, given = split_input_shapes(["x=1..3x3x9..48x9..64"])
    graph = import_graph(model, shapes, ranges=parse_ranges(given, [], [], []))
    assert list(graph.symbols) == ["N", "H", "W"]
    spec = machine_spec(get_board(None))
    low = lower(graph, spec, LowerOptions(threads=threads, parallel=True))
    engine = jit_engine(low.ir_text, spec)
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))(
        engine.get_function_address("fxc_model_run"))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x_t, y_t = low.graph.tensors["x"], low.graph.tensors["y"]
    for i, env in enumerate([{"N": 1, "H": 9, "W": 9}, {"N": 3, "H": 48, "W": 64}, {"N": 2, "H": 17, "W": 33},
                             {"N": 1, "H": 40, "W": 10}, {"N": 3, "H": 23, "W": 61}]):
        x = feed(at(x_t.dyn, env), i)
        xin = np.full(x_t.size, np.nan, F32)  # the entry takes inputs and gives outputs dense at their actual sizes
        xin[:x.size] = x.ravel()
        y = np.full(y_t.size, np.nan, F32)
        arena = np.full(low.emitter.arena_bytes + 64, 0xFF, np.uint8)
        ins, outs = (ctypes.c_void_p * 1)(xin.ctypes.data), (ctypes.c_void_p * 1)(y.ctypes.data)
        syms = (ctypes.c_int64 * 3)(*[env[s] for s in graph.symbols])
        run(ctypes.addressof(ins), ctypes.addressof(outs), arena.ctypes.data + (-arena.ctypes.data) % 64, syms)
        (want,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y[:want.size].reshape(want.shape), want, rtol=1e-4, atol=1e-5, err_msg=str(env))


QEMU_ENVS = [{"N": 1, "H": 9, "W": 9}, {"N": 3, "H": 48, "W": 64}, {"N": 2, "H": 17, "W": 33}, {"N": 1, "H": 40, "W": 10},
             {"N": 3, "H": 23, "W": 61}]


@pytest.mark.parametrize("opt,shape", [("fluid", "x=1..3x3x9..48x9..64"), ("plain", "x=1..3x3x9..48x9..64"),
                                       ("plain", "x=1..3x3x20x24")], ids=["channels_last", "nchw", "nchw_batch"])
@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_cnn_under_qemu(board, opt, shape, tmp_path):
    """The same CNN built for aarch64 and armv7 (their Conv forms: aarch64 paired channel vectors channels-last,
    armv7 depthwise rows with taps as lanes in NCHW, 32-bit index arithmetic on armv7) and run under qemu-user by a
    small driver that calls the object's fxc_model_run with the symbols' values, against ONNX Runtime at the
    minimum, the maximum and sizes between. A batch-only range keeps the static forms per image (aarch64 edge
    blocks and row pairs) under a run-time image loop."""
    import json
    from pathlib import Path

    import onnxruntime as ort
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.frontend.ranges import parse_ranges, split_input_shapes
    from modelrun import board_runner, build

    runner = board_runner(board)
    model = _block_model(["N", 3, "H", "W"])
    _, given = split_input_shapes([shape])
    artifact = build(model, tmp_path, board, ranges=parse_ranges(given, [], [], []), threads=1, opt=opt)
    manifest = json.loads((artifact / "manifest.json").read_text())
    exe = compile_c_program(get_board(board).target, manifest["cpu"], [Path(__file__).parent / "c" / "app_dynamic.c"], [],
                            [artifact / "model.o"], tmp_path / "drive")
    arena = int(manifest["memory"]["arena_bytes"])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fixed = shape.endswith("x20x24")  # the batch-only range
    capacity = (3, 3, 20, 24) if fixed else (3, 3, 48, 64)
    for i, env in enumerate(QEMU_ENVS):
        if fixed:
            env = {"N": env["N"]}
        x = feed((env["N"], 3, *([20, 24] if fixed else [env["H"], env["W"]])), i)
        xin = np.full(int(np.prod(capacity)), np.nan, F32)  # dense at the actual size
        xin[:x.size] = x.ravel()
        (tmp_path / "x.bin").write_bytes(xin.tobytes())
        proc = runner.exec([exe, arena, tmp_path / "x.bin", xin.nbytes, tmp_path / "y.bin", 3 * 24 * 4, *env.values()])
        assert proc.returncode == 0, proc.stderr
        y = np.frombuffer((tmp_path / "y.bin").read_bytes(), F32)
        (want,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y[:want.size].reshape(want.shape), want, rtol=1e-4, atol=1e-5, err_msg=f"{board} {env}")
