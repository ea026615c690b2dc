#!/usr/bin/env python3
"""NCHW depthwise 3x3 (stride 1, pads 1) + Clip on the SpacemiT X60 as a vertical rolling window, through llvm-mca-22:
the schedule docs/RISCV_KERNELS.md ("X60 NCHW depthwise") derives, checked against numpy before it is timed.

    python benchmarks/x60_nchw.py [--mca llvm-mca-22] [--llc llc-22] [--asm-dir DIR]

One strip of 16 columns (e32, LMUL 2) walks down a channel plane: each step loads one input row (one `vle32.v`
at the strip's column; its neighbours x[c-1] and x[c+16] by `lw` at immediate offsets; the kw = 0 and kw = 2
taps are `vslide1up.vx` / `vslide1down.vx` of it, on the vector integer unit) and gives that row's 9 taps to the 3
output rows it feeds (`vfmacc.vf`, the weights in 9 FP registers): the kh = 2 taps finish output row i - 1,
the kh = 1 taps go to row i, and the kh = 0 taps start row i + 1 (`vfmadd.vf` with the bias vector, in the
register of the input vector it consumes). Software-pipelined: during step i the loads of row i + 1 and the Clip
and store of row i - 2 (kernels/epilogue.py's form: `vfmax.vf` / masked `vfmin.vf`, the NaN lanes kept by
`x + x` <= 0xFF000000 on the integer unit) fill the slots between the multiply-adds. Per step: 1 vector load,
2 scalar loads, 1 store, 2 pointer `add`s, 9 multiply-adds + 2 Clip ops (22 VFP cycles at LMUL 2), 2 slides + 2
Clip mask ops (18 VIEU cycles). The 9 vector groups (this row's 3 taps, the next row's 3, the 2 accumulators and the
finished row) rotate once per step; 10 steps bring every role back to its register. ops/conv/strips.py is this
step in LLVM IR.

Prints the hand schedule's cycles per step (mca) and, with --llc, what llc-22 makes of the same operations written
as LLVM IR in the same order (fixed <16 x float> vectors, shuffles for the slides, llvm.fma / maxnum / minnum and
the select kernels/epilogue.py emits). % of peak = 9 x 2 x steps / cycles (mca.py's riscv_peak: one e32 LMUL-1
`vfmacc`, 8 lanes, per cycle); "with the Clip" also counts the 2 Clip FP ops per vector as work.
"""
from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import numpy as np

FEATURES = "+m,+a,+f,+d,+c,+v,+zvl256b,+zicond"
V = 16
WEIGHT = {(kh, kw): f"f{8 + 3 * kh + kw}" for kh in range(3) for kw in range(3)}
LO, HI = "ft0", "ft1"
GROUPS = [f"v{2 * i}" for i in range(3, 12)]  # v0: the mask, v2: the Clip's scratch, v4: the bias
# the best order found (hill climbing over the slots, each candidate checked against numpy): the VFP instructions
# one every 2 cycles, the others in the slot after the VFP instruction of the same index
VFP_ORDER = "m0 m1 m2 m3 m4 m5 vfmax m7 vfmin m6 m8"
OTHER_ORDER = "vle+vadd - mask lwl lwr - up - - down vse+adds+addp"


def step(regs, t):
    """One step's instructions by name: L M R (this row's taps), nL nM nR (next row's), A1 A2 (rows i, i - 1), C (row i - 2)."""
    L, M, R, nL, nM, nR, A1, A2, C = regs
    w = WEIGHT
    ins = {f"m{j}": x for j, x in enumerate([
        f"vfmacc.vf {A2}, {w[2, 0]}, {L}", f"vfmacc.vf {A1}, {w[1, 0]}, {L}", f"vfmadd.vf {L}, {w[0, 0]}, v4",
        f"vfmacc.vf {A2}, {w[2, 1]}, {M}", f"vfmacc.vf {A1}, {w[1, 1]}, {M}", f"vfmacc.vf {L}, {w[0, 1]}, {M}",
        f"vfmacc.vf {A2}, {w[2, 2]}, {R}", f"vfmacc.vf {A1}, {w[1, 2]}, {R}", f"vfmacc.vf {L}, {w[0, 2]}, {R}"])}
    left, right = f"t{2 * (t % 2) + 3}", f"t{2 * (t % 2) + 4}"
    ins.update(vadd=f"vadd.vv v2, {C}, {C}", mask="vmsleu.vx v0, v2, a6", vfmax=f"vfmax.vf v2, {C}, {LO}",
               vfmin=f"vfmin.vf {C}, v2, {HI}, v0.t", vse=f"vse32.v {C}, (a1)",
               vle=f"vle32.v {nM}, (a0)", lwl=f"lw {left}, -4(a0)", lwr=f"lw {right}, {4 * V}(a0)",
               up=f"vslide1up.vx {nL}, {nM}, {left}", down=f"vslide1down.vx {nR}, {nM}, {right}",
               adds="add a1, a1, a7", addp="add a0, a0, a7")
    return ins


