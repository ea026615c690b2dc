#!/usr/bin/env python3
"""Hand-scheduled channels-last depthwise 3x3 rows for the SpacemiT X60 through llvm-mca-22: the bounds
docs/RISCV_KERNELS.md derives ("Depthwise on RISC-V").

    python benchmarks/x60_depthwise.py [--mca llvm-mca-22] [--asm-dir DIR]
    python benchmarks/x60_depthwise.py --rows 5 --columns 3 --copies 2 [--show] [--search] [--int-clip]
    python benchmarks/x60_depthwise.py --llvm     # the same rows as LLVM IR, scheduled by llvmlite's LLVM

LMUL 2, one output row (`rolling`): a rolling window over one output row of 16 channels (e32, LMUL 2): each input
column is loaded once (its 3 kernel rows, one `vle32.v` each) and feeds the 3 output pixels that use it (`vfmacc.vv`
with the kernel column's weight); the pixel the column completes is clipped to [0, 6] as kernels/epilogue.py does
it (vfmax / vfmin, the NaN lanes kept by a masked vfmin from `x + x` above 0xFF000000) and stored. Registers: 9
weights (v10-v26), the bias (v8, the first tap's vfmadd adds it), the mask (v0) and 5 rotating groups. The roles
rotate by one group per column, so a loop iteration is 5 columns with every pointer increment grouped at its top.
Per pixel: 3 loads + 1 store (16 VLS cycles), 9 vfmacc (18 VFP) + the Clip (4 VFP, 8 VIEU).

LMUL 1, R output rows (`multirow`): 8 channels, R output rows x U columns per iteration. Input column j's R + 2
rows are loaded once each and streamed: row i's vector feeds every tap that reads it (up to 9: kernel rows i - o
of output rows o, kernel columns 2, 1, 0 of output columns j - 2, j - 1, j), the last one a `vfmadd` that turns
it into output (i, j)'s accumulator (the bias added), so no register is copied. An output completed by its
kernel column 2 is clipped (as above) and stored. The order is a greedy list schedule (x60_schedule.py) over a
model of the X60's in-order issue as llvm-mca applies it: dual issue, the units' occupancy (VFP 1 cycle per m1
op, VLS 3, VIEU 2, two integer ALUs), latencies, and write-backs in program order; registers are then coloured
per accumulator chain, the chains carried into the next iteration pinned to the registers they came in. One
`addi` per load and store moves its pointer to the next column that uses it (RVV loads take no offset);
`--copies m` pointers per row (m = U: each moved once per iteration); `--int-clip`: the first tap a `vfmul`, the
bias a `vfadd` after the last, the Clip to [0, 6] on the integer unit (`vmax.vx` / masked `vmin.vx` on the bits); `--indexed`: one input and one output pointer per column, the rows' vectors by
`vluxei32.v` / `vsuxei32.v` at a register of offsets per row (4 VLS cycles, latency 4 in the model: not a
measured X60 cost). `--search` refines the greedy order by moving single ops while the model's cycles drop.
The first table (`rules`) prints the in-order issue costs the bound counts; the second (`synthetic`) checks the
bound's accounting: loops with the op counts and places the bound assumes
and no true dependencies, priced by llvm-mca-22.
% of peak = 9 R U `vfmacc` per iteration / cycles (one e32 m1 `vfmacc` per cycle: mca.py's riscv_peak); the
second figure counts the Clip's `vfmax` / `vfmin` as work too. tests/test_riscv_x60_depthwise.py runs the
loops through an interpreter of their instructions against NumPy.
"""
from __future__ import annotations

import argparse
import random
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from x60_schedule import allocate, build, dependencies, emit, mca, pin_deps, pointer_ops, refine, schedule

FEATURES = "+m,+a,+f,+d,+c,+v,+zvl256b"


WEIGHT = {(kh, kw): f"v{10 + 2 * (3 * kh + kw)}" for kh in range(3) for kw in range(3)}


