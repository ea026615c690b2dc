"""fluidml-xc as an ONNX backend (onnx.backend.base.Backend): prepare compiles, run executes.

On an x86_64 host the compiled model runs in-process: the emitted LLVM module is optimized with the
same pipeline as `compile_module`, JIT-compiled with llvmlite's MCJIT (target/jit.py), and
`fxc_model_run` is called through ctypes with numpy input/output buffers and a numpy arena (no linking,
no subprocess; libm symbols resolve from this process). For any other board the model is built into an artifact (the
normal `fluidml-xc build` pipeline) and its runner executed through `execute.run_artifact` (qemu-user
for foreign targets).

    rep = FxcBackend.prepare(model, "CPU")            # or board="qemu-aarch64"
    outputs = rep.run([x, y])
"""
from __future__ import annotations

import ctypes
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep

from ..target.boards import Board, get_board
from ..errors import InputError, NeedsConstant, RunCheckFailed, UnresolvedShape
from ..frontend.builder import outer_references
from ..frontend.names import unique_names
from ..frontend.ranges import ShapeRanges
from ..frontend.sequences import VALUE_INPUTS, describe_value, flat_names, regroup, structured_if, type_kind
from ..pipeline import Lowered, LowerOptions, bind_inputs, import_graph, lower
from ..strings import from_slots, is_slot, manifest_dtype, to_slots
from ..ir import is_onnx_domain

DEFAULT_OPT = "fluid"


# --------------------------------------------------------------------------------------------------
# in-process JIT (x86_64 hosts)
# --------------------------------------------------------------------------------------------------
def jit_available(board: Board) -> bool:
    from ..emit.link import is_host_target
    return board.target.name == "x86_64" and is_host_target(board.target)


_RUN_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
_RUN_DYN_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_int64))
"""A dynamic graph's entry: it takes the symbols' values too (emit/boundary.py)."""