def loop_body(vfp_order: str = VFP_ORDER, other_order: str = OTHER_ORDER) -> tuple[list[str], int]:
    """The loop: steps until the roles return to their registers."""
    regs, lines, steps = list(GROUPS), [], 0
    while True:
        ins = step(regs, steps)
        vfp, other = vfp_order.split(), other_order.split()
        for j in range(max(len(vfp), len(other))):
            lines += [ins[vfp[j]]] if j < len(vfp) else []
            lines += [ins[o] for o in other[j].split("+")] if j < len(other) and other[j] != "-" else []
        L, M, R, nL, nM, nR, A1, A2, C = regs
        regs, steps = [nL, nM, nR, C, M, R, L, A1, A2], steps + 1
        if regs == GROUPS:
            return lines + ["bne a0, a2, .Lhot"], steps


def simulate(lines: list[str], iterations: int = 2, width: int = 40, col: int = 8) -> bool:
    """Runs the loop in program order on a random plane (with NaN and infinities) from the state it expects at
    input row 2 and compares the rows it stores with numpy's conv + Clip (NaN kept)."""
    steps = sum(1 for x in lines if x.startswith("vse32"))
    H, rng = steps * iterations + 6, np.random.default_rng(0)
    x = (rng.standard_normal((H, width)) * 3).astype(np.float32)
    x[3, 10], x[5, 12], x[7, 9] = np.nan, np.inf, -np.inf
    w, bias = rng.standard_normal((3, 3)).astype(np.float32), np.float32(0.7)
    xp = np.zeros((H + 2, width + 2), np.float32)
    xp[1:-1, 1:-1] = x
    ref = np.full((H, width), bias, np.float32)
    for kh in range(3):
        for kw in range(3):
            ref = (ref + w[kh, kw] * xp[kh:kh + H, kw:kw + width]).astype(np.float32)
    want = np.where(np.isnan(ref), ref, np.clip(ref, 0, 6))

    def part(o, khs):
        acc = np.full(V, bias, np.float32)
        for kh in khs:
            for kw in range(3):
                acc = (acc + w[kh, kw] * xp[o + kh, col + kw:col + kw + V]).astype(np.float32)
        return acc
    i, stride = 2, width * 4
    L, M, R, _, _, _, A1, A2, C = GROUPS
    vr = {L: xp[i + 1, col:col + V].copy(), M: xp[i + 1, col + 1:col + 1 + V].copy(), R: xp[i + 1, col + 2:col + 2 + V].copy(),
          A2: part(i - 1, (0, 1)), A1: part(i, (0,)), C: ref[i - 2, col:col + V].copy(), "v4": np.full(V, bias, np.float32)}
    xr = {"a0": (i + 1) * stride + col * 4, "a1": H * stride + (i - 2) * stride + col * 4, "a7": stride, "a6": 0xFF000000}
    fr = {WEIGHT[kh, kw]: w[kh, kw] for kh in range(3) for kw in range(3)} | {LO: np.float32(0), HI: np.float32(6)}
    mem = np.concatenate([x.ravel(), np.zeros(H * width, np.float32)])
    bits = lambda v: v.view(np.uint32)

    def at(a):
        off, reg = re.fullmatch(r"(-?\d+)?\((\w+)\)", a).groups()
        return (int(off or 0) + xr[reg]) // 4
    for _ in range(iterations):
        for line in lines[:-1]:
            op, *a = line.replace(",", " ").split()
            if op == "vfmacc.vf":
                vr[a[0]] = (vr[a[0]] + fr[a[1]] * vr[a[2]]).astype(np.float32)
            elif op == "vfmadd.vf":
                vr[a[0]] = (fr[a[1]] * vr[a[0]] + vr[a[2]]).astype(np.float32)
            elif op == "vadd.vv":
                vr[a[0]] = (bits(vr[a[1]]) + bits(vr[a[2]])).view(np.float32)
            elif op == "vmsleu.vx":
                vr["mask"] = bits(vr[a[1]]) <= np.uint32(xr[a[2]])
            elif op == "vfmax.vf":
                vr[a[0]] = np.fmax(vr[a[1]], fr[a[2]])
            elif op == "vfmin.vf":
                vr[a[0]] = np.where(vr["mask"], np.fmin(vr[a[1]], fr[a[2]]), vr[a[0]])
            elif op == "vse32.v":
                mem[at(a[1]):at(a[1]) + V] = vr[a[0]]
            elif op == "vle32.v":
                vr[a[0]] = mem[at(a[1]):at(a[1]) + V].copy()
            elif op == "lw":
                xr[a[0]] = mem[at(a[1]):at(a[1]) + 1].view(np.uint32)[0]
            elif op in ("vslide1up.vx", "vslide1down.vx"):
                s = np.array([xr[a[2]]], np.uint32).view(np.float32)
                vr[a[0]] = np.concatenate([s, vr[a[1]][:-1]] if "up" in op else [vr[a[1]][1:], s])
            elif op == "add":
                xr[a[0]] = xr[a[1]] + xr[a[2]]
            else:
                raise ValueError(op)
    rows = list(range(i - 2, i - 2 + steps * iterations))
    got = mem[H * width:].reshape(H, width)[rows, col:col + V]
    return bool(np.array_equal(got, want[rows, col:col + V], equal_nan=True) and np.isnan(got).any())


