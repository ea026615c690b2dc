"""Elementwise kernels over dims that vary at run time (#26): each graph is compiled once and run at the minimum,
the maximum and sizes between (odd ones, ones that are not a multiple of the vector width, 1) against
onnx.reference, with the varying dim outermost and innermost, broadcasting against fixed dims, parallel tiles over
a varying dim and serial builds."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from dynamic_harness import DynamicCase
from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter, check_supported
from fluidml_xc.errors import InputError
from fluidml_xc.ops.elementwise import UNARY_OPS
from fluidml_xc.passes.elementwise_fusion import fuse_groups
from fluidml_xc.planning import PlanOptions, plan_memory
from fluidml_xc.symbolic import Sym, SymRange, at
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.jit import jit_target_machine
from fluidml_xc.target.machine import compile_module, machine_spec, optimized_module, target_machine
from onnx import helper as onnx_helper

W, B = Sym("W"), Sym("B")
F32 = np.float32
SIZES = (1, 2, 7, 17, 33, 64)
"""W in 1..64: 1, small, odd, just past a multiple of 8 and 16 lanes, the maximum."""
PARALLEL = pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def _floats(rng, shape, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, shape).astype(F32)


def _check_all(run, feeds_at, sizes=SIZES, name="W", **tol):
    for w in sizes:
        run.check({name: w}, feeds_at(w), **tol)
    _stops_at_extent(run, {name: sizes[len(sizes) // 2]}, feeds_at(sizes[len(sizes) // 2]))


def _prefix(t) -> bool:
    """Is the tensor's dense layout at every size a prefix of its capacity layout (no dim of capacity > 1 before a
    varying dim)? Such a tensor sits in the caller's buffer the same whether the model's boundary takes tensors
    dense or at capacity strides."""
    first = next(d for d in range(len(t.shape)) if not isinstance(t.dyn[d], int))
    return all(n == 1 for n in t.shape[:first])


def _raw_run(run, env, feeds, alias: str | None = None) -> list[np.ndarray]:
    """Run at `env` with every output buffer (capacity-sized) filled with 0x5A bytes; output 0 written into input
    `alias`'s buffer when given (an in-place run). Feeds are placed dense, which is where a prefix tensor
    (`_prefix`) sits in any case. Returns the outputs' raw bytes, one row per element."""
    g = run.case.graph
    keep = {}
    for name in g.inputs:
        t = g.tensors[name]
        buf = np.zeros(max(t.size, 1), t.dtype)
        buf[:np.size(feeds[name])] = np.asarray(feeds[name]).reshape(-1)
        keep[name] = buf
    outs = [np.full(max(g.tensors[n].size, 1) * g.tensors[n].dtype.itemsize, 0x5A, np.uint8) for n in g.outputs]
    if alias is not None:
        outs[0] = keep[alias].view(np.uint8)
    raw = np.full(run.arena_bytes + run.alignment, 0xFF, np.uint8)
    arena = raw.ctypes.data + (-raw.ctypes.data) % run.alignment
    syms = (ctypes.c_int64 * len(g.symbols))(*[int(env[s]) for s in g.symbols])
    ins = (ctypes.c_void_p * max(len(keep), 1))(*[keep[n].ctypes.data for n in g.inputs])
    outp = (ctypes.c_void_p * len(outs))(*[b.ctypes.data for b in outs])
    run._fn(ctypes.addressof(ins), ctypes.addressof(outp), arena, syms)
    return [b[:g.tensors[n].size * g.tensors[n].dtype.itemsize].reshape(g.tensors[n].size, -1)
            for n, b in zip(g.outputs, outs)]


def _stops_at_extent(run, env, feeds):
    """Loops run to the run-time extents, not to the capacity: every element of a prefix output (`_prefix`) beyond
    its actual elements keeps the sentinel its buffer was filled with."""
    g = run.case.graph
    checked = 0
    for name, buf in zip(g.outputs, _raw_run(run, env, feeds)):
        t = g.tensors[name]
        if t.dyn is None or not _prefix(t):
            continue
        actual = int(np.prod(at(t.dyn, env)))
        beyond = (buf[actual:] != 0x5A).any(axis=-1)
        assert not beyond.any(), f"{name} at {env}: {int(beyond.sum())} elements written beyond the run-time extent"
        checked += 1
    assert checked, "no output to check"


