"""Import-time expansion of control flow with static structure into ordinary nodes.

- Scan (opset 8 without sequence_lens, opset 9+) over a static number of steps is unrolled: each
  step's scan-input slices are Gathers, the body's nodes are copied with their tensors renamed per
  step, state outputs feed the next step, and each scan output is the Concat of the steps' values
  (Unsqueezed along its axis, in its direction). A stateless Scan whose body is one DFT of its step becomes one
  DFT of the whole scan input instead (scan_batch.py), whatever its length.
- Loop with a trip count and condition known at build time, whose body keeps the condition true,
  is unrolled the same way; any other Loop stays one node that runs its body at run time (loops.py).
- If with a condition known at build time (a constant, or a graph input frozen with --bind) becomes
  the nodes of the branch taken. With a run-time condition both branches are computed and each output
  is Where(cond, then, else), when the branches' shapes, inferred inside them with the static shapes
  of the outer graph (a dry run of the frontend's folder: `probe`), are the same and no kept node
  addresses memory with indices known only at run time (OpSpec.index_inputs); otherwise a one-line error
  names the reason and the graph inputs to --bind.

Each is the tensor expansion of its op in expanders.py: it returns the replacement ONNX nodes (the frontend then
imports them like the model's own), or None when the node is left as it is (and reported unsupported).
"""
from __future__ import annotations

import numpy as np
import onnx

from ..errors import InputError, NeedsConstant, UnresolvedShape
from ..ir import is_onnx_domain
from .bind_hints import bind_hint, inputs_behind
from .builder import NodeBuilder, attr, attrs, op_types
from .expanders import Scope, expand_tensors, expands
from .loops import always_true
from .scan_batch import batch_scanned_dft
from ..opspec import indexing_op_types, traits

MAX_UNROLLED_NODES = 4096
"""Unrolling a Scan into more nodes than this is not worth it: the node stays unsupported."""


def _unroll(bld: NodeBuilder, body: onnx.GraphProto, states: list[str], scans: list[str], scan_ranks: list[int],
            length: int, in_axes: list[int], in_dirs: list[int], out_axes: list[int], out_dirs: list[int],
            tag: str) -> tuple[list[str], list[str]]:
    """Unrolled steps; (final state names, scan output names)."""
    n_state = len(states)
    steps: list[list[str]] = []
    for t in range(length):
        bindings = {}
        for i, name in enumerate(states):
            bindings[body.input[i].name] = name
        for j, name in enumerate(scans):
            index = length - 1 - t if in_dirs[j] else t
            idx = bld.constant(np.array(index, dtype=np.int64), "step")
            bindings[body.input[n_state + j].name] = bld.add("Gather", [name, idx], axis=in_axes[j])[0]
        outs = bld.instantiate(body, f"{tag}{t}", bindings)
        states = outs[:n_state]
        steps.append(outs[n_state:])
    scan_outs = []
    for j in range(len(body.output) - n_state):
        values = [steps[t][j] for t in range(length)]
        if out_dirs[j]:
            values.reverse()
        scan_outs.append((values, out_axes[j]))
    return states, scan_outs


def _finish_scan_output(bld: NodeBuilder, values: list[str], axis: int, output: str) -> None:
    parts = [bld.unsqueeze(v, axis) for v in values]
    if len(parts) == 1:
        bld.add("Identity", parts, [output])
    else:
        bld.add("Concat", parts, [output], axis=axis)


