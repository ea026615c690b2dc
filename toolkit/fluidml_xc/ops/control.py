"""Loop run at run time (frontend/loops.py imports its body as its own static graph).

The body is compiled once, as node functions of the same module with its own verified memory plan
(emit/emitter.py `body_call`, reached through `Kernel.compile_subgraph`); the Loop's kernel runs it in a
run-time loop in the node's scratch memory (`loop_scratch`):

    carried = initial values (copied into buffer A of each);  i = 0;  cond = the condition input (true if absent)
    while i < min(trip count, most steps) and cond:
        body(i, true, carried in A) -> condition, carried into B, scan step j into row i of scan output j
        swap A and B;  cond = the body's condition;  i += 1
    final carried values copied to their outputs; the scan outputs' actual dims (i, *step shape) written

The most steps (`MAX_TRIPS_ATTR`, the constant trip count or --max-dim) bounds the scan outputs' buffers: nothing
is written past it. A Loop bounded by --max-dim (`BOUND_ATTR`) whose run stops at the bound with steps left (its
trip count above the bound, or its condition still true) fails the run (`run_check_loop`, OpSpec.run_check): its
kernel stores its code in the run's status word, the glue returns FXC_ERR_RUN and the JIT raises RunCheckFailed.
A Loop whose body holds such checks (a bounded Loop, a TopK with a run-time K) clears the body's status word,
stops after a step that set it and passes it up as `Kernel.status_base` + the body's status.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from ..ir import BODY_ATTR, BOUND_ATTR, DEFAULT_BOUND, MAX_TRIPS_ATTR, STATES_ATTR, Graph, Node
from ..opspec import register

I8 = ir.IntType(8)
I8P = I8.as_pointer()
I64 = ir.IntType(64)


def run_check_loop(graph: Graph, node: Node) -> str | None:
    """The message of a run this Loop fails: bounded by --max-dim (`BOUND_ATTR`), it needed more steps."""
    name = node.attrs.get(BOUND_ATTR)
    if name is None:
        return None
    steps = int(node.attrs[MAX_TRIPS_ATTR])
    flag = f"--max-dim '{name}" if name == DEFAULT_BOUND else f"--max-dim {name}"
    end = "'" if name == DEFAULT_BOUND else ""
    return (f"Loop node {node.name!r} needs more than its bound of {steps} steps ({flag}={steps}{end}); "
            f"the outputs are not valid: rebuild with a larger {flag}=N{end}")


def _align(n: int, alignment: int) -> int:
    return -(-int(n) // alignment) * alignment


@dataclass
class LoopScratch:
    """Byte offsets in a run-time Loop's scratch memory (body arena first)."""

    states: list[tuple[int, int]] = field(default_factory=list)
    """Per carried value: its two buffers (A, B)."""
    scans: dict[int, int] = field(default_factory=dict)
    """Scan output j (0-based among the scan outputs) the graph does not use -> a buffer for one step of it."""
    iteration: int = 0
    cond_in: int = 0
    cond_out: int = 0
    total: int = 0


def loop_scratch(graph: Graph, node: Node, body_arena: int, alignment: int) -> LoopScratch:
    """Where the body's arena, the carried values' buffers, unused scan steps and the scalars go."""
    body, n_state = node.attrs[BODY_ATTR], node.attrs[STATES_ATTR]
    layout, top = LoopScratch(), _align(body_arena, alignment)
    for name in body.outputs[1:1 + n_state]:
        size = _align(max(body.tensors[name].nbytes, 1), alignment)
        layout.states.append((top, top + size))
        top += 2 * size
    for j, name in enumerate(body.outputs[1 + n_state:]):
        i = n_state + j
        if i >= len(node.outputs) or not node.outputs[i]:
            layout.scans[j] = top
            top += _align(max(body.tensors[name].nbytes, 1), alignment)
    layout.iteration, layout.cond_in, layout.cond_out = top, top + 8, top + 16
    layout.total = _align(top + 24, alignment)
    return layout


def _memcpy(k, dst: ir.Value, src: ir.Value, nbytes: int) -> None:
    if nbytes <= 0:
        return
    fn = k.module.declare_intrinsic("llvm.memcpy", [I8P, I8P, I64])
    k.b.call(fn, [k.b.bitcast(dst, I8P), k.b.bitcast(src, I8P), I64(nbytes), ir.Constant(ir.IntType(1), 0)])


def _to_index(k, v: ir.Value) -> ir.Value:
    if v.type.width > k.idx_t.width:
        return k.b.trunc(v, k.idx_t)
    return k.b.sext(v, k.idx_t) if v.type.width < k.idx_t.width else v


def _trip_limit(k, trips: int) -> ir.Value:
    """min(trip count input, most steps), the trip count read at run time when it is not a constant."""
    m = k.inputs[0] if k.inputs else None
    if m is None or m.value is not None:
        return k.index(trips)
    raw = k.b.load(k.b.bitcast(m.ptr, I64.as_pointer()))
    clamped = k.b.select(k.b.icmp_signed("<", raw, I64(trips)), raw, I64(trips))
    return _to_index(k, k.b.select(k.b.icmp_signed("<", clamped, I64(0)), I64(0), clamped))


