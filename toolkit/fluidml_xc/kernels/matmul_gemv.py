"""The float32 GEMV of the SpacemiT X60 (RVV 1.0, VLEN 256, in-order dual issue) as a hand-scheduled machine-code
routine: a MatMul / Gemm of one row with B constant (every classifier), one panel of PANEL columns (packed K-major,
kernels/matmul_blocked.py `panels`) per call, the four LMUL-2 accumulators in registers over all of K.

A GEMV reads each weight once, so its loop is bound by the one vector load/store unit: a `vle32.v` of 16 floats
takes it 4 cycles (llvm-mca-22's SpacemitX60; 3 for 8 floats at LMUL 1, 8 / 16 for 32 / 64 at LMUL 4 / 8) against
2 cycles of the FP unit for the 16 multiply-adds, 50% of the FMA peak at best (docs/RISCV_KERNELS.md, "A GEMV on
RISC-V"). RVV loads take no offset and the in-order write-back rule stalls an `addi` issued right after a `vfmacc`
by 4 cycles, so LLVM's loop (an `addi` before each load) took 62 cycles per 12 loads. Here each load's slot is
`vle32.v`, the x value's `flw` (once per K step), the next load's address `addi`, then the multiply-add of the load
before: the `addi` waits only for the load (3 cycles, which the load unit spends anyway) and the load after the
multiply-add only 1, so a slot is the load unit's 4 cycles. STEPS K steps per loop iteration (28 loads); the loop's
pointer increments and branch cost about 2 cycles per iteration.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..target.arch import arch_of, riscv_vlen
from .scalar_tile import ENCODERS, IMMEDIATE, SYNTAX as TILE_SYNTAX, encode as encode_words, text as tile_text

SECTION = ".text.fxc_gemv"
"""The routines' section (the linker puts `.text.*` in the executable .text; benchmarks/mca.py reads it)."""
CPUS = {"spacemit-x60"}
"""The CPUs (LLVM's names) the routine is scheduled for."""
LANES, GROUPS = 16, 4
"""Floats per LMUL-2 register group at VLEN 256 (`vl`), groups per panel."""
PANEL = LANES * GROUPS
"""Columns per call: B's packed panel width the routine reads."""
STEPS = 7
"""K steps per loop iteration (28 loads: B's offsets and its increment within the 12-bit immediates)."""
VTYPE = 0xD1
"""e32, m2, tail and mask agnostic."""

X, B, X_END, OUT = 10, 11, 12, 13
"""The arguments (a0-a3): x (A's row), B's panel, x's end for the loop, the out buffer (PANEL floats)."""
ACC, LOADS = (0, 2, 4, 6), (8, 10, 12, 14)
"""Accumulator groups (one per 16 columns) and the groups the loads rotate through."""
TEMPS = (5, 6, 7, 28)
"""t0-t3: the next loads' addresses."""
XREGS = tuple(range(STEPS))
"""ft0-ft6: x's value of each K step of an iteration."""


def for_cpu(triple: str, cpu: str, features: str) -> bool:
    """The routine is scheduled for this CPU and its VLEN holds 16 floats in an LMUL-2 group."""
    return bool(triple) and arch_of(triple).riscv and cpu in CPUS and riscv_vlen(features) >= 256


def takes(k, dtype, kk, mr: int, widths: list[int], a_step: int, panel: int) -> bool:
    """The routine runs this outer_accumulate call: float32, one row, a static K, B packed in panels of PANEL
    columns, x's K stride within the loads' offsets over an iteration."""
    spec = k.spec
    return (spec is not None and for_cpu(spec.triple, spec.cpu, spec.features) and np.dtype(dtype) == np.float32
            and isinstance(kk, int) and kk > 0 and mr == 1 and panel == PANEL and sum(widths) <= PANEL
            and all(w == LANES for w in widths) and 0 < 4 * a_step * STEPS <= IMMEDIATE)


