"""The float32 3x3 depthwise conv of an in-order scalar RISC-V core (the SiFive U74 of kernels/scalar_tile.py) as a
hand-scheduled machine-code routine: one channel, a band of up to 3 output rows over a whole row width.

A rolling window over the input columns: each column of the band (rows + 2 input rows) is loaded once into FP
registers and feeds the 9 x rows multiply-adds of the three output columns that use it (kw = 2 finishes one, kw = 1
continues one, kw = 0 starts one from the bias); the 9 weights stay in registers, 3 x rows accumulators are in
flight. Per 3 x 3 pixels: 27 `fmadd.s` against 5 `flw`, 3 stores and the Clip. The U74 writes back in order (an
`flw`, integer op or store right after an `fmadd.s` waits for its write-back: docs/RISCV_KERNELS.md), so each
column's loads, the Clip of the column finished before and the stores of the one before that are one block
between two runs of 27 multiply-adds, FP-pipe and load/store-pipe instructions in pairs.

The fused Clip keeps ONNX's NaN: `fmax.s` / `fmin.s` return the number when one operand is NaN, so `feq.s x, x`
(0 for NaN) minus 1 is ORed into the result's bits (all ones: a NaN) and the word is stored with `sw`
(`fmax.s` orders -0 below +0: Clip(-0.0, 0, 6) = +0.0). Per pixel that is 4 FP-pipe instructions beside the 9
multiply-adds: at most 9 / 13 = 69% of the multiply-add peak (llvm-mca-22: 62% in the loop; 74% without an
activation), docs/RISCV_KERNELS.md "Depthwise on RISC-V".
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .scalar_tile import ENCODERS, IMMEDIATE, SAVED, _b, kernel_tile

ROWS = 3
"""Output rows per band: 9 weights + 3 x 3 accumulators + 5 inputs + 3 clipped values + zero, bias and bounds."""

WEIGHTS, ZERO, BIAS, LOW, HIGH = range(9), 9, 10, 11, 12
INPUTS, ACCS, CLIPPED = range(13, 13 + ROWS + 2), range(18, 18 + 3 * ROWS), range(27, 27 + ROWS)
X, OUT, W_PTR, END = 10, 11, 12, 13
"""Integer arguments (lp64d): the band's first input row at column 0, the first output row, the 9 weights; END
is the loop's end for X. The bias and the bounds come in fa0-fa2 (BIAS, LOW, HIGH)."""
MASK, BITS = (5, 6, 7), (14, 15, 16)
"""t0-t2: feq.s of a pixel's sum, then minus 1; a4-a6: the clipped value's bits ORed with it."""


@dataclass(frozen=True)
class Band:
    rows: int
    """Output rows (1 to ROWS)."""
    width: int
    """Input columns."""
    left: int
    right: int
    """Zero columns before and after the input row (the padding): output columns = width + left + right - 2."""
    zero_rows: frozenset
    """Band rows (0 .. rows + 1) outside the input (the padding): zeros, never loaded."""
    x_row: int
    out_row: int
    """Bytes between input rows and between output rows."""
    low: bool
    high: bool
    """The activation's bounds (a Relu: low only); both False and `clip` False: the sums are stored as they are."""
    clip: bool

    @property
    def out_width(self) -> int:
        return self.width + self.left + self.right - 2


def fits(band: Band) -> bool:
    """Every load and store offset of the routine within the 12-bit immediates."""
    return ((band.rows + 1) * band.x_row + 4 * band.width + 12 <= IMMEDIATE
            and (band.rows - 1) * band.out_row + 4 * band.out_width + 12 <= IMMEDIATE and band.out_width >= 1)


def activation(epilogue) -> tuple[bool, float | None, float | None] | None:
    """(clip, low, high) of a fused Epilogue (kernels/epilogue.py) in the routine's form, None when it has none."""
    if epilogue is None:
        return False, None, None
    if epilogue.residual:
        return None
    if epilogue.activation is None:
        return False, None, None
    if epilogue.activation == "relu":
        return True, 0.0, None
    if epilogue.activation == "clip":
        low, high = epilogue.bounds
        return (low is not None or high is not None), low, high
    return None


def bands(h: int, width: int, oh_count: int, ow_count: int, top: int, left: int, x_row: int, out_row: int,
          epilogue) -> list[Band] | None:
    """The bands of a stride-1 3 x 3 depthwise plane (h x width in, oh_count x ow_count out, rows x_row / out_row
    elements apart), top to bottom, or None when the routine does not take it (padding over 2, an activation it
    has no form for, offsets past the immediates)."""
    act = activation(epilogue)
    right = ow_count + 2 - width - left
    if act is None or not (0 <= top <= 2 and 0 <= left <= 2 and 0 <= right <= 2):
        return None
    clip, low, high = act
    out = [Band(min(ROWS, oh_count - oh0), width, left, right,
                frozenset(r for r in range(min(ROWS, oh_count - oh0) + 2) if not 0 <= oh0 - top + r < h),
                4 * x_row, 4 * out_row, low is not None, high is not None, clip) for oh0 in range(0, oh_count, ROWS)]
    return out if all(fits(b) for b in out) else None