UNARY_FLOAT = [op for op in UNARY_OPS if op not in ("Not", "BitwiseNot")]
UNARY_DOMAIN = {"Log": (0.1, 3.0), "Sqrt": (0.0, 3.0), "Acosh": (1.0, 3.0), "Asin": (-1, 1), "Acos": (-1, 1),
                "Atanh": (-0.9, 0.9), "Tan": (-1.2, 1.2)}


@PARALLEL
def test_unary_ops_varying_outer_and_inner(parallel):
    """Every unary op over [W, 9] (varying outermost) and [2, 3, W] (varying innermost), plus Gelu's tanh form,
    Not and BitwiseNot."""
    case = DynamicCase({"W": SymRange("W", 1, 64, 16)})
    feeds_spec = {}
    for op in UNARY_FLOAT:
        for shape in ((W, 9), (2, 3, W)):
            name = case.input(f"{op.lower()}_{len(shape)}", F32, shape)
            feeds_spec[name] = (shape, UNARY_DOMAIN.get(op, (-3.0, 3.0)))
            case.node(op, [name], [(F32, shape)])
    case.node("Gelu", [f"gelu_{3}"], [(F32, (2, 3, W))], {"approximate": "tanh"})
    b = case.input("b", np.bool_, (W, 5))
    case.node("Not", [b], [(np.bool_, (W, 5))])
    i = case.input("i", np.int32, (3, W))
    case.node("BitwiseNot", [i], [(np.int32, (3, W))])
    run = case.compile(parallel=parallel)
    rng = _rng()

    def feeds(w):
        out = {}
        for name, (shape, (lo, hi)) in feeds_spec.items():
            out[name] = _floats(rng, tuple(w if d is W else d for d in shape), lo, hi)
        out["b"] = rng.random((w, 5)) < 0.5
        out["i"] = rng.integers(-1000, 1000, (3, w), dtype=np.int32)
        return out
    _check_all(run, feeds, rtol=2e-5, atol=2e-6)


BINARY_FLOAT = ["Add", "Sub", "Mul", "Div", "Mod", "Pow"]
BINARY_INT = ["Add", "Sub", "Mul", "Div", "Mod", "BitwiseAnd", "BitwiseOr", "BitwiseXor"]
COMPARE = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


@PARALLEL
def test_binary_ops_broadcasting(parallel):
    """Binary and comparison ops with numpy broadcasting: two varying operands sharing the symbol, a varying dim
    against a fixed 1 (both ways round), against a fixed row, and against scalars (Mul/Div by a constant)."""
    case = DynamicCase({"W": SymRange("W", 1, 64, 16)})
    x = case.input("x", F32, (3, W, 5))
    y = case.input("y", F32, (3, W, 5))
    col = case.input("col", F32, (W, 1))
    row = case.input("row", F32, (5,))
    pos = case.input("pos", F32, (3, W, 5))
    two = case.const("two", np.array(2.5, F32))
    for op in BINARY_FLOAT:
        case.node(op, [x, y], [(F32, (3, W, 5))])
        case.node(op, [col, x], [(F32, (3, W, 5))])
    case.node("Pow", [pos, row], [(F32, (3, W, 5))])
    case.node("Pow", [pos, case.const("half", np.array(0.5, F32))], [(F32, (3, W, 5))])
    case.node("Add", [x, row], [(F32, (3, W, 5))])
    case.node("Mul", [x, two], [(F32, (3, W, 5))])
    case.node("Div", [two, col], [(F32, (W, 1))])
    case.node("Sub", [col, row], [(F32, (W, 5))])
    case.node("Mod", [x, y], [(F32, (3, W, 5))], {"fmod": 1})
    for op in COMPARE:
        case.node(op, [x, col], [(np.bool_, (3, W, 5))])
    ia = case.input("ia", np.int32, (W, 4))
    ib = case.input("ib", np.int32, (4,))
    for op in BINARY_INT:
        case.node(op, [ia, ib], [(np.int32, (W, 4))])
    sa, sb = case.input("sa", np.uint8, (W,)), case.input("sb", np.uint8, (W,))
    case.node("BitShift", [sa, sb], [(np.uint8, (W,))], {"direction": "LEFT"})
    ba, bb = case.input("ba", np.bool_, (W, 3)), case.input("bb", np.bool_, (1, 3))
    for op in ("And", "Or", "Xor"):
        case.node(op, [ba, bb], [(np.bool_, (W, 3))])
    run = case.compile(parallel=parallel)
    rng = _rng(1)

    def feeds(w):
        nonzero = lambda a: np.where(np.abs(a) < 0.1, 1.0, a).astype(F32)
        return {"x": _floats(rng, (3, w, 5)), "y": nonzero(_floats(rng, (3, w, 5))), "col": nonzero(_floats(rng, (w, 1))),
                "row": _floats(rng, (5,)), "pos": _floats(rng, (3, w, 5), 0.1, 3.0),
                "ia": rng.integers(-100, 100, (w, 4), dtype=np.int32),
                "ib": np.array([3, -7, 11, 5], np.int32),
                "sa": rng.integers(0, 255, (w,), dtype=np.uint8), "sb": rng.integers(0, 7, (w,), dtype=np.uint8),
                "ba": rng.random((w, 3)) < 0.5, "bb": rng.random((1, 3)) < 0.5}
    _check_all(run, feeds, rtol=2e-5, atol=2e-6)


