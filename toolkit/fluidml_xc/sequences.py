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

Positions (SequenceAt/Insert/Erase, SplitToSequence's split) must be build-time constants; the error
says so in the form backend.FxcBackendRep recognizes, so it binds such graph inputs as constants.

Graph inputs/outputs (the ABI): a sequence `x` of n tensors is n tensors `x.0` ... `x.{n-1}`; an
optional is an absent value (no tensor) or its content (a tensor: `x.0`; a sequence: `x.0`, ...).
Descriptors (JSON): "tensor", ["seq", n], ["opt"], ["opt", "tensor"], ["opt", ["seq", n]].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import InputError

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
    if desc == "tensor":
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
def _structured_if(node: onnx.NodeProto) -> bool:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH and any(type_kind(o.type) in ("seq", "opt") for o in attr.g.output):
            return True
    return False


def handles(node: onnx.NodeProto, structs: dict) -> bool:
    if node.domain == SEQ_DOMAIN:
        return True
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in SEQUENCE_OPS or any(n in structs for n in node.input if n):
        return True
    return node.op_type == "If" and _structured_if(node)


def _needs_constant(node_name: str, op: str, what: str) -> InputError:
    return InputError(f"node {node_name!r} ({op}): {what} must be a build-time constant (sequences have a static structure)")


def _unresolved(out: str, node_name: str, op: str, why: str) -> InputError:
    return InputError(f"cannot infer a static shape for {out!r} (node {node_name!r}, {op}): {why}")


def expand(node: onnx.NodeProto, node_name: str, tensors: dict, structs: dict, unresolved: dict,
           opset: int) -> list[onnx.NodeProto]:
    """Nodes replacing `node` (maybe none: it only defines structures in `structs`)."""
    from .subgraphs import _attr, _Builder, _op_types, INDEXING_OPS, expand_if, expand_loop

    op = node.op_type
    bld = _Builder(node_name, opset)
    ins = list(node.input)
    outs = list(node.output)

    def value(name: str):
        if not name:
            return None
        if name in structs:
            return structs[name]
        if name in unresolved:
            raise InputError(unresolved[name])
        if name not in tensors:
            raise InputError(f"node {node_name!r} reads {name!r}, which nothing produces: the model is malformed")
        return name

    def seq(i: int) -> tuple:
        v = value(ins[i])
        if not isinstance(v, tuple):
            raise InputError(f"node {node_name!r} ({op}): input {ins[i]!r} is not a sequence")
        return v

    def const_int(i: int, what: str):
        if i >= len(ins) or not ins[i]:
            return None
        t = tensors.get(ins[i])
        if t is None or not t.is_const:
            value(ins[i])
            raise _needs_constant(node_name, op, what)
        return np.asarray(t.value).astype(np.int64)

    def position(n: int, i: int, default: int, allow_end: bool) -> int:
        p = const_int(i, "the position")
        p = default if p is None else int(np.ravel(p)[0])
        if p < 0:
            p += n
        if not (0 <= p <= (n if allow_end else n - 1)):
            raise InputError(f"node {node_name!r} ({op}): position {p} out of range for a sequence of {n} tensors")
        return p

    def out(v) -> list:
        if outs and outs[0]:
            structs[outs[0]] = v
        return bld.nodes

    def tensor_out(src: str) -> list:
        if outs and outs[0]:
            bld.add("Identity", [src], [outs[0]])
        return bld.nodes

    if node.domain == SEQ_DOMAIN and op == "Select":
        cond, a, b = ins
        origin = node.doc_string or node_name

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
        result = select(value(a), value(b), outs[0] if isinstance(value(a), str) else None)
        return bld.nodes if isinstance(result, str) else out(result)

    if op == "Identity":
        return out(value(ins[0]))
    if op == "SequenceConstruct":
        items = tuple(value(n) for n in ins)
        if not all(isinstance(v, str) for v in items):
            raise InputError(f"node {node_name!r} (SequenceConstruct): sequences of sequences/optionals are not supported")
        return out(items)
    if op == "SequenceEmpty":
        return out(())
    if op == "SequenceInsert":
        s, t = seq(0), value(ins[1])
        if not isinstance(t, str):
            raise InputError(f"node {node_name!r} (SequenceInsert): inserting a sequence/optional is not supported")
        p = position(len(s), 2, len(s), True)
        return out(s[:p] + (t,) + s[p:])
    if op == "SequenceErase":
        s = seq(0)
        p = position(len(s), 1, -1 + len(s), False)
        return out(s[:p] + s[p + 1:])
    if op == "SequenceAt":
        s = seq(0)
        if const_int(1, "the position") is None:
            raise _needs_constant(node_name, op, "the position")
        return tensor_out(s[position(len(s), 1, 0, False)])
    if op == "SequenceLength":
        s = seq(0)
        bld.add("Constant", [], [outs[0]], value=numpy_helper.from_array(np.array(len(s), dtype=np.int64)))
        return bld.nodes
    if op == "ConcatFromSequence":
        s = seq(0)
        if not s:
            raise InputError(f"node {node_name!r} (ConcatFromSequence): the sequence is empty")
        axis, new_axis = int(_attr(node, "axis")), int(_attr(node, "new_axis", 0))
        rank = len(tensors[s[0]].shape) + new_axis
        axis = axis + rank if axis < 0 else axis
        parts = [bld.unsqueeze(e, axis) for e in s] if new_axis else list(s)
        if len(parts) == 1:
            bld.add("Identity", parts, [outs[0]])
        else:
            bld.add("Concat", parts, [outs[0]], axis=axis)
        return bld.nodes
    if op == "SplitToSequence":
        x = value(ins[0])
        shape = tensors[x].shape
        axis = int(_attr(node, "axis", 0))
        axis = axis + len(shape) if axis < 0 else axis
        length = shape[axis]
        split = const_int(1, "split")
        elements = []
        if split is None:
            keep = int(_attr(node, "keepdims", 1))
            for k in range(length):
                idx = bld.constant(np.array(k if not keep else [k], dtype=np.int64), "index")
                elements.append(bld.add("Gather", [x, idx], axis=axis)[0])
            return out(tuple(elements))
        if split.ndim == 0:
            step = int(split)
            if step <= 0:
                raise InputError(f"node {node_name!r} (SplitToSequence): split must be positive")
            sizes = [min(step, length - s) for s in range(0, length, step)]
        else:
            sizes = [int(v) for v in split]
            if sum(sizes) != length or min(sizes, default=0) < 0:
                raise InputError(f"node {node_name!r} (SplitToSequence): split {sizes} does not sum to {length}")
        start = 0
        axes = bld.constant(np.array([axis], dtype=np.int64), "axes")
        for size in sizes:
            begin = bld.constant(np.array([start], dtype=np.int64), "start")
            end = bld.constant(np.array([start + size], dtype=np.int64), "end")
            elements.append(bld.add("Slice", [x, begin, end, axes])[0])
            start += size
        return out(tuple(elements))
    if op == "SequenceMap":
        body = _attr(node, "body")
        values = [value(n) for n in ins]
        lengths = {len(v) for v in values if isinstance(v, tuple)}
        if len(lengths) != 1 or not isinstance(values[0], tuple):
            raise InputError(f"node {node_name!r} (SequenceMap): the input sequences differ in length")
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
                    raise InputError(f"node {node_name!r} (SequenceMap): optional inputs are not supported")
            steps.append(bld.instantiate(body, f"m{k}", bindings))
        for j, name in enumerate(outs):
            if name:
                structs[name] = tuple(step[j] for step in steps)
        return bld.nodes
    if op == "Optional":
        return out(Opt(value(ins[0]) if ins and ins[0] else None))
    if op == "OptionalHasElement":
        v = value(ins[0]) if ins and ins[0] else Opt(None)
        present = not (isinstance(v, Opt) and v.value is None)
        bld.add("Constant", [], [outs[0]], value=numpy_helper.from_array(np.array(present)))
        return bld.nodes
    if op == "OptionalGetElement":
        v = value(ins[0])
        if isinstance(v, Opt):
            if v.value is None:
                raise InputError(f"node {node_name!r} (OptionalGetElement): the optional value is empty")
            v = v.value
        return tensor_out(v) if isinstance(v, str) else out(v)
    if op == "If":
        cond = tensors.get(ins[0])
        if cond is None:
            value(ins[0])
        if cond.is_const:
            return expand_if(node, node_name, tensors, opset)
        then_g, else_g = _attr(node, "then_branch"), _attr(node, "else_branch")
        if opset < 9 or cond.size != 1 or (_op_types(then_g) | _op_types(else_g)) & INDEXING_OPS:
            raise _unresolved(outs[0], node_name, "If", "its branches give sequences/optionals, so the condition must be "
                              "known at build time")
        then_outs = bld.instantiate(then_g, "then", {})
        else_outs = bld.instantiate(else_g, "else", {})
        for a, b, o in zip(then_outs, else_outs, outs):
            if o:
                bld.nodes.append(helper.make_node("Select", [ins[0], a, b], [o], name=bld.name("Select"),
                                                  domain=SEQ_DOMAIN, doc_string=node_name))
        return bld.nodes
    if op == "Loop":
        expanded = expand_loop(node, node_name, tensors, opset)
        body = _attr(node, "body")
        carried = ins[2:]
        trip = tensors.get(ins[0]) if ins and ins[0] else None
        go = tensors.get(ins[1]) if len(ins) > 1 and ins[1] else None
        if (expanded is None and trip is not None and trip.is_const and (go is None or go.is_const)
                and (int(np.ravel(trip.value)[0]) <= 0 or (go is not None and not bool(np.ravel(go.value)[0])))
                and len(body.output) == 1 + len(carried)):  # no iteration: the outputs are the initial values
            for src, o in zip(carried, outs):
                v = value(src)
                if o and isinstance(v, str):
                    bld.add("Identity", [v], [o])
                elif o:
                    structs[o] = v
            return bld.nodes
        if expanded is None:
            raise _unresolved(outs[0], node_name, "Loop", "it carries sequences/optionals, so its trip count and "
                              "condition must be known at build time")
        return expanded
    bad = next(n for n in ins if n in structs)
    raise InputError(f"node {node_name!r} ({op}) reads the sequence/optional value {bad!r}: only sequence and "
                     "optional ops, Identity, If and Loop accept one")
