"""A Loop that runs at run time: one node whose body is imported once as its own static graph.

subgraphs.py unrolls a Loop whose trip count and condition are build-time constants and whose body keeps the
condition true. Any other Loop (a condition computed at run time or by the body, a run-time trip count, too many
steps to unroll) stays one node when its body imports with static shapes:

- the body becomes an ir.Graph (`node.attrs[BODY_ATTR]`) with inputs [iteration, condition, carried...,
  outer...]: the outer-scope tensors it reads are constants of the body or, computed at run time, extra inputs
  appended to the Loop node's inputs; its outputs are [condition, carried..., scan steps...];
- carried values keep their shape and dtype from step to step (else a one-line error);
- the most steps it runs (`node.attrs[MAX_TRIPS_ATTR]`) is the trip count when it is a constant, else
  `--max-dim NAME=N` for the Loop node's name or one of its scan outputs' (asked for by name when missing; the
  name kept in `node.attrs[BOUND_ATTR]`: a run that needs more steps fails, ops/control.py);
- scan outputs are (max steps, *step shape); when the loop may stop early their dim 0 is data-dependent
  (frontend/shapes.py: the kernel writes the actual count into their dims slots, ops/control.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import InputError, UnresolvedShape
from ..ir import BODY_ATTR, BOUND_ATTR, DEFAULT_BOUND, MAX_TRIPS_ATTR, STATES_ATTR, Graph, Tensor
from .builder import outer_references
from .shapes import ATTR, analyze
from .unsupported import unresolved_shape

EXTRA_INPUTS_ATTR = "_extra_inputs"
"""Outer-scope tensors the body reads, appended to the node's inputs by the importer."""


class BodyGraph(Graph):
    """A run-time Loop's body: equal to another by structure (nodes, names, shapes, dtypes, constants' bytes), so
    the imports of a dynamic model at several sizes (frontend/dynamic.py) see one body where it does not vary."""

    def __eq__(self, other) -> bool:
        return isinstance(other, Graph) and _canonical(self) == _canonical(other)

    __hash__ = None


def _canonical(value):
    if isinstance(value, Graph):
        return ("graph", tuple(value.inputs), tuple(value.outputs), value.opset,
                tuple((n.op_type, n.name, n.domain, tuple(n.inputs), tuple(n.outputs), _canonical(n.attrs)) for n in value.nodes),
                tuple((k, np.dtype(t.dtype).str, np.dtype(t.dtype).name, tuple(t.shape), _canonical(t.value)) for k, t in sorted(value.tensors.items())))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.dtype.name, value.shape, hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest())
    if isinstance(value, dict):
        return tuple((str(k), _canonical(v)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    return repr(value)


def always_true(body: onnx.GraphProto) -> bool:
    """The body's condition output is its condition input (through Identity) or a constant true."""
    producers = {o: n for n in body.node for o in n.output}
    name, cond_in = body.output[0].name, body.input[1].name
    while True:
        if name == cond_in:
            return True
        node = producers.get(name)
        if node is None:
            return False
        if node.op_type == "Identity":
            name = node.input[0]
            continue
        if node.op_type == "Constant":
            value = next((a for a in node.attribute if a.name == "value"), None)
            return value is not None and bool(np.ravel(numpy_helper.to_array(value.t))[0])
        return False


def _const_scalar(tensors: dict[str, Tensor], name: str):
    if not name or not tensors[name].is_const:
        return None
    return np.ravel(tensors[name].value)[0]


def _max_trips(folder, node: onnx.NodeProto, body: onnx.GraphProto, where: str, n_state: int) -> tuple[int, bool, str | None]:
    """(most steps the loop runs, whether it always runs exactly that many, the --max-dim name bounding it when
    its trip count is not a constant)."""
    inputs = list(node.input) + ["", ""]
    trip, cond = inputs[0], inputs[1]
    m, c = _const_scalar(folder.tensors, trip), _const_scalar(folder.tensors, cond)
    if cond and c is not None and not bool(c):
        return 0, True, None
    exact = m is not None and (not cond or c is not None) and always_true(body)
    if m is not None:
        return max(int(m), 0), exact, None
    scans = [o for o in node.output[n_state:] if o]
    for name in [where, *scans, DEFAULT_BOUND]:
        if name in folder.max_dims:
            return folder.max_dims[name], False, name
    named = (scans or [o for o in node.output if o] or [where])[0]
    alt = f" (or --max-dim {scans[0]}=N)" if scans else ""
    raise UnresolvedShape(f"{unresolved_shape(folder, node, named)}; or give the most steps the loop may run with "
                          f"--max-dim {where}=N{alt}", named)


def _body_model(model: onnx.ModelProto, body: onnx.GraphProto, inputs: list[Tensor], consts: dict[str, np.ndarray],
                extras: list[Tensor]) -> onnx.ModelProto:
    """The body as a model: its inputs typed with the outer graph's static shapes, outer constants as initializers."""
    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    del graph.input[:]
    for formal, t in zip(body.input, inputs):
        graph.input.append(helper.make_tensor_value_info(formal.name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), t.shape))
    for t in extras:
        graph.input.append(helper.make_tensor_value_info(t.name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), t.shape))
    for name, value in consts.items():
        graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    out = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    out.functions.extend(model.functions)
    return out