def rolling(pixels: int) -> list[str]:
    """The loop body: pixels columns, every group role rotated once per column."""
    free = [f"x{i}" for i in range(5, 32) if i not in (11, 16, 17)]  # a1: the end, a6: the NaN bound, a7: the step
    loads, stores = free[:3 * pixels], free[3 * pixels:4 * pixels]
    lines = [f"add {p}, {p}, a7" for p in loads + stores]
    x0, x1, done, a2, a1 = "v2", "v4", "v6", "v28", "v30"
    w = WEIGHT
    for j in range(pixels):
        row = loads[3 * j:3 * j + 3]
        lines += [f"vfmacc.vv {a2}, {w[0, 2]}, {x0}", f"vadd.vv v0, {done}, {done}",
                  f"vfmacc.vv {a1}, {w[0, 1]}, {x0}", f"vfmax.vf {done}, {done}, fa5",
                  f"vfmadd.vv {x0}, {w[0, 0]}, v8", "vmsltu.vx v0, v0, a6",
                  f"vfmacc.vv {a2}, {w[1, 2]}, {x1}", f"vfmin.vf {done}, {done}, fa4, v0.t",
                  f"vfmacc.vv {a1}, {w[1, 1]}, {x1}", f"vse32.v {done}, ({stores[j]})", f"vle32.v {done}, ({row[2]})",
                  f"vfmacc.vv {x0}, {w[1, 0]}, {x1}", f"vle32.v {x1}, ({row[0]})",
                  f"vfmacc.vv {a2}, {w[2, 2]}, {done}", f"vfmacc.vv {a1}, {w[2, 1]}, {done}",
                  f"vfmacc.vv {x0}, {w[2, 0]}, {done}", f"vle32.v {done}, ({row[1]})"]
        x0, x1, done, a2, a1 = x1, done, a2, a1, x0
    return lines + [f"bne {loads[0]}, a1, .Lhot"]


def mca_m2(tool: str, body: list[str]) -> tuple[float, float]:
    asm = "# LLVM-MCA-RISCV-LMUL M2\n# LLVM-MCA-RISCV-SEW E32\n.Lhot:\n" + "\n".join(body) + "\n"
    out = subprocess.run([tool, "-mtriple=riscv64", "-mcpu=spacemit-x60", f"-mattr={FEATURES}", "-iterations=200"],
                         input=asm, capture_output=True, text=True, check=True).stdout
    return (int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200,
            float(re.search(r"Block RThroughput:\s+([\d.]+)", out).group(1)))


@dataclass
class Loop:
    body: list[str]
    """The loop's instructions, the branch last."""
    cycles: int
    """One iteration's cycles on the scheduler's model."""
    registers: dict
    """Pointer name (pi{row}_{copy}, po{row}_{copy}; indexed: pi_{copy}, po_{copy}) or carried-in accumulator
    (in2_{row}: output column -2 after kernel columns 0 and 1, in1_{row}: column -1 after kernel column 0) ->
    its register."""


def multirow(rows: int, columns: int, copies: int, indexed: bool = False, search: bool = False,
             int_clip: bool = False, restarts: int = 0) -> Loop:
    """The LMUL-1 loop of rows x columns: its instructions and the model's cycles for one iteration. restarts:
    that many more greedy orders with random tie-breaks (seeded), the best kept (with search: the best 4 refined)."""
    ops, carried_in, carried_out = build(rows, columns, copies, indexed, int_clip)
    ops = pointer_ops(ops)
    pool = [f"v{i}" for i in range(11 + (rows + 2) * indexed, 32)]
    extra = pin_deps(ops, carried_in, carried_out)
    found = []
    for k in range(restarts + 1):
        rnd = random.Random(k)
        try:
            found.append(schedule(ops, len(pool), extra, [rnd.uniform(0, 10) for _ in ops] if k else None)[::-1])
        except RuntimeError:  # a tie-break that ran the registers out
            continue
    found.sort(key=lambda t: t[0])
    cycles, seq = found[0]
    if search:
        deps = dependencies(ops, extra)[0]
        cycles, seq = min((refine(ops, seq, deps, len(pool), carried_out)[::-1] for _, seq in found[:4]),
                          key=lambda t: t[0])
    order = [ops[i] for i in seq]
    regmap = allocate(order, carried_in, carried_out, pool)
    ints = [f"x{i}" for i in (1, 3, 4, *range(5, 32)) if i not in (11, 16, 17)]  # a1 end, a6 NaN bound, a7 left free
    ptrs = sorted({op.ptr for op in order if op.mn == "add"})
    if len(ptrs) > len(ints):
        raise ValueError(f"{len(ptrs)} pointers for {len(ints)} integer registers: fewer --copies")
    ptrmap = dict(zip(ptrs, ints))
    return Loop(emit(order, regmap, ptrmap) + [f"bne {ptrmap[ptrs[0]]}, a1, .Lhot"], cycles,
                {**ptrmap, **{v: regmap[v] for v in carried_in}})


