"""Graph + memory plan -> one LLVM module: a function per node and `fxc_model_run` calling them in order."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..frontend.unsupported import unsupported_message
from ..ir import BODY_ATTR, Graph, Node
from ..kernels.derived import as_stored, origin_of
from ..kernels.kernel import Kernel, Operand, layout_strides
from ..kernels.scalar import storage_type
from ..strings import is_slot
from ..opspec import lookup
from ..target.machine import MachineSpec, data_layout
from .ir_text import module_text
from .boundary import Boundary, BoundaryEmitter, extend_tail, finish_outputs
from .parallel_safety import parallel_safe
from .unit_args import ConstantArgs

I8P = ir.IntType(8).as_pointer()
I64 = ir.IntType(64)
TASK_T = ir.FunctionType(ir.VoidType(), [I8P, I64, I64])
PARALLEL_FOR = "fxc_parallel_for"


@dataclass
class WeightsBlob:
    """The bytes behind `EmitOptions.weights_symbol`: each distinct constant once, `alignment`-aligned, shared by
    the code variants of one build (a constant their kernels pack alike is stored once)."""

    data: bytearray = field(default_factory=bytearray)
    offsets: dict[bytes, int] = field(default_factory=dict)

    def add(self, data: bytes, alignment: int) -> int:
        key = hashlib.sha256(data).digest()
        if key not in self.offsets:
            offset = -len(self.data) % alignment + len(self.data)
            self.data.extend(b"\0" * (offset - len(self.data)))
            self.data.extend(data)
            self.offsets[key] = offset
        return self.offsets[key]


@dataclass
class EmitOptions:
    layouts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    loop_orders: dict[str, str] = field(default_factory=dict)
    """node name -> loop order chosen by the optimizer (its kernel reads Kernel.loop_order)."""
    weights_symbol: str | None = None
    """When set, constants of INLINE_LIMIT bytes or more are not IR initializers but offsets into one
    external blob `weights_symbol` (see `ModuleEmitter.blob`), which link.attach_weights puts into
    the object. LLVM then never parses or prints the weights, which keeps big models fast to build."""
    parallel: bool = True
    """Emit heavy ops as tiles handed to `fxc_parallel_for` (runtime_c/pool.c; a serial weak definition
    in the module serves the JIT). False (a build for one thread) emits every op as one plain function."""
    symbol_prefix: str = "fxc_"
    """Prefix of the module's two exported entries (`<prefix>model_run`, `<prefix>model_run_profiled`): a build
    --name NAME uses `NAME_`, so several models link into one program (the weights blob is named by the build; the
    rest is internal but the weak serial `fxc_parallel_for`, which the shared runtime's replaces)."""
    variant: str = ""
    """Suffix of the entries and node functions of one code variant (MachineSpec.variant: `_x86_64_v3`)."""
    blob: WeightsBlob | None = None
    """The weights blob shared with the build's other code variants (None: this module's own)."""
    unit: bool = False
    """Emit for a per-node unit (emit/units.py): a constant of INLINE_LIMIT bytes or more is an external hidden
    symbol named by its content (`constant_symbol`, defined in the weights object; recorded in `ModuleEmitter.
    content`) instead of an offset into the blob, and `fxc_parallel_for` is declared (the entry module defines it)."""
    constant_args: bool = False
    """With `unit`: the node function's large constants are pointer arguments after its others (ConstantArgs), so
    its code does not depend on which layer it is; the entry passes their symbols (`unit_arguments`)."""


INLINE_LIMIT = 256


def constant_bytes(value: np.ndarray) -> bytes:
    """A build-time array's bytes as stored (bool as uint8, nothing as one zero byte)."""
    value = np.ascontiguousarray(value)
    return (value.astype(np.uint8).tobytes() if value.dtype == np.bool_ else value.tobytes()) or b"\0"


def unsupported_ops(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if lookup(n.op_type, graph.opset, n.domain) is None]


def check_supported(graph: Graph) -> None:
    from ..frontend.shapes import check as check_dynamic

    check_dynamic(graph)
    strings = [n for n in (*graph.inputs, *graph.outputs) if is_slot(graph.tensors[n].dtype)]
    if graph.symbols and strings:
        raise InputError(f"{strings[0]!r} is a string tensor of a model whose dims vary at run time, which fluidml-xc "
                         "does not support yet: give every input dim one size (--input-shape)")
    for node in graph.nodes:
        if BODY_ATTR in node.attrs:
            check_supported(node.attrs[BODY_ATTR])
    missing = unsupported_ops(graph)
    if missing:
        raise InputError(unsupported_message([(n.op_type if not n.domain else f"{n.domain}.{n.op_type}", n.name) for n in missing]))
    for node in graph.nodes:
        if touches_varying(graph, node) and not lookup(node.op_type, graph.opset, node.domain).runtime_extents:
            name = next(n for n in [*node.inputs, *node.outputs] if n and graph.tensors[n].dyn is not None)
            raise InputError(f"node {node.name!r} ({node.op_type}) reads or writes {name!r}, whose shape "
                             f"{_dyn_text(graph.tensors[name].dyn)} varies at run time, and {node.op_type} does not take "
                             "run-time sizes yet: give that dimension one value (--input-shape or --dim NAME=N)")


def touches_varying(graph: Graph, node: Node) -> bool:
    """Does `node` read or write a tensor whose dims vary at run time (ir.Tensor.dyn)?"""
    return bool(graph.symbols) and any(n and graph.tensors[n].dyn is not None for n in [*node.inputs, *node.outputs])


def _dyn_text(dyn: tuple) -> str:
    return "[" + ", ".join(str(d) for d in dyn) + "]"


class ModuleEmitter:
    def __init__(self, graph: Graph, plan, spec: MachineSpec, options: EmitOptions):
        self.graph, self.plan, self.spec, self.options = graph, plan, spec, options
        self.module = ir.Module(name=re.sub(r"[^A-Za-z0-9_.-]", "_", graph.name))  # no newline or quote in the IR header
        self.module.triple = spec.triple
        self.module.data_layout = data_layout(spec)
        self.globals: dict[str, ir.Value] = {}
        self.weights = options.blob if options.blob is not None else WeightsBlob()
        self.blob = self.weights.data
        self.blob_var: ir.GlobalVariable | None = None
        self._tail = None
        self.parallel: dict[str, tuple[int, ...]] = {}
        """node name -> its tiles per split dimension, for the ops handed to fxc_parallel_for."""
        self._pfor: ir.Function | None = None
        self.sym_index = {name: i for i, name in enumerate(graph.symbols)}
        self._takes_syms: set[str] = set()
        """Names of the nodes whose function takes the symbols' run-time values as its last pointer argument."""
        self._boundary: Boundary | None = None
        self._bodies: dict[str, ModuleEmitter] = {}
        """Loop node name -> the emitter of its body (on this module), `body_emitter`."""
        self.content: dict[str, bytes] = {}
        """With EmitOptions.unit: constant symbol -> its bytes, in the order the module first used them."""
        self.const_args: ConstantArgs | None = None
        """While a unit's node function is lowered with EmitOptions.constant_args: its constant arguments."""
        self.arg_constants: list[bytes] = []
        """After: the bytes of those arguments, in order."""
        self.unit_args: ConstantArgs | None = None
        """The last node function's ConstantArgs (how its arguments follow from its constant inputs)."""
        self.unit_arguments: dict[int, list[tuple[str, bytes]]] = {}
        """An entry module's steps -> the constants passed after the other arguments of their unit function."""

    @property
    def tail(self):
        """dynamic.TailLayout: dims slots of data-dependent outputs and their kernels' scratch, after the
        planned arena (a plan without `arena_bytes`, as the cost model's, counts as an empty arena)."""
        if self._tail is None:
            from ..frontend.shapes import tail_layout
            from ..ops.control import loop_scratch
            from ..ops.dynamic import scratch_bytes

            scratch = {n.name: scratch_bytes(self.graph, n) for n in self.graph.nodes}
            for n in self.graph.nodes:
                if BODY_ATTR in n.attrs:
                    scratch[n.name] = loop_scratch(self.graph, n, self.body_emitter(n).arena_bytes, self.spec.alignment).total
            self._tail = tail_layout(self.graph, getattr(self.plan, "arena_bytes", 0), self.spec.alignment, scratch)
            if self.graph.symbols:
                self._boundary = extend_tail(self.graph, self._tail, self.spec.alignment, self.plan)
        return self._tail

    @tail.setter
    def tail(self, layout) -> None:
        """A unit's tail (emit/units.py): its node's dims slots as the whole graph's has them, no scratch offset."""
        self._tail = layout

    @property
    def boundary(self) -> Boundary | None:
        """A dynamic graph's staged inputs and varying outputs' dims slots (boundary.py); None for a static graph."""
        return self._boundary if self.tail is not None else None

    @property
    def arena_bytes(self) -> int:
        """The arena the model needs: the plan's plus the dims table and scratch of dynamic outputs."""
        return self.tail.arena_bytes

    def constant_data(self, value: np.ndarray, argument: bool = False) -> ir.Value:
        """Read-only bytes of a build-time array as an i8 pointer constant: inline, or in the weights blob.
        argument: in a unit, an argument whatever its size and of no declared size (Kernel.argument_data)."""
        data, origin = constant_bytes(value), origin_of(value)
        if self.const_args is not None and (argument or len(data) >= INLINE_LIMIT) and self.const_args.here():
            return self.const_args.get(data, origin, sized=not argument)
        if self.const_args is not None and origin is not None:
            self.const_args.inlined.append(origin)
        if self.options.unit and len(data) >= INLINE_LIMIT:
            return self._content_constant(data)
        if self.options.weights_symbol and len(data) >= INLINE_LIMIT:
            offset = self.weights.add(data, self.spec.alignment)
            if self.blob_var is None:
                self.blob_var = self.module.globals.get(self.options.weights_symbol)  # a Loop body's emitter shares it
            if self.blob_var is None:
                self.blob_var = ir.GlobalVariable(self.module, ir.ArrayType(ir.IntType(8), 0), self.options.weights_symbol)
                self.blob_var.global_constant = True
                self.blob_var.visibility = "hidden"
            return self.blob_var.gep([ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(64), offset)])
        ty = ir.ArrayType(ir.IntType(8), len(data))
        var = ir.GlobalVariable(self.module, ty, self.module.get_unique_name("w"))
        var.global_constant = True
        var.linkage = "internal"
        var.unnamed_addr = True
        var.align = self.spec.alignment
        var.initializer = ir.Constant(ty, bytearray(data))
        return var.bitcast(I8P)

    def _content_constant(self, data: bytes, digest: str | None = None) -> ir.Value:
        """An external hidden i8 array named by `data`'s hash (`digest`: its sha256 hex, when known; a Loop body's
        emitter shares the module's)."""
        symbol = constant_symbol(data, digest)
        self.content.setdefault(symbol, data)
        var = self.module.globals.get(symbol)
        if var is None:
            var = ir.GlobalVariable(self.module, ir.ArrayType(ir.IntType(8), 0), symbol)
            var.global_constant = True
            var.visibility = "hidden"
        return var.bitcast(I8P)

    def constant_global(self, name: str) -> ir.Value:
        if name not in self.globals:
            self.globals[name] = self.constant_data(self.graph.tensors[name].value)
        return self.globals[name]

    def layout(self, name: str) -> tuple[int, ...] | None:
        return self.options.layouts.get(name)

    def emit(self) -> str:
        """The module (emit_module) as LLVM IR text."""
        self.emit_module()
        return module_text(self.module)

    def emit_module(self) -> None:
        """Node functions, then `fxc_model_run` and `fxc_model_run_profiled` (hooks passed as pointers) calling them."""
        steps = []
        for step, node_index in enumerate(self.plan.order):
            node = self.graph.nodes[node_index]
            fn = self.node_function(node, step)
            if fn is not None:
                fn.attributes.add("noinline")
                steps.append((step, node, fn))
        self.emit_entries(steps)

    def emit_entries(self, steps: list[tuple[int, Node, ir.Function]]) -> None:
        """`fxc_model_run` and `fxc_model_run_profiled` (hooks passed as pointers) calling `steps`' functions."""
        self._takes_syms.update(node.name for _, node, _ in steps if touches_varying(self.graph, node))
        hook = ir.FunctionType(ir.VoidType(), [ir.IntType(32)]).as_pointer()
        self._entry(f"{self.options.symbol_prefix}model_run{self.options.variant}", steps, None)
        self._entry(f"{self.options.symbol_prefix}model_run_profiled{self.options.variant}", steps, hook)

    def _entry(self, symbol: str, steps, hook: ir.Type | None) -> None:
        graph = self.graph
        syms_t = [I64.as_pointer()] if graph.symbols else []
        params = [I8P.as_pointer(), I8P.as_pointer(), I8P] + syms_t + ([hook, hook] if hook else [])
        run = ir.Function(self.module, ir.FunctionType(ir.VoidType(), params), symbol)
        b = ir.IRBuilder(run.append_basic_block("entry"))
        inputs_arg, outputs_arg, arena = run.args[:3]
        hooks = run.args[3 + len(syms_t):]
        pointers: dict[str, ir.Value] = {}
        for k, name in enumerate(graph.inputs):
            pointers[name] = b.load(b.gep(inputs_arg, [ir.Constant(ir.IntType(32), k)]))
        raw_inputs, edge = dict(pointers), None
        if graph.symbols:
            edge = BoundaryEmitter(self.module, b, graph, self.boundary, run.args[3], self.sym_index)
            pointers.update({name: edge.stage(name, raw_inputs[name], arena) for name in self.boundary.staged})
        for k, name in enumerate(graph.outputs):
            if not graph.tensors[name].is_const:
                pointers.setdefault(name, b.load(b.gep(outputs_arg, [ir.Constant(ir.IntType(32), k)])))
        pointer = self._calls(b, steps, pointers, arena, run.args[3] if syms_t else None, hooks)
        if edge is None:
            self._copy_passthrough_outputs(b, pointer, lambda k: b.load(b.gep(outputs_arg, [ir.Constant(ir.IntType(32), k)])))
        else:
            finish_outputs(edge, graph, outputs_arg, arena, raw_inputs, self.constant_global)
        b.ret_void()

    def _calls(self, b: ir.IRBuilder, steps, pointers: dict[str, ir.Value], arena: ir.Value, syms: ir.Value | None,
               hooks) -> Callable[[str], ir.Value]:
        """The node functions called in order on `pointers` (graph inputs and outputs) and the arena; returns how a
        tensor's pointer is found (for the pass-through outputs the caller copies)."""
        graph = self.graph

        def pointer(name: str) -> ir.Value:
            if name in pointers:
                return pointers[name]
            tensor = graph.tensors[name]
            if tensor.is_const:
                return self.constant_global(name)
            return b.gep(arena, [ir.Constant(ir.IntType(64), self.plan.offsets[name])], inbounds=True)

        for step, node, fn in steps:
            names = self.arg_names(node)
            args = [b.bitcast(pointer(n), a.type) for n, a in zip(names, fn.args)]
            for offset, a in zip(self._extra_offsets(node), fn.args[len(names):]):
                args.append(b.bitcast(b.gep(arena, [ir.Constant(ir.IntType(64), offset)], inbounds=True), a.type))
            if node.name in self._takes_syms:
                args.append(syms)
            args += [self._content_constant(data, digest) for digest, data in self.unit_arguments.get(step, ())]
            if hooks:
                b.call(hooks[0], [ir.Constant(ir.IntType(32), step)])
            b.call(fn, args)
            if hooks:
                b.call(hooks[1], [ir.Constant(ir.IntType(32), step)])
        return pointer

    def _copy_passthrough_outputs(self, b: ir.IRBuilder, pointer, output: Callable[[int], ir.Value]) -> None:
        """Graph outputs that are constants or graph inputs, and every repeat of an output listed more than once
        (its nodes write the first one's buffer), are copied into the caller's buffer."""
        produced = {o for n in self.graph.nodes for o in n.outputs}
        memcpy = self.module.declare_intrinsic("llvm.memcpy", [I8P, I8P, ir.IntType(64)])
        for k, name in enumerate(self.graph.outputs):
            tensor = self.graph.tensors[name]
            if name in produced and not tensor.is_const and self.graph.outputs.index(name) == k:
                continue
            dst = output(k)
            src = self.constant_global(name) if tensor.is_const else pointer(name)
            if src is dst:
                continue
            b.call(memcpy, [dst, src, ir.Constant(ir.IntType(64), max(tensor.nbytes, 0)), ir.Constant(ir.IntType(1), 0)])

    def arg_names(self, node: Node) -> list[str]:
        """Tensors passed to a node's function, one per storage: an in-place output shares its input's
        pointer (so LLVM sees one pointer and vectorizes); constants are read from read-only data directly."""
        names, roots = [], set()
        for n in [n for n in node.inputs if n and not self.graph.tensors[n].is_const] + [n for n in node.outputs if n]:
            root = self.storage_root(n)
            if root not in roots:
                roots.add(root)
                names.append(n)
        return names

    def _dims_outputs(self, node: Node) -> list[int]:
        """Indices of `node`'s outputs that are dynamic roots (their kernels get a dims slot pointer)."""
        from ..frontend.shapes import node_marks
        return [i for i in sorted(node_marks(node)) if i < len(node.outputs) and node.outputs[i] in self.tail.slots]

    def _has_scratch(self, node: Node) -> bool:
        from ..frontend.shapes import node_marks
        return bool(node_marks(node)) or BODY_ATTR in node.attrs

    def _extra_offsets(self, node: Node) -> list[int]:
        """Arena offsets passed after the tensors: one dims slot per dynamic output, then the scratch; then the
        run's status word for a node whose kernel may fail the run (OpSpec.run_check)."""
        out = []
        if self._has_scratch(node):
            out = [self.tail.slots[node.outputs[i]] for i in self._dims_outputs(node)] + [self.tail.scratch_offset]
        if self.tail.takes_status(node.name):
            out.append(self.tail.status_offset)
        return out

    def _constant_pointer(self, name: str) -> ir.Value:
        """A constant stored in its layout (permuted at build time), as a typed pointer constant expression."""
        tensor = self.graph.tensors[name]
        layout = self.layout(name)
        key = f"{name}\0{layout}" if layout else name
        if key not in self.globals:
            self.globals[key] = self.constant_data(as_stored(name, tensor.value, layout))
        if isinstance(self.globals[key], ir.Argument):
            return self.const_args.cast(self.globals[key], storage_type(tensor.dtype).as_pointer())
        return self.globals[key].bitcast(storage_type(tensor.dtype).as_pointer())

    def storage_root(self, name: str) -> str:
        """The tensor whose storage `name` is (the plan's aliases followed)."""
        alias = self.plan.alias_of
        while name in alias:
            name = alias[name]
        return name

    def emits_function(self, node: Node) -> bool:
        """False for a view the memory plan aliases to its input (no code)."""
        from ..planning import is_alias_view

        return not (lookup(node.op_type, self.graph.opset, node.domain).view and is_alias_view(self.graph, node))

    def signature(self, node: Node) -> list[ir.Type]:
        """The parameter types of `node`'s function: a pointer per storage (arg_names), a dims slot pointer per
        dynamic output, the scratch, the symbols' values when it touches a varying tensor."""
        types = [storage_type(self.graph.tensors[n].dtype).as_pointer() for n in self.arg_names(node)]
        dims_outputs = self._dims_outputs(node)
        types += [ir.IntType(64).as_pointer()] * len(dims_outputs) + [I8P] * (len(self._extra_offsets(node)) - len(dims_outputs))
        return types + [I64.as_pointer()] * touches_varying(self.graph, node)

    def node_function(self, node: Node, step: int) -> ir.Function | None:
        graph = self.graph
        spec = lookup(node.op_type, graph.opset, node.domain)
        if not self.emits_function(node):
            return None
        names = self.arg_names(node)
        dims_outputs = self._dims_outputs(node)
        extra = self._extra_offsets(node)
        types = self.signature(node)
        takes_syms = touches_varying(graph, node)
        if takes_syms:
            self._takes_syms.add(node.name)
        idx_t = ir.IntType(self.spec.pointer_bits)
        tiled = self.options.parallel
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), types + [idx_t, idx_t] * tiled),
                         f"op{step}{self.options.variant}")
        fn.linkage = "internal"
        for arg in fn.args[:len(types)]:
            arg.add_attribute("noalias")
        kernel = Kernel(self.module, fn, graph, node, [], [], self.spec.pointer_bits, self.spec.vector_bits)
        kernel.spec = self.spec
        kernel.loop_order = self.options.loop_orders.get(node.name)
        kernel.accumulators, kernel.conv_accumulators = self.spec.accumulators, self.spec.conv_accumulators
        kernel.pack_vector_bits = self.spec.pack_vector_bits or self.spec.vector_bits
        if tiled:
            kernel.tile_range = (fn.args[-2], fn.args[-1])
        kernel.constant_data = self.constant_data
        kernel.argument_data = partial(self.constant_data, argument=True)
        kernel.compile_subgraph = lambda body: self.body_call(node)
        kernel.dims_out = {i: fn.args[len(names) + j] for j, i in enumerate(dims_outputs)}
        kernel.scratch = fn.args[len(names) + len(dims_outputs)] if self._has_scratch(node) else None
        if self.tail.takes_status(node.name):
            kernel.status, kernel.check_code = fn.args[len(names) + len(extra) - 1], self.tail.check_codes.get(node.name, 0)
            kernel.status_base = self.tail.status_base(node.name)
        if takes_syms:
            kernel.syms, kernel.sym_index = fn.args[len(types) - 1], self.sym_index
        by_root = {self.storage_root(n): arg for n, arg in zip(names, fn.args)}

        def operand(name: str) -> Operand | None:
            if not name:
                return None
            t = graph.tensors[name]
            if t.is_const:
                storage = lambda: self._constant_pointer(name)  # noqa: E731
            else:
                arg = by_root[self.storage_root(name)]
                ptr_type = storage_type(t.dtype).as_pointer()
                storage = arg if arg.type == ptr_type else kernel.b.bitcast(arg, ptr_type)
            return Operand(name, np.dtype(t.dtype), t.shape, layout_strides(t.shape, self.layout(name)), storage, t.value,
                           t.dyn)

        kernel.inputs = [operand(n) for n in node.inputs]
        kernel.outputs = [operand(n) for n in node.outputs]
        if self.options.constant_args:
            self.const_args = ConstantArgs(fn, kernel, self.spec.alignment)
        try:
            spec.lower(kernel)
        finally:
            const_args, self.const_args = self.const_args, None
        self.unit_args = const_args
        kernel.b.ret_void()
        if const_args is not None and const_args.args:
            types, self.arg_constants = const_args.splice(types), const_args.data
        if not tiled:
            return fn
        if not kernel.tiles:  # one plain function: drop the unused (begin, end)
            fn.args = fn.args[:len(types)]
            fn.ftype = ir.FunctionType(ir.VoidType(), types)
            fn.type = fn.ftype.as_pointer()
            return fn
        return self._tiled_entry(fn, types, kernel, node, step)

    def body_emitter(self, node: Node) -> "ModuleEmitter":
        """The emitter of a run-time Loop's body on this module: its own verified memory plan (the body runs in
        the Loop's scratch memory), its node functions named after the Loop's (`op3_loop7...`)."""
        from ..planning import PlanOptions, plan_memory, verify_plan

        if node.name not in self._bodies:
            body = node.attrs[BODY_ATTR]
            plan = plan_memory(body, PlanOptions(alignment=self.spec.alignment))
            verify_plan(body, plan)
            step = self.plan.order.index(self.graph.nodes.index(node))
            options = EmitOptions(weights_symbol=self.options.weights_symbol, parallel=self.options.parallel,
                                  symbol_prefix=self.options.symbol_prefix, variant=f"_loop{step}{self.options.variant}",
                                  blob=self.weights, unit=self.options.unit)
            nested = ModuleEmitter(body, plan, self.spec, options)
            nested.content = self.content
            nested.module = self.module
            self._bodies[node.name] = nested
        return self._bodies[node.name]

    def body_call(self, node: Node) -> "BodyCall":
        """Emits the Loop body's node functions once; the BodyCall emits one run of the body."""
        nested = self.body_emitter(node)
        steps = []
        for step, node_index in enumerate(nested.plan.order):
            fn = nested.node_function(nested.graph.nodes[node_index], step)
            if fn is not None:
                fn.attributes.add("noinline")
                steps.append((step, nested.graph.nodes[node_index], fn))
        return BodyCall(nested, steps)

    def parallel_for(self) -> ir.Function:
        """`fxc_parallel_for`: a unit's declaration, else serial_parallel_for's definition."""
        if self._pfor is None:
            existing = self.module.globals.get(PARALLEL_FOR)
            if existing is not None:
                self._pfor = existing
            elif self.options.unit:
                self._pfor = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [TASK_T.as_pointer(), I8P, I64]),
                                         PARALLEL_FOR)
            else:
                self._pfor = self.serial_parallel_for()
        return self._pfor

    def serial_parallel_for(self) -> ir.Function:
        """`fxc_parallel_for` defined weak and serial (tile by tile) for the JIT; runtime_c/pool.c's wins at link."""
        pfor = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [TASK_T.as_pointer(), I8P, I64]), PARALLEL_FOR)
        pfor.linkage = "weak"
        task, ctx, n = pfor.args
        entry, loop, done = pfor.append_basic_block("entry"), pfor.append_basic_block("loop"), pfor.append_basic_block("done")
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_signed(">", n, I64(0)), loop, done)
        b.position_at_end(loop)
        i = b.phi(I64)
        i.add_incoming(I64(0), entry)
        nxt = b.add(i, I64(1))
        b.call(task, [ctx, i, nxt])
        i.add_incoming(nxt, loop)
        b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
        b.position_at_end(done)
        b.ret_void()
        return pfor

    def _tiled_entry(self, body: ir.Function, types: list, kernel: Kernel, node: Node, step: int) -> ir.Function:
        """The node function for a body with a parallel region: its arguments go into a context struct on
        the stack and `op<step>.tile(ctx, begin, end)` runs the body over tiles [begin, end) through
        fxc_parallel_for; a body with stores outside the region runs whole on the calling thread."""
        idx_t = body.args[-1].type
        entry = ir.Function(self.module, ir.FunctionType(ir.VoidType(), types), f"{body.name}.run")
        entry.linkage = "internal"
        for arg in entry.args:
            arg.add_attribute("noalias")
        b = ir.IRBuilder(entry.append_basic_block("entry"))
        if not parallel_safe(body, kernel.region_blocks):
            b.call(body, [*entry.args, ir.Constant(idx_t, 0), ir.Constant(idx_t, kernel.tiles)])
            b.ret_void()
            body.attributes.add("alwaysinline")
            return entry
        ctx_t = ir.LiteralStructType(types)
        tile = ir.Function(self.module, TASK_T, f"{body.name}.tile")
        tile.linkage = "internal"
        tb = ir.IRBuilder(tile.append_basic_block("entry"))
        ctx = tb.bitcast(tile.args[0], ctx_t.as_pointer())
        zero = ir.Constant(ir.IntType(32), 0)
        fields = [tb.load(tb.gep(ctx, [zero, ir.Constant(ir.IntType(32), i)], inbounds=True)) for i in range(len(types))]
        lo, hi = tile.args[1], tile.args[2]
        if idx_t.width < 64:
            lo, hi = tb.trunc(lo, idx_t), tb.trunc(hi, idx_t)
        tb.call(body, [*fields, lo, hi])
        tb.ret_void()
        slot = b.alloca(ctx_t)
        for i, arg in enumerate(entry.args):
            b.store(arg, b.gep(slot, [zero, ir.Constant(ir.IntType(32), i)], inbounds=True))
        b.call(self.parallel_for(), [tile, b.bitcast(slot, I8P), I64(kernel.tiles)])
        b.ret_void()
        self.parallel[node.name] = kernel.tile_split
        return entry