@PARALLEL
def test_variadic_where_cast_clip_and_friends(parallel):
    """Sum/Max/Min/Mean, Where with a broadcast condition, Cast/CastLike, Clip with constant and run-time bounds,
    PRelu against a fixed slope, ThresholdedRelu, Celu, IsNaN/IsInf, Identity, EyeLike, Quantize/Dequantize."""
    case = DynamicCase({"W": SymRange("W", 1, 64, 16)})
    x = case.input("x", F32, (W, 6))
    y = case.input("y", F32, (W, 6))
    z = case.input("z", F32, (6,))
    c = case.input("c", np.bool_, (W, 1))
    lo, hi = case.input("lo", F32, ()), case.const("hi", np.array(1.5, F32))
    for op in ("Sum", "Max", "Min", "Mean"):
        case.node(op, [x, y, z], [(F32, (W, 6))])
    case.node("Where", [c, x, z], [(F32, (W, 6))])
    case.node("Cast", [x], [(np.int32, (W, 6))], {"to": 6})
    case.node("CastLike", [x, case.const("like", np.zeros(1, np.float64))], [(np.float64, (W, 6))])
    case.node("Clip", [x, lo, hi], [(F32, (W, 6))])
    case.node("Clip", [x, case.const("clo", np.array(-0.5, F32))], [(F32, (W, 6))])
    case.node("PRelu", [x, case.const("slope", np.linspace(-1, 1, 6).astype(F32))], [(F32, (W, 6))])
    case.node("ThresholdedRelu", [x], [(F32, (W, 6))], {"alpha": 0.3})
    case.node("Celu", [x], [(F32, (W, 6))], {"alpha": 0.7})
    case.node("IsNaN", [y], [(np.bool_, (W, 6))])
    case.node("IsInf", [y], [(np.bool_, (W, 6))], {"detect_negative": 0})
    case.node("Identity", [x], [(F32, (W, 6))])
    case.node("EyeLike", [x], [(F32, (W, 6))], {"k": 1})
    q, = case.node("QuantizeLinear", [x, case.const("qs", np.array(0.05, F32)), case.const("qz", np.array(7, np.uint8))],
                   [(np.uint8, (W, 6))])
    case.node("DequantizeLinear", [q, case.const("ds", np.array(0.05, F32)), case.const("dz", np.array(7, np.uint8))],
              [(F32, (W, 6))])
    run = case.compile(parallel=parallel)
    rng = _rng(2)

    def feeds(w):
        yv = _floats(rng, (w, 6))
        yv[0, 0], yv[-1, -1] = np.nan, np.inf
        return {"x": _floats(rng, (w, 6)), "y": yv, "z": _floats(rng, (6,)), "c": rng.random((w, 1)) < 0.5,
                "lo": np.array(-1.0, F32)}
    _check_all(run, feeds, rtol=2e-5, atol=2e-6)


def test_bitcast_varying():
    case = DynamicCase({"W": SymRange("W", 1, 64, 16)}, opset=26)
    x, y = case.input("x", F32, (2, W)), case.input("y", np.int16, (W, 3))
    case.node("BitCast", [x], [(np.int32, (2, W))], {"to": 6})
    case.node("BitCast", [y], [(np.float16, (W, 3))], {"to": 10})
    run = case.compile()
    rng = _rng(3)
    _check_all(run, lambda w: {"x": _floats(rng, (2, w)), "y": rng.integers(0, 30000, (w, 3), dtype=np.int16)})


