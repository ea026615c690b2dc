"""The float32 3x3 channels-last depthwise conv of the SpacemiT X60 (RVV 1.0, VLEN >= 256, in-order dual issue) as a
hand-scheduled machine-code routine (section SECTION, like kernels/scalar_tile.py's for the U74): one unit of up to
8 channels (one LMUL-1 register, `vl` its channel count), a band of up to ROWS[stride] output rows over the whole row
width, at stride 1 or 2.

A rolling window over the input columns (stride 1): column u's rows + 2 input vectors are loaded once and feed every tap that
reads them (kernel row i - o of output row o, kernel columns 2, 1, 0 of the output columns it finishes, continues
and starts). Input row i < rows is loaded into the register of the output it starts (column u + left), whose last
tap is a `vfmadd.vv` with the bias (no copies); the last two rows go to `sets` alternating pairs. At stride 2 a band
reads 2 x rows + 1 input rows, two columns per output column: an even column's even rows start outputs in place,
its other rows and all of an odd column's go to a set of registers per parity (an odd column's last rows to the
even column's, free once its taps are done: the odd column loads during the even one's taps). The 9 weights and the bias stay in registers. A finished output takes the Clip on the vector integer unit (lo >= +0: `vmax.vx` /
`vminu.vx` on the bits, masked by `x + x < 0xFF000001` unsigned, so a NaN lane keeps its NaN; `-0.0` gives lo) and
is stored. RVV loads and stores take no offset: every input and output row has a pointer, moved a column (the
input's and the output's column strides in registers) after each use.

The order: the loop body is `period` columns (the accumulators' slots and the input sets back at their registers), software-pipelined (each column's taps with the next column's loads) and ordered by `schedule`, a greedy
list scheduler over the X60's in-order rules as llvm-mca-22 models them (docs/RISCV_KERNELS.md: dual issue, a
write-back in program order, a unit busy per instruction); the columns before and after the loop, which read zeros
for the padding instead of loading, are ordered the same way. Rows outside the image are the zero row
(ops/conv/depthwise.py zero_row): the caller's pointers."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from llvmlite import ir

from ..target.arch import arch_of, riscv_vlen
from .depthwise_tile import activation
from .scalar_tile import ENCODERS, SYNTAX as TILE_SYNTAX, encode as encode_words, s_type, text as tile_text

SECTION = ".text.fxc_rvv_depthwise"
"""The routines' section (the linker puts `.text.*` in the executable .text; benchmarks/mca.py reads it)."""
LANES = 8
"""Channels per unit: one e32 LMUL-1 register at VLEN 256 (the weights are packed 8 floats a tap)."""
ROWS = {1: 5, 2: 4}
"""Output rows per band by stride: 9 weights + bias + mask + 2 mask temporaries, and at stride 1 3 x 5 accumulators
+ 2 x 2 last-row inputs, at stride 2 2 x 4 accumulators + 5 inputs of an even column and the 6 registers left for
the 9 of an odd one (its last 3 in the even column's): the 32 vector registers."""
CPUS = {"spacemit-x60"}
"""The CPUs (LLVM's names) the routine is scheduled for."""

MASK, WEIGHTS, BIAS, ACC0 = 0, 1, 10, 11
ALU = (5, 6, 7, 28, 29, 30, 31, 11, 12, 13, 14, 15, 16, 17, 8, 9, 18, 19, 20, 21)
"""The integer registers the routine takes, in order (t0-t2, t3-t6, a1-a7, then saved s0, s1, s2-s5); a0 is the
argument block and is read last."""
CALLEE_SAVED = {8, 9, *range(18, 28)}


