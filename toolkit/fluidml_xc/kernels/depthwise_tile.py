"""The float32 3x3 depthwise conv of an in-order scalar RISC-V core (the SiFive U74 of kernels/scalar_tile.py) as a
hand-scheduled machine-code routine (section SECTION): one channel, a band of up to 3 output rows over a whole row width.

A rolling window over the input columns: each column of the band (rows + 2 input rows) is loaded once into FP
registers and feeds the 9 x rows multiply-adds of the three output columns that use it (kw = 2 finishes one, kw = 1
continues one, kw = 0 starts one from the bias); the 9 weights stay in registers, 3 x rows accumulators are in
flight. Per 3 x 3 pixels: 27 `fmadd.s` against 5 `flw`, 3 stores and the Clip. The U74 writes back in order (an
`flw`, integer op or store right after an `fmadd.s` waits for its write-back: docs/RISCV_KERNELS.md), so each
column's loads, the Clip of the column finished before and the stores of the one before that are one block
between two runs of 27 multiply-adds, FP-pipe and load/store-pipe instructions in pairs.

The exact Clip keeps ONNX's NaN: `fmax.s` / `fmin.s` return the number when one operand is NaN, so `feq.s x, x`
(0 for NaN) minus 1 is ORed into the result's bits (all ones: a NaN) and the word is stored with `sw`
(`fmax.s` orders -0 below +0: Clip(-0.0, 0, 6) = +0.0). Per pixel that is 4 FP-pipe instructions beside the 9
multiply-adds: 61% of the multiply-add peak by llvm-mca-22.

A band with a Clip first runs the checked form: `fmax.s` / `fmin.s` alone, in place, and the sum stored by `fsw`;
per 3 output columns one `fmadd.s` of the sums of rows 0 and R - 1 of one column into a check value (CHECK, from
+0.0), which becomes non-finite when either is and stays so. A NaN sum needs a non-finite input, weight or bias (a
chain of multiply-adds of finite values overflows to an infinity of one sign at worst), and any non-finite input in
the band's rows reaches every output column of row 0 (input rows 0-2) or R - 1 (rows R - 1 to R + 1) it feeds, 3
consecutive columns (fewer only at the edges, checked column by column): so a NaN anywhere leaves the check non-finite.
The routine returns `fclass.s` of it masked to the infinities and NaNs (a0), and the caller runs the exact routine
over the band when it is not 0 (an infinity or an overflow also does: same result, the exact cost). 71-72% of
peak by llvm-mca-22 (docs/RISCV_KERNELS.md "The U74's depthwise band").

NCHW rows are offsets from one input and one output pointer; rows farther apart (channels-last) each take a pointer
(`mode`), or, in the checked form, rows close and columns far apart share one moved a column every block."""
from __future__ import annotations

from functools import partial

import functools
from dataclasses import dataclass

from llvmlite import ir

from .scalar_tile import ENCODERS, IMMEDIATE, SAVED, SYNTAX as TILE_SYNTAX, encode as encode_words, i_type, kernel_tile, s_type, text as tile_text

ROWS = 3
"""Output rows per band: 9 weights + 3 x 3 accumulators + 5 inputs + 3 clipped values + zero, bias and bounds."""

