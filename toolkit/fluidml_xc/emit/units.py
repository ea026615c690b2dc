"""A model as independent per-node units (issue #27): one LLVM module per node function and one entry module per
code variant; a unit is found by a key computed before it is emitted, and its object by a key of its IR.

A unit is emitted from a node-local view (`UnitView`): a Graph holding only the node's own tensors (those that are
graph inputs or outputs listed as such), named by position, the graph's symbols and opset (a Loop's body whole), a
plan holding only which of its arguments share storage, its layouts and loop order. A kernel that reads anything
else fails (KeyError) instead of being cached wrongly, and the view key (`unit_key`) digests that view whole with
the code-changing EmitOptions, the MachineSpec, LLVM's and llvmlite's versions and this package's sources. Its large
constants are pointer arguments (emit/unit_args.py), so layers of the same shapes emit the same IR; the object is
keyed by that IR (`code_key`) and its function is `fxc_k_<code key[:24]><variant>` (hidden, weak_odr: two models
with the same kernel link into one program); the entry passes the constants' hidden symbols, named by their content
(emitter.constant_symbol) and defined in the weights object.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
import struct
import sys
from dataclasses import dataclass, field

import llvmlite
import ml_dtypes
import numpy as np
from google.protobuf.message import Message
from llvmlite import ir

from ..frontend.shapes import TailLayout
from ..ir import Graph, Node
from ..resources import package_digest
from ..target.machine import MachineSpec, llvm_version
from .emitter import INLINE_LIMIT, EmitOptions, ModuleEmitter, constant_bytes
from .ir_text import module_text

KEY_FORMAT = 2
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
    real: dict[str, str] = field(default_factory=dict)
    """Positional name -> the node's or tensor's name in the model (for error messages; not part of the key)."""

    @property
    def node(self) -> Node:
        return self.graph.nodes[0]


def local_view(emitter: ModuleEmitter, node: Node) -> UnitView:
    """`node` cut out of `emitter`'s graph, plan and options (the whole-graph emitter of one code variant), its
    node and tensors named by position (canonical_names) so that its code does not depend on which layer it is."""
    graph = emitter.graph
    names = list(dict.fromkeys(n for n in [*node.inputs, *node.outputs] if n))
    groups: dict[str, str] = {}
    alias = {}
    for name in names:
        root = emitter.storage_root(name)
        groups.setdefault(root, name)
        if groups[root] != name:
            alias[name] = groups[root]
    rename = canonical_names(node, names)
    new = lambda name: rename.get(name, name)  # noqa: E731
    local = Node(node.op_type, rename.get(UNIT_NODE, node.name), [new(n) if n else n for n in node.inputs],
                 [new(n) if n else n for n in node.outputs], _local_attrs(node.attrs, rename), node.domain)
    view = Graph("unit", {new(n): dataclasses.replace(graph.tensors[n], name=new(n)) for n in names}, [local],
                 [new(n) for n in graph.inputs if n in names], [new(n) for n in graph.outputs if n in names],
                 graph.opset, {}, dict(graph.symbols))
    layouts = {new(n): emitter.options.layouts[n] for n in names if n in emitter.options.layouts}
    orders = {local.name: emitter.options.loop_orders[node.name]} if node.name in emitter.options.loop_orders else {}
    options = EmitOptions(layouts=layouts, loop_orders=orders, parallel=emitter.options.parallel, unit=True,
                          constant_args=True)
    slots = tuple(new(o) for o in node.outputs if o and o in emitter.tail.slots)
    plan = LocalPlan({new(a): new(b) for a, b in alias.items()}, emitter.spec.alignment)
    checks = _local_checks(emitter.tail.checks, node.name, local.name, bool(rename)) if emitter.tail.takes_status(node.name) else ()
    return UnitView(view, plan, options, slots, checks, {v: k for k, v in rename.items() if k != UNIT_NODE} | (
        {rename[UNIT_NODE]: node.name} if UNIT_NODE in rename else {}))


def _local_checks(checks: list, name: str, local: str, renamed: bool) -> tuple:
    """The run checks as the unit sees them: only their positions (status codes) and which are this node's count;
    the other nodes' names and every message are left out, so that they do not change the key."""
    if not renamed:
        return tuple(checks)
    return tuple(dataclasses.replace(c, node=local if c.node == name else f"u.c{i}", message="",
                                     via=None if c.via is None else (local if c.via == name else "u.loop"))
                 for i, c in enumerate(checks))