def _first_condition(k) -> ir.Value:
    c = k.inputs[1] if len(k.inputs) > 1 else None
    if c is None:
        return ir.Constant(ir.IntType(1), 1)
    if c.value is not None:
        return ir.Constant(ir.IntType(1), int(bool(np.ravel(c.value)[0])))
    return k.b.icmp_unsigned("!=", k.b.load(k.b.bitcast(c.ptr, I8P)), I8(0))


def _status(k) -> ir.Value:
    return k.b.bitcast(k.status, I64.as_pointer())


def _pass_body_status(k, body_status: ir.Value | None, going: ir.Value) -> None:
    """After a step: a check in the body that failed stops this loop and passes its status up."""
    if body_status is None:
        return
    b = k.b
    failed = b.load(body_status)
    b.store(b.and_(b.load(going), b.icmp_signed("==", failed, I64(0))), going)
    with b.if_then(b.icmp_signed("!=", failed, I64(0)), likely=False):
        b.store(b.add(failed, I64(k.status_base)), _status(k))


def _flag_overrun(k, going: ir.Value, count: ir.Value) -> None:
    """After the loop: the run fails when it stopped at its --max-dim bound with steps left to run."""
    if not k.check_code:
        return
    b = k.b
    more = b.load(going)
    m = k.inputs[0] if k.inputs else None
    if m is not None:
        steps = b.load(count)
        more = b.and_(more, b.icmp_signed(">", b.load(b.bitcast(m.ptr, I64.as_pointer())),
                                          b.sext(steps, I64) if k.idx_t.width < 64 else steps))
    with b.if_then(more, likely=False):
        b.store(I64(k.check_code), _status(k))


def _write_dims(k, i: int, dims: list) -> None:
    ptr = k.dims_out.get(i)
    if ptr is None:
        return
    for d, v in enumerate(dims):
        value = I64(v) if isinstance(v, int) else (k.b.sext(v, I64) if v.type.width < 64 else v)
        k.b.store(value, k.b.gep(ptr, [k.index(d)], inbounds=True))


@register("Loop", since=1, heavy=True, run_check=run_check_loop,
          notes="a trip count and condition known at build time with a body that keeps it true: unrolled; "
                "otherwise run at run time with a static-shape body (bounded by the trip count or --max-dim; a run "
                "needing more steps than --max-dim fails)")
def lower_loop(k) -> None:
    node, b = k.node, k.b
    body, trips, n_state = node.attrs[BODY_ATTR], node.attrs[MAX_TRIPS_ATTR], node.attrs[STATES_ATTR]
    call = k.compile_subgraph(body)
    layout = loop_scratch(k.graph, node, call.arena_bytes, k.spec.alignment)

    def at(offset: int) -> ir.Value:
        return b.gep(k.scratch, [k.index(offset)], inbounds=True)

    state_bytes = [body.tensors[n].nbytes for n in body.outputs[1:1 + n_state]]
    cur, nxt = [], []
    for j, (a, bb) in enumerate(layout.states):
        _memcpy(k, at(a), k.inputs[2 + j].ptr, state_bytes[j])
        cur.append(k.local(I8P, at(a)))
        nxt.append(k.local(I8P, at(bb)))
    body_status = None
    if k.status_base is not None and call.status_offset >= 0:
        body_status = b.bitcast(at(call.status_offset), I64.as_pointer())
        b.store(I64(0), body_status)
    limit = _trip_limit(k, trips)
    count = k.local(k.idx_t, k.index(0))
    going = k.local(ir.IntType(1), _first_condition(k))
    header, step, done = (k.fn.append_basic_block(n) for n in ("loop_cond", "loop_body", "loop_done"))
    b.branch(header)
    b.position_at_end(header)
    i = b.load(count)
    b.cbranch(b.and_(b.load(going), b.icmp_signed("<", i, limit)), step, done)
    b.position_at_end(step)
    b.store(b.sext(i, I64) if k.idx_t.width < 64 else i, b.bitcast(at(layout.iteration), I64.as_pointer()))
    b.store(I8(1), at(layout.cond_in))
    scans = []
    for j, name in enumerate(body.outputs[1 + n_state:]):
        out = k.outputs[n_state + j] if n_state + j < len(k.outputs) else None
        if out is None:
            scans.append(at(layout.scans[j]))
            continue
        step_elems = int(np.prod(body.tensors[name].shape, dtype=np.int64))
        scans.append(b.bitcast(b.gep(out.ptr, [b.mul(i, k.index(step_elems))], inbounds=True), I8P))
    extras = [op.ptr for op in k.inputs[2 + n_state:]]
    call(b, [at(layout.iteration), at(layout.cond_in), *[b.load(p) for p in cur], *extras],
         [at(layout.cond_out), *[b.load(p) for p in nxt], *scans], at(0))
    for p, q in zip(cur, nxt):
        x, y = b.load(p), b.load(q)
        b.store(y, p)
        b.store(x, q)
    b.store(b.icmp_unsigned("!=", b.load(at(layout.cond_out)), I8(0)), going)
    _pass_body_status(k, body_status, going)
    b.store(b.add(i, k.index(1)), count)
    b.branch(header)
    b.position_at_end(done)
    _flag_overrun(k, going, count)
    for j, out in enumerate(k.outputs[:n_state]):
        if out is not None:
            _memcpy(k, out.ptr, b.load(cur[j]), state_bytes[j])
    final = b.load(count)
    for j, name in enumerate(body.outputs[1 + n_state:]):
        _write_dims(k, n_state + j, [final, *body.tensors[name].shape])