class JitModel:
    """An emitted module compiled in-process; call() runs fxc_model_run on numpy buffers."""

    def __init__(self, lowered: Lowered):
        from ..emit.image_runtime import prepare_jit
        from ..target.jit import jit_engine

        spec = lowered.spec
        self.graph, self.plan = lowered.graph, lowered.plan
        prepare_jit(self.graph)
        self.engine = jit_engine(lowered.ir_text, spec)
        address = self.engine.get_function_address("fxc_model_run")
        if not address:
            raise InputError("JIT: fxc_model_run was not emitted")
        self.symbols = dict(self.graph.symbols)
        self._fn = (_RUN_DYN_FN if self.symbols else _RUN_FN)(address)
        if self.symbols:
            from ..emit.boundary import input_dims
            self._input_dims = input_dims(self.graph)
        self.alignment = spec.alignment
        self.arena_bytes = int(lowered.tail.arena_bytes)
        self.output_slots = list(lowered.tail.output_slots)
        self.status_offset, self.checks = lowered.tail.status_offset, list(lowered.tail.checks)
        self.input_specs = [(n, np.dtype(self.graph.tensors[n].dtype), tuple(self.graph.tensors[n].shape)) for n in self.graph.inputs]
        self.output_specs = [(n, np.dtype(self.graph.tensors[n].dtype), tuple(self.graph.tensors[n].shape)) for n in self.graph.outputs]
        self.structures = self.graph.structures

    def _arena(self) -> tuple[np.ndarray, int]:
        raw = np.zeros(self.arena_bytes + self.alignment, dtype=np.uint8)
        shift = (-raw.ctypes.data) % self.alignment
        return raw, raw.ctypes.data + shift

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in graph order for feeds {graph input name: array}; a dynamic graph's feeds are of any size in its
        ranges (dense), and its outputs come at their actual sizes."""
        syms = []
        if self.symbols:
            from ..symbolic import bind_inputs
            shapes = {name: np.shape(feeds[name]) for name, _, _ in self.input_specs}
            env = bind_inputs(self._input_dims, self.symbols, shapes)
            syms = [(ctypes.c_int64 * max(len(env), 1))(*[env[s] for s in self.symbols])]
            arrays = [_in_capacity(np.asarray(feeds[name], dtype=dtype), shape) for name, dtype, shape in self.input_specs]
        else:
            arrays = [_coerce_input(name, dtype, shape, feeds[name]) for name, dtype, shape in self.input_specs]
        outputs = [np.zeros(shape, dtype=dtype) for _, dtype, shape in self.output_specs]
        # every buffer gets at least one byte so that no pointer is NULL (zero-sized tensors)
        keep = [a if a.nbytes else np.zeros(1, np.uint8) for a in arrays]
        out_keep = [o if o.nbytes else np.zeros(1, np.uint8) for o in outputs]
        in_ptrs = (ctypes.c_void_p * max(len(keep), 1))(*[a.ctypes.data for a in keep])
        out_ptrs = (ctypes.c_void_p * max(len(out_keep), 1))(*[o.ctypes.data for o in out_keep])
        raw, arena = self._arena()
        self._fn(in_ptrs, out_ptrs, ctypes.c_void_p(arena), *syms)
        if self.status_offset >= 0:
            at = arena - raw.ctypes.data + self.status_offset
            status = int(raw[at:at + 8].view(np.int64)[0])
            if status:
                raise RunCheckFailed(self.checks[status - 1].message)
        for k, offset in enumerate(self.output_slots):
            if offset >= 0:  # a data-dependent or varying shape: the run wrote the actual dims into the arena
                rank = outputs[k].ndim
                at = arena - raw.ctypes.data + offset
                dims = tuple(int(d) for d in raw[at:at + 8 * rank].view(np.int64))
                outputs[k] = outputs[k].reshape(-1)[:int(np.prod(dims, dtype=np.int64))].reshape(dims).copy()
        del raw, keep, out_keep
        return [from_slots(o) if is_slot(o.dtype) else o for o in outputs]


def _in_capacity(arr: np.ndarray, capacity: tuple[int, ...]) -> np.ndarray:
    """A dense feed at the start of a buffer of the capacity's size (the C API's input buffers)."""
    buf = np.zeros(int(np.prod(capacity, dtype=np.int64)), dtype=arr.dtype)
    buf[:arr.size] = arr.reshape(-1)
    return buf


def _coerce_input(name: str, dtype: np.dtype, shape: tuple[int, ...], value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.shape != shape:
        if arr.size == int(np.prod(shape, dtype=np.int64)):
            arr = arr.reshape(shape)
        else:
            raise InputError(f"input {name!r}: shape {arr.shape} does not match the model's {shape}")
    if is_slot(dtype):
        return np.ascontiguousarray(to_slots(arr, dtype, f"input {name!r}")).reshape(arr.shape)
    return np.asarray(arr, dtype=dtype, order="C")  # (ascontiguousarray would make a 0-d array 1-d)


# --------------------------------------------------------------------------------------------------
# artifacts (other boards, qemu-user)
# --------------------------------------------------------------------------------------------------
class ArtifactModel:
    """The model built into an artifact directory for a board; call() runs its runner (qemu for foreign targets)."""

    def __init__(self, model: onnx.ModelProto, board: Board, input_shapes: dict, opt: str = DEFAULT_OPT,
                 timeout: float | None = 600, workdir: Path | None = None, bind: dict | None = None,
                 structures: dict | None = None, max_dims: dict[str, int] | None = None):
        from ..build import BuildOptions, build_model

        model = bind_inputs(model, bind or {})
        input_shapes = {k: v for k, v in input_shapes.items() if not bind or k not in bind}
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.mkdtemp(prefix="fxc-backend-")
            workdir = Path(self._tmp)
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "model.onnx"
        onnx.save(model, str(path))
        result = build_model(path, BuildOptions(board=board.name, out_dir=workdir / "artifact", input_shapes=input_shapes,
                                                opt=opt, profile_runner=False, record_last=False,
                                                structures=dict(structures or {}),
                                                ranges=ShapeRanges(max_dims=dict(max_dims or {}))))
        self.artifact, self.manifest, self.timeout = result.artifact, result.manifest, timeout
        self.structures = self.manifest.structures

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        from .execute import run_artifact

        if self.manifest.symbols:  # a dynamic build: feeds of any size in its ranges (run_artifact checks them)
            feeds = {s.name: np.asarray(feeds[s.name], dtype=np.dtype(s.dtype)) for s in self.manifest.inputs}
        else:
            feeds = {s.name: _coerce_input(s.name, manifest_dtype(s.dtype), s.shape, feeds[s.name]) for s in self.manifest.inputs}
        result = run_artifact(self.artifact, feeds, timeout=self.timeout)
        outs = []
        for s in self.manifest.outputs:
            value = np.asarray(result.outputs[s.name], dtype=manifest_dtype(s.dtype))
            outs.append(value if s.dynamic_dims else value.reshape(s.shape))
        return outs

    def close(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __del__(self):
        self.close()


def compile_model(model: onnx.ModelProto, board: str | Board | None = None, input_shapes: dict | None = None,
                  opt: str = DEFAULT_OPT, timeout: float | None = 600, workdir: Path | None = None,
                  bind: dict[str, np.ndarray] | None = None, structures: dict | None = None,
                  max_dims: dict[str, int] | None = None):
    """A callable `f({input name: array}) -> list of output arrays` for `board` (JIT on x86_64 hosts).

    `bind`: graph inputs compiled as constants with these values (they are then not fed).
    `structures`: sequence/optional inputs -> ABI descriptor (frontend/sequences.py); the compiled model's inputs
    and outputs are then their element tensors (`x.0`, ...), grouped back by `regroup_outputs`.
    `max_dims`: --max-dim (the bounds of data-dependent dims: a run-time Loop's steps, a Range's length, ...;
    "*": every such dim not named)."""
    board = board if isinstance(board, Board) else get_board(board)
    if jit_available(board):
        from ..target.machine import machine_spec

        graph = import_graph(model, input_shapes, bind=bind, structures=structures,
                             ranges=ShapeRanges(max_dims=dict(max_dims)) if max_dims else None)
        return JitModel(lower(graph, machine_spec(board), LowerOptions(opt=opt)))
    return ArtifactModel(model, board, dict(input_shapes or {}), opt, timeout, workdir, bind, structures, max_dims)


def regroup_outputs(model: onnx.ModelProto, compiled, flat: list) -> list:
    """The model's outputs from a compiled model's flat outputs: a sequence output becomes a list of
    arrays, an optional one None or its value (frontend/sequences.py)."""
    described = (getattr(compiled, "structures", None) or {}).get("outputs", {})
    if not described:
        return list(flat)
    result, at = [], 0
    for vi in model.graph.output:
        desc = described.get(vi.name, "tensor")
        n = len(flat_names(vi.name, desc))
        result.append(regroup(desc, list(flat[at:at + n])))
        at += n
    return result


MAX_BOUND_ELEMENTS = 64


def _needing_node(exc: InputError) -> str | None:
    """The label of the node that needs input values at build time, when `exc` says so."""
    return exc.node if isinstance(exc, NeedsConstant) else None


def _needs_values(exc: InputError) -> bool:
    """Whether binding graph inputs to their values may resolve `exc` (an unknown shape, a needed constant)."""
    return isinstance(exc, UnresolvedShape) or _needing_node(exc) is not None


def _node_needing_values(model: onnx.ModelProto, exc: InputError):
    """The ONNX node whose output shape (or lowering) needs input values at build time, from an InputError."""
    if isinstance(exc, UnresolvedShape) and exc.tensor is not None:
        name = exc.tensor
        node = next((n for n in model.graph.node if name in n.output), None)
        if node is None and "/" in name:  # a tensor inside a function body the frontend inlined: its calling node
            node = dict(zip(unique_names(model), model.graph.node)).get(name.split("/")[0])
        return node
    label = _needing_node(exc)
    if label is not None:
        return next((n for n, name in zip(model.graph.node, unique_names(model)) if name == label), None)
    return None


def _shape_inputs(model: onnx.ModelProto, node, arrays: dict[str, np.ndarray], bound: dict) -> dict[str, np.ndarray]:
    """Graph inputs that `node` needs the values of: those reached from its inputs 1.. (shape, axes,
    sizes, repeats, pads, K, ...) walking back through producers, small enough to be such values."""
    producers = {out: n for n in model.graph.node for out in n.output if out}
    if node is None:
        return {}
    stack = [n for n in list(node.input)[1:] if n]
    if node.op_type == "ConstantOfShape":
        stack = [n for n in node.input if n]
    if node.op_type == "Loop":  # the trip count and the condition decide the output shapes, not the carried values
        stack = [n for n in node.input[:2] if n]
    if (node.op_type in VALUE_INPUTS and is_onnx_domain(node.domain)
            and (node.op_type != "If" or structured_if(node))):  # positions, split sizes, the condition of an If giving sequences
        values = _shape_inputs_from(producers, [node.input[i] for i in VALUE_INPUTS[node.op_type]
                                                if i < len(node.input) and node.input[i]], arrays, bound)
        if values or node.op_type != "If":
            return values
    for attr in node.attribute:  # If/Scan/Loop bodies read enclosing tensors by name
        if attr.type == onnx.AttributeProto.GRAPH:
            stack.extend(sorted(outer_references(attr.g)))
    return _shape_inputs_from(producers, stack, arrays, bound)


def _shape_inputs_from(producers: dict, stack: list[str], arrays: dict[str, np.ndarray], bound: dict) -> dict[str, np.ndarray]:
    found, seen = {}, set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in arrays and name not in bound:
            value = arrays[name]
            if isinstance(value, np.ndarray) and value.size <= MAX_BOUND_ELEMENTS and value.ndim <= 1:
                found[name] = value
        elif name in producers:
            stack.extend(n for n in producers[name].input if n)
    return found


def _graph_input_names(model: onnx.ModelProto) -> list[str]:
    initializers = {init.name for init in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in initializers]


def _declared_static(model: onnx.ModelProto) -> bool:
    initializers = {init.name for init in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
            return False
        if any(not (d.HasField("dim_value") and d.dim_value > 0) for d in tt.shape.dim):
            return False
    return True


class FxcBackendRep(BackendRep):
    """A prepared model, compiled in prepare when every input shape is static.

    Otherwise (shapes to take from the first inputs, or an output shape that depends on the values of
    inputs such as Reshape's shape, Resize's sizes or a Reduce's axes) it is compiled on
    run, specialized to those input shapes and values: such inputs become build-time constants and the
    compiled model is reused only for the same shapes and values (`specialized` names them)."""

    MAX_SPECIALIZE_ROUNDS = 8

    def __init__(self, model: onnx.ModelProto, board: Board, opt: str = DEFAULT_OPT, timeout: float | None = 600,
                 max_dims: dict[str, int] | None = None):
        self.model, self.board, self.opt, self.timeout = model, board, opt, timeout
        self.max_dims = dict(max_dims or {})
        """--max-dim for every build (the conformance harness: '*' for sizes that come at run time)."""
        self.input_names = _graph_input_names(model)
        self.output_names = [vi.name for vi in model.graph.output]
        self._compiled: dict[tuple, tuple[Any, dict]] = {}
        self.specialized: list[str] = []
        self.folded = False
        """True when specializing left no op to run (every output was computed at build time)."""
        self._static = None
        if _declared_static(model):
            try:
                self._static = compile_model(model, board, None, opt, timeout, max_dims=self.max_dims)
            except InputError as exc:
                if not _needs_values(exc):
                    raise

    def _specialize(self, arrays: dict[str, np.ndarray], structures: dict | None = None):
        shapes = {n: tuple(a.shape) for n, a in arrays.items()}
        bound: dict[str, np.ndarray] = {}
        for _ in range(self.MAX_SPECIALIZE_ROUNDS):
            try:
                compiled = compile_model(self.model, self.board, shapes, self.opt, self.timeout, bind=bound,
                                         structures=structures, max_dims=self.max_dims)
                break
            except InputError as exc:
                more = _shape_inputs(self.model, _node_needing_values(self.model, exc), arrays, bound)
                if not more:
                    raise
                bound.update(more)
        else:
            raise InputError(f"output shapes still depend on input values after binding {', '.join(bound)}")
        return compiled, bound

    def _for(self, arrays: dict[str, np.ndarray], structures: dict | None = None):
        if self._static is not None:
            return self._static, {}
        key = repr(sorted((structures or {}).items()))
        for k, (compiled, bound) in self._compiled.items():
            if k[0] == key and all(n in arrays and arrays[n].shape == v.shape and arrays[n].dtype == v.dtype and np.array_equal(arrays[n], v)
                   for n, v in bound.items()):
                if all(arrays[n].shape == s for n, s in compiled_shapes(compiled).items()):
                    return compiled, bound
        compiled, bound = self._specialize(arrays, structures)
        self._compiled[(key, len(self._compiled))] = (compiled, bound)
        self.specialized = sorted(bound)
        self.folded = bool(bound) and compiled_op_count(compiled) == 0
        return compiled, bound

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            values = [inputs[n] for n in self.input_names]
        elif isinstance(inputs, (list, tuple)):
            values = list(inputs)
        else:
            values = [inputs]
        if len(values) != len(self.input_names):
            raise InputError(f"expected {len(self.input_names)} inputs ({', '.join(self.input_names)}), got {len(values)}")
        kinds = {vi.name: type_kind(vi.type) for vi in self.model.graph.input}
        arrays, structures = {}, {}
        for n, v in zip(self.input_names, values):
            if kinds.get(n) in ("seq", "opt"):  # one tensor per element (frontend/sequences.py)
                desc, items = describe_value(kinds[n], v, n)
                structures[n] = desc
                arrays.update(zip(flat_names(n, desc), items))
            else:
                arrays[n] = np.asarray(v)
        compiled, bound = self._for(arrays, structures)
        flat = compiled({n: a for n, a in arrays.items() if n not in bound})
        return tuple(regroup_outputs(self.model, compiled, flat))


def compiled_shapes(compiled) -> dict[str, tuple[int, ...]]:
    if isinstance(compiled, JitModel):
        return {n: shape for n, _, shape in compiled.input_specs}
    return {s.name: s.shape for s in compiled.manifest.inputs}


def compiled_op_count(compiled) -> int:
    if isinstance(compiled, JitModel):
        return len(compiled.graph.nodes)
    return len(compiled.manifest.ops)


_DEVICES = {"CPU"}


def _board_for(device: str, board: str | None) -> Board:
    if board:
        return get_board(board)
    device = (device or "CPU").upper()
    return get_board(None if device == "CPU" else device.lower())


class FxcBackend(Backend):
    """onnx.backend.base.Backend for fluidml-xc; device "CPU" is this host (JIT), pass board=... for others."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return True

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", board: str | None = None, opt: str = DEFAULT_OPT,
                timeout: float | None = 600, max_dims: dict[str, int] | None = None, **kwargs: Any) -> FxcBackendRep:
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load_model_from_string(model) if isinstance(model, bytes) else onnx.load(str(model))
        return FxcBackendRep(model, _board_for(device, board), opt, timeout, max_dims)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info=None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        arrays = [np.asarray(v) for v in (inputs.values() if isinstance(inputs, dict) else inputs)]
        names = [n for n in node.input if n]
        if len(names) != len(arrays):
            raise InputError(f"node {node.op_type} has {len(names)} inputs, got {len(arrays)} values")
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(names, arrays)]
        graph_outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.output if n]
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs),
                                  opset_imports=[helper.make_opsetid(node.domain or "", opset)])
        return cls.prepare(model, device, **kwargs).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            _board_for(device, None)
        except InputError:
            return False
        return True


prepare = FxcBackend.prepare
run_model = FxcBackend.run_model
run_node = FxcBackend.run_node
supports_device = FxcBackend.supports_device
