"""FusedElementwise (domain "fluidml"): a chain or tree of elementwise ops evaluated in one pass over memory.

Made by passes/elementwise_fusion.py. `node.attrs["program"]` is a list of steps, evaluated per output
element in order; the last step is the output. A step is

    {"op": ONNX op type, "args": [ref, ...], "dtype": numpy name of its result, "attrs": {ONNX attrs}}

and a ref is ["in", i] (fused input i, numpy-broadcast against the output shape), ["step", j] (an
earlier step's value) or ["imm", value, dtype] (a build-time scalar constant, emitted as an immediate).
The scalar lowerings are the elementwise family's own (ops/elementwise.py's UNARY/BINARY/COMPARE
tables), so a fused op computes exactly what the separate ops would, with ONNX's intermediate dtypes
(comparisons give bool, Cast converts).

In place: fused input 0 is, whenever the fusion found one, an activation of the output's shape; element
i of it is read only to compute output element i, before that element is stored, so the planner may
let the output overwrite it (it checks shapes, item sizes and layouts).
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
from llvmlite import ir

from ..dtypes import compute_dtype
from ..kernels import lowp
from ..kernels.flat import flat_elementwise
from ..kernels.kernel import Operand, element_work
from ..kernels.scalar import const
from .elementwise import BINARY, COMPARE, UNARY, ieee_add, power, constant_power
from ..opspec import FUSED_OP, OUR_DOMAIN, register

VARIADIC = ("Sum", "Max", "Min", "Mean")


class _StepKernel:
    """The fused op's kernel as one step's scalar lowering sees it: k.attr reads the step's own ONNX attributes."""

    def __init__(self, k, attrs: dict):
        self._k, self._attrs = k, attrs

    def attr(self, name, default=None):
        return self._attrs.get(name, default)

    def __getattr__(self, name):
        return getattr(self._k, name)


def _combine(op: str):
    if op in ("Sum", "Mean"):
        return ieee_add
    if op == "Max":
        return lambda k, dt, a, b: k.s.maximum(dt, a, b)
    return lambda k, dt, a, b: k.s.minimum(dt, a, b)


def eval_step(k, step: dict, args: list, dts: list):
    """LLVM value of one program step from its argument values and their dtypes; a step whose dtype is
    storage-only (bfloat16, float8, int4, ...) gives the value its stored element would hold."""
    value = _eval_step(k, step, args, dts)
    out_dt = np.dtype(step["dtype"])
    if lowp.is_lowp(out_dt) and step["op"] not in ("Cast", "CastLike"):
        value = lowp.round_to(k.b, out_dt, value)
    return value


def _eval_step(k, step: dict, args: list, dts: list):
    op = step["op"]
    out_dt = np.dtype(step["dtype"])
    sk = _StepKernel(k, step.get("attrs", {}))
    dt = dts[0]
    if op in UNARY:
        return UNARY[op](sk, dt, args[0])
    if op in BINARY:
        return BINARY[op](sk, dt, args[0], args[1])
    if op in COMPARE:
        return k.s.to_bool(k.s.cmp(dt, COMPARE[op], args[0], args[1]))
    if op == "Where":
        return k.b.select(k.b.trunc(args[0], ir.IntType(1)), args[1], args[2])
    if op in ("Cast", "CastLike"):
        if sk.attr("_astype"):
            return lowp.round_to(k.b, out_dt, k.s.cast(dt, compute_dtype(out_dt), args[0]))
        mode = sk.attr("round_mode", "up")
        return k.s.cast(dt, out_dt, args[0], bool(sk.attr("saturate", 1)), mode.decode() if isinstance(mode, bytes) else mode)
    if op == "Clip":  # args: x, then the bounds present (attrs say which)
        x, rest = args[0], list(args[1:])
        lo = rest.pop(0) if step["attrs"].get("has_min") else None
        hi = rest.pop(0) if step["attrs"].get("has_max") else None
        return k.s.clamp(dt, x, lo, hi)
    if op == "Pow":
        exponent = step.get("attrs", {}).get("exponent")
        powered = constant_power(k, dt, args[0], exponent) if exponent is not None else None
        return powered if powered is not None else power(k, dt, args[0], args[1], dts[1])
    if op in VARIADIC:
        combine = _combine(op)
        acc = args[0]
        for v in args[1:]:
            acc = combine(k, out_dt, acc, v)
        if op == "Mean":
            acc = k.b.fdiv(acc, const(out_dt, len(args)))
        return acc
    raise NotImplementedError(f"FusedElementwise cannot evaluate {op}")