@PARALLEL
def test_expand_output_varies(parallel):
    """Expand to a varying output: a varying input against a fixed shape, and a fixed 1 broadcast along it."""
    case = DynamicCase({"W": SymRange("W", 1, 64, 16)})
    x = case.input("x", F32, (W, 1))
    case.node("Expand", [x, case.const("s1", np.array([3, 1, 37], np.int64))], [(F32, (3, W, 37))])
    case.node("Expand", [x, case.const("s3", np.array([1, 37], np.int64))], [(F32, (W, 37))])
    v = case.input("v", F32, (1, W))
    case.node("Expand", [v, case.const("s2", np.array([5, 1], np.int64))], [(F32, (5, W))])
    run = case.compile(parallel=parallel)
    rng = _rng(4)
    _check_all(run, lambda w: {"x": _floats(rng, (w, 1)), "v": _floats(rng, (1, w))})


def _fused_chain(case, x_dims, r_dims) -> None:
    x, r = case.input("x", F32, x_dims), case.input("r", F32, r_dims)
    a, = case.node("Add", [x, r], [(F32, x_dims)], output=False)
    m, = case.node("Mul", [a, case.const("k", np.array(0.75, F32))], [(F32, x_dims)], output=False)
    s, = case.node("Sigmoid", [m], [(F32, x_dims)], output=False)
    g, = case.node("Greater", [x, case.const("t", np.array(0.0, F32))], [(np.bool_, x_dims)], output=False)
    w, = case.node("Where", [g, s, r], [(F32, x_dims)], output=False)
    case.node("Clip", [w, case.const("lo", np.array(-1.0, F32)), case.const("hi", np.array(0.9, F32))], [(F32, x_dims)])
    assert fuse_groups(case.graph) == 1 and [n.op_type for n in case.graph.nodes] == ["FusedElementwise"]


@PARALLEL
def test_fused_chain(parallel):
    """A chain the fusion pass turns into one FusedElementwise (Add -> Mul by a scalar -> Sigmoid -> Where ->
    Clip), with a broadcast operand, over two symbols; checked against the unfused nodes."""
    case = DynamicCase({"W": SymRange("W", 1, 64, 16), "B": SymRange("B", 1, 4, 2)})
    _fused_chain(case, (B, W, 8), (W, 1))
    run = case.compile(parallel=parallel)
    rng = _rng(5)
    for b, w in ((1, 1), (4, 64), (2, 7), (3, 17), (1, 33), (4, 9)):
        run.check({"B": b, "W": w}, {"x": _floats(rng, (b, w, 8)), "r": _floats(rng, (w, 1))}, rtol=2e-5, atol=2e-6)


@PARALLEL
def test_fused_chain_in_place(parallel):
    """The fused chain with its output in input 0's buffer (the loop's aliased copy), and stopping at the extent."""
    case = DynamicCase({"W": SymRange("W", 1, 64, 16)})
    _fused_chain(case, (W, 8), (W, 1))
    run = case.compile(parallel=parallel)
    rng = _rng(7)
    for w in SIZES:
        env, feeds = {"W": w}, {"x": _floats(rng, (w, 8)), "r": _floats(rng, (w, 1))}
        in_place = _raw_run(run, env, feeds, alias="x")[0].view(F32)[:w * 8].reshape(w, 8)
        np.testing.assert_allclose(in_place, run.reference(env, feeds)[0], rtol=2e-5, atol=2e-6, err_msg=f"in place {env}")
    _stops_at_extent(run, {"W": 17}, {"x": _floats(rng, (17, 8)), "r": _floats(rng, (17, 1))})


def _parallel_calls(ir_text: str) -> int:
    return len(re.findall(r"call \w+ @\"?fxc_parallel_for", ir_text))