PIXEL_CYCLES = {False: 110 / 9, True: 132 / 9}
"""llvm-mca-22 cycles per output pixel of the band loop (3 columns of 3 rows, docs/RISCV_KERNELS.md): without an
activation, with the Clip (or Relu)."""
BAND_CYCLES = 40
"""Cycles of a band's call outside the loop: the 12 FP registers saved and restored, the 9 weights loaded."""


def plane_cycles(plane: list[Band]) -> float:
    """The cost model's cycles for one channel's bands."""
    return sum(BAND_CYCLES + b.rows * b.out_width * PIXEL_CYCLES[b.clip] for b in plane)


Insn = tuple


def program(band: Band) -> list[Insn]:
    """The routine: out[r][o] = act(bias + sum over kh, kw of w[kh][kw] x[r + kh][o + kw - left]) for the band."""
    R, ncols, ow = band.rows, band.width + band.left + band.right, band.out_width
    moved = {X: 0, OUT: 0}
    code: list[Insn] = [("addi", 2, 2, -8 * len(SAVED))] + [("fsd", f, 2, 8 * q) for q, f in enumerate(SAVED)]
    code += [("flw", w, W_PTR, 4 * w) for w in WEIGHTS] + [("fmv.w.x", ZERO, 0)]

    def acc(o: int, r: int) -> int:
        return ACCS[o % 3 * R + r]

    def block(b: int, last_of_loop: bool) -> list[Insn]:
        """The instructions between the multiply-adds of columns b - 1 and b: the stores of output column b - 4,
        the Clip of b - 3, the loads of column b (and the loop's increments)."""
        stage2, stage1 = [], []
        if band.clip and 0 <= b - 4 < ow:
            stage2 = [[("fmv.x.w", BITS[r], CLIPPED[r]), ("addi", MASK[r], MASK[r], -1)] for r in range(R)]
        if band.clip and 0 <= b - 3 < ow:
            o = b - 3
            first = [("fmax.s", CLIPPED[r], acc(o, r), LOW) if band.low else ("fmin.s", CLIPPED[r], acc(o, r), HIGH)
                     for r in range(R)]
            second = [("fmin.s", CLIPPED[r], CLIPPED[r], HIGH) for r in range(R)] if band.low and band.high else []
            stage1 = [first, second, [("feq.s", MASK[r], acc(o, r), acc(o, r)) for r in range(R)]]
        x = b - band.left
        loads = ([("flw", INPUTS[k], X, 4 * x + k * band.x_row - moved[X]) for k in range(R + 2)
                  if k not in band.zero_rows] if b < ncols and 0 <= x < band.width else [])
        out: list[Insn] = [i for pair in stage2 for i in pair]
        pipe_a = loads + ([("or", BITS[r], BITS[r], MASK[r]) for r in range(R)] if stage2 else [])
        pipe_b = [i for part in stage1 for i in part]
        if last_of_loop:
            pipe_a += [("addi", p, p, 12) for p in (X, OUT)]
        held = []
        for q in range(max(len(pipe_a), len(pipe_b))):
            for insn in pipe_a[q:q + 1] + pipe_b[q:q + 1]:
                # a pixel's feq.s overwrites the mask the stores' or still reads: after that or
                waits = insn[0] == "feq.s" and stage2 and ("or", BITS[MASK.index(insn[1])], BITS[MASK.index(insn[1])],
                                                           insn[1]) not in out
                (held if waits else out).append(insn)
                if insn[0] == "or":
                    out += [h for h in held if h[1] == insn[3]]
                    held = [h for h in held if h[1] != insn[3]]
        out += held
        if last_of_loop:
            moved[X] += 12
            moved[OUT] += 12
        if stage2:
            o = b - 4
            out += [("sw", BITS[r], OUT, 4 * o + r * band.out_row - moved[OUT]) for r in range(R)]
        elif not band.clip and 0 <= b - 3 < ow:
            o = b - 3
            out += [("fsw", acc(o, r), OUT, 4 * o + r * band.out_row - moved[OUT]) for r in range(R)]
        return out

    def column(b: int) -> list[Insn]:
        """Column b's multiply-adds: kernel row by kernel row, the finishing, continuing and starting outputs."""
        if b >= ncols:
            return []
        x = b - band.left
        pad = not 0 <= x < band.width
        out = []
        for kh in range(3):
            for kw in (2, 1, 0):
                o = b - kw
                if not 0 <= o < ow:
                    continue
                for r in range(R):
                    src = ZERO if pad or r + kh in band.zero_rows else INPUTS[r + kh]
                    addend = BIAS if kw == 0 and kh == 0 else acc(o, r)
                    out.append(("fmadd.s", acc(o, r), WEIGHTS[3 * kh + kw], src, addend))
        return out

    first, hi = 4, min(band.width + band.left, ow)
    iterations = max(0, hi - first) // 3 if hi - first >= 6 else 0
    b = 0
    while b < ncols + 2:
        if iterations and b == first:
            code.append(("addi", END, X, 12 * iterations))
            top = len(code)
            for j in range(3):
                code += block(b + j, j == 2) + column(b + j)
            code.append(("bne", X, END, top))
            moved[X] = moved[OUT] = 12 * iterations
            b += 3 * iterations
            continue
        code += block(b, False) + column(b)
        b += 1
    code += [("fld", f, 2, 8 * q) for q, f in enumerate(SAVED)]
    return code + [("addi", 2, 2, 8 * len(SAVED)), ("jalr", 0, 1, 0)]