UNIT_NODE = "\0node"


def canonical_names(node: Node, names: list[str]) -> dict[str, str]:
    """Real name -> positional one (`u.n0` for the node under UNIT_NODE, `u.t<i>` for its tensors); none for a node
    holding a graph (a Loop body reads the outer names)."""
    if any(isinstance(v, Graph) for v in node.attrs.values()):
        return {}
    return {UNIT_NODE: "u.n0", **{name: f"u.t{i}" for i, name in enumerate(names)}}


def _local_attrs(attrs: dict, rename: dict[str, str]) -> dict:
    """The node's attributes in its view: the fused nodes' names (`_fused_nodes`, read only by the manifest) by
    position once the names are; no attribute names a tensor (fused steps refer to inputs by index)."""
    if not rename or "_fused_nodes" not in attrs:
        return attrs
    return {**attrs, "_fused_nodes": [f"u.f{i}" for i in range(len(attrs["_fused_nodes"]))]}


def real_names(error: BaseException, names: dict[str, str]) -> BaseException:
    """`error` (raised while lowering a unit) with the positional names in its messages put back to the real ones."""
    if not names:
        return error
    pattern = re.compile(r"u\.[nt]\d+\b")
    fix = lambda v: pattern.sub(lambda m: names.get(m.group(0), m.group(0)), v) if isinstance(v, str) else v  # noqa: E731
    error.args = tuple(fix(a) for a in error.args)
    for attr, value in list(vars(error).items()):
        if isinstance(value, str):
            setattr(error, attr, fix(value))
    return error


def describe(value) -> object:
    """A canonical, JSON-encodable description of `value` (arrays and bytes by their sha256); a type it does not
    know is a TypeError, so nothing a kernel may read is left out of a key unnoticed."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return ["f", struct.pack("<d", value).hex()]  # bits: NaN's sign and payload too
    if isinstance(value, (bytes, bytearray)):
        return ["b", hashlib.sha256(value).hexdigest()]
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ["a", _dtype(data.dtype), list(data.shape), hashlib.sha256(data.tobytes()).hexdigest()]
    if isinstance(value, np.generic):
        return ["s", _dtype(value.dtype), value.tobytes().hex()]
    if isinstance(value, np.dtype):
        return ["d", _dtype(value)]
    if isinstance(value, type) and issubclass(value, np.generic):
        return ["d", _dtype(np.dtype(value))]
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
        fields = {f.name: describe(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Graph):  # the symbols' order is the order of the run-time values kernels read
            fields["symbols"] = ["ordered", [[name, describe(r)] for name, r in value.symbols.items()]]
        return ["o", type(value).__qualname__, fields]
    raise TypeError(f"a unit key cannot describe a {type(value).__module__}.{type(value).__qualname__} "
                    "(add it to emit/units.describe)")


def _dtype(dtype: np.dtype) -> str:
    """numpy's code and the name: ml_dtypes' types share codes (float8_e4m3fn, float8_e4m3fnuz, int4: '<V1')."""
    return f"{dtype.str}:{dtype.name}"


def view_digest(view: UnitView) -> str:
    """The sha256 of a view's description (graph with the node, constants, symbols; storage sharing; layouts and
    loop order; dims slots; the EmitOptions fields a unit's code depends on)."""
    options = view.options
    text = json.dumps([describe(view.graph), sorted(view.plan.alias_of.items()), view.plan.alignment,
                       describe(options.layouts), describe(options.loop_orders), options.parallel, list(view.slots),
                       describe(view.checks)])
    return hashlib.sha256(text.encode()).hexdigest()


def shape_only(tensor) -> bool:
    """A constant tensor that blind_digest describes by dtype, shape and finiteness only: one a kernel could not
    keep inline (INLINE_LIMIT bytes or more) of numpy's bool, integer or float dtypes (not ml_dtypes')."""
    return tensor.value is not None and tensor.nbytes >= INLINE_LIMIT and np.dtype(tensor.dtype).kind in "biuf"


