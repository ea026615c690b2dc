"""Sequence and optional values whose structure is known at build time (import-time expansion).

A sequence whose length is known at build time is a tuple of ordinary tensor names; an optional whose
presence is known is `Opt(None)`, `Opt(tensor name)` or `Opt(sequence)`. The frontend keeps these in
a `structs` map (value name -> structure) next to its tensors, and the sequence/optional ops become
ordinary tensor ops or nothing at all:

- SequenceConstruct / SequenceEmpty / SequenceInsert / SequenceErase / Optional / Identity: a new
  structure over the same tensors (no node);
- SequenceAt / OptionalGetElement of a tensor: Identity of the element; SequenceLength /
  OptionalHasElement: a Constant;
- ConcatFromSequence: (Unsqueeze +) Concat; SplitToSequence: one Slice (or Gather) per element;
- SequenceMap: its body instantiated once per element;
- If with a run-time condition whose branches give structures of the same shape: one Where per
  element (pseudo-node `Select` in SEQ_DOMAIN, resolved when both branches are known); Loop
  carrying structures: subgraphs.expand_loop.

Positions (SequenceAt/Insert/Erase, SplitToSequence's split) must be build-time constants; the error is an
errors.NeedsConstant naming the node, from which backend.FxcBackendRep binds such graph inputs as constants.

Every expansion here is a structure expansion in expanders.py's registry.

Graph inputs/outputs (the ABI): a sequence `x` of n tensors is n tensors `x.0` ... `x.{n-1}`; an
optional is an absent value (no tensor) or its content (a tensor: `x.0`; a sequence: `x.0`, ...).
Descriptors (JSON): "tensor", ["seq", n], ["opt"], ["opt", "tensor"], ["opt", ["seq", n]]; a ZipMap's output
(zipmap.py) is ["zipmap", labels], one tensor under the output's own name.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import InputError, NeedsConstant, UnresolvedShape
from .builder import NodeBuilder, attr, op_types
from .expanders import Scope, always, expands
from .subgraphs import expand_loop, indexes_memory, taken_branch
from .zipmap import ZIPMAP, ZipMapValue, zipmap_rows

SEQ_DOMAIN = "fluidml_xc.structure"

SEQUENCE_OPS = {"SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength",
                "ConcatFromSequence", "SplitToSequence", "SequenceMap", "Optional", "OptionalHasElement", "OptionalGetElement"}

VALUE_INPUTS = {"SequenceInsert": (2,), "SequenceErase": (1,), "SequenceAt": (1,), "SplitToSequence": (1,), "If": (0,)}
"""op -> inputs whose values the expansion needs at build time (backend binds them)."""


@dataclass(frozen=True)
class Opt:
    value: object = None
    """None (absent), a tensor name, or a tuple of tensor names (a sequence)."""


# --------------------------------------------------------------------------------------------------
# types and ABI descriptors
# --------------------------------------------------------------------------------------------------
def type_kind(tp: onnx.TypeProto) -> str:
    """"tensor", "seq", "opt" or "" (undeclared)."""
    if tp.HasField("tensor_type"):
        return "tensor"
    if tp.HasField("sequence_type"):
        return "seq"
    if tp.HasField("optional_type"):
        return "opt"
    return ""


def element_dtype(tp: onnx.TypeProto) -> int:
    """The ONNX element type of the tensors a sequence/optional type holds (0 if undeclared)."""
    while True:
        if tp.HasField("tensor_type"):
            return tp.tensor_type.elem_type
        if tp.HasField("sequence_type"):
            tp = tp.sequence_type.elem_type
        elif tp.HasField("optional_type"):
            tp = tp.optional_type.elem_type
        else:
            return 0


def inner_kind(tp: onnx.TypeProto) -> str:
    return type_kind(tp.optional_type.elem_type) if tp.HasField("optional_type") else ""


def flat_names(name: str, desc) -> list[str]:
    if desc == "tensor" or desc[0] == ZIPMAP:
        return [name]
    if desc[0] == "seq":
        return [f"{name}.{k}" for k in range(desc[1])]
    if len(desc) == 1:
        return []
    inner = desc[1]
    return [f"{name}.0"] if inner == "tensor" else [f"{name}.{k}" for k in range(inner[1])]


def describe_value(kind: str, value, name: str = "?"):
    """(descriptor, flat arrays) of a run-time value given for a graph input of `kind`."""
    def arr(v):
        return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)
    if kind == "seq":
        if not isinstance(value, (list, tuple)):
            raise InputError(f"input {name!r} is a sequence: pass a list of arrays")
        items = [arr(v) for v in value]
        return ["seq", len(items)], items
    if kind == "opt":
        if value is None:
            return ["opt"], []
        if isinstance(value, (list, tuple)):
            items = [arr(v) for v in value]
            return ["opt", ["seq", len(items)]], items
        return ["opt", "tensor"], [arr(value)]
    return "tensor", [arr(value)]


def regroup(desc, values: list):
    """The run-time value of a graph output from its flat tensors."""
    if desc == "tensor":
        return values[0]
    if desc[0] == ZIPMAP:
        return zipmap_rows(desc[1], values[0])
    if desc[0] == "seq":
        return list(values)
    if len(desc) == 1:
        return None
    return values[0] if desc[1] == "tensor" else list(values)


def input_structure(name: str, tp: onnx.TypeProto, desc, shapes: dict[str, tuple[int, ...]]):
    """(structure, [(flat name, ONNX elem type)]) of a structured graph input.

    `desc` is the descriptor given for it (None: from the `name.K` entries of `shapes`)."""
    kind = type_kind(tp)
    elem = element_dtype(tp)
    if desc is None:
        count = 0
        while f"{name}.{count}" in shapes:
            count += 1
        if kind == "seq":
            if not count:
                raise InputError(f"input {name!r} is a sequence: pass its length and element shapes, one per element, with "
                                 f"--input-shape {name}.0=DIMS --input-shape {name}.1=DIMS ...")
            desc = ["seq", count]
        else:
            if not count:
                raise InputError(f"input {name!r} is optional: pass the shape of its value with --input-shape {name}.0=DIMS "
                                 "(an absent optional input is compiled only through the Python backend)")
            desc = ["opt", ["seq", count]] if inner_kind(tp) == "seq" else ["opt", "tensor"]
    names = flat_names(name, desc)
    if not elem and names:
        raise InputError(f"input {name!r}: its {kind} type declares no element type")
    if desc == "tensor" or desc[0] == "seq":
        struct = tuple(names)
    elif len(desc) == 1:
        struct = Opt(None)
    else:
        struct = Opt(names[0] if desc[1] == "tensor" else tuple(names))
    return struct, [(n, elem) for n in names]


def descriptor(struct) -> object:
    if isinstance(struct, ZipMapValue):
        return [ZIPMAP, list(struct.labels)]
    if isinstance(struct, tuple):
        return ["seq", len(struct)]
    if isinstance(struct, Opt):
        if struct.value is None:
            return ["opt"]
        return ["opt", descriptor(struct.value)]
    return "tensor"


def output_elements(name: str, tp: onnx.TypeProto, structs: dict, tensors: dict):
    """(descriptor, element tensor names) of a graph output that is (or is declared as) a structure."""
    value = structs.get(name, name)
    if isinstance(value, ZipMapValue):
        return descriptor(value), [value.tensor]
    if type_kind(tp) == "opt" and not isinstance(value, Opt):
        value = Opt(value)
    if isinstance(value, str) and value not in tensors:
        return None
    desc = descriptor(value)
    if isinstance(value, Opt):
        value = () if value.value is None else value.value
    elements = [value] if isinstance(value, str) else list(value)
    return desc, elements


# --------------------------------------------------------------------------------------------------
# expansion
# --------------------------------------------------------------------------------------------------
def structured_if(node: onnx.NodeProto) -> bool:
    """Whether an If's branches give sequences/optionals (then its condition must be known at build time)."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH and any(type_kind(o.type) in ("seq", "opt") for o in a.g.output):
            return True
    return False


