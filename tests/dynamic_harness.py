"""Kernels over dims that vary at run time, tested without the frontend: a hand-made ir.Graph whose tensors carry
symbolic dims (ir.Tensor.dyn), emitted and JIT-compiled once, then run at many sizes against onnx.reference.

Tensors are stored with their capacity strides (fluidml_xc/symbolic.py); the entry takes each input dense at its
actual dims and leaves each output dense at its actual dims (emit/boundary.py), in buffers sized for the capacity.

    W = Sym("W")
    case = DynamicCase({"W": SymRange("W", 1, 64, 16)})
    x = case.input("x", np.float32, (2, W))
    y = case.node("Relu", [x], [(np.float32, (2, W))])
    run = case.compile()
    for w in (1, 7, 64):
        run.check({"W": w}, {"x": np.random.rand(2, w).astype(np.float32)})
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter, check_supported
from fluidml_xc.ir import Graph, Node, Tensor
from fluidml_xc.planning import PlanOptions, plan_memory
from fluidml_xc.symbolic import SymRange, at, capacity, is_static
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.jit import jit_engine
from fluidml_xc.target.machine import machine_spec


class DynamicCase:
    """A graph built node by node over symbolic shapes (ints for static dims, symbolic.Expr for varying ones)."""

    def __init__(self, ranges: dict[str, SymRange], opset: int = 21):
        self.ranges = dict(ranges)
        self.graph = Graph("dyn", {}, [], [], [], opset, symbols=dict(ranges))
        self.onnx_nodes: list = []
        self.values: dict[str, np.ndarray] = {}

    def _tensor(self, name: str, dtype, dims: Sequence, value: np.ndarray | None = None) -> str:
        dims = tuple(dims)
        dyn = None if all(is_static(d) for d in dims) else dims
        self.graph.tensors[name] = Tensor(name, np.dtype(dtype), capacity(dims, self.ranges), value, dyn)
        return name

    def input(self, name: str, dtype, dims: Sequence) -> str:
        self.graph.inputs.append(self._tensor(name, dtype, dims))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        value = np.asarray(value)
        self.values[name] = value
        return self._tensor(name, value.dtype, value.shape, value)

    def node(self, op_type: str, inputs: list[str], outputs: list[tuple], attrs: dict | None = None,
             output: bool = True, domain: str = "") -> list[str]:
        """Add a node; `outputs`: (dtype, dims) per output. Outputs are graph outputs unless output=False."""
        attrs = dict(attrs or {})
        k = len(self.graph.nodes)
        names = [self._tensor(f"{op_type.lower()}{k}_{i}", dt, dims) for i, (dt, dims) in enumerate(outputs)]
        self.graph.nodes.append(Node(op_type, f"{op_type.lower()}{k}", list(inputs), names, attrs, domain))
        self.onnx_nodes.append(helper.make_node(op_type, list(inputs), names, name=f"n{k}", domain=domain, **attrs))
        if output:
            self.graph.outputs.extend(names)
        return names

    def compile(self, board: str | None = None, parallel: bool = True, layouts: dict | None = None) -> "DynamicRun":
        check_supported(self.graph)
        plan = plan_memory(self.graph, PlanOptions(reuse=False, inplace=False, reorder=False))
        spec = machine_spec(get_board(board))
        emitter = ModuleEmitter(self.graph, plan, spec, EmitOptions(parallel=parallel, layouts=dict(layouts or {})))
        text = emitter.emit()
        return DynamicRun(self, text, jit_engine(text, spec), emitter, spec.alignment)


class DynamicRun:
    def __init__(self, case: DynamicCase, ir_text: str, engine, emitter: ModuleEmitter, alignment: int):
        self.case, self.ir_text, self.engine, self.alignment = case, ir_text, engine, alignment
        self.arena_bytes = emitter.arena_bytes
        fn_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))
        self._fn = fn_t(engine.get_function_address("fxc_model_run"))

    def __call__(self, env: dict[str, int], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs at their actual sizes for symbol values `env` and feeds of the actual sizes."""
        g = self.case.graph
        keep, in_ptrs, out_ptrs, outs = [], [], [], []
        for name in g.inputs:
            t = g.tensors[name]
            actual = at(t.dyn or t.shape, env)
            feed = np.asarray(feeds[name], dtype=t.dtype)
            assert feed.shape == actual, f"feed {name}: {feed.shape} for actual shape {actual}"
            buf = np.full(max(t.size, 1), 0x7F if t.dtype.kind != "f" else np.nan, dtype=t.dtype)
            buf[:feed.size] = feed.reshape(-1)  # dense at the actual dims; the capacity's tail is garbage
            keep.append(buf)
            in_ptrs.append(buf.ctypes.data)
        for name in g.outputs:
            t = g.tensors[name]
            buf = np.zeros(max(t.size, 1), dtype=t.dtype)
            outs.append(buf)
            out_ptrs.append(buf.ctypes.data)
        raw = np.full(self.arena_bytes + self.alignment, 0xFF, dtype=np.uint8)  # NaN-filled: reads of unset bytes show
        arena = raw.ctypes.data + (-raw.ctypes.data) % self.alignment
        syms = (ctypes.c_int64 * max(len(g.symbols), 1))(*[int(env[s]) for s in g.symbols])
        ins = (ctypes.c_void_p * max(len(in_ptrs), 1))(*in_ptrs)
        outp = (ctypes.c_void_p * max(len(out_ptrs), 1))(*out_ptrs)
        self._fn(ctypes.addressof(ins), ctypes.addressof(outp), arena, syms)
        result = []
        for name, buf in zip(g.outputs, outs):
            t = g.tensors[name]
            actual = at(t.dyn or t.shape, env)
            result.append(buf[:int(np.prod(actual, dtype=np.int64))].reshape(actual).copy())  # dense at the exit
        del raw, keep
        return result

    def reference(self, env: dict[str, int], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """onnx.reference on the same nodes at the actual sizes."""
        g = self.case.graph

        def info(name: str):
            t = g.tensors[name]
            return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), at(t.dyn or t.shape, env))

        inits = [onnx.numpy_helper.from_array(v, n) for n, v in self.case.values.items()]
        graph = helper.make_graph(self.case.onnx_nodes, "ref", [info(n) for n in g.inputs], [info(n) for n in g.outputs], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)])
        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]

    def check(self, env: dict[str, int], feeds: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-6) -> None:
        got, want = self(env, feeds), self.reference(env, feeds)
        for name, g_, w in zip(self.case.graph.outputs, got, want):
            assert g_.shape == w.shape, f"{name} at {env}: shape {g_.shape}, want {w.shape}"
            np.testing.assert_allclose(g_, w, rtol=rtol, atol=atol, err_msg=f"{name} at {env}")