def llvm_ir(rows: int, columns: int = 3) -> str:
    """The same rows x columns rolling window as LLVM IR (8-float vectors, llvm.fma, the Clip as
    kernels/epilogue.py's RVV form): what LLVM's own scheduler makes of it."""
    vec = "<8 x float>"
    six = ", ".join(["float 6.0"] * 8)
    nan = ", ".join(["i32 -16777216"] * 8)
    args = [f"ptr %x{i}" for i in range(rows + 2)] + [f"ptr %o{o}" for o in range(rows)] + ["ptr %w", f"{vec} %bias",
                                                                                          "i64 %n", "i64 %cs"]
    lines = [f"define void @dw({', '.join(args)}) {{", "entry:"]
    for k in range(9):
        lines += [f"  %wp{k} = getelementptr float, ptr %w, i64 {8 * k}", f"  %w{k} = load {vec}, ptr %wp{k}, align 4"]
    lines += ["  br label %loop", "loop:", "  %j = phi i64 [0, %entry], [%jn, %loop]"]
    lines += [f"  %A{age}_{o} = phi {vec} [%bias, %entry], [NEXT{age}_{o}, %loop]" for o in range(rows) for age in (2, 1)]
    older, old = {o: f"%A2_{o}" for o in range(rows)}, {o: f"%A1_{o}" for o in range(rows)}
    n = 0

    def fma(w, x, acc):
        nonlocal n
        n += 1
        lines.append(f"  %f{n} = call {vec} @llvm.fma.v8f32({vec} %w{w}, {vec} {x}, {vec} {acc})")
        return f"%f{n}"
    for u in range(columns):
        lines += [f"  %c{u} = add i64 %j, {u}", f"  %off{u} = mul i64 %c{u}, %cs"]
        for i in range(rows + 2):
            lines += [f"  %xp{u}_{i} = getelementptr float, ptr %x{i}, i64 %off{u}",
                      f"  %X{u}_{i} = load {vec}, ptr %xp{u}_{i}, align 4"]
        new = {}
        for o in range(rows):
            done, mid, fresh = older[o], old[o], "%bias"
            for kh in range(3):
                x = f"%X{u}_{o + kh}"
                done, mid, fresh = fma(3 * kh + 2, x, done), fma(3 * kh + 1, x, mid), fma(3 * kh, x, fresh)
            old[o], new[o] = mid, fresh
            n += 1
            lines += [f"  %mx{n} = call {vec} @llvm.maxnum.v8f32({vec} {done}, {vec} zeroinitializer)",
                      f"  %mn{n} = call {vec} @llvm.minnum.v8f32({vec} %mx{n}, {vec} <{six}>)",
                      f"  %bi{n} = bitcast {vec} {done} to <8 x i32>", f"  %b2{n} = add <8 x i32> %bi{n}, %bi{n}",
                      f"  %nan{n} = icmp ugt <8 x i32> %b2{n}, <{nan}>",
                      f"  %cl{n} = select <8 x i1> %nan{n}, {vec} {done}, {vec} %mn{n}",
                      f"  %op{u}_{o} = getelementptr float, ptr %o{o}, i64 %off{u}",
                      f"  store {vec} %cl{n}, ptr %op{u}_{o}, align 4"]
        older, old = old, new
    text = "\n".join(lines + ["  %jn = add i64 %j, 3", "  %end = icmp sge i64 %jn, %n",
                              "  br i1 %end, label %exit, label %loop", "exit:", "  ret void", "}"])
    for o in range(rows):
        text = text.replace(f"NEXT2_{o},", f"{older[o]},").replace(f"NEXT1_{o},", f"{old[o]},")
    decl = [f"declare {vec} @llvm.{f}.v8f32({', '.join([vec] * k)})" for f, k in (("fma", 3), ("maxnum", 2), ("minnum", 2))]
    return text + "\n" + "\n".join(decl) + "\n"