@expands("", "Scan")
def expand_scan(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    tensors, opset = scope.tensors, scope.opset
    body = attr(node, "body")
    m = int(attr(node, "num_scan_inputs"))
    bld = NodeBuilder(node_name, opset)
    if opset < 9:
        if node.input and node.input[0]:
            return None  # sequence_lens: steps differ per batch row
        inputs = list(node.input[1:])
        n_state = len(inputs) - m
        states, scans = inputs[:n_state], inputs[n_state:]
        if not scans:
            return None
        batch, length = tensors[scans[0]].shape[:2]
        n_out = len(body.output) - n_state
        if batch * length * len(body.node) > MAX_UNROLLED_NODES:
            return None
        dirs = list(attr(node, "directions", None) or [0] * m)
        finals: list[list[str]] = []
        outs: list[list[str]] = []
        for bi in range(batch):
            idx = bld.constant(np.array(bi, dtype=np.int64), "batch")
            b_states = [bld.add("Gather", [s, idx], axis=0)[0] for s in states]
            b_scans = [bld.add("Gather", [s, idx], axis=0)[0] for s in scans]
            fin, scan_outs = _unroll(bld, body, b_states, b_scans, [], length, [0] * m, dirs, [0] * n_out, [0] * n_out, f"b{bi}t")
            finals.append(fin)
            row = []
            for values, axis in scan_outs:
                row.append(bld.add("Concat", [bld.unsqueeze(v, 0) for v in values], axis=0)[0] if len(values) > 1
                           else bld.unsqueeze(values[0], 0))
            outs.append(row)
        for i, out in enumerate(node.output[:n_state]):
            if out:
                _finish_scan_output(bld, [f[i] for f in finals], 0, out)
        for j, out in enumerate(node.output[n_state:]):
            if out:
                _finish_scan_output(bld, [o[j] for o in outs], 0, out)
        return bld.nodes
    inputs = list(node.input)
    n_state = len(inputs) - m
    states, scans = inputs[:n_state], inputs[n_state:]
    n_out = len(body.output) - n_state
    ranks = [len(tensors[s].shape) for s in scans]
    in_axes = [a % r if r else 0 for a, r in zip(attr(node, "scan_input_axes", None) or [0] * m, ranks)]
    in_dirs = list(attr(node, "scan_input_directions", None) or [0] * m)
    out_axes_raw = list(attr(node, "scan_output_axes", None) or [0] * n_out)
    out_dirs = list(attr(node, "scan_output_directions", None) or [0] * n_out)
    if not scans or len(in_axes) != m or len(in_dirs) != m or len(out_axes_raw) != n_out or len(out_dirs) != n_out:
        return None
    lengths = {tensors[s].shape[a] for s, a in zip(scans, in_axes)}
    if len(lengths) != 1:
        return None
    length = lengths.pop()
    if length == 0:
        return None
    if (n_state == 0 and m == 1 and n_out == 1 and node.output[0]
            and batch_scanned_dft(bld, body, scans[0], ranks[0], in_axes[0], in_dirs[0], out_axes_raw[0] % ranks[0],
                                  out_dirs[0], node.output[0], tensors, opset)):
        return bld.nodes
    if length * max(1, len(body.node)) > MAX_UNROLLED_NODES:
        return None
    # an output axis may be negative: relative to the scan output's rank (the step value's rank + 1)
    out_ranks = []
    for o in body.output[n_state:]:
        shape = o.type.tensor_type.shape if o.type.HasField("tensor_type") and o.type.tensor_type.HasField("shape") else None
        out_ranks.append(None if shape is None else len(shape.dim) + 1)
    out_axes = []
    for a, r in zip(out_axes_raw, out_ranks):
        if a < 0:
            if r is None:
                return None
            a += r
        out_axes.append(a)
    finals, scan_outs = _unroll(bld, body, states, scans, ranks, length, in_axes, in_dirs, out_axes, out_dirs, "t")
    for i, out in enumerate(node.output[:n_state]):
        if out:
            bld.add("Identity", [finals[i]], [out])
    for (values, axis), out in zip(scan_outs, node.output[n_state:]):
        if out:
            _finish_scan_output(bld, values, axis, out)
    return bld.nodes


def indexes_memory(op_types: set[str]) -> bool:
    """Whether ops of these types address memory with values computed at run time (OpSpec.index_inputs, or
    control flow): a branch not taken may hold indices that are out of range there, so an If whose branches use
    them is not computed both ways."""
    return bool(op_types & (indexing_op_types() | {"Loop", "Scan", "If"}))


def _static_outputs(graph: onnx.GraphProto) -> list[tuple[int, tuple[int, ...]]] | None:
    result = []
    for o in graph.output:
        if not o.type.HasField("tensor_type") or not o.type.tensor_type.HasField("shape"):
            return None
        dims = o.type.tensor_type.shape.dim
        if any(not (d.HasField("dim_value") and d.dim_value >= 0) for d in dims):
            return None
        result.append((o.type.tensor_type.elem_type, tuple(d.dim_value for d in dims)))
    return result


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def _bind_hint(folder, cond: str, tensors: dict, builds: dict[bool, bool] | None = None) -> str:
    return bind_hint(getattr(folder, "model", None), cond, tensors, builds)


def _branch_builds(folder, branch: onnx.GraphProto, tag: str, node_name: str, opset: int) -> bool:
    """Whether one branch alone imports with the static shapes of the outer graph."""
    bld = NodeBuilder(node_name, opset)
    bld.instantiate(branch, tag, {})
    try:
        probe(folder, bld.nodes, opset)
    except InputError:
        return False
    return True


def probe(folder, nodes: list[onnx.NodeProto], opset: int) -> tuple[dict, list[onnx.NodeProto], dict[str, str]]:
    """Static shapes of `nodes` run through a copy of the frontend's folder (constants folded, nested
    control flow expanded) without touching the real one: (tensors, nodes kept, data-dependent tensors).
    Raises the InputError the real import would raise."""
    dry = type(folder)(folder.model, dict(folder.tensors), folder.fold, folder.limits, folder.max_dims,
                       folder.max_string_bytes)
    dry.unresolved, dry.dynamic = dict(folder.unresolved), dict(folder.dynamic)
    work, kept = list(reversed(nodes)), []
    while work:
        node = work.pop()
        if is_onnx_domain(node.domain):
            expanded = expand_tensors(node, node.name, Scope(dry.tensors, opset, dry))
            if expanded is not None:
                work.extend(reversed(expanded))
                continue
        if not dry.visit(node, attrs(node)):
            kept.append(node)
    for name, message in dry.unresolved.items():
        if name not in folder.unresolved:
            raise UnresolvedShape(message, name)
    return dry.tensors, kept, dry.dynamic


def _run_time_index(kept: list[onnx.NodeProto], tensors: dict) -> onnx.NodeProto | None:
    """A kept node that addresses memory with indices known only at run time."""
    for node in kept:
        if node.op_type in ("Loop", "Scan", "If"):
            return node
        for i in traits(node.op_type, domain=node.domain).index_inputs:
            if i < len(node.input) and node.input[i] and not tensors[node.input[i]].is_const:
                return node
    return None


def taken_branch(node: onnx.NodeProto, node_name: str, opset: int, taken: bool) -> list[onnx.NodeProto]:
    """The nodes of an If's branch taken, its initializers first (as Constant nodes), its outputs the If's (Identity)."""
    bld = NodeBuilder(node_name, opset)
    outs = bld.instantiate(attr(node, "then_branch" if taken else "else_branch"), "then" if taken else "else", {})
    for src, out in zip(outs, node.output):
        if out:
            bld.add("Identity", [src], [out])
    return bld.nodes


@expands("", "If")
def expand_if(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """The branch taken when the condition is known; else both branches and one Where per output, when they have the
    same static shapes and index memory only with values known at build time (`scope.folder` infers their shapes;
    without it, their declared output types decide)."""
    tensors, opset, folder = scope.tensors, scope.opset, scope.folder
    cond = tensors[node.input[0]]
    then_g, else_g = attr(node, "then_branch"), attr(node, "else_branch")
    if cond.is_const:
        return taken_branch(node, node_name, opset, bool(np.ravel(cond.value)[0]))
    bld = NodeBuilder(node_name, opset)
    if folder is None:
        return _expand_if_declared(node, bld, cond, then_g, else_g, opset)
    behind = inputs_behind(getattr(folder, "model", None), node.input[0])
    source = f" (from input {', '.join(map(repr, behind))})" if behind else ""
    where = f"If node {node_name!r}: its condition {node.input[0]!r}{source} is computed at run time"
    def hint() -> str:  # only when refusing: it evaluates the condition with onnx.reference
        return _bind_hint(folder, node.input[0], tensors)
    if opset < 9 or cond.size != 1:
        raise InputError(f"{where} and holds {cond.size} values (one is needed): {hint()}")
    then_outs = bld.instantiate(then_g, "then", {})
    else_outs = bld.instantiate(else_g, "else", {})
    try:
        shapes, kept, dynamic = probe(folder, bld.nodes, opset)
    except InputError as exc:
        builds = {True: _branch_builds(folder, then_g, "then", node_name, opset),
                  False: _branch_builds(folder, else_g, "else", node_name, opset)}
        which = "the then branch" if builds[False] and not builds[True] else \
            "the else branch" if builds[True] and not builds[False] else "one of them"
        message = f"{where}, so both branches are computed, and {which} fails: {exc}: " \
                  f"{_bind_hint(folder, node.input[0], tensors, builds)}"
        if isinstance(exc, UnresolvedShape):
            raise UnresolvedShape(message, exc.tensor) from None
        if isinstance(exc, NeedsConstant):
            raise NeedsConstant(message, exc.node) from None
        raise InputError(message) from None
    risky = _run_time_index(kept, shapes)
    if risky is not None:
        raise InputError(f"{where} and a branch indexes memory with run-time values ({risky.op_type} node "
                         f"{risky.name!r}), so the branch not taken cannot be computed safely: {hint()}")
    for a, b, out in zip(then_outs, else_outs, node.output):
        if not out:
            continue
        ta, tb = shapes[a], shapes[b]
        if a in dynamic or b in dynamic:
            raise InputError(f"{where} and output {out!r} has a data-dependent shape ({dynamic.get(a) or dynamic.get(b)}): {hint()}")
        if (np.dtype(ta.dtype), tuple(ta.shape)) != (np.dtype(tb.dtype), tuple(tb.shape)):
            raise InputError(f"{where} and its branches give output {out!r} different shapes (then {_shape_text(ta.shape)} "
                             f"{np.dtype(ta.dtype).name}, else {_shape_text(tb.shape)} {np.dtype(tb.dtype).name}): {hint()}")
        if len(ta.shape) < len(cond.shape):
            raise InputError(f"{where} and output {out!r} has a lower rank than the condition: {hint()}")
        bld.add("Where", [node.input[0], a, b], [out])
    return bld.nodes


def _expand_if_declared(node, bld: NodeBuilder, cond, then_g, else_g, opset: int) -> list[onnx.NodeProto] | None:
    """Run-time condition without the frontend's folder: the branches' declared output types decide."""
    then_t, else_t = _static_outputs(then_g), _static_outputs(else_g)
    if opset < 9 or then_t is None or then_t != else_t or cond.size != 1:
        return None
    if any(len(shape) < len(cond.shape) for _, shape in then_t):
        return None
    if indexes_memory(op_types(then_g) | op_types(else_g)):
        return None
    then_outs = bld.instantiate(then_g, "then", {})
    else_outs = bld.instantiate(else_g, "else", {})
    for a, b, out in zip(then_outs, else_outs, node.output):
        if out:
            bld.add("Where", [node.input[0], a, b], [out])
    return bld.nodes


@expands("", "Loop")
def expand_loop(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """A Loop whose trip count and condition are known at build time and whose body keeps the
    condition true: unrolled like a Scan (scan outputs stacked along a new first axis). Any other Loop stays
    one node (loops.py)."""
    tensors, opset = scope.tensors, scope.opset
    body = attr(node, "body")
    inputs = list(node.input) + ["", ""]
    trip, cond = inputs[0], inputs[1]
    if not trip or not tensors[trip].is_const or len(body.input) < 2 or not body.output:
        return None
    trips = int(np.ravel(tensors[trip].value)[0])
    if cond:
        if not tensors[cond].is_const:
            return None
        if not bool(np.ravel(tensors[cond].value)[0]):
            trips = 0
    carried = [n for n in node.input[2:]]
    n_state = len(carried)
    if trips <= 0 or not always_true(body) or trips * max(1, len(body.node)) > MAX_UNROLLED_NODES:
        return None
    bld = NodeBuilder(node_name, opset)
    true = bld.constant(np.array(True), "cond")
    states, steps = carried, []
    for t in range(trips):
        bindings = {body.input[0].name: bld.constant(np.array(t, dtype=np.int64), "iter"), body.input[1].name: true}
        for i, name in enumerate(states):
            bindings[body.input[2 + i].name] = name
        outs = bld.instantiate(body, f"t{t}", bindings)
        states, steps = outs[1:1 + n_state], steps + [outs[1 + n_state:]]
    for i, out in enumerate(node.output[:n_state]):
        if out:
            bld.add("Identity", [states[i]], [out])
    for j, out in enumerate(node.output[n_state:]):
        if out:
            _finish_scan_output(bld, [step[j] for step in steps], 0, out)
    return bld.nodes