def _needs_constant(node_name: str, op: str, what: str) -> NeedsConstant:
    return NeedsConstant(f"node {node_name!r} ({op}): {what} must be a build-time constant (sequences have a static "
                         "structure)", node_name)


def _unresolved(out: str, node_name: str, op: str, why: str) -> UnresolvedShape:
    return UnresolvedShape(f"cannot infer a static shape for {out!r} (node {node_name!r}, {op}): {why}", out)


class _Expansion:
    """One node being expanded: its builder, inputs and outputs, and how it reads values and constants."""

    def __init__(self, node: onnx.NodeProto, node_name: str, scope: Scope):
        self.node, self.name, self.scope = node, node_name, scope
        self.tensors, self.structs, self.unresolved, self.opset = scope.tensors, scope.structs, scope.unresolved, scope.opset
        self.op = node.op_type
        self.bld = NodeBuilder(node_name, self.opset)
        self.ins, self.outs = list(node.input), list(node.output)

    def value(self, name: str):
        """A tensor name or a structure (tuple / Opt); None for an absent input."""
        if not name:
            return None
        if name in self.structs:
            return self.structs[name]
        if name in self.unresolved:
            raise UnresolvedShape(self.unresolved[name], name)
        if name not in self.tensors:
            raise InputError(f"node {self.name!r} reads {name!r}, which nothing produces: the model is malformed")
        return name

    def seq(self, i: int) -> tuple:
        v = self.value(self.ins[i])
        if not isinstance(v, tuple):
            raise InputError(f"node {self.name!r} ({self.op}): input {self.ins[i]!r} is not a sequence")
        return v

    def const_int(self, i: int, what: str):
        if i >= len(self.ins) or not self.ins[i]:
            return None
        t = self.tensors.get(self.ins[i])
        if t is None or not t.is_const:
            self.value(self.ins[i])
            raise _needs_constant(self.name, self.op, what)
        return np.asarray(t.value).astype(np.int64)

    def position(self, n: int, i: int, default: int, allow_end: bool) -> int:
        p = self.const_int(i, "the position")
        p = default if p is None else int(np.ravel(p)[0])
        if p < 0:
            p += n
        if not (0 <= p <= (n if allow_end else n - 1)):
            raise InputError(f"node {self.name!r} ({self.op}): position {p} out of range for a sequence of {n} tensors")
        return p

    def out(self, v) -> list:
        """The node's first output is the structure `v` (no node)."""
        if self.outs and self.outs[0]:
            self.structs[self.outs[0]] = v
        return self.bld.nodes

    def tensor_out(self, src: str) -> list:
        if self.outs and self.outs[0]:
            self.bld.add("Identity", [src], [self.outs[0]])
        return self.bld.nodes

    def constant_out(self, value: np.ndarray) -> list:
        self.bld.add("Constant", [], [self.outs[0]], value=numpy_helper.from_array(value))
        return self.bld.nodes