def as_ir(lines: list[str]) -> str:
    """The loop's operations as LLVM IR in the same order (registers become SSA values, the loop-carried ones phis)."""
    f, i = f"<{V} x float>", f"<{V} x i32>"
    cur, body, count = {}, [], [0]

    def new():
        count[0] += 1
        return f"%t{count[0]}"
    weights = {WEIGHT[kh, kw]: f"%w{3 * kh + kw}" for kh in range(3) for kw in range(3)}
    phis = [f"  %in_{r} = phi {f} [%init_{r}, %entry], [%out_{r}, %loop]" for r in GROUPS]
    phis += [f"  %in_{r} = phi ptr [%{r}, %entry], [%out_{r}, %loop]" for r in ("a0", "a1")]
    cur.update({r: f"%in_{r}" for r in GROUPS + ["a0", "a1"]}, v4="%bias")
    splat = lambda v: f"<{', '.join([v] * V)}>"
    for line in lines[:-1]:
        op, *a = line.replace(",", " ").split()
        d = new()
        if op == "vfmacc.vf":
            body.append(f"  {d} = call {f} @llvm.fma.v16f32({f} {weights[a[1]]}, {f} {cur[a[2]]}, {f} {cur[a[0]]})")
        elif op == "vfmadd.vf":
            body.append(f"  {d} = call {f} @llvm.fma.v16f32({f} {weights[a[1]]}, {f} {cur[a[0]]}, {f} {cur[a[2]]})")
        elif op == "vle32.v":
            body.append(f"  {d} = load {f}, ptr {cur[a[1][1:-1]]}, align 4")
        elif op == "lw":
            off, reg = re.fullmatch(r"(-?\d+)\((\w+)\)", a[1]).groups()
            body.append(f"  {d}p = getelementptr i8, ptr {cur[reg]}, i64 {off}\n  {d} = load i32, ptr {d}p")
        elif op in ("vslide1up.vx", "vslide1down.vx"):
            m = [V] + list(range(V - 1)) if "up" in op else list(range(1, V)) + [V]
            body.append(f"  {d}b = bitcast {f} {cur[a[1]]} to {i}\n  {d}s = insertelement {i} poison, i32 {cur[a[2]]}, i64 0\n"
                        f"  {d}v = shufflevector {i} {d}b, {i} {d}s, <{V} x i32> <{', '.join(f'i32 {j}' for j in m)}>\n"
                        f"  {d} = bitcast {i} {d}v to {f}")
        elif op == "vadd.vv":
            body.append(f"  {d}b = bitcast {f} {cur[a[1]]} to {i}\n  {d} = add {i} {d}b, {d}b")
        elif op == "vmsleu.vx":
            body.append(f"  {d} = icmp ule {i} {cur[a[1]]}, {splat('i32 -16777216')}")
            cur["mask"] = d
            continue
        elif op == "vfmax.vf":
            body.append(f"  {d} = call {f} @llvm.maxnum.v16f32({f} {cur[a[1]]}, {f} zeroinitializer)")
            cur["x"] = cur[a[1]]
        elif op == "vfmin.vf":
            body.append(f"  {d}m = call {f} @llvm.minnum.v16f32({f} {cur[a[1]]}, {f} {splat('float 6.0')})\n"
                        f"  {d} = select <{V} x i1> {cur['mask']}, {f} {d}m, {f} {cur['x']}")
        elif op == "vse32.v":
            body.append(f"  store {f} {cur[a[0]]}, ptr {cur[a[1][1:-1]]}, align 4")
            continue
        elif op == "add":
            body.append(f"  {d} = getelementptr i8, ptr {cur[a[1]]}, i64 %stride")
        cur[a[0]] = d
    head = ["target triple = \"riscv64-unknown-linux-gnu\"", f"declare {f} @llvm.fma.v16f32({f}, {f}, {f})",
            f"declare {f} @llvm.maxnum.v16f32({f}, {f})", f"declare {f} @llvm.minnum.v16f32({f}, {f})",
            "define void @strip(ptr %a0, ptr %a1, ptr %end, i64 %stride, ptr %w, float %b, ptr %init) {", "entry:"]
    for j in range(9):
        head.append(f"  %wp{j} = getelementptr float, ptr %w, i64 {j}\n  %ws{j} = load float, ptr %wp{j}\n"
                    f"  %wi{j} = insertelement {f} poison, float %ws{j}, i64 0\n"
                    f"  %w{j} = shufflevector {f} %wi{j}, {f} poison, {i} zeroinitializer")
    head.append(f"  %bi = insertelement {f} poison, float %b, i64 0\n  %bias = shufflevector {f} %bi, {f} poison, {i} zeroinitializer")
    head += [f"  %ip{j} = getelementptr {f}, ptr %init, i64 {j}\n  %init_{r} = load {f}, ptr %ip{j}" for j, r in enumerate(GROUPS)]
    tail = [f"  %done = icmp eq ptr {cur['a0']}, %end", "  br i1 %done, label %exit, label %loop", "exit:", "  ret void", "}"]
    text = "\n".join(head + ["  br label %loop", "loop:"] + phis + body + tail)
    for r in GROUPS + ["a0", "a1"]:
        text = text.replace(f"%out_{r},", f"{cur[r]},")
    return text + "\n"


