"""A model as independent per-node units (issue #27): one LLVM module per node function and one entry module per
code variant, each unit named and cached by a key computed before it is emitted.

A unit is emitted from a node-local view (`UnitView`): a Graph holding only the node's own tensors (those that are
graph inputs or outputs listed as such), the graph's symbols and opset (a Loop's body whole), a plan holding only which of its arguments share storage, its layouts and
loop order. A kernel that reads anything else fails (KeyError) instead of being cached wrongly, and the key
(`unit_key`) digests that view whole with the code-changing EmitOptions, the MachineSpec, LLVM's and llvmlite's
versions and this package's sources. The unit's function is `fxc_k_<key[:24]><variant>` (hidden, weak_odr: two models
with the same kernel link into one program); its large constants are hidden symbols named by their content
(emitter.constant_symbol), defined in the weights object.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import struct
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import llvmlite
import numpy as np
from google.protobuf.message import Message
from llvmlite import ir

from ..frontend.shapes import TailLayout
from ..ir import Graph, Node
from ..target.machine import MachineSpec, llvm_version
from .emitter import EmitOptions, ModuleEmitter

KEY_FORMAT = 1
"""Bumped when the unit record or the key's description changes shape."""


@dataclass(frozen=True)
class LocalPlan:
    """The memory plan as a unit sees it: which of its tensors share storage (names of its own view only)."""

    alias_of: dict[str, str]
    alignment: int
    order: tuple[int, ...] = (0,)
    offsets: dict[str, int] = field(default_factory=dict)
    arena_bytes: int = 0


@dataclass(frozen=True)
class UnitView:
    """Everything node_function reads to emit one node: its graph, plan, options and dims slots."""

    graph: Graph
    plan: LocalPlan
    options: EmitOptions
    slots: tuple[str, ...]
    """The node's outputs that have a dims slot in the whole graph's tail (dynamic roots)."""
    checks: tuple = ()
    """The whole graph's run checks (frontend.shapes.RunCheck) when the node takes the run's status word (its
    kernel may fail the run, or a check in its Loop body may): its status codes are positions in that list."""

    @property
    def node(self) -> Node:
        return self.graph.nodes[0]


def local_view(emitter: ModuleEmitter, node: Node) -> UnitView:
    """`node` cut out of `emitter`'s graph, plan and options (the whole-graph emitter of one code variant)."""
    graph = emitter.graph
    names = list(dict.fromkeys(n for n in [*node.inputs, *node.outputs] if n))
    groups: dict[str, str] = {}
    alias = {}
    for name in names:
        root = emitter.storage_root(name)
        groups.setdefault(root, name)
        if groups[root] != name:
            alias[name] = groups[root]
    view = Graph("unit", {n: graph.tensors[n] for n in names}, [node], [n for n in graph.inputs if n in names],
                 [n for n in graph.outputs if n in names], graph.opset, {}, dict(graph.symbols))
    layouts = {n: emitter.options.layouts[n] for n in names if n in emitter.options.layouts}
    orders = {node.name: emitter.options.loop_orders[node.name]} if node.name in emitter.options.loop_orders else {}
    options = EmitOptions(layouts=layouts, loop_orders=orders, parallel=emitter.options.parallel, unit=True)
    slots = tuple(o for o in node.outputs if o and o in emitter.tail.slots)
    checks = tuple(emitter.tail.checks) if emitter.tail.takes_status(node.name) else ()
    return UnitView(view, LocalPlan(alias, emitter.spec.alignment), options, slots, checks)


def describe(value) -> object:
    """A canonical, JSON-encodable description of `value` (arrays and bytes by their sha256); a type it does not
    know is a TypeError, so nothing a kernel may read is left out of a key unnoticed."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return ["f", repr(value)]
    if isinstance(value, (bytes, bytearray)):
        return ["b", hashlib.sha256(value).hexdigest()]
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ["a", data.dtype.str, list(data.shape), hashlib.sha256(data.tobytes()).hexdigest()]
    if isinstance(value, np.generic):
        return ["s", value.dtype.str, repr(value.item())]
    if isinstance(value, np.dtype):
        return ["d", value.str]
    if isinstance(value, type) and issubclass(value, np.generic):
        return ["d", np.dtype(value).str]
    if isinstance(value, enum.Enum):
        return ["e", type(value).__qualname__, value.name]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [describe(v) for v in value]]
    if isinstance(value, (set, frozenset)):
        return ["set", sorted((describe(v) for v in value), key=json.dumps)]
    if isinstance(value, dict):
        items = [[describe(k), describe(v)] for k, v in value.items()]
        return ["m", sorted(items, key=lambda kv: json.dumps(kv[0]))]
    if isinstance(value, Message):
        return ["pb", type(value).__qualname__, hashlib.sha256(value.SerializeToString(deterministic=True)).hexdigest()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ["o", type(value).__qualname__, {f.name: describe(getattr(value, f.name)) for f in dataclasses.fields(value)}]
    raise TypeError(f"a unit key cannot describe a {type(value).__module__}.{type(value).__qualname__} "
                    "(add it to emit/units.describe)")


def view_digest(view: UnitView) -> str:
    """The sha256 of a view's description (graph with the node, constants, symbols; storage sharing; layouts and
    loop order; dims slots; the EmitOptions fields a unit's code depends on)."""
    options = view.options
    text = json.dumps([describe(view.graph), sorted(view.plan.alias_of.items()), view.plan.alignment,
                       describe(options.layouts), describe(options.loop_orders), options.parallel, list(view.slots),
                       describe(view.checks)])
    return hashlib.sha256(text.encode()).hexdigest()