def program(kk: int, a_step: int) -> list[tuple]:
    """The routine for K = kk, x's values a_step floats apart: the PANEL sums stored to the out buffer."""
    loads_per_iteration = GROUPS * STEPS
    iterations, left = divmod(kk, STEPS)
    code: list[tuple] = [("addi", TEMPS[0], 0, LANES), ("vsetvli", 0, TEMPS[0], VTYPE)]
    code += [("vmv.v.i", v, 0) for v in ACC]

    def multiply_add(j: int, count: int) -> None:
        """The multiply-add of load j of a run of count (j < 0: of the loop's iteration before, from its end)."""
        j = j % count if j >= 0 else loads_per_iteration + j
        code.append(("vfmacc.vf", ACC[j % GROUPS], XREGS[j // GROUPS], LOADS[j % len(LOADS)]))

    def run(count: int, after_loop: bool, looping: bool) -> None:
        """count loads from B (x's steps from X): slot j is the load, the step's x, the next address, the
        multiply-add of load j - 1. The loop's last slot leaves its multiply-add to the next slot 0, after its load
        (a `bne` right after a multiply-add would wait for it): slot 0 after the loop does the loop's last two."""
        for j in range(count):
            code.append(("vle32.v", LOADS[j % len(LOADS)], B if j == 0 else TEMPS[j % len(TEMPS)], 0))
            if j == 0 and after_loop:
                multiply_add(-2, count)
            if j % GROUPS == 0:
                code.append(("flw", XREGS[j // GROUPS], X, 4 * a_step * (j // GROUPS)))
            if j + 1 < count:
                code.append(("addi", TEMPS[(j + 1) % len(TEMPS)], B, 4 * LANES * (j + 1)))
            elif looping:
                code.append(("addi", B, B, 4 * LANES * count))
            if j == count - GROUPS + 1 and looping:
                code.append(("addi", X, X, 4 * a_step * STEPS))
            if (j or after_loop) and not (looping and j == count - 1):
                multiply_add(j - 1, count)

    if iterations:
        # the first slot's multiply-adds of "the iteration before" add 0 x 0 to zero sums
        code += [("vmv.v.i", LOADS[(loads_per_iteration - q) % len(LOADS)], 0) for q in (1, 2)]
        code.append(("fmv.w.x", XREGS[STEPS - 1], 0))
        top = len(code)
        run(loads_per_iteration, True, True)
        code.append(("bne", X, X_END, top))
    if left:
        run(GROUPS * left, bool(iterations), False)
        multiply_add(GROUPS * left - 1, GROUPS * left)
    else:
        multiply_add(-2, loads_per_iteration)
        multiply_add(-1, loads_per_iteration)
    for g, acc in enumerate(ACC):
        if g:
            code.append(("addi", TEMPS[0], OUT, 4 * LANES * g))
        code.append(("vse32.v", acc, OUT if g == 0 else TEMPS[0], 0))
    return code + [("jalr", 0, 1, 0)]


def _v(funct6: int, funct3: int):
    """OP-V with vd, rs1 / imm, vs2 in llvm-mc's operand order (`vfmacc.vf vd, rs1, vs2`)."""
    return lambda vd, rs1, vs2: funct6 << 26 | 1 << 25 | vs2 << 20 | (rs1 & 0x1F) << 15 | funct3 << 12 | vd << 7 | 0x57


WORDS = {
    **ENCODERS,
    "vle32.v": lambda vd, rs1, imm: 1 << 25 | rs1 << 15 | 6 << 12 | vd << 7 | 0x07,
    "vse32.v": lambda vs3, rs1, imm: 1 << 25 | rs1 << 15 | 6 << 12 | vs3 << 7 | 0x27,
    "vsetvli": lambda rd, rs1, vtype: vtype << 20 | rs1 << 15 | 7 << 12 | rd << 7 | 0x57,
    "vfmacc.vf": _v(0x2C, 5),
    "vmv.v.i": lambda vd, imm: _v(0x17, 3)(vd, imm, 0),
}
"""RV64GCV's words of the routine's instructions (OP-V, unit-stride vector load and store, vsetvli)."""

SYNTAX = {**TILE_SYNTAX, "vle32.v": "v,x()", "vse32.v": "v,x()", "vsetvli": "xxi", "vfmacc.vf": "vfv", "vmv.v.i": "vi"}
"""Each mnemonic's operands for llvm-mc (v a vector register)."""


def encode(code: list[tuple]) -> list[int]:
    return encode_words(code, WORDS)


def text(code: list[tuple]) -> str:
    return tile_text(code, SYNTAX)


def slots(k, dtype, x, b_first, kk: int, a_step: int, widths: list[int]) -> list:
    """outer_accumulate's slots of one row (a stack vector per width, from the out buffer's first sum(widths) sums)."""
    out = accumulate(k, x, b_first, kk, a_step)
    return [k.local(k.vector_type(dtype, w), k.vload(out, dtype, k.index(sum(widths[:g])), w))
            for g, w in enumerate(widths)]


def accumulate(k, x, b_first, kk: int, a_step: int) -> ir.Value:
    """Run the routine over kk steps: x the float* of A's row at its first K step, b_first the float* of the
    panel's first K step (PANEL contiguous floats per step); the out buffer (PANEL floats) of the sums. The
    routine is machine code in SECTION (llvmlite's LLVM has no RISC-V assembler), one per K and stride, called with
    the lp64d convention (vector registers, vl and vtype are not preserved across calls)."""
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    ptr = f32.as_pointer()
    name = f"fxc.gemv.{PANEL}.k{kk}.a{a_step}"
    routine = k.module.globals.get(name)
    if routine is None:
        words = encode(program(kk, a_step))
        routine = ir.GlobalVariable(k.module, ir.ArrayType(i32, len(words)), name)
        routine.initializer = ir.Constant(routine.type.pointee, words)
        routine.global_constant, routine.linkage, routine.align = True, "private", 4
        routine.section = SECTION
    with k.b.goto_entry_block():
        out = k.b.alloca(ir.ArrayType(f32, PANEL))
    x_end = k.b.gep(x, [i64(kk // STEPS * STEPS * a_step)])
    fn_type = ir.FunctionType(ir.VoidType(), [ptr] * 4)
    k.b.call(k.b.bitcast(routine, fn_type.as_pointer()),
             [k.b.bitcast(x, ptr), k.b.bitcast(b_first, ptr), k.b.bitcast(x_end, ptr), k.b.bitcast(out, ptr)])
    return k.b.gep(out, [i32(0), i32(0)], inbounds=True)