def ref_dtype(ref, input_dtypes: list, step_dtypes: list) -> np.dtype:
    kind = ref[0]
    if kind == "in":
        return np.dtype(input_dtypes[ref[1]])
    if kind == "step":
        return np.dtype(step_dtypes[ref[1]])
    return np.dtype(ref[2])


@register(FUSED_OP, domain=OUR_DOMAIN, inplace=True, notes="fused chain of elementwise ops (passes/elementwise_fusion.py)",
          elementwise=True, lowp_native=True, heavy=False, runtime_extents=True)
def lower_fused(k):
    program = k.attr("program")
    out = k.outputs[0]
    ins = [op for op in k.inputs if op is not None]
    in_dts = [op.dtype for op in ins]
    step_dts = [np.dtype(s["dtype"]) for s in program]
    domain, capacity = k.domain(out, ins)

    def body(values, idx):
        results: list = []
        for step in program:
            args, dts = [], []
            for ref in step["args"]:
                if ref[0] == "in":
                    args.append(values[ref[1]])
                elif ref[0] == "step":
                    args.append(results[ref[1]])
                else:
                    args.append(const(ref[2], ref[1]))
                dts.append(ref_dtype(ref, in_dts, step_dts))
            results.append(eval_step(k, step, args, dts))
        return [results[-1]]
    def emit(operands):
        k.generic(domain, [out.identity_access()], [op.broadcast_access(out.shape) for op in operands], body,
                  capacity=capacity)
    k.point_work = element_work(step["op"] for step in program)
    if flat_elementwise(k, out, ins, lambda values: body(values, None), in_place_first=True):
        return

    first = ins[0] if ins else None
    if (first is None or first.value is not None or first.shape != out.shape or first.strides != out.strides
            or np.dtype(first.dtype).itemsize != np.dtype(out.dtype).itemsize or out.size < 2):
        emit(ins)
        return
    # In place (the planner let the output overwrite input 0) the two pointers are equal, but LLVM sees two
    # arguments that may alias and guards its vector loop with an overlap check that then always fails:
    # when they are equal, run a copy of the loop that reads input 0 through the output's pointer, which
    # LLVM's dependence analysis proves element-wise (same address read, then written) and vectorizes.
    i64 = ir.IntType(64)
    # both copies run the same chunk of the same parallel split (Kernel.outer_chunk)
    sizes = capacity or domain
    order = sorted(range(len(sizes)), key=lambda d: -abs(out.identity_access().strides[d]))
    plan = k.split_plan(sizes, order, k.generic_work(sizes, len(ins)))
    with (k.parallel_tiles([plan[2]], k.generic_work(sizes, len(ins))) if plan and k.tile_range is not None
          else nullcontext(None)) as chunk:
        if chunk is not None and k._in_region:
            k.outer_chunk = (chunk[0], plan[2])
        same = k.b.icmp_unsigned("==", k.b.ptrtoint(first.ptr, i64), k.b.ptrtoint(out.ptr, i64))
        with k.b.if_else(same) as (aliased, separate):
            with aliased:
                through_out = Operand(first.name, first.dtype, first.shape, first.strides,
                                      k.b.bitcast(out.ptr, first.ptr.type), None)
                emit([through_out] + ins[1:])
            with separate:
                emit(ins)
        k.outer_chunk = None