WEIGHTS, ZERO, BIAS, LOW, HIGH = range(9), 9, 10, 11, 12
INPUTS, ACCS, CLIPPED = range(13, 13 + ROWS + 2), range(18, 18 + 3 * ROWS), range(27, 27 + ROWS)
X, OUT, W_PTR, END = 10, 11, 12, 13
"""Integer arguments (lp64d): the band's first input row at column 0, the first output row, the 9 weights; END
is the loop's end for X. The bias and the bounds come in fa0-fa2 (BIAS, LOW, HIGH)."""
CHECK = 27
"""The checked form's check value: a multiply-add of two outputs' sums into it per checked column (module doc)."""
NON_FINITE = 0x381
"""`fclass.s` bits of -inf, +inf and the two NaNs."""
MASK, BITS = (5, 6, 7), (14, 15, 16)
"""t0-t2: feq.s of a pixel's sum, then minus 1; a4-a6: the clipped value's bits ORed with it."""
X_ROW, OUT_ROW, X_COL, OUT_COL, END_ARG = 13, 14, 15, 16, 17
"""Row pointers (not `offsets`): the arguments a3-a7 are the row and column strides in bytes and X's end, before
the prologue puts the row pointers, the column strides (s0, s1) and END in place."""
IN_ROWS, OUT_ROWS, STEPS, STRIDES3 = (X, 28, 29, 30, 31), (OUT, W_PTR, END_ARG), (8, 9), (18, 19)
"""Each band row's input pointer (a0, t3-t6), each output row's (a1, a2 once the weights are loaded, a7), the
column strides (s0, s1) and 3 columns' (s2, s3: the loop's step when 2 columns fit the offsets), saved."""


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
    x_col: int
    out_col: int
    """Bytes between input columns and between output columns (4 in NCHW, 4 x channels channels-last)."""
    low: bool
    high: bool
    """The activation's bounds (a Relu: low only); both False and `clip` False: the sums are stored as they are."""
    clip: bool

    @property
    def out_width(self) -> int:
        return self.width + self.left + self.right - 2


def offsets(band: Band) -> bool:
    """Every input row at an offset from one pointer and every output row from another (NCHW rows); else each row
    has its own pointer, all moved on a column at a time (channels-last)."""
    return ((band.rows + 1) * band.x_row + (band.width + 2) * band.x_col <= IMMEDIATE and 3 * band.x_col <= IMMEDIATE
            and (band.rows - 1) * band.out_row + (band.out_width + 2) * band.out_col <= IMMEDIATE
            and band.x_col == band.out_col)


def mode(band: Band) -> str:
    """How the routine addresses the band: "offsets" (one pointer for the input, one for the output), "rows" (a
    pointer per row, moved 3 columns an iteration in the loop) or "columns" (moved every column: columns more than
    1023 bytes apart)."""
    if offsets(band):
        return "offsets"
    return "rows" if 2 * max(band.x_col, band.out_col) <= IMMEDIATE else "columns"


def fits(band: Band) -> bool:
    """The routine's loads and stores reach every element with 12-bit offsets (with a Clip, the checked form's too)."""
    if band.out_width < 1:
        return False
    try:
        encode(program(band))
        if band.clip:
            encode(program(band, True))
    except AssertionError:
        return False
    return True


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


def bands(h: int, width: int, oh_count: int, ow_count: int, top: int, left: int, x_strides: tuple[int, int],
          out_strides: tuple[int, int], epilogue) -> list[Band] | None:
    """The bands of a stride-1 3 x 3 depthwise plane (h x width in, oh_count x ow_count out; rows and columns
    x_strides / out_strides elements apart), top to bottom, or None when the routine does not take it (padding
    over 2, an activation it has no form for, offsets past the immediates)."""
    act = activation(epilogue)
    right = ow_count + 2 - width - left
    if act is None or not (0 <= top <= 2 and 0 <= left <= 2 and 0 <= right <= 2):
        return None
    clip, low, high = act
    out = [Band(min(ROWS, oh_count - oh0), width, left, right,
                frozenset(r for r in range(min(ROWS, oh_count - oh0) + 2) if not 0 <= oh0 - top + r < h),
                4 * x_strides[0], 4 * out_strides[0], 4 * x_strides[1], 4 * out_strides[1], low is not None,
                high is not None, clip) for oh0 in range(0, oh_count, ROWS)]
    return out if all(fits(b) for b in out) else None


PIXEL_CYCLES = {"offsets": 110 / 9, "rows": 112 / 9, "columns": 120 / 9}
"""llvm-mca-22 cycles per output pixel of the band loop without an activation (3 columns of 3 rows, a band without
zero rows, docs/RISCV_KERNELS.md) by `mode`."""
CHECKED_PIXEL_CYCLES = {"offsets": 113 / 9, "6 columns": 227 / 18, "6 columns, both sides moved every column": 230 / 18,
                        "3 columns": 116 / 9, "every column": 124 / 9}
