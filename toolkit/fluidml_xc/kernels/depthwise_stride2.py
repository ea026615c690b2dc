"""The float32 3x3 depthwise conv at stride 2 of the SiFive U74 (kernels/depthwise_tile.py's core) as a machine-code
routine in depthwise_tile's SECTION: one channel, a band of up to ROWS output rows over the whole row width.

A band of R output rows reads 2R + 1 input rows, and each output column 2 new input columns. A rolling window over
the input columns: column u's 2R + 1 values are loaded once (`flw`) and feed every tap that reads them (kernel column
kw of output column (u - kw) / 2 when that is whole); an output column is in flight over 3 input columns and a new
one starts every 2, so 2 x R sums are live. The 9 weights, the bias and the bounds stay in FP registers; the
inputs of even and odd columns take a set each (EVEN, ODD).

Per output pixel 9 `fmadd.s` against 4 + 2 / R `flw` and a store, and the U74 writes back in order (a load or store
right after an `fmadd.s` waits for its write-back: docs/RISCV_KERNELS.md), so each load costs a cycle of its own: at
most 9 / (9 + 4 + 2/3 + 1) = 61% of the multiply-add peak at R = 3. The Clip is depthwise_tile's exact one (`feq.s`,
`fmax.s`, `fmin.s`, the NaN's bits ORed back, `sw`: ONNX's NaN kept, Clip(-0.0, 0, 6) = +0.0); its FP-pipe
instructions pair with the loads, so depthwise_tile's checked form would save no cycle here.

Rows are addressed by `layout`: at offsets from shared pointers when their bytes apart fit the 12-bit immediates,
else a pointer per row (an argument block: `arguments`), moved once per 4 input columns with the loads and stores
at offsets from it, or every column. Per 2 input columns the multiply-adds, then one block (the finished output
column's Clip, the next 2 columns' loads, the pointer adds), then the stores, each ordered by
kernels/rvv_depthwise.py's list scheduler over the U74's issue rules (`U74`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from llvmlite import ir

from . import depthwise_tile as dt
from .rvv_depthwise import ALU, CALLEE_SAVED, Op, schedule
from .scalar_tile import SAVED

ROWS = 3
"""Output rows per band: 9 weights, bias, bounds + 2 x 3 sums + 7 + 7 inputs (one of them the zero's) = 32 FP
registers."""
WEIGHTS, ZERO, BIAS, LOW, HIGH, ACC0 = 0, 9, 10, 11, 12, 13
EVEN, ODD = tuple(range(19, 26)), (*range(26, 32), ZERO)
"""The inputs of even and of odd input columns, by live row; the seventh of an odd column is ZERO's register (a
band without zero rows: loaded after the left padding's taps, set to zero again before the right padding's)."""
BLOCK = 10
"""a0: the argument block."""
INTEGER = (*ALU, *range(22, 28))
"""The integer registers the routine takes, in order (rvv_depthwise's, then s6-s11)."""


@dataclass(frozen=True)
class Band:
    rows: int
    """Output rows (1 to ROWS)."""
    width: int
    """Input columns."""
    left: int
    right: int
    """Zero columns before and after the input row that the outputs read (0 to 2)."""
    zero_rows: frozenset
    """Band rows (0 .. 2 rows) outside the input: zeros, never loaded."""
    x_col: int
    out_col: int
    """Bytes between input columns and between output columns."""
    low: bool
    high: bool
    clip: bool
    """The activation as depthwise_tile.Band's."""
    x_row: int = 0
    out_row: int = 0
    """Bytes between input rows and between output rows (0: unknown, a pointer per row)."""

    @property
    def out_width(self) -> int:
        return (self.width + self.left + self.right - 3) // 2 + 1

    @property
    def in_rows(self) -> int:
        return 2 * self.rows + 1


def arguments(band: Band) -> list[str]:
    """The argument block's i64 words (the caller fills them): the row pointers, the loop's end of the first loaded
    row's pointer, the column steps (one column, 4 input / 2 output columns) and the weights' address."""
    return ([f"in{i}" for i in range(band.in_rows)] + [f"out{r}" for r in range(band.rows)]
            + ["end", "x_step", "out_step", "x_big", "out_big", "weights"])


LATENCY = {"fmadd.s": 5, "flw": 3, "fsw": 1, "sw": 1, "fmax.s": 3, "fmin.s": 3, "feq.s": 3, "fmv.x.w": 3,
           "fmv.w.x": 3, "addi": 3, "add": 3, "or": 3, "bne": 3, "ld": 3, "sd": 1, "fld": 3, "fsd": 1, "jalr": 3}
PIPES = {"flw": "A", "fsw": "A", "sw": "A", "ld": "A", "sd": "A", "fld": "A", "fsd": "A", "addi": "AB", "add": "AB",
         "or": "AB"}
"""llvm-mca-22's SiFive7 (sifive-u74): latencies and pipes (loads, stores on A; integer ops on either; the FP ops
and branches on B), one instruction per pipe and cycle."""


class U74:
    """The issue state of the U74 as llvm-mca models it (rvv_depthwise.Machine's interface): in order, two a cycle on
    pipes A and B, write-backs in program order."""

    def __init__(self):
        self.cycle, self.issued, self.write_back = 0, 0, 0
        self.ready: dict = {}
        self.free = {"A": 0, "B": 0}

    def at(self, op: Op) -> int:
        mn = op.insn[0]
        t = max([self.cycle + (self.issued >= 2), *(self.ready.get(r, 0) for r in op.reads)])
        return max(t, min(self.free[p] for p in PIPES.get(mn, "B")), self.write_back - LATENCY[mn])

    def place(self, op: Op) -> int:
        t, mn = self.at(op), op.insn[0]
        self.issued = self.issued + 1 if t == self.cycle else 1
        self.cycle = t
        pipe = min(PIPES.get(mn, "B"), key=lambda p: (self.free[p] > t, p))
        self.free[pipe] = t + 1
        self.write_back = max(self.write_back, t + LATENCY[mn])
        for r in op.writes:
            self.ready[r] = t + LATENCY[mn]
        return t


PRIORITY = {**LATENCY, "feq.s": 0}
"""The latencies the scheduler ranks by: a pixel's `feq.s` precedes its in-place `fmax.s` only by reading the sum
first, so its path to the end is the Clip's (the NaN tests then interleave with the Clip chains, not all first)."""
EARLY = ("flw", "fsw", "sw")
"""Loads and stores ranked half a cycle early (rvv_depthwise.rank)."""
GROUP = 0
"""The scheduler's pointer additions: issued as soon as ready (an `add` has a load's latency on the U74)."""


def _op(insn, reads=(), writes=()) -> Op:
    return Op(insn, tuple(r for r in reads if r != "x0"), tuple(writes), insn[0])


def _steady(band: Band) -> tuple[int, int]:
    """The loop's first padded column and its iterations of 4 columns: columns that are input, whose next column is
    too, and whose taps all feed outputs of the row."""
    first = max(2, band.left + band.left % 2)
    last = min(band.left + band.width - 4, 2 * band.out_width - 2)
    return first, max(0, (last - first + 2) // 4)


@dataclass(frozen=True)
class Layout:
    """How the routine addresses the band: `in_shared`, all input rows at offsets from two pointers (even and odd
    columns, each moved 2 columns after its column's loads); else a pointer per row. `out_shared`, the output rows at
    offsets from one pointer. `stepped`: the per-row input pointers and the output pointers move once per 4 input
    columns (2 output columns), with the loads and stores at column offsets from them; else every column."""
    stepped: bool
    in_shared: bool
    out_shared: bool


def _registers(band: Band) -> tuple[list, dict, list, list, list]:
    """The argument block's names, their registers, each output row's NaN-mask and bits registers, and which of
    those registers the routine saves (callee-saved)."""
    names = arguments(band)
    regs = dict(zip([n for n in names if n != "weights"], INTEGER))
    masks = INTEGER[len(regs):len(regs) + band.rows]
    bits = INTEGER[len(regs) + band.rows:len(regs) + 2 * band.rows]
    return names, regs, masks, bits, [r for r in (*regs.values(), *masks, *bits) if r in CALLEE_SAVED]


def _prologue(names: list, regs: dict, saved: list) -> tuple[list, int]:
    """The frame's saves, the 9 weights and the zero loaded, the argument block read; and the frame's bytes."""
    frame = 8 * (len(SAVED) + len(saved))
    code: list = [("addi", 2, 2, -frame)] + [("fsd", f, 2, 8 * q) for q, f in enumerate(SAVED)]
    code += [("sd", r, 2, 8 * (len(SAVED) + q)) for q, r in enumerate(saved)]
    temp = regs["end"]
    code += [("ld", temp, BLOCK, 8 * names.index("weights"))] + [("flw", WEIGHTS + t, temp, 4 * t) for t in range(9)]
    return code + [("fmv.w.x", ZERO, 0)] + [("ld", r, BLOCK, 8 * names.index(n)) for n, r in regs.items()], frame


def _epilogue(saved: list, frame: int) -> list:
    """The saved registers restored, the frame popped, the return."""
    code = [("fld", f, 2, 8 * q) for q, f in enumerate(SAVED)]
    code += [("ld", r, 2, 8 * (len(SAVED) + q)) for q, r in enumerate(saved)]
    return code + [("addi", 2, 2, frame), ("jalr", 0, 1, 0)]


def _acc(rows: int, o: int, r: int) -> int:
    """The accumulator of output column o's row r (two columns' accumulators in turn)."""
    return ACC0 + o % 2 * rows + r


def _generate(band: Band, lay: Layout) -> tuple[list, int, int]:
    """The routine, the argument row whose pointer ends the loop and the bytes past it that end it."""
    stepped, in_shared, out_shared = lay.stepped, lay.in_shared, lay.out_shared
    R, ow, left = band.rows, band.out_width, band.left
    names, regs, masks, bits, saved = _registers(band)
    inp, outp = [regs[f"in{i}"] for i in range(band.in_rows)], [regs[f"out{r}"] for r in range(R)]
    live = [k for k in range(band.in_rows) if k not in band.zero_rows]
    pos = {p: 0 for p in (*inp, *outp)}
    code, frame = _prologue(names, regs, saved)
    shift = (band.in_rows - 1) * band.x_row // 8 * 4  # the shared input pointers sit mid-band
    if in_shared:  # in0: even columns' pointer, in1: odd columns', x_big: 2 columns
        code += [("addi", inp[0], inp[0], shift), ("add", inp[1], inp[0], regs["x_step"]),
                 ("add", regs["x_big"], regs["x_step"], regs["x_step"])]
        pos[inp[1]] = band.x_col

    def in_at(k: int, x: int) -> tuple[int, int]:
        """The register and offset of input row k's column x."""
        if in_shared:
            p = inp[x % 2]
            return p, k * band.x_row - shift + x * band.x_col - pos[p]
        return inp[k], x * band.x_col - pos[inp[k]]

    reset: list = []  # the column before whose taps ZERO is zero again

    def x_reg(u: int, k: int) -> int:
        return (EVEN if (u - left) % 2 == 0 else ODD)[live.index(k)]

    def real(u: int) -> bool:
        return 0 <= u - left < band.width

    def loads(u: int) -> list[Op]:
        if not real(u):
            return []
        x, ops = u - left, []
        for k in live:
            p, offset = in_at(k, x)
            ops.append(_op(("flw", x_reg(u, k), p, offset), [f"x{p}"], [f"f{x_reg(u, k)}"]))
            if not in_shared and (not stepped or x % 4 == 1):
                step = regs["x_big"] if stepped else regs["x_step"]
                ops.append(_op(("add", p, p, step), [f"x{p}", f"x{step}"], [f"x{p}"]))
                pos[p] += (4 if stepped else 1) * band.x_col
        if in_shared and live:
            p = inp[x % 2]
            ops.append(_op(("add", p, p, regs["x_big"]), [f"x{p}", f"x{regs['x_big']}"], [f"x{p}"]))
            pos[p] += 2 * band.x_col
        return ops

    def taps(u: int) -> list[Op]:
        ops = []
        if u >= left + band.width and len(live) == 7 and not reset:
            reset.append(u)
            ops.append(_op(("fmv.w.x", ZERO, 0), (), [f"f{ZERO}"]))
        for k in range(band.in_rows):
            src = x_reg(u, k) if real(u) and k not in band.zero_rows else ZERO
            for kh in range(3):
                r = (k - kh) // 2
                if (k - kh) % 2 or not 0 <= r < R:
                    continue
                for kw in (2, 1, 0):
                    o = (u - kw) // 2
                    if (u - kw) % 2 or not 0 <= o < ow:
                        continue
                    a, w = _acc(R, o, r), WEIGHTS + 3 * kh + kw
                    addend = BIAS if kh == 0 and kw == 0 else a
                    ops.append(_op(("fmadd.s", a, w, src, addend), [f"f{w}", f"f{src}", f"f{addend}"], [f"f{a}"]))
        return ops

    def finish(u: int) -> list[Op]:
        o = (u - 2) // 2
        if u % 2 or not 0 <= o < ow:
            return []
        ops = []
        for r in range(R):
            a, p, f = _acc(R, o, r), outp[0] if out_shared else outp[r], f"f{_acc(R, o, r)}"
            offset = r * band.out_row * out_shared + o * band.out_col - pos[p]
            if band.clip:
                m, b = masks[r], bits[r]
                ops += [_op(("feq.s", m, a, a), [f], [f"x{m}"])]
                ops += [_op(("fmax.s", a, a, LOW), [f, f"f{LOW}"], [f])] * band.low
                ops += [_op(("fmin.s", a, a, HIGH), [f, f"f{HIGH}"], [f])] * band.high
                ops += [_op(("fmv.x.w", b, a), [f], [f"x{b}"]), _op(("addi", m, m, -1), [f"x{m}"], [f"x{m}"]),
                        _op(("or", b, b, m), [f"x{b}", f"x{m}"], [f"x{b}"]),
                        _op(("sw", b, p, offset), [f"x{b}", f"x{p}"], ["mem"])]
            else:
                ops.append(_op(("fsw", a, p, offset), [f, f"x{p}"], ["mem"]))
        for p in dict.fromkeys(outp[:1] if out_shared else outp):
            if not stepped or o % 2 == 1:
                step = regs["out_big"] if stepped else regs["out_step"]
                ops.append(_op(("add", p, p, step), [f"x{p}", f"x{step}"], [f"x{p}"]))
                pos[p] += (2 if stepped else 1) * band.out_col
        return ops

    def window(us, machine: U74) -> list:
        """Two columns (u even): their multiply-adds, the block (finished outputs, next loads), the stores, scheduled."""
        code = []
        for u in us:
            block = finish(u) + loads(u + 2) + loads(u + 3)
            stores = [o for o in block if o.kind in ("sw", "fsw") or o.kind == "add" and o.insn[1] in outp]
            for part in (taps(u) + taps(u + 1), [o for o in block if o not in stores], stores):
                code += [o.insn for o in schedule(part, GROUP, machine, PRIORITY, EARLY)]
        return code

    ncols = band.width + left + band.right
    first, iterations = _steady(band)
    code += window([-2], U74()) + window(range(0, first, 2), U74())  # -2: columns 0 and 1's loads
    test_row = 0 if in_shared else live[0] if live else None
    test = None if test_row is None else inp[test_row]
    end = 0
    if iterations and test is not None:
        start = dict(pos)
        top = len(code)
        code += window(range(first, first + 4, 2), U74())
        code.append(("bne", test, regs["end"], top))
        pos = {p: start[p] + (pos[p] - start[p]) * iterations for p in pos}
        end = pos[test] + shift * in_shared
        code += window(range(first + 4 * iterations, ncols, 2), U74())
    else:
        code += window(range(first, ncols, 2), U74())
    return code + _epilogue(saved, frame), test_row or 0, end


@lru_cache(maxsize=256)
def layout(band: Band) -> Layout:
    """The first layout whose offsets fit the 12-bit immediates: rows shared where their bytes apart are known,
    then pointers stepped every 4 columns."""
    shares = [(i, o) for i in (True, False) for o in (True, False) if (band.x_row or not i) and (band.out_row or not o)]
    for stepped in (True, False):
        for in_shared, out_shared in shares:
            lay = Layout(stepped, in_shared, out_shared)
            try:
                encode(_generate(band, lay)[0])
                return lay
            except AssertionError:
                pass
    raise AssertionError(band)


def program(band: Band) -> list:
    """The band's routine: a0 the argument block (`arguments`), fa0 the bias, fa1 / fa2 the bounds."""
    return _generate(band, layout(band))[0]


def loop_end(band: Band) -> tuple[int, int]:
    """The argument row whose pointer ends the loop, and the bytes past it its `end` is."""
    return _generate(band, layout(band))[1:]


def encode(code: list) -> list[int]:
    return dt.encode(code)


def text(code: list) -> str:
    """The routine as assembly (llvm-mc syntax)."""
    return dt.text(code)


def bands(h: int, width: int, oh_count: int, ow_count: int, top: int, left: int, x_strides: tuple[int, int],
          out_strides: tuple[int, int], epilogue) -> list[Band] | None:
    """The bands of a stride-2 3 x 3 depthwise plane (h x width in, oh_count x ow_count out; rows and columns
    x_strides / out_strides elements apart), or None when the routine does not take it (padding over 2, an
    activation it has no form for)."""
    act = dt.activation(epilogue)
    right = max(0, 2 * (ow_count - 1) + 3 - width - left)  # the last input column may be unread
    if act is None or not (0 <= top <= 2 and 0 <= left <= 2 and right <= 2) or ow_count < 1:
        return None
    clip, low, high = act
    out = []
    for oh0 in range(0, oh_count, ROWS):
        rows = min(ROWS, oh_count - oh0)
        zero = frozenset(k for k in range(2 * rows + 1) if not 0 <= 2 * oh0 - top + k < h)
        out.append(Band(rows, width, left, right, zero, 4 * x_strides[1], 4 * out_strides[1], low is not None,
                        high is not None, clip, 4 * x_strides[0], 4 * out_strides[0]))
    return out if out[0].out_width == ow_count else None


def call(k, band: Band, block: dict, bias, low: float, high: float) -> None:
    """Run the band's routine (one per band shape, in depthwise_tile's SECTION) with the argument block's values
    (`arguments`: i64 values or pointers), the bias (a float value) and the bounds."""
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    rows = "".join(str(r) for r in sorted(band.zero_rows))
    name = (f"fxc.depthwise_stride2.r{band.rows}.w{band.width}.p{band.left}{band.right}.z{rows}.c{band.x_col}."
            f"{band.out_col}.s{band.x_row}.{band.out_row}.{'c' if band.clip else ''}{'l' if band.low else ''}{'h' if band.high else ''}")
    routine = k.module.globals.get(name)
    if routine is None:
        words = encode(program(band))
        routine = ir.GlobalVariable(k.module, ir.ArrayType(i32, len(words)), name)
        routine.initializer = ir.Constant(routine.type.pointee, words)
        routine.global_constant, routine.linkage, routine.align = True, "private", 4
        routine.section = dt.SECTION
    b, names = k.b, arguments(band)
    with b.goto_entry_block():
        args = b.alloca(ir.ArrayType(i64, len(names)))
    for q, n in enumerate(names):
        v = block[n]
        v = b.ptrtoint(v, i64) if isinstance(v.type, ir.PointerType) else b.sext(v, i64) if v.type.width < 64 else v
        b.store(v, b.gep(args, [i32(0), i32(q)], inbounds=True))
    fn_type = ir.FunctionType(ir.VoidType(), [i64.as_pointer(), f32, f32, f32])
    b.call(b.bitcast(routine, fn_type.as_pointer()),
           [b.bitcast(args, i64.as_pointer()), bias, ir.Constant(f32, low), ir.Constant(f32, high)])


@lru_cache(maxsize=256)
def cycles(band: Band) -> int:
    """The routine's cycles from its first instruction to its return as `U74` issues them (the loop's iterations
    run out): the cost model's price of a band (fluid/depthwise_costs.py)."""
    code = program(band)
    ends = [i for i, insn in enumerate(code) if insn[0] == "bne"]
    run = code
    if ends:
        end, iterations = ends[0], _steady(band)[1]
        run = code[:code[end][3]] + code[code[end][3]:end + 1] * iterations + code[end + 1:]
    machine = U74()
    for insn in run:
        machine.place(dataflow(insn))
    return machine.write_back


STORES = ("fsw", "sw", "sd", "fsd")


def dataflow(insn) -> Op:
    """The instruction with the registers it reads and writes (a store or branch writes none; x0 is no register)."""
    op, *args = insn
    if op == "bne":
        return _op(insn, (f"x{args[0]}", f"x{args[1]}"))
    kinds = dt.SYNTAX[op]
    kinds = [kinds[0], "x", "i"] if kinds.endswith("()") else list(kinds)
    regs = [f"{k}{a}" for k, a in zip(kinds, args) if k != "i"]
    if op in STORES:
        return _op(insn, regs)
    return _op(insn, regs[1:], (regs[0],))