def _expands(*ops: str, domain: str = "", claims: Callable[[onnx.NodeProto], bool] | None = None):
    """Registers `fn(expansion)` as the structure expansion of `ops` (expanders.py); the ops of SEQUENCE_OPS are
    structure nodes whatever they read, the others when they read a structure or `claims` says so."""
    def register(fn: Callable[[_Expansion], list]) -> Callable[[_Expansion], list]:
        def expand(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto]:
            return fn(_Expansion(node, node_name, scope))
        for op in ops:
            expands(domain, op, structure=True, claims=always if op in SEQUENCE_OPS else claims)(expand)
        return fn
    return register


@_expands("Select", domain=SEQ_DOMAIN, claims=always)
def _select(x: _Expansion) -> list:
    """The pseudo-op an If with a run-time condition becomes: one Where per element of same-shaped branches."""
    cond, a, b = x.ins
    origin = x.node.doc_string or x.name
    bld, tensors, outs = x.bld, x.tensors, x.outs

    def select(a, b, target: str | None):
        if isinstance(a, str) and isinstance(b, str):
            ta, tb = tensors[a], tensors[b]
            if ta.shape != tb.shape or np.dtype(ta.dtype) != np.dtype(tb.dtype):
                raise _unresolved(outs[0], origin, "If", "the branches give tensors of different shapes")
            return bld.add("Where", [cond, a, b], [target] if target else None)[0]
        if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
            return tuple(select(x, y, None) for x, y in zip(a, b))
        if isinstance(a, Opt) and isinstance(b, Opt) and (a.value is None) == (b.value is None):
            return a if a.value is None else Opt(select(a.value, b.value, None))
        raise _unresolved(outs[0], origin, "If", "the branches give sequences/optionals of different structures, "
                          "so the condition must be known at build time")
    result = select(x.value(a), x.value(b), outs[0] if isinstance(x.value(a), str) else None)
    return bld.nodes if isinstance(result, str) else x.out(result)