@cache
def package_digest() -> str:
    """sha256 of this package's .py sources (path and bytes), once per process: new code, new keys."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def tool_versions() -> dict[str, str]:
    return {"llvm": llvm_version(), "llvmlite": llvmlite.__version__}


def unit_key(view_sha: str, spec: MachineSpec) -> str:
    """The unit's cache key (64 hex): its view's digest, every MachineSpec field, the tools' versions, the code."""
    text = json.dumps([KEY_FORMAT, view_sha, describe(spec), tool_versions(), package_digest()])
    return hashlib.sha256(text.encode()).hexdigest()


def unit_symbol(key: str, spec: MachineSpec) -> str:
    """The unit's exported function: its key's first 24 hex digits and the code variant's suffix (for a reader of
    the object: the key covers the spec already)."""
    return f"fxc_k_{key[:24]}{spec.variant}"


@dataclass(frozen=True)
class UnitRecord:
    """What the cache keeps of a unit: its object, the content hashes (sha256 hex) of the constants it names, and
    its tiles per split dimension (None: not handed to fxc_parallel_for)."""

    code: bytes
    constants: tuple[str, ...] = ()
    split: tuple[int, ...] | None = None

    MAGIC = b"FXCUNIT1"

    def to_bytes(self) -> bytes:
        head = json.dumps({"constants": list(self.constants), "split": self.split}).encode()
        return self.MAGIC + struct.pack("<I", len(head)) + head + self.code

    @classmethod
    def from_bytes(cls, data: bytes) -> UnitRecord | None:
        """The record, or None for bytes that are not one (another format)."""
        if not data.startswith(cls.MAGIC) or len(data) < len(cls.MAGIC) + 4:
            return None
        start = len(cls.MAGIC) + 4
        (size,) = struct.unpack("<I", data[len(cls.MAGIC):start])
        try:
            head = json.loads(data[start:start + size])
            split = None if head["split"] is None else tuple(int(v) for v in head["split"])
            return cls(data[start + size:], tuple(str(c) for c in head["constants"]), split)
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class EmittedUnit:
    """A unit's IR text, its constants (content hash -> bytes, in first use order) and tiles per split dimension."""

    ir_text: str
    constants: dict[str, bytes]
    split: tuple[int, ...] | None


def emit_unit(view: UnitView, spec: MachineSpec, key: str) -> EmittedUnit:
    """The node's functions in a module of their own, the node function exported as unit_symbol(key, spec); its
    helpers are named after the variant too (op0_x86_64_v3.tile)."""
    emitter = ModuleEmitter(view.graph, view.plan, spec, dataclasses.replace(view.options, variant=spec.variant))
    emitter.tail = TailLayout(slots={name: 0 for name in view.slots}, checks=list(view.checks),
                              status_offset=0 if view.checks else -1)
    fn = emitter.node_function(view.node, 0)
    fn.attributes.add("noinline")
    _rename(emitter.module, fn, unit_symbol(key, spec))
    fn.linkage, fn.visibility = "weak_odr", "hidden"
    constants = {hashlib.sha256(data).hexdigest(): data for data in emitter.content.values()}
    split = emitter.parallel.get(view.node.name)
    return EmittedUnit(str(emitter.module), constants, tuple(split) if split is not None else None)


def _rename(module: ir.Module, fn: ir.Function, name: str) -> None:
    del module.globals[fn.name]
    fn.name = name
    module.globals[name] = fn


def emit_entry(emitter: ModuleEmitter, symbols: dict[int, str]) -> str:
    """The entry module of one code variant: `emitter` (the whole graph, EmitOptions.unit) declares each step's
    unit function (step -> symbol) and calls them; it defines the weak serial fxc_parallel_for of a parallel build."""
    steps = []
    for step, node_index in enumerate(emitter.plan.order):
        if step not in symbols:
            continue
        node = emitter.graph.nodes[node_index]
        fn = emitter.module.globals.get(symbols[step])
        if fn is None:
            fn = ir.Function(emitter.module, ir.FunctionType(ir.VoidType(), emitter.signature(node)), symbols[step])
            fn.visibility = "hidden"
            for arg in fn.args:
                arg.add_attribute("noalias")
        steps.append((step, node, fn))
    emitter.emit_entries(steps)
    if emitter.options.parallel:
        emitter.serial_parallel_for()
    return str(emitter.module)