def llvm_loop(rows: int) -> list[str]:
    """llvm_ir compiled by llvmlite's LLVM for the bpi-f3 (spacemit-x60): the loop's instructions."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    mod = llvm.parse_assembly(llvm_ir(rows))
    mod.triple = "riscv64-unknown-linux-gnu"
    tm = llvm.Target.from_triple(mod.triple).create_target_machine(cpu="spacemit-x60", features=FEATURES + ",+zicond",
                                                                    opt=3, reloc="pic")
    asm = [line.strip() for line in tm.emit_assembly(mod).splitlines()]
    start = next(k for k, line in enumerate(asm) if re.match(r"\.LBB0_\d+:", line) and k > 0)
    end = next(k for k, line in enumerate(asm) if k > start and line.startswith("b") and asm[start][:-1] in line)
    return [line for line in asm[start + 1:end + 1] if line and not line.startswith((".", "#"))]


def per_column(rows: int, int_clip: bool = False) -> float:
    """Cycles per output column no unit-stride order beats, columns per iteration unbounded (docs/RISCV_KERNELS.md):
    11 R vector FP ops (9 R vfmacc, the Clip's vfmax and vfmin; int_clip: 8 R vfmacc, R vfmul, R vfadd), 1 cycle
    per VLS op (2 R + 2) beyond the 2 R that follow a latency-4 FP op, half a cycle per add (one per VLS op), 1.5
    cycles per group of adds, a group per 27 pointers."""
    vls = 2 * rows + 2
    return (10 if int_clip else 11) * rows + (vls - 2 * rows) + vls / 2 + 1.5 * vls / 27


def synthetic(rows: int, columns: int, groups: int) -> list[str]:
    """A loop with the op counts and places of the bound and no true dependencies: per column 9 R vfmacc and 2 R
    Clip ops (latency 4) each followed by a VLS op, the column's 2 other VLS ops after a vfmacc (one of them after
    the adds where a group starts), (2 R + 2) x columns adds in `groups` groups, the branch."""
    ints = [f"x{i}" for i in (1, 3, 4, *range(5, 32)) if i not in (11, 16, 17)]
    body, fma, moved = [], 0, 0
    adds = (2 * rows + 2) * columns
    starts = {round(g * columns / groups) for g in range(groups)}
    for j in range(columns):
        col, extra = [], 2
        if j in starts:
            n = min(-(-adds // groups), adds - moved)
            body += [f"add {ints[(moved + t) % len(ints)]}, {ints[(moved + t) % len(ints)]}, a7" for t in range(n)]
            body.append("vle32.v v31, (a5)")
            moved, extra = moved + n, 1
        for c in range(2 * rows):
            for _ in range(4 if c % 2 else 5):
                col.append(f"vfmacc.vv v{11 + fma % 16}, v1, v2")
                fma += 1
            col += ["vfmax.vf v29, v3, fa5", "vse32.v v27, (a2)"] if c % 2 else ["vfmin.vf v28, v4, fa4, v0.t", "vle32.v v30, (a3)"]
        for e in range(extra):
            k = [i for i, line in enumerate(col) if line.startswith("vfmacc")][2 + e * len(col) // 3]
            col.insert(k + 1, "vle32.v v26, (a4)")
        body += col
    return body + ["bne x31, a1, .Lhot"]


def rules(tool: str) -> list[tuple[str, float]]:
    """The in-order issue costs the bound counts, each as a loop of 16 independent e32 m1 vfmacc and the branch."""
    fm = [f"vfmacc.vv v{8 + k}, v1, v2" for k in range(16)]
    adds = [f"add x{5 + k}, x{5 + k}, a7" for k in range(8)]
    loops = {"16 vfmacc": fm, "+ a vle32 after a vfmacc": fm[:8] + ["vle32.v v30, (a0)"] + fm[8:],
             "+ 2 vle32 after vfmaccs": fm[:5] + ["vle32.v v30, (a0)"] + fm[5:10] + ["vle32.v v31, (a2)"] + fm[10:],
             "15 vfmacc + vfmax, a vle32 after the vfmax": fm[:8] + ["vfmax.vf v29, v3, fa5", "vle32.v v30, (a0)"] + fm[9:],
             "+ 8 adds beside the branch": fm + adds, "+ 8 adds in 2 groups": fm[:8] + adds[:4] + fm[8:] + adds[4:],
             "+ 8 adds and a vle32 before them": fm + ["vle32.v v30, (a0)"] + adds}
    return [(name, mca(body + ["bne x31, a1, .Lhot"], tool)[0]) for name, body in loops.items()]


SYNTHETIC = ((3, 3, 1), (4, 3, 1), (5, 3, 2), (6, 3, 2), (7, 3, 3))
"""(rows, columns, add groups): columns 3 at least (the accumulators' registers return after 3), 27 pointers a group."""


CASES = ((3, 3, 3, False), (4, 3, 2, False), (5, 3, 2, False), (6, 3, 1, False), (3, 3, 3, True), (4, 3, 3, True))
"""(rows, columns, pointers per row, indexed) of the default table."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--mca", default="llvm-mca-22", help="an llvm-mca with the SpacemitX60 model (LLVM 21+)")
    ap.add_argument("--rows", type=int, help="LMUL 1: output rows per block (default: the table of CASES)")
    ap.add_argument("--columns", type=int, default=3, help="LMUL 1: output columns per loop iteration (3 at least)")
    ap.add_argument("--copies", type=int, default=2, help="LMUL 1: pointers per row (each moved copies columns on)")
    ap.add_argument("--indexed", action="store_true", help="LMUL 1: vluxei32 / vsuxei32, one pointer per column")
    ap.add_argument("--int-clip", action="store_true", help="LMUL 1: first tap vfmul, bias vfadd, Clip on the bits")
    ap.add_argument("--restarts", type=int, default=0, help="LMUL 1: more greedy orders, random tie-breaks")
    ap.add_argument("--search", action="store_true", help="LMUL 1: refine the greedy order by local search (slow)")
    ap.add_argument("--show", action="store_true", help="print the LMUL-1 loop")
    ap.add_argument("--llvm", action="store_true", help="LMUL 1: LLVM's own schedule of the rows (1 to 4)")
    ap.add_argument("--asm-dir", type=Path, help="write the loops here")
    args = ap.parse_args()
    if args.llvm:
        print("| rows | insn | vfmacc | stack | llvm-mca-22 cycles | % of peak |\n|---:|---:|---:|---:|---:|---:|")
        for rows in range(1, 5):
            body = llvm_loop(rows)
            cycles, _ = mca(body, args.mca)
            print(f"| {rows} | {len(body)} | {sum(line.startswith('vfmacc') for line in body)} | "
                  f"{sum('(sp)' in line for line in body)} | {cycles:.1f} | {27 * rows / cycles:.1%} |")
        return 0
    body = rolling(5)
    cycles, rthr = mca_m2(args.mca, body)
    print(f"LMUL 2, one row, rolling window, 5 pixels x 16 channels: {len(body)} instructions, {cycles:.1f} cycles "
          f"({90 / cycles:.1%} of peak), resource bound {rthr:.1f} ({90 / rthr:.1%})")
    if args.asm_dir:
        args.asm_dir.mkdir(parents=True, exist_ok=True)
        (args.asm_dir / "x60-dw-rolling-5.s").write_text("\n".join(body) + "\n")
    print("| loop (llvm-mca-22, e32 m1) | cycles |\n|---|---:|")
    for name, cycles in rules(args.mca):
        print(f"| {name} | {cycles:.1f} |")
    print("| rows | columns | add groups | vfmacc | VLS ops | adds | llvm-mca-22 cycles | % of peak | bound |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rows, columns, groups in SYNTHETIC:
        body = synthetic(rows, columns, groups)
        cycles, _ = mca(body, args.mca)
        fma = 9 * rows * columns
        print(f"| {rows} | {columns} | {groups} | {fma} | {(2 * rows + 2) * columns} | {(2 * rows + 2) * columns} | "
              f"{cycles:.1f} | {fma / cycles:.1%} | {9 * rows / per_column(rows):.1%} |")
    print("| rows | columns | pointers per row | loads | insn | model cycles | llvm-mca-22 cycles | % of peak | "
          "with the Clip | bound (unit stride) |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    cases = [(args.rows, args.columns, args.copies, args.indexed)] if args.rows else CASES
    for rows, columns, copies, indexed in cases:
        loop = multirow(rows, columns, copies, indexed, search=args.search, int_clip=args.int_clip,
                        restarts=args.restarts)
        body, model = loop.body, loop.cycles
        cycles, _ = mca(body, args.mca)
        fma = 9 * rows * columns
        print(f"| {rows} | {columns} | {copies} | {'indexed' if indexed else 'unit stride'} | {len(body)} | {model} | "
              f"{cycles:.1f} | {fma / cycles:.1%} | {'' if args.int_clip else f'{11 * rows * columns / cycles:.1%}'} | "
              f"{'' if indexed else f'{9 * rows / per_column(rows, args.int_clip):.1%}'} |")
        if args.show:
            print("\n".join(body))
        if args.asm_dir:
            (args.asm_dir / f"x60-dw-rows{rows}x{columns}{'-indexed' if indexed else ''}.s").write_text("\n".join(body) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