def mca(tool: str, body: list[str]) -> tuple[float, float]:
    asm = "# LLVM-MCA-RISCV-LMUL M2\n# LLVM-MCA-RISCV-SEW E32\n.Lhot:\n" + "\n".join(body) + "\n"
    out = subprocess.run([tool, "-mtriple=riscv64", "-mcpu=spacemit-x60", f"-mattr={FEATURES}", "-iterations=200"],
                         input=asm, capture_output=True, text=True, check=True).stdout
    return (int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200,
            float(re.search(r"Block RThroughput:\s+([\d.]+)", out).group(1)))


def compiled_loop(llc: str, ir_text: str) -> list[str]:
    """llc's loop body for the IR (the block after `# %loop`)."""
    asm = subprocess.run([llc, "-O3", "-mtriple=riscv64", "-mcpu=spacemit-x60", "-mattr=+zvl256b", "-o", "-"],
                         input=ir_text, capture_output=True, text=True, check=True).stdout
    body = asm.split("# %loop\n", 1)[1].splitlines()
    out = []
    for line in body:
        if line.startswith("\t") and not line.lstrip().startswith((".", "#")):
            out.append(line.strip().replace("\t", " "))
            if out[-1].startswith(("bne", "bnez")):
                break
    return out


def report(name: str, lines: list[str], steps: int, cycles: float, rthr: float) -> None:
    print(f"{name}: {steps} steps, {len(lines)} instructions, {cycles:.1f} cycles ({cycles / steps:.2f} per output vector): "
          f"{18 * steps / cycles:.1%} of peak ({22 * steps / cycles:.1%} with the Clip's FP ops), "
          f"resource bound {rthr:.1f} ({18 * steps / rthr:.1%})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mca", default="llvm-mca-22", help="an llvm-mca with the SpacemitX60 model (LLVM 21+)")
    ap.add_argument("--llc", default="llc-22", help="also compile the same order as LLVM IR with this llc ('' to skip)")
    ap.add_argument("--asm-dir", type=Path, help="write the loops here")
    args = ap.parse_args()
    lines, steps = loop_body()
    if not simulate(lines):
        raise SystemExit("the hand schedule does not compute the conv + Clip (numpy disagrees)")
    report("hand schedule", lines, steps, *mca(args.mca, lines))
    compiled = compiled_loop(args.llc, as_ir(lines)) if args.llc else None
    if compiled:
        report(f"{args.llc}, same order as IR", compiled, steps, *mca(args.mca, compiled))
    if args.asm_dir:
        args.asm_dir.mkdir(parents=True, exist_ok=True)
        (args.asm_dir / "x60-nchw-strip.s").write_text("\n".join(lines) + "\n")
        if compiled:
            (args.asm_dir / "x60-nchw-strip-llc.s").write_text("\n".join(compiled) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