"""The same for the checked form with a Clip(0, 6) (a Relu 1-3% less) by `checked_layout` (6 columns: 225-228 by the
pointers' increments); the exact routine runs over a band only when it holds a NaN or an infinity, unpriced."""
CALL_CYCLES = {"offsets": 37, "rows": 58, "columns": 58}
"""Cycles of a band's prologue and epilogue by `mode`, an instruction each: the 12 FP registers saved and restored,
the 9 weights loaded (row pointers: the 4 integer registers saved and restored, the pointers and strides set); the
checked form 3 more (the check's set-up and fclass.s, the caller's test)."""


def checked_layout(band: Band) -> str:
    """The checked form's loop as CHECKED_PIXEL_CYCLES prices it."""
    form = checked_form(band)
    if offsets(band):
        return "offsets"
    if not form.stepped:
        return "every column"
    if form.span == 3:
        return "3 columns"
    far = (shared_input(band) and 2 * band.x_col > IMMEDIATE and shared_output(band) and 2 * band.out_col > IMMEDIATE)
    return "6 columns, both sides moved every column" if far else "6 columns"


def plane_cycles(plane: list[Band]) -> float:
    """The cost model's cycles for one channel's bands."""
    return sum(CALL_CYCLES[mode(b)] + 3 * b.clip + b.rows * b.out_width
               * (CHECKED_PIXEL_CYCLES[checked_layout(b)] if b.clip else PIXEL_CYCLES[mode(b)]) for b in plane)


Insn = tuple


def _acc(R: int, o: int, r: int) -> int:
    """The accumulator of output column o (of the 3 in flight), row r."""
    return ACCS[o % 3 * R + r]


def _prologue(R: int, S: int, frame: int, saved_x: list, fast: bool, single: bool, in_shared: bool,
              shared: bool) -> list[Insn]:
    """The frame, the saved registers, the weights, the zero (and the check), the row pointers and the steps."""
    code: list[Insn] = [("addi", 2, 2, -frame)] + [("fsd", f, 2, 8 * q) for q, f in enumerate(SAVED)]
    code += [("flw", w, W_PTR, 4 * w) for w in WEIGHTS] + [("fmv.w.x", ZERO, 0)]
    if fast:
        code.append(("fmv.w.x", CHECK, 0))
    if not single:
        code += [("sd", s_reg, 2, 8 * len(SAVED) + 8 * q) for q, s_reg in enumerate(saved_x)]
        code += [("add", IN_ROWS[k], IN_ROWS[k - 1], X_ROW) for k in range(1, R + 2) if not in_shared]
        code += [("addi", END, END_ARG, 0)]
        code += [("add", OUT_ROWS[r], OUT_ROWS[r - 1], OUT_ROW) for r in range(1, R) if not shared]
        code += [("addi", STEPS[0], X_COL, 0), ("addi", STEPS[1], OUT_COL, 0)]
        for three, one in zip(STRIDES3, STEPS):
            code += [("add", three, one, one), ("add", three, three, one)] + [("add", three, three, three)] * (S == 6)
    return code


def _epilogue(frame: int, saved_x: list, fast: bool) -> list[Insn]:
    """The checked form's a0 (the check's class: infinity or NaN), the saved registers back, the return."""
    code: list[Insn] = [("fclass.s", MASK[0], CHECK), ("andi", X, MASK[0], NON_FINITE)] if fast else []
    code += [("fld", f, 2, 8 * q) for q, f in enumerate(SAVED)]
    code += [("ld", s_reg, 2, 8 * len(SAVED) + 8 * q) for q, s_reg in enumerate(saved_x)]
    return code + [("addi", 2, 2, frame), ("jalr", 0, 1, 0)]


