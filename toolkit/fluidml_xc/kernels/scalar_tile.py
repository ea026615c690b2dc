"""The float32 GEMM register tile of an in-order scalar RISC-V core (SiFive U74: RV64GC, dual issue, one FP pipe)
as a hand-scheduled machine-code routine, for the outer-product kernels (kernels/matmul_blocked.py
outer_accumulate: MatMul, Gemm, Winograd's GEMM, and the convs ops/conv/pointwise.py and im2col.py run as GEMMs).

An m x n tile keeps m A values and m x n accumulators in FP registers and reads B's panel (n columns per K step,
packed) one column at a time through two registers: the next column's `flw` goes right before this column's m
`fmadd.s`, the next step's A loads after its last column, so no multiply-add waits for its operand. On the U74
every load costs an issue cycle (an in-order core that writes back in order: docs/RISCV_KERNELS.md), so a step
costs m x n + m + n cycles: 5 x 5 (25 + 5 + 2 = 32 FP registers) gives 25 / 35 = 71.4% of peak, the best any tile of
the 32 registers allows. LLVM's scheduler does not keep this order (it hoists loads and increments where its own
model likes), hence `program`; the pointer increments go beside the last step's A loads and the branch ends the
loop, `steps` K steps per iteration (benchmarks/u74_tiles.py: 70.4% by llvm-mca-22 at 4 steps; docs/RISCV_KERNELS.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ..target.arch import arch_of, riscv_vlen

IMMEDIATE = 2047
"""The largest load offset RISC-V's 12-bit signed immediate holds."""


@dataclass(frozen=True)
class ScalarTile:
    rows: int
    """A values per K step, kept in FP registers (rows of C)."""
    cols: int
    """B values per K step, two registers in turn (columns of C: the packed panel's width)."""
    steps: int
    """K steps per loop iteration."""


SCALAR_TILES = {"sifive-u74": ScalarTile(5, 5, 4)}
"""CPU (LLVM's name) -> its hand-scheduled tile; other scalar RISC-V CPUs take LLVM's schedule of the generic one."""


def scalar_tile(triple: str, cpu: str, features: str) -> ScalarTile | None:
    """The tile for a scalar RISC-V CPU (no V) that has one, else None (also when the features take away the F or D
    extension the routine's flw/fld/fsd need)."""
    if not triple or not arch_of(triple).riscv or riscv_vlen(features) or {"-f", "-d"} & set(features.split(",")):
        return None
    return SCALAR_TILES.get(cpu)


def kernel_tile(k) -> ScalarTile | None:
    """scalar_tile for the machine the kernel is emitted for."""
    spec = k.spec
    return None if spec is None else scalar_tile(spec.triple, spec.cpu, spec.features)


def takes(k, dtype, kk, mr: int, widths: list[int], a_step: int, b_step: int) -> bool:
    """The kernel's tile runs this outer_accumulate call: float32, a static K, the tile's rows and columns, A's K
    stride (elements) within the loads' immediate offsets and B's positive (larger ones go in a register)."""
    tile = kernel_tile(k)
    return (tile is not None and np.dtype(dtype) == np.float32 and isinstance(kk, int) and kk > 0 and mr == tile.rows
            and sum(widths) == tile.cols and (tile.steps + 1) * 4 * abs(a_step) <= IMMEDIATE and b_step > 0)


def register_step(tile: ScalarTile, b_step: int) -> bool:
    """B's K stride (elements) is too long for the loads' offsets over an iteration: a register adds it each step."""
    return (tile.steps + 1) * 4 * b_step + 4 * tile.cols > IMMEDIATE


Insn = tuple
"""(mnemonic, operands...): registers as numbers (x or f by the mnemonic), offsets and immediates as ints; a
branch's target is the index of an instruction."""

A_REGS, B_REG, B_END, OUT = (10, 11, 12, 13, 14), 15, 16, 17
"""The routine's arguments (lp64d: a0-a7): the A row pointers, B's pointer, B's end for the loop, the out buffer;
B's K stride in bytes, when in a register (register_step), is the ninth, on the stack, loaded into STEP."""
STEP, NEXT = 5, 6
"""t0, and t1: with the stride in a register, B's pointers at even and odd K steps are a5 and t1, each moved two
steps on beside the A loads of the step before it is next needed."""
SAVED = (8, 9, *range(18, 28))
"""fs0-fs11: the FP registers a callee keeps (lp64d); the tile uses all 32."""


