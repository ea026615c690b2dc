"""MatMul, Gemm and the recurrent ops over dims that vary at run time (#26): each case compiled once, run at the
minimum, the maximum and sizes between (odd ones, ones that are not a multiple of the register tile) against
onnx.reference, with and without parallel tiles."""
from __future__ import annotations

import numpy as np
import pytest

from dynamic_harness import DynamicCase, DynamicRun
from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter, check_supported
from fluidml_xc.planning import PlanOptions, plan_memory
from fluidml_xc.symbolic import Sym, SymRange
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.jit import jit_engine
from fluidml_xc.target.machine import machine_spec

S, B = Sym("S"), Sym("B")
RNG = np.random.default_rng(26)


BOARDS = ["x86_64-v2", "x86_64-v3", None]
"""Vector widths this host runs: 4 floats (the width of NEON: the tiles aarch64 and armv7 boards get), 8, the host's."""


def _compile(case: DynamicCase, parallel: bool, loop_orders: dict | None = None, board: str | None = None) -> DynamicRun:
    """DynamicCase.compile with the optimizer's loop order per node given (node names: op type + position)."""
    check_supported(case.graph)
    plan = plan_memory(case.graph, PlanOptions(reuse=False, inplace=False, reorder=False))
    spec = machine_spec(get_board(board))
    emitter = ModuleEmitter(case.graph, plan, spec, EmitOptions(parallel=parallel, loop_orders=dict(loop_orders or {})))
    text = emitter.emit()
    return DynamicRun(case, text, jit_engine(text, spec), emitter, spec.alignment)