@dataclass(frozen=True)
class Band:
    rows: int
    """Output rows (1 to ROWS[stride])."""
    width: int
    """Input columns."""
    left: int
    right: int
    """Zero columns before and after the input row (the padding the outputs read, 0 to 2)."""
    act: str
    """"none", "relu" (max with lo) or "clip" (max with lo, min with hi): lo >= +0."""
    stride: int = 1
    """1 or 2, in both directions."""

    @property
    def out_width(self) -> int:
        return (self.width + self.left + self.right - 3) // self.stride + 1

    @property
    def in_rows(self) -> int:
        return self.stride * (self.rows - 1) + 3

    @property
    def slots(self) -> int:
        """Outputs of a row in flight: 3 at stride 1, 2 at stride 2."""
        return 3 if self.stride == 1 else 2

    @property
    def sets(self) -> int:
        """Register sets of the inputs that start no output, by column (stride 2: even and odd columns)."""
        return 2 if self.stride == 2 else min(3, (32 - ACC0 - 3 * self.rows - 2) // 2)

    @property
    def period(self) -> int:
        """Columns per loop iteration: the accumulators' slots and the input sets back at their registers."""
        cycle = self.slots * self.stride
        return cycle * self.sets // math.gcd(cycle, self.sets)

    def steady(self) -> tuple[int, int]:
        """The loop's first column and its iterations: columns whose outputs are all in the row and whose next
        column is inside the input."""
        first = max(0, 2 - self.left)
        last = min(self.width - 2, self.stride * (self.out_width - 1) - self.left)
        return first, max(0, (last - first + 1) // self.period)


def arguments(band: Band) -> list[str]:
    """The argument block's i64 words, in order (the caller fills them)."""
    return ([f"in{i}" for i in range(band.in_rows)] + [f"out{o}" for o in range(band.rows)]
            + ["end", "stride", "out_stride", "lo", "hi", "nan", "vl", "weights", "bias"])


Insn = tuple


@dataclass
class Op:
    insn: Insn
    reads: tuple
    writes: tuple
    kind: str


LATENCY = {"vfmacc.vv": 5, "vfmadd.vv": 5, "vle32.v": 3, "vse32.v": 3, "vadd.vv": 4, "vmsltu.vx": 4, "vmax.vx": 4,
           "vminu.vx": 4, "vmv.v.v": 4, "add": 1, "bne": 1, "addi": 1, "jalr": 1, "vsetvli": 1, "ld": 3, "sd": 1}
UNIT = {"vfmacc.vv": ("VFP", 1), "vfmadd.vv": ("VFP", 1), "vle32.v": ("VLS", 3), "vse32.v": ("VLS", 3),
        "vadd.vv": ("VIEU", 2), "vmsltu.vx": ("VIEU", 2), "vmax.vx": ("VIEU", 1), "vminu.vx": ("VIEU", 1),
        "vmv.v.v": ("VIEU", 2), "add": ("ALU", 1), "bne": ("ALU", 1), "addi": ("ALU", 1), "jalr": ("ALU", 1),
        "vsetvli": ("ALU", 1), "ld": ("LSU", 1), "sd": ("LSU", 1)}
"""llvm-mca-22's SpacemitX60 at e32 m1 (docs/RISCV_KERNELS.md): latency and cycles of the unit per instruction;
two ALUs (the prologue's scalar loads and stores approximately)."""


class Machine:
    """The issue state of an in-order dual-issue core as llvm-mca models it: `at(op)` the cycle op would issue if
    placed next, `place(op)` places it."""

    def __init__(self):
        self.cycle, self.issued, self.write_back = 0, 0, 0
        self.ready: dict = {}
        self.busy = {"VFP": [0], "VLS": [0], "VIEU": [0], "ALU": [0, 0], "LSU": [0]}

    def at(self, op: Op) -> int:
        mn = op.insn[0]
        t = self.cycle + (self.issued >= 2)
        t = max([t, *(self.ready.get(r, 0) for r in op.reads)])
        t = max(t, min(self.busy[UNIT[mn][0]]), self.write_back - LATENCY[mn])
        return t

    def place(self, op: Op) -> int:
        t, mn = self.at(op), op.insn[0]
        self.issued = self.issued + 1 if t == self.cycle else 1
        self.cycle = t
        units = self.busy[UNIT[mn][0]]
        units[units.index(min(units))] = t + UNIT[mn][1]
        self.write_back = max(self.write_back, t + LATENCY[mn])
        for r in op.writes:
            self.ready[r] = t + LATENCY[mn]
        return t


def rank(machine: Machine, op: Op, latency: dict = LATENCY, early: tuple = ("vle32.v", "vse32.v")) -> float:
    """An op's rank as the next one: its issue cycle, plus the cycles it would push the write-back horizon (every later
    op with a shorter latency waits for it), less half a cycle for a load or store (`early`: each needs a cycle
    without a multiply-add before it: better early, beside the horizon it leaves)."""
    t = machine.at(op)
    return t + max(0, t + latency[op.kind] - machine.write_back) - 0.5 * (op.kind in early)


ADD_GROUP = {1: 2, 2: 2.5}
"""By stride: pointer additions wait until this many per output row are ready (or nothing else is), then go out
together: an `add` issues only once every write-back before it is done (3-4 cycles after a multiply-add), so each
group costs that wait once (llvm-mca-22, the loops with the Clip: stride 1 414 cycles one by one, 406 in groups of 2
per row, 495 in groups of 2.5 or more; stride 2, 4 rows: 168 / 160 / 162 in groups of 1 / 2 / 2.5, 184 in groups
of 3; 3 rows: 133 / 135 / 128, 144)."""


def schedule(ops: list[Op], group: float, machine=None, latency: dict = LATENCY,
             early: tuple = ("vle32.v", "vse32.v")) -> list[Op]:
    """A greedy list schedule: next, among the ops whose predecessors (true, anti and output dependencies through
    registers, in the given order) are placed, the one of the lowest `rank`, ties to the longest path to the end;
    the pointer additions in groups of `group`. `machine` (default an X60 `Machine`), `latency` and `early`: the
    core's issue model (kernels/depthwise_stride2.py passes the U74's)."""
    n = len(ops)
    preds: list[set] = [set() for _ in range(n)]
    last_write: dict = {}
    reads_since: dict = {}
    for j, op in enumerate(ops):
        for r in op.reads:
            if r in last_write:
                preds[j].add(last_write[r])
        for r in op.writes:
            if r in last_write:
                preds[j].add(last_write[r])
            preds[j].update(reads_since.get(r, ()))
        for r in op.reads:
            reads_since.setdefault(r, []).append(j)
        for r in op.writes:
            last_write[r], reads_since[r] = j, []
        preds[j].discard(j)
    succs: list[list] = [[] for _ in range(n)]
    for j in range(n):
        for p in preds[j]:
            succs[p].append(j)
    height = [0] * n
    for j in reversed(range(n)):
        height[j] = latency[ops[j].insn[0]] + max((height[s] for s in succs[j]), default=0)
    left = [len(p) for p in preds]
    ready = {j for j in range(n) if not left[j]}
    machine, out, grouping = machine or Machine(), [], False
    while ready:
        adds = [j for j in ready if ops[j].kind == "add"]
        grouping = bool(adds) and (grouping or len(adds) >= group or len(adds) == len(ready))
        pool = adds if grouping else [j for j in ready if ops[j].kind != "add"]
        j = min(pool, key=lambda j: (rank(machine, ops[j], latency, early), -height[j], j))
        ready.discard(j)
        machine.place(ops[j])
        out.append(ops[j])
        for s in succs[j]:
            left[s] -= 1
            if not left[s]:
                ready.add(s)
    return out


def program(band: Band) -> list[Insn]:
    """The band's routine: a0 the argument block (`arguments`)."""
    R, P, S = band.rows, band.period, band.stride
    names = arguments(band)
    regs = dict(zip([n for n in names if n not in ("vl", "weights", "bias")], ALU))
    saved = [r for r in regs.values() if r in CALLEE_SAVED]
    inp, outp = [regs[f"in{i}"] for i in range(band.in_rows)], [regs[f"out{o}"] for o in range(R)]
    stride, out_stride = regs["stride"], regs["out_stride"]
    temp = regs["end"]  # the weights' and the bias's pointer before END is loaded
    code: list[Insn] = []
    if saved:
        code += [("addi", 2, 2, -8 * len(saved))] + [("sd", r, 2, 8 * q) for q, r in enumerate(saved)]
    word = {n: 8 * q for q, n in enumerate(names)}
    code += [("ld", temp, 10, word["vl"]), ("vsetvli", 0, temp, VTYPE), ("ld", temp, 10, word["weights"])]
    for t in range(9):
        code += [("vle32.v", WEIGHTS + t, temp, 0), ("addi", temp, temp, 4 * LANES)]
    code += [("ld", temp, 10, word["bias"]), ("vle32.v", BIAS, temp, 0)]
    code += [("ld", r, 10, word[n]) for n, r in regs.items()]
    ow, left, lo, hi, nan = band.out_width, band.left, regs["lo"], regs["hi"], regs["nan"]
    starter = lambda i: i % S == 0 and i // S < R  # noqa: E731  (input rows that start an output)
    starts = lambda u, i: (u + left) % S == 0 and starter(i)  # noqa: E731
    extras: dict = {}  # (column class, input row) -> register
    for cls in range(band.sets):
        for i in range(band.in_rows):
            if not (starter(i) and (S == 1 or cls == 0)):
                extras[cls, i] = ACC0 + band.slots * R + len(extras)
    if ACC0 + band.slots * R + len(extras) > 30:  # stride 2: an odd column's last rows take the even column's
        even = [ACC0 + band.slots * R + n for n in range(sum(cls == 0 for cls, _ in extras))]
        own = list(range(even[-1] + 1, 30))
        extras = {**{key: even[n] for n, key in enumerate(k for k in extras if k[0] == 0)},
                  **{(1, i): (own + even)[i] for i in range(band.in_rows)}}
        assert len(own + even) >= band.in_rows, band

    def acc(o: int, c: int) -> int:
        return ACC0 + band.slots * o + c % band.slots

    def x_reg(u: int, i: int) -> int:
        if starts(u, i):
            return acc(i // S, (u + left) // S)
        return extras[(u + left) % 2 if S == 2 else u % band.sets, i]

    def op(insn: Insn, reads=(), writes=()) -> Op:
        return Op(insn, tuple(reads), tuple(writes), insn[0])

    def loads(u: int) -> list[Op]:
        if not 0 <= u < band.width:
            return []
        ops = []
        for i in range(band.in_rows):
            x, p = x_reg(u, i), inp[i]
            ops += [op(("vle32.v", x, p, 0), [f"x{p}"], [f"v{x}"]),
                    op(("add", p, p, stride), [f"x{p}"], [f"x{p}"])]
        return ops

    def taps(u: int) -> list[Op]:
        c0, ops = (u + left) // S, []
        if not 0 <= u < band.width:
            return [op(("vmv.v.v", acc(o, c0), BIAS), [f"v{BIAS}"], [f"v{acc(o, c0)}"]) for o in range(R)
                    if (u + left) % S == 0 and c0 < ow]
        for i in range(band.in_rows):
            x, start = x_reg(u, i), None
            for kh in range(3):
                o = (i - kh) // S
                if (i - kh) % S or not 0 <= o < R:
                    continue
                for kw in (2, 1, 0):
                    c = (u + left - kw) // S
                    if (u + left - kw) % S or not 0 <= c < ow:
                        continue
                    if kh == 0 and kw == 0:
                        start = op(("vfmadd.vv", x, WEIGHTS, BIAS), [f"v{x}", f"v{WEIGHTS}", f"v{BIAS}"], [f"v{x}"])
                        continue
                    a, w = acc(o, c), WEIGHTS + 3 * kh + kw
                    ops.append(op(("vfmacc.vv", a, w, x), [f"v{a}", f"v{w}", f"v{x}"], [f"v{a}"]))
            ops += [start] if start else []
        return ops

    def finish(u: int) -> list[Op]:
        c, ops = (u + left - 2) // S, []
        if (u + left - 2) % S or not 0 <= c < ow:
            return []
        for o in range(R):
            a, q, t = acc(o, c), outp[o], 30 + o % 2
            if band.act != "none":
                ops += [op(("vadd.vv", t, a, a), [f"v{a}"], [f"v{t}"]),
                        op(("vmsltu.vx", MASK, t, nan), [f"v{t}", f"x{nan}"], ["v0"]),
                        op(("vmax.vx", a, a, lo, MASK), [f"v{a}", f"x{lo}", "v0"], [f"v{a}"])]
                if band.act == "clip":
                    ops.append(op(("vminu.vx", a, a, hi, MASK), [f"v{a}", f"x{hi}", "v0"], [f"v{a}"]))
            ops += [op(("vse32.v", a, q, 0), [f"v{a}", f"x{q}"], ["mem"]),
                    op(("add", q, q, out_stride), [f"x{q}"], [f"x{q}"])]
        return ops

    def window(us) -> list[Insn]:
        ops = []
        for u in us:
            ops += taps(u) + finish(u) + loads(u + 1)
        return [o.insn for o in schedule(ops, ADD_GROUP[S] * R)]

    first, iterations = band.steady()
    u_end = band.width - 1 + band.right
    head = loads(-left) if -left >= 0 else []  # the first loaded column's loads, when it is not padding
    code += [o.insn for o in schedule(head, ADD_GROUP[S] * R)] + window(range(-left, first))
    if iterations:
        top = len(code)
        code += window(range(first, first + P))
        code.append(("bne", inp[0], regs["end"], top))
    code += window(range(first + iterations * P, u_end + 1))
    code += [("ld", r, 2, 8 * q) for q, r in enumerate(saved)]
    if saved:
        code.append(("addi", 2, 2, 8 * len(saved)))
    return code + [("jalr", 0, 1, 0)]


def loop_end_columns(band: Band) -> int:
    """Columns input row 0's pointer has moved when the loop ends (its `end` is that many strides on)."""
    first, iterations = band.steady()
    return first + 1 + iterations * band.period


def dataflow(insn: Insn) -> Op:
    """The instruction with the registers it reads and writes (v0 for a mask; an accumulate or a masked op reads
    its destination; a store or branch writes none)."""
    op, *args = insn
    if op == "bne":
        return Op(insn, (f"x{args[0]}", f"x{args[1]}"), (), op)
    kinds = SYNTAX[op]
    kinds = [kinds[0], "x", "i"] if kinds.endswith("()") else list(kinds)
    regs = ["v0" if k == "m" else f"{k}{a}" for k, a in zip(kinds, args) if k != "i"]
    if op in ("vse32.v", "sd"):
        return Op(insn, tuple(regs), (), op)
    keeps = op in ("vfmacc.vv", "vfmadd.vv") or "m" in kinds
    return Op(insn, tuple(regs if keeps else regs[1:]), (regs[0],), op)


@lru_cache(maxsize=256)
def cycles(band: Band) -> int:
    """The routine's cycles from its first instruction to its return, issued by `Machine` (its loop within a cycle
    of llvm-mca-22's: tests/test_riscv_x60_routine.py): the cost model's price of a band (fluid/depthwise_costs.py)."""
    code = program(band)
    ends = [i for i, insn in enumerate(code) if insn[0] == "bne"]
    run = code
    if ends:
        end, iterations = ends[0], band.steady()[1]
        run = code[:code[end][3]] + code[code[end][3]:end + 1] * iterations + code[end + 1:]
    machine = Machine()
    for insn in run:
        machine.place(dataflow(insn))
    return machine.write_back


VTYPE = 0x50
"""e32, m1, tail agnostic, mask undisturbed (a masked Clip keeps a NaN lane's value)."""


def _v(funct6: int, funct3: int, masked: bool = False):
    """OP-V: vd, then vs2 / vs1-or-rs1 in llvm-mc's operand order for the mnemonic."""
    def word(vd, a, b, mask=None):
        vs2, vs1 = (b, a) if funct3 in (1, 5) and funct6 >= 0x28 else (a, b)
        return funct6 << 26 | (mask is None) << 25 | vs2 << 20 | vs1 << 15 | funct3 << 12 | vd << 7 | 0x57
    return word


WORDS = {
    **ENCODERS,
    "sd": lambda rs2, rs1, imm: s_type(0x23, 3, rs2, rs1, imm),
    "vle32.v": lambda vd, rs1, imm: 1 << 25 | rs1 << 15 | 6 << 12 | vd << 7 | 0x07,
    "vse32.v": lambda vs3, rs1, imm: 1 << 25 | rs1 << 15 | 6 << 12 | vs3 << 7 | 0x27,
    "vsetvli": lambda rd, rs1, vtype: vtype << 20 | rs1 << 15 | 7 << 12 | rd << 7 | 0x57,
    "vfmacc.vv": _v(0x2C, 1), "vfmadd.vv": _v(0x28, 1),
    "vadd.vv": _v(0x00, 0), "vmsltu.vx": _v(0x1A, 4), "vmax.vx": _v(0x07, 4), "vminu.vx": _v(0x04, 4),
    "vmv.v.v": lambda vd, vs1: 0x17 << 26 | 1 << 25 | vs1 << 15 | vd << 7 | 0x57,
}
"""RV64GCV's words of the routine's instructions (the V extension's OP-V, unit-stride load and store, vsetvli)."""

SYNTAX = {**TILE_SYNTAX, "sd": "x,x()", "vle32.v": "v,x()", "vse32.v": "v,x()", "vsetvli": "xxi",
          "vfmacc.vv": "vvv", "vfmadd.vv": "vvv", "vadd.vv": "vvv", "vmsltu.vx": "vvx", "vmax.vx": "vvxm",
          "vminu.vx": "vvxm", "vmv.v.v": "vv"}
"""Each mnemonic's operands for llvm-mc (v a vector register, m the mask v0.t)."""


def encode(code: list[Insn]) -> list[int]:
    """The routine's instruction words."""
    return encode_words(code, WORDS)


def text(code: list[Insn]) -> str:
    """The routine as assembly (llvm-mc syntax; labels .L<index>)."""
    return tile_text(code, SYNTAX)


def for_cpu(triple: str, cpu: str, features: str) -> bool:
    """An X60 (CPUS) with V at VLEN >= 256."""
    return bool(triple) and arch_of(triple).riscv and cpu in CPUS and riscv_vlen(features) >= 32 * LANES


def takes(k) -> bool:
    """The kernel is emitted for a CPU the routine is for (`for_cpu`)."""
    spec = k.spec
    return spec is not None and for_cpu(spec.triple, spec.cpu, spec.features)


def clip_form(epilogue) -> tuple[str, int, int] | None:
    """The routine's activation ("none", "relu", "clip") and its bounds' bits, or None when it has no form for the
    epilogue (a residual, a lower bound below +0 or none with an upper one, other activations)."""
    act = activation(epilogue)
    if act is None:
        return None
    clip, low, high = act
    if not clip:
        return "none", 0, 0
    if low is None or low < 0 or np.signbit(np.float32(low)):
        return None
    bits = lambda v: int(np.float32(v).view(np.int32))
    return ("relu", bits(low), 0) if high is None else ("clip", bits(low), bits(high))


def bands(h: int, width: int, oh_count: int, ow_count: int, top: int, left: int, act: str,
          stride: int = 1) -> list[Band] | None:
    """The bands of a 3 x 3 plane at stride 1 or 2 (h x width in, oh_count x ow_count out), or None when the padding
    the outputs read is over 2."""
    right = max(0, stride * (ow_count - 1) + 3 - width - left)  # the last input column may be unread at stride 2
    if stride not in ROWS or not (0 <= top <= 2 and 0 <= left <= 2 and right <= 2):
        return None
    rows = ROWS[stride]
    plane = [Band(min(rows, oh_count - oh0), width, left, right, act, stride) for oh0 in range(0, oh_count, rows)]
    return plane if plane and plane[0].out_width == ow_count else None


def call(k, band: Band, block: dict) -> None:
    """Run the band's routine (one per band shape, in the module's SECTION) with the argument block's values
    (`arguments`: i64 values or pointers)."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    name = f"fxc.rvv_depthwise.r{band.rows}.w{band.width}.p{band.left}{band.right}.s{band.stride}.{band.act}"
    routine = k.module.globals.get(name)
    if routine is None:
        words = encode(program(band))
        routine = ir.GlobalVariable(k.module, ir.ArrayType(i32, len(words)), name)
        routine.initializer = ir.Constant(routine.type.pointee, words)
        routine.global_constant, routine.linkage, routine.align = True, "private", 4
        routine.section = SECTION
    b, names = k.b, arguments(band)
    with b.goto_entry_block():
        args = b.alloca(ir.ArrayType(i64, len(names)))
    for q, n in enumerate(names):
        v = block[n]
        v = b.ptrtoint(v, i64) if isinstance(v.type, ir.PointerType) else b.sext(v, i64) if v.type.width < 64 else v
        b.store(v, b.gep(args, [i32(0), i32(q)], inbounds=True))
    fn_type = ir.FunctionType(ir.VoidType(), [i64.as_pointer()])
    b.call(b.bitcast(routine, fn_type.as_pointer()), [b.bitcast(args, i64.as_pointer())])