def constant_symbol(data: bytes, digest: str | None = None) -> str:
    """The hidden symbol of a unit's constant: named by its content (its sha256 hex `digest`, computed when not
    given), so it does not move when another one changes."""
    return "fxc_c_" + (digest or hashlib.sha256(data).hexdigest())[:32]


@dataclass
class BodyCall:
    """One run of a Loop body's node functions, emitted where a kernel asks (Kernel.compile_subgraph)."""

    emitter: ModuleEmitter
    steps: list

    @property
    def arena_bytes(self) -> int:
        return self.emitter.arena_bytes

    @property
    def status_offset(self) -> int:
        """The body's status word in its arena (a check in the body may fail the run), -1 when it has none."""
        return self.emitter.tail.status_offset

    def __call__(self, b: ir.IRBuilder, inputs: list[ir.Value], outputs: list[ir.Value], arena: ir.Value) -> None:
        """The body on `inputs`/`outputs` (i8* per graph input/output, in order) with `arena` as its arena."""
        graph = self.emitter.graph
        pointers = dict(zip(graph.inputs, inputs))
        for name, ptr in zip(graph.outputs, outputs):
            if not graph.tensors[name].is_const:
                pointers.setdefault(name, ptr)
        pointer = self.emitter._calls(b, self.steps, pointers, arena, None, ())
        self.emitter._copy_passthrough_outputs(b, pointer, lambda k: outputs[k])


def emit_module(graph: Graph, plan, spec: MachineSpec, options: EmitOptions = EmitOptions()) -> str:
    """LLVM IR text of the whole model for `spec`'s target."""
    check_supported(graph)
    return ModuleEmitter(graph, plan, spec, options).emit()