def program(tile: ScalarTile, kk: int, a_step: int, b_step: int) -> list[Insn]:
    """The tile's routine for K = kk, A's rows a_step and B's rows b_step floats apart between K steps: the m x n
    sums stored row-major to the out buffer."""
    m, n, steps = tile.rows, tile.cols, tile.steps
    assert steps * n % 2 == 0, "each iteration starts on B's first register"
    a_bytes, b_bytes = 4 * a_step, 4 * b_step
    areg, breg, acc = list(range(m)), [m, m + 1], list(range(m + 2, m + 2 + m * n))
    aptr, in_register, bptr = A_REGS[:m], register_step(tile, b_step), (B_REG, NEXT)
    moved = {p: 0 for p in [*aptr, B_REG]}
    code: list[Insn] = [("ld", STEP, 2, 0)] if in_register else []
    code += [("addi", 2, 2, -8 * len(SAVED))] + [("fsd", f, 2, 8 * q) for q, f in enumerate(SAVED)]

    def load(reg: int, ptr: int, offset: int) -> None:
        code.append(("flw", reg, ptr, offset - moved[ptr]))

    def advance(ptr: int, by: int) -> None:
        code.append(("addi", ptr, ptr, by))
        moved[ptr] += by

    def steps_of(count: int, looping: bool) -> None:
        """count K steps from the pointers; the last one's prefetch only when looping (which moves them)."""
        col = 0
        for s in range(count):
            last = s == count - 1
            for j in range(n):
                if j < n - 1 or not last or looping:
                    nk, nj = (s, j + 1) if j < n - 1 else (s + 1, 0)
                    if in_register:
                        code.append(("flw", breg[(col + 1) % 2], bptr[nk % 2], 4 * nj))
                    else:
                        load(breg[(col + 1) % 2], B_REG, b_bytes * nk + 4 * nj)
                code.extend(("fmadd.s", acc[i * n + j], areg[i], breg[col % 2], acc[i * n + j]) for i in range(m))
                col += 1
            if last and not looping:
                break
            for i in range(m):
                load(areg[i], aptr[i], a_bytes * (s + 1))
                if in_register and i == 1:  # the step after next's pointer, beside the A loads
                    code.append(("add", bptr[s % 2], bptr[(s + 1) % 2], STEP))
                if last:
                    advance(aptr[i], a_bytes * count)
                    if i == 0 and not in_register:
                        advance(B_REG, b_bytes * count)
        for p in moved:
            moved[p] = 0

    code.extend(("fmv.w.x", r, 0) for r in acc)
    for i in range(m):
        load(areg[i], aptr[i], 0)
    load(breg[0], B_REG, 0)
    if in_register:
        code.append(("add", NEXT, B_REG, STEP))
    iterations = (kk - 1) // steps
    if iterations:
        top = len(code)
        steps_of(steps, True)
        code.append(("bne", B_REG, B_END, top))
    steps_of(kk - iterations * steps, False)
    code.extend(("fsw", r, OUT, 4 * q) for q, r in enumerate(acc))
    code.extend(("fld", f, 2, 8 * q) for q, f in enumerate(SAVED))
    return code + [("addi", 2, 2, 8 * len(SAVED)), ("jalr", 0, 1, 0)]


SYNTAX = {"flw": "f,x()", "fld": "f,x()", "fsw": "f,x()", "fsd": "f,x()", "ld": "x,x()", "fmadd.s": "ffff",
          "fmv.w.x": "fx", "add": "xxx", "addi": "xxi", "jalr": "xxi"}
"""Each mnemonic's operands for llvm-mc: f / x registers, i an immediate, "x()" an offset(base) pair."""


def text(code: list[Insn], syntax: dict[str, str] = SYNTAX) -> str:
    """The routine as assembly (llvm-mc syntax; labels .L<index>; kinds: f / x / v registers, i an immediate, m a
    vector mask `v0.t`)."""
    targets = {insn[3] for insn in code if insn[0] == "bne"}
    lines = []
    for at, (op, *ops) in enumerate(code):
        if at in targets:
            lines.append(f".L{at}:")
        if op == "bne":
            lines.append(f"bne x{ops[0]}, x{ops[1]}, .L{ops[2]}")
            continue
        kinds = syntax[op]
        if kinds.endswith("()"):
            lines.append(f"{op} {kinds[0]}{ops[0]}, {ops[2]}(x{ops[1]})")
        else:
            lines.append(f"{op} " + ", ".join(str(v) if kind == "i" else f"v{v}.t" if kind == "m" else f"{kind}{v}"
                                              for kind, v in zip(kinds, ops)))
    return "\n".join(lines) + "\n"


def i_type(opcode: int, funct3: int, rd: int, rs1: int, imm: int) -> int:
    """An I-type instruction word (loads, immediates)."""
    assert -2048 <= imm < 2048, imm
    return (imm & 0xFFF) << 20 | rs1 << 15 | funct3 << 12 | rd << 7 | opcode