def _outer_inputs(body: onnx.GraphProto, where: str, folder) -> tuple[dict[str, np.ndarray], list[Tensor]]:
    consts, extras = {}, []
    for name in sorted(outer_references(body)):
        if name in folder.unresolved:
            raise UnresolvedShape(folder.unresolved[name], name)
        if name not in folder.tensors:
            raise InputError(f"Loop node {where!r}: its body reads {name!r}, which nothing produces: the model is malformed")
        if name in folder.dynamic:
            raise InputError(f"Loop node {where!r}: its body reads {name!r}, whose shape depends on the data "
                             f"({folder.dynamic[name]}): such tensors are supported only as graph outputs")
        t = folder.tensors[name]
        if t.is_const:
            consts[name] = t.value
        else:
            extras.append(t)
    return consts, extras


def _check_body(graph: Graph, where: str, states: list[Tensor], n_out: int) -> None:
    if len(graph.outputs) != n_out:
        raise InputError(f"Loop node {where!r}: its body has {len(graph.outputs)} outputs, {n_out} expected "
                         "(condition, carried values, scan outputs): the model is malformed")
    cond = graph.tensors[graph.outputs[0]]
    if np.dtype(cond.dtype) != np.bool_ or cond.size != 1:
        raise InputError(f"Loop node {where!r}: its body's condition output {graph.outputs[0]!r} must be one bool, "
                         f"not {np.dtype(cond.dtype).name} of shape {list(cond.shape)}: the model is malformed")
    for t, name in zip(states, graph.outputs[1:]):
        out = graph.tensors[name]
        if (np.dtype(out.dtype), tuple(out.shape)) != (np.dtype(t.dtype), tuple(t.shape)):
            raise InputError(f"Loop node {where!r}: its body turns carried value {t.name!r} ({list(t.shape)} "
                             f"{np.dtype(t.dtype).name}) into {list(out.shape)} {np.dtype(out.dtype).name}: only loops "
                             "whose carried values keep their shape and dtype are supported")
    dynamic = analyze(graph).root
    for name in graph.outputs:
        if name in dynamic:
            raise InputError(f"Loop node {where!r}: its body output {name!r} has a data-dependent shape: "
                             "only bodies with static output shapes are supported")


def import_loop(folder, node: onnx.NodeProto, attrs: dict, import_body: Callable[..., Graph]) -> dict[str, Tensor]:
    """The Loop node's output tensors (bounds); its imported body and facts go into `attrs`.
    `import_body(model, input_shapes)` imports the body model with the outer import's limits."""
    where = node.name or node.op_type
    body = next(a.g for a in node.attribute if a.name == "body")
    n_state = len(node.input) - 2
    if len(body.input) != 2 + n_state:
        raise InputError(f"Loop node {where!r}: its body has {len(body.input)} inputs, {2 + n_state} expected "
                         "(iteration, condition, carried values): the model is malformed")
    trips, exact, bound = _max_trips(folder, node, body, where, n_state)
    states = [folder.tensors[n] for n in node.input[2:]]
    consts, extras = _outer_inputs(body, where, folder)
    inputs = [Tensor("iter", np.dtype(np.int64), ()), Tensor("cond", np.dtype(np.bool_), ()), *states]
    model = _body_model(folder.model, body, inputs, consts, extras)
    shapes = {f.name: tuple(t.shape) for f, t in zip(body.input, inputs)} | {t.name: tuple(t.shape) for t in extras}
    imported = import_body(model, shapes, f"{where}/body")
    graph = BodyGraph(**{f.name: getattr(imported, f.name) for f in dataclasses.fields(imported)})
    _check_body(graph, where, states, 1 + len(node.output))
    result, marks = {}, {}
    for i, name in enumerate(node.output):
        if not name:
            continue
        step = graph.tensors[graph.outputs[1 + i]]
        shape = tuple(step.shape) if i < n_state else (trips, *step.shape)
        result[name] = Tensor(name, np.dtype(step.dtype), shape)
        if i >= n_state and not exact:
            marks[i] = (0,)
            folder.dynamic[name] = f"Loop node {where!r}"
    if marks:
        attrs[ATTR] = marks
    attrs[BODY_ATTR], attrs[MAX_TRIPS_ATTR], attrs[STATES_ATTR] = graph, trips, n_state
    if bound is not None:
        attrs[BOUND_ATTR] = bound
    attrs[EXTRA_INPUTS_ATTR] = [t.name for t in extras]
    return result


def bodies(graph: Graph) -> list[Graph]:
    """The body graphs of `graph`'s run-time Loops, nested ones included (innermost last)."""
    found = []
    for node in graph.nodes:
        body = node.attrs.get(BODY_ATTR)
        if body is not None:
            found += [body, *bodies(body)]
    return found