def _r(funct7: int, funct3: int, opcode: int):
    return lambda rd, rs1, rs2: funct7 << 25 | rs2 << 20 | rs1 << 15 | funct3 << 12 | rd << 7 | opcode


WORDS = {
    **ENCODERS,
    "fmax.s": _r(0x14, 1, 0x53), "fmin.s": _r(0x14, 0, 0x53), "feq.s": _r(0x50, 2, 0x53), "or": _r(0, 6, 0x33),
    "fmv.x.w": lambda rd, rs1: 0x70 << 25 | rs1 << 15 | rd << 7 | 0x53,
    "sw": lambda rs2, rs1, imm: ENCODERS["fsw"](rs2, rs1, imm) & ~0x7F | 0x23,
}
"""RV64GC's words of the routine's instructions (R format for the FP min / max / compare, sw as fsw's S format)."""

SYNTAX = {"flw": "f,x()", "fld": "f,x()", "fsw": "f,x()", "fsd": "f,x()", "sw": "x,x()", "fmadd.s": "ffff",
          "fmax.s": "fff", "fmin.s": "fff", "feq.s": "xff", "fmv.x.w": "xf", "fmv.w.x": "fx", "or": "xxx",
          "addi": "xxi", "jalr": "xxi"}
"""Each mnemonic's operands for llvm-mc: f / x registers, i an immediate, "x()" an offset(base) pair."""


def encode(code: list[Insn]) -> list[int]:
    """The routine's instruction words."""
    return [_b(ops[0], ops[1], 4 * (ops[2] - at)) if op == "bne" else WORDS[op](*ops) for at, (op, *ops) in enumerate(code)]


def text(code: list[Insn]) -> str:
    """The routine as assembly (llvm-mc syntax; labels .L<index>)."""
    targets = {insn[3] for insn in code if insn[0] == "bne"}
    lines = []
    for at, (op, *ops) in enumerate(code):
        if at in targets:
            lines.append(f".L{at}:")
        if op == "bne":
            lines.append(f"bne x{ops[0]}, x{ops[1]}, .L{ops[2]}")
            continue
        kinds = SYNTAX[op]
        if kinds.endswith("()"):
            lines.append(f"{op} {kinds[0]}{ops[0]}, {ops[2]}(x{ops[1]})")
        else:
            lines.append(f"{op} " + ", ".join(str(v) if kind == "i" else f"{kind}{v}" for kind, v in zip(kinds, ops)))
    return "\n".join(lines) + "\n"


def takes(k) -> bool:
    """The kernel is emitted for a CPU with the hand-scheduled tiles (kernels/scalar_tile.py)."""
    return kernel_tile(k) is not None


def call(k, band: Band, x_ptr, out_ptr, w_ptr, bias, low: float, high: float) -> None:
    """Run the band's routine (machine code in the module's `.text.fxc_scalar_tile` section, one per band shape)
    on one channel: x_ptr the band's first input row at column 0, out_ptr its first output row, w_ptr the 9
    weights, bias a float value."""
    f32, i32 = ir.FloatType(), ir.IntType(32)
    ptr = f32.as_pointer()
    fn_type = ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr, f32, f32, f32])
    rows = "".join(str(r) for r in sorted(band.zero_rows))
    name = (f"fxc.depthwise_tile.r{band.rows}.w{band.width}.p{band.left}{band.right}.z{rows}.s{band.x_row}.{band.out_row}"
            f".{'c' if band.clip else ''}{'l' if band.low else ''}{'h' if band.high else ''}")
    routine = k.module.globals.get(name)
    if routine is None:
        words = encode(program(band))
        routine = ir.GlobalVariable(k.module, ir.ArrayType(i32, len(words)), name)
        routine.initializer = ir.Constant(routine.type.pointee, words)
        routine.global_constant, routine.linkage, routine.align = True, "private", 4
        routine.section = ".text.fxc_scalar_tile"
    k.b.call(k.b.bitcast(routine, fn_type.as_pointer()),
             [k.b.bitcast(x_ptr, ptr), k.b.bitcast(out_ptr, ptr), k.b.bitcast(w_ptr, ptr), bias,
              ir.Constant(f32, low), ir.Constant(f32, high)])