def blind_digest(view: UnitView) -> str:
    """view_digest with the shape_only tensors' values left out but whether each is all finite: views of the same
    blind digest differ at most in those values, which a kernel that opts in (kernels/derived.py) reads only to
    compute its constant arguments, so they share their IR (Sharing)."""
    tensors, finite = dict(view.graph.tensors), []
    for name, tensor in view.graph.tensors.items():
        if shape_only(tensor):
            tensors[name] = dataclasses.replace(tensor, value=None)
            finite.append([name, bool(np.isfinite(tensor.value).all())])
    graph = dataclasses.replace(view.graph, tensors=tensors)
    text = json.dumps(["blind", view_digest(dataclasses.replace(view, graph=graph)), finite])
    return hashlib.sha256(text.encode()).hexdigest()


def tool_versions() -> dict[str, str]:
    """What computes code and constants besides our sources: LLVM, llvmlite, numpy (folded and packed constants,
    twiddles), ml_dtypes (the low-precision conversions), Python."""
    return {"llvm": llvm_version(), "llvmlite": llvmlite.__version__, "numpy": np.__version__,
            "ml_dtypes": ml_dtypes.__version__, "python": sys.version}


def unit_key(view_sha: str, spec: MachineSpec) -> str:
    """The unit's cache key (64 hex): its view's digest, every MachineSpec field, the tools' versions, the code."""
    text = json.dumps([KEY_FORMAT, view_sha, describe(spec), tool_versions(), package_digest()])
    return hashlib.sha256(text.encode()).hexdigest()


def unit_symbol(key: str, spec: MachineSpec) -> str:
    """A unit's exported function: its code key's first 24 hex digits and the code variant's suffix (for a reader
    of the object: the key covers the spec already)."""
    return f"fxc_k_{key[:24]}{spec.variant}"


PLACEHOLDER = "fxc_k_unit_function"
"""The unit's function name in the IR text its code key digests (code_key), replaced by unit_symbol after."""