def _column(band: Band, fast: bool, b: int, j: int | None = None) -> list[Insn]:
    """Column b's multiply-adds: kernel row by kernel row, the finishing, continuing and starting outputs (the
    checked form: then the check of output column b - 2, every column outside the loop, every third in it)."""
    R, ncols, ow = band.rows, band.width + band.left + band.right, band.out_width
    if b >= ncols:
        return []
    check = ([("fmadd.s", CHECK, _acc(R, b - 2, 0), _acc(R, b - 2, R - 1), CHECK)]
             if fast and 0 <= b - 2 < ow and (j is None or j % 3 == 0) else [])
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
                addend = BIAS if kw == 0 and kh == 0 else _acc(R, o, r)
                out.append(("fmadd.s", _acc(R, o, r), WEIGHTS[3 * kh + kw], src, addend))
    return out + check


def _loop_moves(band: Band, form: "Form", ins: list, outs: list, live: list, shared: bool,
                in_shared: bool) -> tuple[list, list]:
    """The pointers the loop moves S columns once an iteration, and those each of its S blocks moves."""
    S = form.span
    far_in, far_out = 2 * band.x_col > IMMEDIATE, 2 * band.out_col > IMMEDIATE  # one pointer: moved every column
    out_movers = [] if (shared and far_out) or not form.stepped else list(dict.fromkeys(outs))
    in_movers = ([] if (in_shared and far_in) or not form.stepped
                 else list(dict.fromkeys([X, *(ins[k] for k in live)])))  # X first: the loop's test
    movers = out_movers + in_movers
    if form.in_blocks:  # each side's increments in its blocks
        loop_moves = [[] for _ in range(S)]
        for group, blocks in ((out_movers, form.out_blocks), (in_movers, form.in_blocks)):
            for i, p in enumerate(group):
                loop_moves[blocks[i * len(blocks) // len(group)]].append(p)
    else:  # spread over the iteration, the output pointers first
        loop_moves = [[p for i, p in enumerate(movers) if i * S // len(movers) == j] for j in range(S)]
    return movers, loop_moves


def program(band: Band, checked: bool = False, form: "Form | None" = None) -> list[Insn]:
    """The routine: out[r][o] = act(bias + sum over kh, kw of w[kh][kw] x[r + kh][o + kw - left]) for the band.
    `checked` (a band with a Clip): the checked form (`fmax.s` / `fmin.s` alone, a0 = the NaN check, module doc);
    `form` its loop's shape (default `checked_form`)."""
    fast = checked and band.clip
    form = (form or checked_form(band)) if fast else Form()
    S = form.span
    R, ncols, ow = band.rows, band.width + band.left + band.right, band.out_width
    single = offsets(band)
    in_shared, shared = (fast and not single and f(band) for f in (shared_input, shared_output))
    ins = [X] * (R + 2) if single or in_shared else list(IN_ROWS[:R + 2])
    outs = [OUT] * R if single or shared else list(OUT_ROWS[:R])
    row_off = ([k * band.x_row for k in range(R + 2)] if single or in_shared else [0] * (R + 2),
               [r * band.out_row for r in range(R)] if single or shared else [0] * R)
    moved = dict.fromkeys([*ins, *outs], 0)  # each pointer's bytes past its row's first element
    if not single:
        moved.update(dict.fromkeys(ins, shifts(band, fast, form)[0]))
        moved.update(dict.fromkeys(outs, shifts(band, fast, form)[1]))
    saved_x = [] if single else [*STEPS, *STRIDES3]
    stepped = mode(band) == "rows"  # the loop moves the row pointers once an iteration
    frame = 8 * (len(SAVED) + len(saved_x))
    code = _prologue(R, S, frame, saved_x, fast, single, in_shared, shared)
    live = [k for k in range(R + 2) if k not in band.zero_rows]
    step_ptrs = list(dict.fromkeys([X, *(ins[k] for k in live), *outs]))

    acc = partial(_acc, R)
    def block(b: int, last_of_loop: bool, in_loop: bool = False) -> list[Insn]:
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
        loads = ([("flw", INPUTS[k], ins[k], x * band.x_col + row_off[0][k] - moved[ins[k]]) for k in live]
                 if b < ncols and 0 <= x < band.width else [])
        out: list[Insn] = [i for pair in stage2 for i in pair]
        pipe_a = loads + ([("or", BITS[r], BITS[r], MASK[r]) for r in range(R)] if stage2 else [])
        pipe_b = [i for part in stage1 for i in part]
        steps = []
        if single and last_of_loop:
            steps = [("addi", p, p, 3 * band.x_col) for p in (X, OUT)]
        elif not single and not (stepped and in_loop):
            steps = [("add", p, p, STEPS[p in outs]) for p in step_ptrs]
        elif last_of_loop:
            steps = [("add", p, p, STRIDES3[p in outs]) for p in step_ptrs]
        pipe_a += steps
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
        for insn in steps:
            col = band.out_col if insn[1] in outs else band.x_col
            moved[insn[1]] += 3 * col if single or insn[3] in STRIDES3 else col
        if stage2:
            o = b - 4
            out += [("sw", BITS[r], outs[r], o * band.out_col + row_off[1][r] - moved[outs[r]]) for r in range(R)]
        elif not band.clip and 0 <= b - 3 < ow:
            o = b - 3
            out += [("fsw", acc(o, r), outs[r], o * band.out_col + row_off[1][r] - moved[outs[r]]) for r in range(R)]
        return out

    def fast_block(b: int, j: int | None) -> list[Insn]:
        """The checked form's block between columns b - 1 and b (j: its index in the loop's iteration, None outside
        the loop): output column b - 3 clipped in place and stored, column b loaded, the pointer increments; the
        output pointers' increments first (the stores read them), each FP-pipe instruction beside a load or an add."""
        o, x = b - 3, b - band.left
        loads = ([("flw", INPUTS[k], ins[k], x * band.x_col + row_off[0][k] - moved[ins[k]]) for k in live]
                 if b < ncols and 0 <= x < band.width else [])
        if single:
            steps = [] if j is None else [("addi", p, p, S * band.x_col) for p in loop_moves[j]]
        else:  # a column every block outside the loop and for the pointers the loop does not step
            steps = [("add", p, p, STEPS[p in outs]) for p in step_ptrs if j is None or p not in movers]
            steps += [("add", p, p, STRIDES3[p in outs]) for p in ([] if j is None else loop_moves[j])]
        for insn in steps:
            moved[insn[1]] += (S if single or insn[3] in STRIDES3 else 1) * (band.out_col if insn[1] in outs else band.x_col)
        pipe_a = [i for i in steps if i[1] in outs] + loads + [i for i in steps if i[1] not in outs]
        pipe_b, stores = [], []
        if 0 <= o < ow:
            pipe_b = ([("fmax.s", acc(o, r), acc(o, r), LOW) for r in range(R)] * band.low
                      + [("fmin.s", acc(o, r), acc(o, r), HIGH) for r in range(R)] * band.high)
            stores = [("fsw", acc(o, r), outs[r], o * band.out_col + row_off[1][r] - moved[outs[r]]) for r in range(R)]
        out = []
        for q in range(max(len(pipe_a), len(pipe_b))):
            out += pipe_a[q:q + 1] + pipe_b[q:q + 1]
        return out + stores

    column = partial(_column, band, fast)
    movers, loop_moves = _loop_moves(band, form, ins, outs, live, shared, in_shared)
    first, iterations = FIRST, loop_iterations(band, S)
    b = 0
    while b < ncols + 2:
        if iterations and b == first:
            if single:
                code.append(("addi", END, X, S * band.x_col * iterations))
            start = dict(moved)
            top = len(code)
            for j in range(S):
                code += fast_block(b + j, j) + column(b + j, j) if fast else block(b + j, j == 2, True) + column(b + j)
            code.append(("bne", X, END, top))
            for p in moved:
                moved[p] = start[p] + (moved[p] - start[p]) * iterations
            b += S * iterations
            continue
        code += fast_block(b, None) + column(b) if fast else block(b, False) + column(b)
        b += 1
    return code + _epilogue(frame, saved_x, fast)


FIRST = 4
"""The loop's first column: the first whose block stores, clips, loads and whose multiply-adds feed three outputs."""


def loop_iterations(band: Band, span: int = 3) -> int:
    """Iterations of the routine's loop of `span` columns (0: straight-line code; a loop from 2 iterations)."""
    hi = min(band.width + band.left, band.out_width)
    return (hi - FIRST) // span if hi - FIRST >= 2 * span else 0


@dataclass(frozen=True)
class Form:
    """The checked form's loop: `span` columns per iteration; with a pointer per row, the blocks of the iteration
    whose increments move the input and the output pointers (empty: all pointers spread over every block) and how
    many columns each side's pointers trail (negative: lead) the column they load or store outside the loop
    (`lag_in`, `lag_out`): a side's offsets in the loop run from 5 columns before to the column of the block of its
    increment, plus its lag."""
    span: int = 3
    stepped: bool = True
    """With a pointer per row: the loop moves them `span` columns once an iteration (else a column every block)."""
    in_blocks: tuple = ()
    out_blocks: tuple = ()
    lag_in: int = 0
    lag_out: int = 0


SIX_COLUMN_FORMS = (Form(6), Form(6, True, (1, 2), (4, 5), 1, -2), Form(6, True, (2, 3), (0, 1), 0, 2))
"""Tried in order for row pointers: the increments spread over the 6 blocks, else each side's in 2 blocks with the lag
that keeps its offsets within 3 columns either way (576-byte columns: 144 channels)."""


@functools.lru_cache(maxsize=None)
def checked_form(band: Band) -> Form:
    """The checked form's loop: 6 columns per iteration with a pointer per row when the loads' and stores' offsets
    reach over them (8 increments beside 6 columns' loads instead of 3), else 3."""
    if offsets(band):
        return Form()
    for form in (*SIX_COLUMN_FORMS, Form()):
        try:
            encode(program(band, True, form))
            return form
        except AssertionError:
            pass
    return Form(3, False)


def shared_output(band: Band) -> bool:
    """The checked form's output rows at offsets from one pointer (rows close: NCHW, or a channels-last plane walked
    transposed), moved with the loop's steps or, columns more than 1023 bytes apart, a column every block."""
    return (band.rows - 1) * band.out_row <= IMMEDIATE


def shared_input(band: Band) -> bool:
    """shared_output for the input rows."""
    return (band.rows + 1) * band.x_row <= IMMEDIATE


def shifts(band: Band, checked: bool = False, form: Form | None = None) -> tuple[int, int]:
    """Bytes from the input and output rows' first elements to the pointers the routine takes: with row pointers
    (moved a column every block, before its stores) the column a block loads and the one it stores are each at
    offset 0: the left padding before the input, 4 columns (5 with the exact Clip's extra stage) before the output;
    the checked form's pointers trail by its lags."""
    if offsets(band):
        return 0, 0
    if not (checked and band.clip):
        return -band.left * band.x_col, -(4 + band.clip) * band.out_col
    form = form or checked_form(band)
    return -(band.left + form.lag_in) * band.x_col, -(4 + form.lag_out) * band.out_col


def loop_end(band: Band, checked: bool = False) -> int:
    """Bytes from the input pointer passed to X's value after the loop (row pointers: END's argument)."""
    span = checked_form(band).span if checked and band.clip else 3
    if offsets(band):
        return span * band.x_col * loop_iterations(band, span)
    return band.x_col * (FIRST + span * loop_iterations(band, span))


SECTION = ".text.fxc_depthwise_tile"
"""The routines' section (the linker puts `.text.*` in the executable .text; benchmarks/mca.py reads it)."""


def _r(funct7: int, funct3: int, opcode: int):
    return lambda rd, rs1, rs2: funct7 << 25 | rs2 << 20 | rs1 << 15 | funct3 << 12 | rd << 7 | opcode


WORDS = {
    **ENCODERS,
    "fmax.s": _r(0x14, 1, 0x53), "fmin.s": _r(0x14, 0, 0x53), "feq.s": _r(0x50, 2, 0x53), "or": _r(0, 6, 0x33),
    "fmv.x.w": lambda rd, rs1: 0x70 << 25 | rs1 << 15 | rd << 7 | 0x53,
    "sw": lambda rs2, rs1, imm: s_type(0x23, 2, rs2, rs1, imm), "sd": lambda rs2, rs1, imm: s_type(0x23, 3, rs2, rs1, imm),
    "fclass.s": lambda rd, rs1: 0x70 << 25 | rs1 << 15 | 1 << 12 | rd << 7 | 0x53,
    "andi": lambda rd, rs1, imm: i_type(0x13, 7, rd, rs1, imm),
}
"""RV64GC's words of the routine's instructions (R format for the FP min / max / compare, S for sw / sd)."""

SYNTAX = {**TILE_SYNTAX, "sw": "x,x()", "sd": "x,x()", "fmax.s": "fff", "fmin.s": "fff", "feq.s": "xff", "fmv.x.w": "xf",
          "or": "xxx", "fclass.s": "xf", "andi": "xxi"}
"""Each mnemonic's operands for llvm-mc: f / x registers, i an immediate, "x()" an offset(base) pair."""


def encode(code: list[Insn]) -> list[int]:
    """The routine's instruction words."""
    return encode_words(code, WORDS)


def text(code: list[Insn]) -> str:
    """The routine as assembly (llvm-mc syntax; labels .L<index>)."""
    return tile_text(code, SYNTAX)


def takes(k) -> bool:
    """The kernel is emitted for a CPU with the hand-scheduled tiles (kernels/scalar_tile.py)."""
    return kernel_tile(k) is not None


def call(k, band: Band, x_ptr, out_ptr, w_ptr, bias, low: float, high: float) -> None:
    """Run the band's routine (machine code in the module's SECTION, one per band shape and form) on one channel:
    x_ptr the band's first input row at column 0, out_ptr its first output row, w_ptr the 9 weights, bias a float
    value. A band with a Clip runs the checked form, and the exact one over it when the check says non-finite."""
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    ptr = f32.as_pointer()
    rows = "".join(str(r) for r in sorted(band.zero_rows))
    name = (f"fxc.depthwise_tile.r{band.rows}.w{band.width}.p{band.left}{band.right}.z{rows}.s{band.x_row}.{band.out_row}"
            f".c{band.x_col}.{band.out_col}.{'c' if band.clip else ''}{'l' if band.low else ''}{'h' if band.high else ''}")
    b = k.b
    x_ptr, out_ptr = b.bitcast(x_ptr, ptr), b.bitcast(out_ptr, ptr)

    def run(checked: bool):
        x_shift, out_shift = shifts(band, checked)
        x_at, out_at = b.gep(x_ptr, [i64(x_shift // 4)]), b.gep(out_ptr, [i64(out_shift // 4)])
        fn_type = ir.FunctionType(i64 if checked else ir.VoidType(), [ptr, ptr, ptr, i64, i64, i64, i64, ptr, f32, f32, f32])
        routine = k.module.globals.get(name + ".checked" * checked)
        if routine is None:
            words = encode(program(band, checked))
            routine = ir.GlobalVariable(k.module, ir.ArrayType(i32, len(words)), name + ".checked" * checked)
            routine.initializer = ir.Constant(routine.type.pointee, words)
            routine.global_constant, routine.linkage, routine.align = True, "private", 4
            routine.section = SECTION
        return b.call(b.bitcast(routine, fn_type.as_pointer()),
                      [x_at, out_at, b.bitcast(w_ptr, ptr), i64(band.x_row), i64(band.out_row), i64(band.x_col),
                       i64(band.out_col), b.gep(x_at, [i64(loop_end(band, checked) // 4)]), bias,
                       ir.Constant(f32, low), ir.Constant(f32, high)])
    if not band.clip:
        run(False)
        return
    with b.if_then(b.icmp_unsigned("!=", run(True), i64(0)), likely=False):
        run(False)