def test_parallel_tiles_over_a_varying_dim():
    """Big enough to split into tiles: the tile count is fixed at build time, each tile runs its fraction of the
    run-time iterations of the leading dims (empty tiles below the tile count): a varying dim leading alone, a
    varying dim second of two leading dims, and a varying dim before a fixed one."""
    case = DynamicCase({"W": SymRange("W", 1, 300, 100), "B": SymRange("B", 1, 4, 2)})
    x = case.input("x", F32, (W, 1200))
    y = case.input("y", F32, (1200,))
    case.node("Add", [x, y], [(F32, (W, 1200))])
    case.node("Relu", [x], [(F32, (W, 1200))])
    mid = case.input("mid", F32, (3, W, 1000))
    case.node("Sigmoid", [mid], [(F32, (3, W, 1000))])
    lead = case.input("lead", F32, (B, 5, 30000))
    case.node("Neg", [lead], [(F32, (B, 5, 30000))])
    run = case.compile(parallel=True)
    assert _parallel_calls(run.ir_text) >= 4, "the ops were not split into tiles"
    rng = _rng(6)
    for w, b in ((1, 1), (5, 2), (11, 3), (12, 4), (13, 1), (150, 2), (299, 3), (300, 4)):
        env = {"W": w, "B": b}
        feeds = {"x": _floats(rng, (w, 1200)), "y": _floats(rng, (1200,)), "mid": _floats(rng, (3, w, 1000)),
                 "lead": _floats(rng, (b, 5, 30000))}
        run.check(env, feeds, rtol=2e-5, atol=2e-6)
    _stops_at_extent(run, env | {"W": 13, "B": 3}, {"x": _floats(rng, (13, 1200)), "y": _floats(rng, (1200,)),
                     "mid": _floats(rng, (3, 13, 1000)), "lead": _floats(rng, (3, 5, 30000))})


def test_innermost_varying_loop_is_vectorized():
    """The innermost loop to a run-time extent keeps a vector body (and a scalar tail, checked at every size by
    the tests above)."""
    case = DynamicCase({"W": SymRange("W", 1, 1024, 64)})
    x = case.input("x", F32, (3, W))
    case.node("Relu", [x], [(F32, (3, W))])
    run = case.compile(parallel=False)
    spec = machine_spec(get_board(None))
    optimized = str(optimized_module(run.ir_text, jit_target_machine(spec)))
    assert re.search(r"<\d+ x float>", optimized), "no vector body in the optimized Relu"


def test_runtime_sizes_broadcast_against_each_other_are_refused():
    case = DynamicCase({"W": SymRange("W", 1, 64, 16), "V": SymRange("V", 1, 64, 16)})
    x, y = case.input("x", F32, (Sym("W"),)), case.input("y", F32, (Sym("V"),))
    case.node("Add", [x, y], [(F32, (Sym("W"),))])
    with pytest.raises(InputError, match=r"dim 0 of 'y' is V where the output's is W"):
        case.compile()


@PARALLEL
def test_constant_of_shape_with_varying_output(parallel):
    """ConstantOfShape fills the output's run-time extents (the shape input's values are those extents)."""
    case = DynamicCase({"W": SymRange("W", 1, 64, 16)})
    shape, rows = case.input("shape", np.int64, (2,)), case.input("rows", np.int64, (2,))
    case.node("ConstantOfShape", [shape], [(np.int32, (3, W))], {"value": onnx_helper.make_tensor("v", 6, [1], [7])})
    case.graph.nodes[-1].attrs["value"] = np.array([7], np.int32)
    case.node("ConstantOfShape", [rows], [(F32, (W, 5))])
    case.node("Neg", [case.input("x", F32, (W,))], [(F32, (W,))])  # an input whose dim is W gives W's value
    run = case.compile(parallel=parallel)
    _check_all(run, lambda w: {"shape": np.array([3, w], np.int64), "rows": np.array([w, 5], np.int64),
                               "x": np.arange(w, dtype=F32)})


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_cross_targets_compile(board):
    """The run-time extents in the index type of 64- and 32-bit targets (armv7 truncates the symbols' int64
    values): a parallel fused chain, a ConstantOfShape and a Relu compile to an ELF object for each board, the Relu's
    inner loop to W with 4-lane vectors."""
    case = DynamicCase({"W": SymRange("W", 1, 300, 100)})
    x, y = case.input("x", F32, (W, 1200)), case.input("y", F32, (1200,))
    a, = case.node("Add", [x, y], [(F32, (W, 1200))], output=False)
    case.node("Tanh", [a], [(F32, (W, 1200))])
    case.node("ConstantOfShape", [case.input("shape", np.int64, (1,))], [(F32, (W,))])
    fuse_groups(case.graph)
    case.node("Relu", [case.input("z", F32, (3, W))], [(F32, (3, W))])  # the inner loop to W: a NEON vector body
    check_supported(case.graph)
    plan = plan_memory(case.graph, PlanOptions(reuse=False, inplace=False, reorder=False))
    spec = machine_spec(get_board(board))
    text = ModuleEmitter(case.graph, plan, spec, EmitOptions(parallel=True)).emit()
    assert _parallel_calls(text) >= 1
    assert compile_module(text, spec)[:4] == b"\x7fELF"
    assert "<4 x float>" in str(optimized_module(text, target_machine(spec))), "no NEON vector body"