def _x(*shape, dtype=np.float32) -> np.ndarray:
    if np.dtype(dtype).kind == "i":
        return RNG.integers(-4, 5, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def _sweep(run: DynamicRun, sizes, feeds, sym: str = "S", rtol=1e-4, atol=1e-4) -> None:
    for s in sizes:
        run.check({sym: s}, feeds(s), rtol=rtol, atol=atol)


SIZES = (1, 5, 7, 13, 16, 31, 64)
"""S over 1..64: size 1, odd sizes and sizes that are not a multiple of MR (6, 4) or NR (16, 8)."""


def _seq_case(lo: int = 1, hi: int = 64) -> DynamicCase:
    return DynamicCase({"S": SymRange("S", lo, hi, (lo + hi) // 2)})


@pytest.mark.parametrize("parallel", [True, False])
def test_varying_rows_constant_weights(parallel):
    """[1, S, 96] @ W[96, 84]: M varies, packed constant B (the projections of a transformer)."""
    case = _seq_case(1, 128)
    x = case.input("x", np.float32, (1, S, 96))
    case.node("MatMul", [x, case.const("w", _x(96, 84))], [(np.float32, (1, S, 84))])
    _sweep(_compile(case, parallel), (*SIZES, 127, 128), lambda s: {"x": _x(1, s, 96)})


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("parallel", [True, False])
def test_attention_scores_and_values(parallel, board):
    """scores = Q . K^T ([2, S, 16] x [2, 16, S]: M and N vary), then scores . V ([2, S, S] x [2, S, 12]: M and K vary),
    big enough at the maximum for parallel tiles."""
    case = DynamicCase({"S": SymRange("S", 1, 96, 48)})
    q, kt, v = case.input("q", np.float32, (2, S, 16)), case.input("kt", np.float32, (2, 16, S)), case.input("v", np.float32, (2, S, 40))
    scores = case.node("MatMul", [q, kt], [(np.float32, (2, S, S))])[0]
    case.node("MatMul", [scores, v], [(np.float32, (2, S, 40))])
    run = _compile(case, parallel, board=board)
    _sweep(run, (1, 2, 7, 17, 33, 50, 95, 96), lambda s: {"q": _x(2, s, 16), "kt": _x(2, 16, s), "v": _x(2, s, 40)})


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("order", ["ikj", "jki", "ijk"])
def test_every_loop_order(order, board):
    """Each loop order over operands of both storage orders, so every blocked kernel runs (outer: ikj; outer_t: jki
    on A^T; dot: ijk on B^T) and the scalar loops where the strides do not suit one (jki on A, ijk on B)."""
    case = _seq_case(1, 40)
    a, bt = case.input("a", np.float32, (S, 24)), case.input("bt", np.float32, (S, 24))
    at, b = case.input("at", np.float32, (24, S)), case.input("b", np.float32, (24, S))
    x = case.node("Gemm", [a, bt], [(np.float32, (S, S))], {"transB": 1})[0]
    y = case.node("Gemm", [at, b], [(np.float32, (S, S))], {"transA": 1})[0]
    case.node("MatMul", [x, case.input("v", np.float32, (S, 24))], [(np.float32, (S, 24))])
    run = _compile(case, True, {"gemm0": order, "gemm1": order, "matmul2": order}, board)
    assert y in case.graph.outputs
    _sweep(run, (1, 3, 8, 9, 23, 40), lambda s: {"a": _x(s, 24), "bt": _x(s, 24), "at": _x(24, s), "b": _x(24, s), "v": _x(s, 24)})


def test_broadcast_batch_varies():
    """[B, 3, S, 8] @ [3, 8, 20]: a varying batch dim, B's batch broadcast, and a varying M; [B, 64, 64] @ [64, 72]
    in parallel tiles over the batch's capacity (those past the run-time batch do nothing)."""
    case = DynamicCase({"S": SymRange("S", 2, 12, 6), "B": SymRange("B", 1, 4, 2)})
    a = case.input("a", np.float32, (B, 3, S, 8))
    case.node("MatMul", [a, case.const("w", _x(3, 8, 20))], [(np.float32, (B, 3, S, 20))])
    case.node("MatMul", [case.input("x", np.float32, (B, 64, 64)), case.const("v", _x(64, 72))], [(np.float32, (B, 64, 72))])
    run = _compile(case, True)
    assert "fxc_parallel_for" in run.ir_text
    for b, s in ((1, 2), (4, 12), (2, 7), (3, 5), (1, 11)):
        run.check({"B": b, "S": s}, {"a": _x(b, 3, s, 8), "x": _x(b, 64, 64)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("parallel", [True, False])
def test_gemm_varying_rows_and_dot_columns(parallel):
    """Gemm with M varying (constant B^T, constant bias, alpha, beta), then Gemm(transB) over an activation whose
    rows vary: N of the dot-product kernel and K of a third Gemm vary."""
    case = DynamicCase({"S": SymRange("S", 1, 70, 32)})
    x = case.input("x", np.float32, (S, 64))
    h = case.node("Gemm", [x, case.const("w", _x(128, 64)), case.const("c", _x(128))], [(np.float32, (S, 128))],
                  {"transB": 1, "alpha": 0.5, "beta": 2.0}, output=False)[0]
    y = case.node("Gemm", [case.input("q", np.float32, (64, 128)), h], [(np.float32, (64, S))], {"transB": 1})[0]
    case.node("Gemm", [y, case.input("v", np.float32, (S, 12)), case.input("r", np.float32, (64, 12))],
              [(np.float32, (64, 12))], {"beta": 0.5})
    run = _compile(case, parallel, {"gemm1": "ijk"})
    _sweep(run, (1, 4, 9, 17, 33, 69, 70), lambda s: {"x": _x(s, 64), "q": _x(64, 128), "v": _x(s, 12), "r": _x(64, 12)},
           rtol=2e-4, atol=2e-3)


def test_gemm_transposed_a_varying_bias():
    """Gemm(transA) with A [K, S] (M varies) and a bias C [S, 1] read at run-time rows."""
    case = _seq_case(1, 30)
    case.node("Gemm", [case.input("a", np.float32, (10, S)), case.const("b", _x(10, 9)), case.input("c", np.float32, (S, 1))],
              [(np.float32, (S, 9))], {"transA": 1, "beta": -1.0})
    _sweep(_compile(case, False), (1, 6, 7, 29, 30), lambda s: {"a": _x(10, s), "c": _x(s, 1)})


@pytest.mark.parametrize("dtype", [np.int32, np.float16])
def test_scalar_kernel_dtypes(dtype):
    """Dtypes without a blocked kernel (int32, float16 summed in float32) loop to the run-time extents."""
    case = _seq_case(1, 20)
    a = case.input("a", dtype, (2, S, 5))
    case.node("MatMul", [a, case.input("b", dtype, (2, 5, S))], [(dtype, (2, S, S))])
    tol = 1e-2 if dtype == np.float16 else 0
    _sweep(_compile(case, False), (1, 4, 11, 20), lambda s: {"a": _x(2, s, 5, dtype=dtype), "b": _x(2, 5, s, dtype=dtype)},
           rtol=tol, atol=tol)


def test_vector_times_matrix():
    """1-D A of varying length: [S] @ [S, 7] (K varies), and [3, S] @ [S] (the 1-D B side)."""
    case = _seq_case(1, 33)
    v = case.input("v", np.float32, (S,))
    case.node("MatMul", [v, case.input("m", np.float32, (S, 7))], [(np.float32, (7,))])
    case.node("MatMul", [case.input("w", np.float32, (3, S)), v], [(np.float32, (3,))])
    _sweep(_compile(case, False), (1, 2, 9, 32, 33), lambda s: {"v": _x(s), "m": _x(s, 7), "w": _x(3, s)})


# -- recurrent ops ---------------------------------------------------------------------------------------
def _ort(run: DynamicRun, env: dict, feeds: dict) -> list[np.ndarray]:
    """ONNX Runtime on the case's nodes at the actual sizes (onnx.reference ignores sequence_lens)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    from fluidml_xc.symbolic import at

    g = run.case.graph

    def info(name):
        t = g.tensors[name]
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), at(t.dyn or t.shape, env))
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in run.case.values.items()]
    graph = helper.make_graph(run.case.onnx_nodes, "ref", [info(n) for n in g.inputs], [info(n) for n in g.outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _check_ort(run: DynamicRun, env: dict, feeds: dict, rtol=1e-4, atol=1e-5) -> None:
    got, want = run(env, feeds), _ort(run, env, feeds)
    for name, g_, w in zip(run.case.graph.outputs, got, want):
        assert g_.shape == w.shape, f"{name} at {env}: shape {g_.shape}, want {w.shape}"
        np.testing.assert_allclose(g_, w, rtol=rtol, atol=atol, err_msg=f"{name} at {env}")


GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _recurrent(op: str, direction: str, x_dims, batch, hidden: int, inp: int, layout: int = 0, seq_lens: bool = False,
               ranges=None, dtype=np.float32, attrs=None):
    """A DynamicCase of one recurrent node over X of dims x_dims (symbolic), with bias and initial states."""
    case = DynamicCase(ranges or {"S": SymRange("S", 1, 16, 8)})
    dirs, g = (2 if direction == "bidirectional" else 1), GATES[op]
    x = case.input("x", dtype, x_dims)
    w = case.const("w", (_x(dirs, g * hidden, inp) * 0.5).astype(dtype))
    r = case.const("r", (_x(dirs, g * hidden, hidden) * 0.5).astype(dtype))
    bias = case.const("bias", (_x(dirs, 2 * g * hidden) * 0.5).astype(dtype))
    lens = case.input("lens", np.int32, (batch,)) if seq_lens else ""
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    ins = [x, w, r, bias, lens, case.input("h0", dtype, state)]
    if op == "LSTM":
        ins.append(case.input("c0", dtype, state))
    seq = x_dims[1] if layout else x_dims[0]
    y_dims = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    outs = [(dtype, y_dims), (dtype, state)] + ([(dtype, state)] if op == "LSTM" else [])
    case.node(op, ins, outs, {"direction": direction, "hidden_size": hidden, "layout": layout, **(attrs or {})})
    return case


def _feeds(op, s, b, hidden, inp, dirs, layout=0, lens=None, dtype=np.float32):
    state = (b, dirs, hidden) if layout else (dirs, b, hidden)
    feeds = {"x": _x(*((b, s, inp) if layout else (s, b, inp)), dtype=dtype), "h0": _x(*state, dtype=dtype)}
    if op == "LSTM":
        feeds["c0"] = _x(*state, dtype=dtype)
    if lens is not None:
        feeds["lens"] = np.asarray(lens, dtype=np.int32)
    return feeds


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_varying_sequence(op, direction):
    """Blocked gate GEMMs, the time loop to the run-time length: Y, Y_h (Y_c) at S = 1..16 vs ONNX Runtime."""
    case = _recurrent(op, direction, (S, 3, 5), 3, 8, 5)
    run = _compile(case, True, board=BOARDS[0] if op == "GRU" else None)
    dirs = 2 if direction == "bidirectional" else 1
    for s in (1, 2, 5, 9, 16):
        _check_ort(run, {"S": s}, _feeds(op, s, 3, 8, 5, dirs))


def test_lstm_chunks_layout_batch_varies():
    """Batch-first LSTM, bidirectional, sequence and batch both varying, the input projections in chunks of 8 steps
    (hidden 64: a chunk of steps fills CHUNK_BYTES), sequences shorter than one chunk too. onnx.reference: ONNX
    Runtime refuses layout 1."""
    case = _recurrent("LSTM", "bidirectional", (B, S, 6), B, 64, 6, layout=1,
                      ranges={"S": SymRange("S", 1, 40, 20), "B": SymRange("B", 1, 4, 2)})
    run = _compile(case, True)
    for b, s in ((1, 1), (4, 40), (2, 3), (3, 8), (4, 17), (1, 33)):
        run.check({"S": s, "B": b}, _feeds("LSTM", s, b, 64, 6, 2, layout=1), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_recurrent_sequence_lens(op):
    """sequence_lens given at run time (the scalar path): rows stop at their own lengths within the run-time S."""
    case = _recurrent(op, "bidirectional", (S, 3, 4), 3, 5, 4, seq_lens=True,
                      attrs={"linear_before_reset": 1} if op == "GRU" else None)
    run = _compile(case, False)
    for s, lens in ((1, (1, 1, 1)), (16, (16, 3, 9)), (7, (7, 1, 4)), (10, (2, 10, 10))):
        _check_ort(run, {"S": s}, _feeds(op, s, 3, 5, 4, 2, lens=lens))


def test_gru_float64_reverse():
    """float64 GRU (linear_before_reset 0: the r * H GEMM), reverse, sequence varying; onnx.reference (ONNX Runtime
    has no float64 GRU)."""
    case = _recurrent("GRU", "reverse", (S, 2, 3), 2, 7, 3, dtype=np.float64)
    run = _compile(case, False)
    for s in (1, 4, 11, 16):
        run.check({"S": s}, _feeds("GRU", s, 2, 7, 3, 1, dtype=np.float64), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("parallel", [True, False])
def test_einsum_varying_labels(parallel):
    """Einsum over varying labels: a batched product reducing over S, a diagonal-free transpose-product keeping S, and
    a broadcast (size-1) label against a varying one; big enough at the maximum for parallel tiles."""
    case = DynamicCase({"S": SymRange("S", 1, 48, 24)})
    a, b = case.input("a", np.float32, (8, S, 40)), case.input("b", np.float32, (8, S, 36))
    case.node("Einsum", [a, b], [(np.float32, (8, 40, 36))], {"equation": "bsi,bsj->bij"})
    case.node("Einsum", [a, case.const("w", _x(40, 50))], [(np.float32, (8, 50, S))], {"equation": "bsi,ij->bjs"})
    case.node("Einsum", [case.input("c", np.float32, (1, 1, 40)), a], [(np.float32, (8, S))], {"equation": "xyi,bsi->bs"})
    run = _compile(case, parallel)
    _sweep(run, (1, 2, 7, 25, 48), lambda s: {"a": _x(8, s, 40), "b": _x(8, s, 36), "c": _x(1, 1, 40)})


@pytest.mark.parametrize("parallel", [True, False])
def test_fused_bias_residual_relu(parallel):
    """MatMul with the epilogue passes/epilogues.py fuses (constant bias, residual, Relu) over varying M, and over a
    varying N (the residual read at the gathered edge's run-time columns), vs MatMul -> Add -> Add -> Relu."""
    from fluidml_xc.ir import Node
    from fluidml_xc.kernels.epilogue import EPILOGUE_ATTR, Epilogue

    case = DynamicCase({"S": SymRange("S", 1, 90, 45)})
    x, w, bias = case.input("x", np.float32, (1, S, 48)), case.const("w", _x(48, 40)), case.const("bias", _x(40))
    q, kt = case.input("q", np.float32, (2, S, 16)), case.input("kt", np.float32, (2, 16, S))
    res, mask = case.input("res", np.float32, (1, S, 40)), case.input("mask", np.float32, (2, S, S))
    fused = []
    for a, dims in (((x, w, bias, res), (1, S, 40)), ((q, kt, "", mask), (2, S, S))):
        mm = case.node("MatMul", list(a[:2]), [(np.float32, dims)], output=False)[0]
        if a[2]:
            mm = case.node("Add", [mm, a[2]], [(np.float32, dims)], output=False)[0]
        mm = case.node("Add", [mm, a[3]], [(np.float32, dims)], output=False)[0]
        y = case.node("Relu", [mm], [(np.float32, dims)])[0]
        fused.append(Node("MatMul", f"fused{len(fused)}", list(a), [y], {EPILOGUE_ATTR: Epilogue("relu", residual=True)}))
    case.graph.nodes = fused
    run = _compile(case, parallel)
    _sweep(run, (1, 5, 16, 37, 89, 90), lambda s: {"x": _x(1, s, 48), "q": _x(2, s, 16), "kt": _x(2, 16, s),
                                                  "res": _x(1, s, 40), "mask": _x(2, s, s)})


@pytest.mark.parametrize("board, machine", [("qemu-aarch64", 0xB7), ("qemu-armv7", 0x28)])
def test_arm_objects(board, machine):
    """The run-time kernels emitted for the ARM boards (NEON tiles; armv7: 32-bit indices, 8 accumulators) compile to
    objects of that machine: attention over a varying sequence, Gemm with a varying K, a bidirectional LSTM."""
    from fluidml_xc.target.objects import compile_modules

    case = DynamicCase({"S": SymRange("S", 1, 96, 48)})
    q, kt, v = case.input("q", np.float32, (2, S, 16)), case.input("kt", np.float32, (2, 16, S)), case.input("v", np.float32, (2, S, 40))
    scores = case.node("MatMul", [q, kt], [(np.float32, (2, S, S))])[0]
    case.node("MatMul", [scores, v], [(np.float32, (2, S, 40))])
    case.node("Gemm", [case.input("a", np.float32, (12, S)), case.input("b", np.float32, (12, S))], [(np.float32, (12, 12))],
              {"transB": 1})
    lstm = _recurrent("LSTM", "bidirectional", (S, 2, 6), 2, 16, 6)
    for graph in (case.graph, lstm.graph):
        check_supported(graph)
    plan = plan_memory(case.graph, PlanOptions(reuse=False, inplace=False, reorder=False))
    spec = machine_spec(get_board(board))
    text = ModuleEmitter(case.graph, plan, spec, EmitOptions(parallel=True, loop_orders={"gemm2": "ijk"})).emit()
    lstm_plan = plan_memory(lstm.graph, PlanOptions(reuse=False, inplace=False, reorder=False))
    lstm_text = ModuleEmitter(lstm.graph, lstm_plan, spec, EmitOptions(parallel=True)).emit()
    for code in compile_modules([(text, spec), (lstm_text, spec)], workers=1):
        assert code[:4] == b"\x7fELF" and int.from_bytes(code[18:20], "little") == machine