@_expands("Identity")
def _identity(x: _Expansion) -> list:
    return x.out(x.value(x.ins[0]))


@_expands("SequenceConstruct")
def _sequence_construct(x: _Expansion) -> list:
    items = tuple(x.value(n) for n in x.ins)
    if not all(isinstance(v, str) for v in items):
        raise InputError(f"node {x.name!r} (SequenceConstruct): sequences of sequences/optionals are not supported")
    return x.out(items)


@_expands("SequenceEmpty")
def _sequence_empty(x: _Expansion) -> list:
    return x.out(())


@_expands("SequenceInsert")
def _sequence_insert(x: _Expansion) -> list:
    s, t = x.seq(0), x.value(x.ins[1])
    if not isinstance(t, str):
        raise InputError(f"node {x.name!r} (SequenceInsert): inserting a sequence/optional is not supported")
    p = x.position(len(s), 2, len(s), True)
    return x.out(s[:p] + (t,) + s[p:])


@_expands("SequenceErase")
def _sequence_erase(x: _Expansion) -> list:
    s = x.seq(0)
    p = x.position(len(s), 1, -1 + len(s), False)
    return x.out(s[:p] + s[p + 1:])


@_expands("SequenceAt")
def _sequence_at(x: _Expansion) -> list:
    s = x.seq(0)
    if x.const_int(1, "the position") is None:
        raise _needs_constant(x.name, x.op, "the position")
    return x.tensor_out(s[x.position(len(s), 1, 0, False)])


@_expands("SequenceLength")
def _sequence_length(x: _Expansion) -> list:
    return x.constant_out(np.array(len(x.seq(0)), dtype=np.int64))


@_expands("ConcatFromSequence")
def _concat_from_sequence(x: _Expansion) -> list:
    s, bld = x.seq(0), x.bld
    if not s:
        raise InputError(f"node {x.name!r} (ConcatFromSequence): the sequence is empty")
    axis, new_axis = int(attr(x.node, "axis")), int(attr(x.node, "new_axis", 0))
    rank = len(x.tensors[s[0]].shape) + new_axis
    axis = axis + rank if axis < 0 else axis
    parts = [bld.unsqueeze(e, axis) for e in s] if new_axis else list(s)
    if len(parts) == 1:
        bld.add("Identity", parts, [x.outs[0]])
    else:
        bld.add("Concat", parts, [x.outs[0]], axis=axis)
    return bld.nodes


@_expands("SplitToSequence")
def _split_to_sequence(x: _Expansion) -> list:
    bld, src = x.bld, x.value(x.ins[0])
    shape = x.tensors[src].shape
    axis = int(attr(x.node, "axis", 0))
    axis = axis + len(shape) if axis < 0 else axis
    length = shape[axis]
    split = x.const_int(1, "split")
    elements = []
    if split is None:
        keep = int(attr(x.node, "keepdims", 1))
        for k in range(length):
            idx = bld.constant(np.array(k if not keep else [k], dtype=np.int64), "index")
            elements.append(bld.add("Gather", [src, idx], axis=axis)[0])
        return x.out(tuple(elements))
    if split.ndim == 0:
        step = int(split)
        if step <= 0:
            raise InputError(f"node {x.name!r} (SplitToSequence): split must be positive")
        sizes = [min(step, length - s) for s in range(0, length, step)]
    else:
        sizes = [int(v) for v in split]
        if sum(sizes) != length or min(sizes, default=0) < 0:
            raise InputError(f"node {x.name!r} (SplitToSequence): split {sizes} does not sum to {length}")
    start = 0
    axes = bld.constant(np.array([axis], dtype=np.int64), "axes")
    for size in sizes:
        begin = bld.constant(np.array([start], dtype=np.int64), "start")
        end = bld.constant(np.array([start + size], dtype=np.int64), "end")
        elements.append(bld.add("Slice", [src, begin, end, axes])[0])
        start += size
    return x.out(tuple(elements))