def s_type(opcode: int, funct3: int, rs2: int, rs1: int, imm: int) -> int:
    """An S-type instruction word (stores)."""
    assert -2048 <= imm < 2048, imm
    return (imm >> 5 & 0x7F) << 25 | rs2 << 20 | rs1 << 15 | funct3 << 12 | (imm & 0x1F) << 7 | opcode


def b_type(rs1: int, rs2: int, imm: int) -> int:
    """`bne rs1, rs2, imm` (B-type)."""
    assert -4096 <= imm < 4096 and imm % 2 == 0, imm
    return ((imm >> 12 & 1) << 31 | (imm >> 5 & 0x3F) << 25 | rs2 << 20 | rs1 << 15 | 1 << 12 | (imm >> 1 & 0xF) << 8
            | (imm >> 11 & 1) << 7 | 0x63)


ENCODERS = {
    "flw": lambda rd, rs1, imm: i_type(0x07, 2, rd, rs1, imm),
    "fld": lambda rd, rs1, imm: i_type(0x07, 3, rd, rs1, imm),
    "ld": lambda rd, rs1, imm: i_type(0x03, 3, rd, rs1, imm),
    "add": lambda rd, rs1, rs2: rs2 << 20 | rs1 << 15 | rd << 7 | 0x33,
    "fsw": lambda rs2, rs1, imm: s_type(0x27, 2, rs2, rs1, imm),
    "fsd": lambda rs2, rs1, imm: s_type(0x27, 3, rs2, rs1, imm),
    "addi": lambda rd, rs1, imm: i_type(0x13, 0, rd, rs1, imm),
    "jalr": lambda rd, rs1, imm: i_type(0x67, 0, rd, rs1, imm),
    "fmadd.s": lambda rd, rs1, rs2, rs3: rs3 << 27 | rs2 << 20 | rs1 << 15 | 7 << 12 | rd << 7 | 0x43,
    "fmv.w.x": lambda rd, rs1: 0x78 << 25 | rs1 << 15 | rd << 7 | 0x53,
}
"""RV64GC's 32-bit encodings (the unprivileged ISA's I, S, B and R4 formats; fmadd.s with the dynamic rounding mode)."""


def encode(code: list[Insn], words: dict = ENCODERS) -> list[int]:
    """The routine's instruction words (`words`: each mnemonic's encoder)."""
    return [b_type(ops[0], ops[1], 4 * (ops[2] - at)) if op == "bne" else words[op](*ops)
            for at, (op, *ops) in enumerate(code)]


def accumulate(k, a_rows: list, b_first, kk: int, a_step: int, b_step: int) -> list:
    """Run the kernel's tile over kk steps: a_rows the float* of each A row's first K step, b_first the float* of
    B's first step (n contiguous floats per step, b_step apart); the m x n sums as float values, row-major. The
    routine is machine code in a text section of the module (llvmlite's LLVM has no RISC-V assembler for inline
    asm), one per loop-or-not, steps after the loop and strides (B's end ends the loop), called with the lp64d
    convention."""
    tile = kernel_tile(k)
    m, n, steps = tile.rows, tile.cols, tile.steps
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    ptr, in_register = f32.as_pointer(), register_step(tile, b_step)
    fn_type = ir.FunctionType(ir.VoidType(), [ptr] * (m + 3) + [i64] * in_register)
    iterations = (kk - 1) // steps
    loop, left = ("loop." if iterations else ""), kk - iterations * steps
    name = f"fxc.scalar_tile.{m}x{n}.{loop}k{left}.a{a_step}.b{'reg' if in_register else b_step}"
    routine = k.module.globals.get(name)
    if routine is None:
        words = encode(program(tile, kk, a_step, b_step))
        routine = ir.GlobalVariable(k.module, ir.ArrayType(i32, len(words)), name)
        routine.initializer = ir.Constant(routine.type.pointee, words)
        routine.global_constant, routine.linkage, routine.align = True, "private", 4
        routine.section = ".text.fxc_scalar_tile"
    with k.b.goto_entry_block():
        out = k.b.alloca(ir.ArrayType(f32, m * n))
    b_end = k.b.gep(b_first, [i64(iterations * steps * b_step)])
    k.b.call(k.b.bitcast(routine, fn_type.as_pointer()),
             [*(k.b.bitcast(a, ptr) for a in a_rows), k.b.bitcast(b_first, ptr), b_end, k.b.bitcast(out, ptr),
              *[i64(4 * b_step)] * in_register])
    return [k.b.load(k.b.gep(out, [i32(0), i32(q)], inbounds=True)) for q in range(m * n)]