def code_key(ir_text: str, spec: MachineSpec) -> str:
    """The key of a unit's object (64 hex): its IR text (the function named PLACEHOLDER), every MachineSpec field,
    the tools' versions and this package's code. Units with the same IR are compiled once and share the object."""
    text = json.dumps([KEY_FORMAT, "code", hashlib.sha256(ir_text.encode()).hexdigest(), describe(spec),
                       tool_versions(), package_digest()])
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class UnitRecord:
    """What the cache keeps under a unit's view key: its code key (the object is cached under it), the content
    hashes (sha256 hex) of the constants it uses (each cached under its own hash), those passed as its arguments
    in order, and its tiles per split dimension (None: not handed to fxc_parallel_for)."""

    code: str
    constants: tuple[str, ...] = ()
    arguments: tuple[str, ...] = ()
    split: tuple[int, ...] | None = None

    MAGIC = b"FXCUNIT2"

    def to_bytes(self) -> bytes:
        return self.MAGIC + json.dumps({"code": self.code, "constants": list(self.constants),
                                        "arguments": list(self.arguments), "split": self.split}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> UnitRecord | None:
        """The record, or None for bytes that are not one (another format)."""
        if not data.startswith(cls.MAGIC):
            return None
        try:
            head = json.loads(data[len(cls.MAGIC):])
            split = None if head["split"] is None else tuple(int(v) for v in head["split"])
            return cls(str(head["code"]), tuple(str(c) for c in head["constants"]),
                       tuple(str(c) for c in head["arguments"]), split)
        except (ValueError, KeyError, TypeError):
            return None


OBJECT_MAGIC = b"FXCOBJ1\0"
"""The prefix of a unit's object in the cache (under its code key)."""


@dataclass(frozen=True)
class EmittedUnit:
    """A unit's IR text (its function named PLACEHOLDER), its constants (content hash -> bytes, in first use order),
    the hashes of those passed as arguments (in order) and its tiles per split dimension."""

    ir_text: str
    constants: dict[str, bytes]
    arguments: tuple[str, ...]
    split: tuple[int, ...] | None

    def named(self, key: str, spec: MachineSpec) -> str:
        """The IR text with the function named after its code key."""
        return self.ir_text.replace(PLACEHOLDER, unit_symbol(key, spec))


@dataclass(frozen=True)
class Sharing:
    """A unit whose IR serves every view of its blind digest: its derived constant arguments as (index, fn,
    tensor names), each computed again from the other view's tensors (kernels/derived.py)."""

    unit: EmittedUnit
    recipes: tuple[tuple[int, object, tuple[str, ...]], ...]

    def apply(self, view: UnitView) -> EmittedUnit | None:
        """The unit `view` emits (a view of the same blind digest), or None when its derived constants' bytes
        equal each other's or another argument's (its own emission would merge those arguments)."""
        arguments, derived = list(self.unit.arguments), {}
        for index, fn, names in self.recipes:
            data = constant_bytes(fn(*(view.graph.tensors[name].value for name in names)))
            arguments[index] = hashlib.sha256(data).hexdigest()
            derived[arguments[index]] = data
        if len(set(arguments)) != len(arguments):
            return None
        constants = {d: derived[d] if d in derived else self.unit.constants[d] for d in arguments}
        return EmittedUnit(self.unit.ir_text, constants, tuple(arguments), self.unit.split)


def emit_unit(view: UnitView, spec: MachineSpec) -> EmittedUnit:
    """The node's functions in a module of their own, the node function exported as PLACEHOLDER; its helpers are
    named after the variant too (op0_x86_64_v3.tile). An error names the node and tensors as the model does."""
    return emit_shared(view, spec)[0]


def emit_shared(view: UnitView, spec: MachineSpec) -> tuple[EmittedUnit, Sharing | None]:
    """emit_unit, and how views of the same blind digest share it (None: they are emitted themselves)."""
    emitter = ModuleEmitter(view.graph, view.plan, spec, dataclasses.replace(view.options, variant=spec.variant))
    emitter.tail = TailLayout(slots={name: 0 for name in view.slots}, checks=list(view.checks),
                              status_offset=0 if view.checks else -1)
    try:
        fn = emitter.node_function(view.node, 0)
    except Exception as error:
        raise real_names(error, view.real)
    fn.attributes.add("noinline")
    _rename(emitter.module, fn, PLACEHOLDER)
    fn.linkage, fn.visibility = "weak_odr", "hidden"
    arguments = tuple(hashlib.sha256(data).hexdigest() for data in emitter.arg_constants)
    constants = {hashlib.sha256(data).hexdigest(): data for data in [*emitter.arg_constants, *emitter.content.values()]}
    split = emitter.parallel.get(view.node.name)
    unit = EmittedUnit(module_text(emitter.module), constants, arguments, tuple(split) if split is not None else None)
    large = {name for name, tensor in view.graph.tensors.items() if shape_only(tensor)}
    recipes = emitter.unit_args.recipes(large) if emitter.unit_args is not None else None
    shared = recipes is not None and list(constants) == list(arguments)  # no constant named in the IR
    return unit, Sharing(unit, recipes) if shared else None


def _rename(module: ir.Module, fn: ir.Function, name: str) -> None:
    del module.globals[fn.name]
    fn.name = name
    module.globals[name] = fn


def emit_entry(emitter: ModuleEmitter, symbols: dict[int, str], arguments: dict[int, list[tuple[str, bytes]]]) -> str:
    """The entry module of one code variant: `emitter` (the whole graph, EmitOptions.unit) declares each step's
    unit function (step -> symbol) and calls them with their constants' symbols last (step -> the constants' sha256
    hex and bytes);
    it defines the weak serial fxc_parallel_for of a parallel build."""
    emitter.unit_arguments = arguments
    steps = []
    for step, node_index in enumerate(emitter.plan.order):
        if step not in symbols:
            continue
        node = emitter.graph.nodes[node_index]
        fn = emitter.module.globals.get(symbols[step])
        if fn is None:
            types = emitter.signature(node) + [ir.IntType(8).as_pointer()] * len(arguments.get(step, ()))
            fn = ir.Function(emitter.module, ir.FunctionType(ir.VoidType(), types), symbols[step])
            fn.visibility = "hidden"
            for arg in fn.args:
                arg.add_attribute("noalias")
        steps.append((step, node, fn))
    emitter.emit_entries(steps)
    if emitter.options.parallel:
        emitter.serial_parallel_for()
    return module_text(emitter.module)