@_expands("SequenceMap")
def _sequence_map(x: _Expansion) -> list:
    body = attr(x.node, "body")
    values = [x.value(n) for n in x.ins]
    lengths = {len(v) for v in values if isinstance(v, tuple)}
    if len(lengths) != 1 or not isinstance(values[0], tuple):
        raise InputError(f"node {x.name!r} (SequenceMap): the input sequences differ in length")
    n = lengths.pop()
    steps = []
    for k in range(n):
        bindings = {}
        for formal, v in zip(body.input, values):
            if isinstance(v, tuple):
                bindings[formal.name] = v[k]
            elif isinstance(v, str):
                bindings[formal.name] = v
            else:
                raise InputError(f"node {x.name!r} (SequenceMap): optional inputs are not supported")
        steps.append(x.bld.instantiate(body, f"m{k}", bindings))
    for j, name in enumerate(x.outs):
        if name:
            x.structs[name] = tuple(step[j] for step in steps)
    return x.bld.nodes


@_expands("Optional")
def _optional(x: _Expansion) -> list:
    return x.out(Opt(x.value(x.ins[0]) if x.ins and x.ins[0] else None))


@_expands("OptionalHasElement")
def _optional_has_element(x: _Expansion) -> list:
    v = x.value(x.ins[0]) if x.ins and x.ins[0] else Opt(None)
    return x.constant_out(np.array(not (isinstance(v, Opt) and v.value is None)))


@_expands("OptionalGetElement")
def _optional_get_element(x: _Expansion) -> list:
    v = x.value(x.ins[0])
    if isinstance(v, Opt):
        if v.value is None:
            raise InputError(f"node {x.name!r} (OptionalGetElement): the optional value is empty")
        v = v.value
    return x.tensor_out(v) if isinstance(v, str) else x.out(v)


@_expands("If", claims=structured_if)
def _if(x: _Expansion) -> list:
    ins, outs, bld = x.ins, x.outs, x.bld
    cond = x.tensors.get(ins[0])
    if cond is None:
        x.value(ins[0])
    if cond.is_const:
        return taken_branch(x.node, x.name, x.opset, bool(np.ravel(cond.value)[0]))
    then_g, else_g = attr(x.node, "then_branch"), attr(x.node, "else_branch")
    if x.opset < 9 or cond.size != 1 or indexes_memory(op_types(then_g) | op_types(else_g)):
        raise _unresolved(outs[0], x.name, "If", "its branches give sequences/optionals, so the condition must be "
                          "known at build time")
    then_outs = bld.instantiate(then_g, "then", {})
    else_outs = bld.instantiate(else_g, "else", {})
    for a, b, o in zip(then_outs, else_outs, outs):
        if o:
            bld.nodes.append(helper.make_node("Select", [ins[0], a, b], [o], name=bld.name("Select"),
                                              domain=SEQ_DOMAIN, doc_string=x.name))
    return bld.nodes


@_expands("Loop")
def _loop(x: _Expansion) -> list:
    ins, outs, tensors = x.ins, x.outs, x.tensors
    expanded = expand_loop(x.node, x.name, x.scope)
    body = attr(x.node, "body")
    carried = ins[2:]
    trip = tensors.get(ins[0]) if ins and ins[0] else None
    go = tensors.get(ins[1]) if len(ins) > 1 and ins[1] else None
    if (expanded is None and trip is not None and trip.is_const and (go is None or go.is_const)
            and (int(np.ravel(trip.value)[0]) <= 0 or (go is not None and not bool(np.ravel(go.value)[0])))
            and len(body.output) == 1 + len(carried)):  # no iteration: the outputs are the initial values
        for src, o in zip(carried, outs):
            v = x.value(src)
            if o and isinstance(v, str):
                x.bld.add("Identity", [v], [o])
            elif o:
                x.structs[o] = v
        return x.bld.nodes
    if expanded is None:
        raise _unresolved(outs[0], x.name, "Loop", "it carries sequences/optionals, so its trip count and "
                          "condition must be known at build time")
    return expanded
