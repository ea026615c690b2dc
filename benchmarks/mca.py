#!/usr/bin/env python3
"""Static throughput of our hot loops on every board's core: llvm-mca over each kernel's innermost loop.

    python benchmarks/mca.py [--boards rpi3,rpi4,...] [--only SUBSTR] [--mca llvm-mca-19] [--markdown]
    python benchmarks/mca.py --boards visionfive2,bpi-f3 --markdown   # RISC-V: llvm-mca-22 (--mca-riscv)

Per case (benchmarks/mca_cases.py) and board: a single-op ONNX model is lowered for the board (single thread, --opt fluid) and
compiled to model.o; `llvm-objdump -d` disassembles it (RISC-V: also the sections of kernels/scalar_tile.py's,
kernels/depthwise_tile.py's and kernels/rvv_depthwise.py's machine-code routines, whose words llvm-mc decodes); the
hot loop is the innermost backward branch (no other backward branch inside it) with the most multiply-accumulate
instructions (FMA/MLA/SDOT...), for a depthwise case first among the depthwise routines; that loop body goes to
`llvm-mca -mtriple=... -mcpu=... -iterations=200`.

Columns: mac = multiply-accumulate instructions in the loop, lanes = MACs they do per iteration,
mul = lanes of plain float multiplies (fmul: a conv tap starting its accumulator at zero, 1 FLOP each),
stack = instructions touching the stack inside the loop (spills/reloads; on armv7 also `add rN, sp, #imm`
that address spilled q-registers for vldmia/vstmia), cyc = mca cycles per iteration, rthr = mca's
resource bound per iteration (Block RThroughput), FLOP/c (2 per fp MAC) or MAC/c (int8), % of the
core's peak (PEAKS below, with sources; RISC-V: the same mca model's rate of 8 independent multiply-adds of
the kind the loop uses, riscv_peak) at cyc cycles, %rthr the same at the resource bound (the figure
for the in-order A53, whose loops run through the out-of-order A57 model), and the bottleneck: "deps" when cyc > 1.15 x rthr (a latency
chain), else the busiest resource in mca's pressure table.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from mca_cases import Case, cases  # noqa: E402

# Peak per core and cycle: (fp32 FLOP, int8 MAC), the mca cpu model used, and where the figure comes from.
# FLOP counts a fused multiply-add as 2. int8 MAC peak counts the widest MAC instruction the core has
# for 8-bit operands accumulated in 32 bits.
PEAKS = {
    "cortex-a53": (8, 4, "cortex-a57",
                   "A53 (no public Arm optimization guide): LLVM's CortexA53 model (AArch64SchedA53.td) issues one "
                   "128-bit fmla per cycle = 8 FLOP and one smlal .4s = 4 MAC. LLVM's ARM backend has no A53 model, "
                   "so the armv7 loop runs through its A57 model (ARMScheduleA57.td, out-of-order): the resource "
                   "estimate, optimistic for the in-order A53."),
    "cortex-a57": (8, 4, "cortex-a57",
                   "Cortex-A57 Software Optimization Guide: ASIMD FP multiply-accumulate Q-form throughput 1/cycle "
                   "(the two FP pipes are 64-bit) = 4 FMA = 8 FLOP; smlal/smlal2 .4s 1/cycle = 4 MAC"),
    "cortex-a72": (8, 4, "cortex-a72",
                   "Cortex-A72 Software Optimization Guide (same FP/ASIMD pipes as A57): FMLA Q-form 1/cycle = 8 FLOP; "
                   "smlal/smlal2 .4s (int16->int32) 1/cycle = 4 MAC; LLVM uses its A57 model"),
    "cortex-a76": (16, 32, "neoverse-n1",
                   "Cortex-A76 Software Optimization Guide: FMLA Q-form throughput 2 (pipes V0/V1) = 16 FLOP; "
                   "sdot .4s/.16b throughput 2 = 32 MAC; LLVM 19's neoverse-n1 model (same core) stands in"),
    "cortex-a78ae": (16, 32, "neoverse-n1",
                     "Cortex-A78 Software Optimization Guide: FMLA Q-form throughput 2 = 16 FLOP; sdot 2/cycle = 32 MAC; "
                     "LLVM 19 gives cortex-a78 the A57 model (1 FMLA/cycle), so neoverse-n1's (same FP/ASIMD pipes) is used"),
}
RISCV_PEAKS = {
    "sifive-u74": "SiFive U74 (in-order, dual issue, one FP pipe): LLVM's SiFive7 model, fmadd.s 1/cycle = 2 FLOP; "
                  "no vector unit (int8: mul + add, 1 multiply/cycle)",
    "spacemit-x60": "SpacemiT X60 (in-order, dual issue, RVV 1.0 VLEN 256): LLVM 22's SpacemitX60 model (RISCVSchedSpacemitX60.td; "
                    "LLVM 19 has the CPU without a scheduling model): vfmacc.vf at e32 m1 = 8 lanes; int8 vwmacc.vx",
}
"""RISC-V cores: their peak is what the same mca model gives for independent multiply-adds (riscv_peak)."""
MCA_TRIPLE = {"aarch64": "aarch64-unknown-linux-gnu", "armv7": "armv7-unknown-linux-gnueabihf", "x86_64": "x86_64-unknown-linux-gnu",
              "riscv64": "riscv64-unknown-linux-gnu"}




def model_object(model: onnx.ModelProto, board, conv_algo: str = "direct", precision: str = "fp32",
                 channels_last: bool = False) -> bytes:
    from fluidml_xc import pipeline
    from fluidml_xc.pipeline import LowerOptions, check_precision, import_graph, lower
    from fluidml_xc.target.machine import compile_module, machine_spec
    from mca_cases import forced_channels_last

    spec = machine_spec(board)
    check_precision(precision, [spec], board.name)
    optimize = pipeline.optimize
    pipeline.optimize = forced_channels_last(optimize) if channels_last else optimize
    try:
        lowered = lower(import_graph(model, conv_algo=conv_algo, precision=precision), spec, LowerOptions(opt="fluid", threads=1, parallel=False))
    finally:
        pipeline.optimize = optimize
    return compile_module(lowered.ir_text, spec), spec


_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{2,8} )+\s*(.*)$")
_FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")
_MAC = {
    "aarch64": re.compile(r"^(fmla|fmadd|mla|smlal2?|umlal2?|sdot|udot|usdot)\b"),
    "armv7": re.compile(r"^(vfma|vmla|vmlal|vsdot|vudot)\b"),
    "x86_64": re.compile(r"^(vfmadd\d+|vfnmadd\d+|vpdpbusds?|vpdpwssds?|vpmaddwd|vpmaddubsw)"),
    "riscv64": re.compile(r"^(vfmacc|vfmadd|vfnmsac|vmacc|vmadd|vwmacc\w*|fmadd\.[sd]|fnmsub\.[sd])\b"),
}
_FMUL = {"aarch64": re.compile(r"^fmul\b"), "armv7": re.compile(r"^vmul\.f32\b"), "x86_64": re.compile(r"^vmulp[sd]\b"),
         "riscv64": re.compile(r"^(vfmul\.v[vf]|fmul\.s)\b")}
_BRANCH = {"aarch64": re.compile(r"^(b\.\w+|cbn?z|tbn?z|b)\s"), "armv7": re.compile(r"^(b\w*)\s"),
           "x86_64": re.compile(r"^(j\w+)\s"), "riscv64": re.compile(r"^(b(?:eq|ne|lt|ge|gt|le)[a-z]*|j)\s")}  # not bseti


TILE_SECTION = ".text.fxc_scalar_tile"
"""kernels/scalar_tile.py's routines: machine code LLVM emits as read-only data (the linker puts it in .text)."""
DEPTHWISE_SECTION = ".text.fxc_depthwise_tile"
"""kernels/depthwise_tile.py's routines, likewise; a depthwise case's hot loop is searched there first (a block's
1x1 convs run the GEMM tile, whose loop has more multiply-adds)."""
DEPTHWISE_BASE = 2 << 32
RVV_DEPTHWISE_SECTION = ".text.fxc_rvv_depthwise"
"""kernels/rvv_depthwise.py's routines (the X60's channels-last depthwise), searched first like DEPTHWISE_SECTION's."""
RVV_DEPTHWISE_BASE = 3 << 32
GEMV_SECTION = ".text.fxc_gemv"
"""kernels/matmul_gemv.py's routines (the X60's GEMV)."""
GEMV_BASE = 4 << 32


def disassemble(obj: bytes, objdump: str, attrs: str = "") -> list[tuple[int, str]]:
    """`attrs`: the spec's features (llvm-objdump prints fp16 fmla as <unknown> without +fullfp16)."""
    with tempfile.NamedTemporaryFile(suffix=".o") as fh:
        fh.write(obj)
        fh.flush()
        present = [name for name in (TILE_SECTION, DEPTHWISE_SECTION, RVV_DEPTHWISE_SECTION, GEMV_SECTION) if name in obj.decode("latin-1")]
        sections = ["-D", "-j", ".text", *(a for name in present for a in ("-j", name))] if present else ["-d"]
        text = subprocess.run([objdump, *sections, "--no-show-raw-insn", *([f"--mattr={attrs}"] if attrs else []), fh.name], capture_output=True, text=True, check=True).stdout
    insns, base = [], 0
    for line in text.splitlines():
        if line.startswith("Disassembly of section "):
            base = (1 << 32 if TILE_SECTION in line else DEPTHWISE_BASE if DEPTHWISE_SECTION in line
                    else RVV_DEPTHWISE_BASE if RVV_DEPTHWISE_SECTION in line else GEMV_BASE if GEMV_SECTION in line else 0)  # each at 0
        m = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
        if m and m.group(2).strip():
            insns.append((base + int(m.group(1), 16), m.group(2).split("\t", 1)[0] + (" " + m.group(2).split("\t", 1)[1] if "\t" in m.group(2) else "")))
    return words_as_code(insns, objdump.replace("objdump", "mc"), attrs)


def words_as_code(insns: list[tuple[int, str]], mc: str, attrs: str) -> list[tuple[int, str]]:
    """RISC-V: the `.word`s objdump shows for machine code emitted as data in .text (kernels/scalar_tile.py's
    routines, which carry a `$d` mapping symbol), disassembled by llvm-mc; a branch's offset made its address."""
    words = [(i, a, int(m.group(1), 16)) for i, (a, s) in enumerate(insns) if (m := re.search(r"\.word\s+0x([0-9a-f]+)", s))]
    if not words or "+d" not in attrs.split(","):
        return insns
    out = list(insns)
    for i, addr, word in words:
        text = subprocess.run([mc, "--disassemble", "-triple=riscv64", f"-mattr={attrs}"], capture_output=True, text=True,
                              input=" ".join(f"0x{b:02x}" for b in word.to_bytes(4, "little"))).stdout
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(".text")]
        if len(lines) != 1:
            continue
        insn = re.sub(r"\s+", " ", lines[0])
        if _BRANCH["riscv64"].match(insn + " ") and re.search(r", (-?\d+)$", insn):
            insn = re.sub(r", (-?\d+)$", lambda m: f", 0x{addr + int(m.group(1)):x}", insn)
        out[i] = (addr, insn)
    return out


def clean(insn: str, arch: str) -> str:
    """One instruction without objdump's trailing comment."""
    insn = re.sub(r"\s+", " ", insn.strip())
    marker = {"aarch64": "//", "armv7": "@", "x86_64": " #", "riscv64": " #"}[arch]
    return insn.split(marker)[0].strip()


def mac_lanes(insn: str, arch: str, vtype: tuple[int, float] = (32, 1.0), vlen: int = 0) -> int:
    """Multiply-accumulates one MAC instruction does (RISC-V vectors: VLEN x LMUL / SEW of the vtype in force)."""
    op = insn.split()[0]
    if arch == "riscv64":
        sew, lmul = vtype
        return max(1, int(vlen * lmul // sew)) if op.startswith("v") else 1
    if arch == "aarch64":
        if op in ("sdot", "udot", "usdot"):
            m = re.search(r"v\d+\.(\d+)s", insn)
            return int(m.group(1)) * 4 if m else 4
        m = re.search(r"v\d+\.(\d+)[bhsd]", insn)
        return int(m.group(1)) if m else 1
    if arch == "armv7":
        if op.startswith("vmlal"):
            return 4 if re.search(r"\bq\d+", insn) else 2
        first = insn.split()[1].rstrip(",")
        return 4 if first.startswith("q") else 2 if first.startswith("d") else 1
    width = 16 if "zmm" in insn else 8 if "ymm" in insn else 4 if "xmm" in insn else 1
    if op.endswith(("ss", "sd")) and not op.startswith("vp"):
        return 1
    if op.startswith("vpdpbusd"):
        return width * 4
    if op in ("vpmaddwd", "vpdpwssd", "vpdpwssds"):
        return width * 2
    if op == "vpmaddubsw":
        return width * 4
    return width


def is_stack(insn: str, arch: str) -> bool:
    if arch == "x86_64":  # spills address the stack pointer; our code keeps no frame pointer, so rbp is a plain base register
        return "(%rsp)" in insn
    if arch == "armv7" and re.match(r"^add\w* \w+, sp, #", insn):
        return True
    if arch == "riscv64":
        return "(sp)" in insn
    return "[sp" in insn


def stack_count(body: list[str], arch: str) -> int:
    """Instructions of the loop that touch the stack: is_stack, and on armv7 the vldmia/vstmia through a
    register the loop set to an address on the stack (`add rN, sp, #imm`); on riscv64 the same for RVV's spills
    (`addi aN, sp, imm` or `sh2add aN, aN, sp`, then `vl2r.v` / `vs2r.v` at (aN): vector loads take no offset)."""
    on_stack, count = set(), 0
    for insn in body:
        if is_stack(insn, arch):
            count += 1
        if arch == "riscv64":
            if (m := re.match(r"^v[ls][\w.]* \w+, \((\w+)\)", insn)) and m.group(1) in on_stack:
                count += 1
            if dest := re.match(r"^(?:addi?|sh\dadd) (\w+), (.*)", insn):
                address = any(r == "sp" or r in on_stack for r in re.split(r",\s*", dest.group(2)))
                (on_stack.add if address else on_stack.discard)(dest.group(1))
                count += address
            elif dest := re.match(r"^\S+ (\w+),", insn):
                on_stack.discard(dest.group(1))
        m = re.match(r"^(v(?:ld|st)m\w*|vld1\.\d+|vst1\.\d+) (r\d+|lr|ip)\b", insn) if arch == "armv7" else None
        if m and m.group(2) in on_stack:
            count += 1
        dest = re.match(r"^(?:add|sub|mov|ldr)\w* (r\d+|lr|ip),", insn) if arch == "armv7" else None
        if dest:
            (on_stack.add if re.match(r"^add\w* \w+, sp, #", insn) else on_stack.discard)(dest.group(1))
    return count


@dataclass
class Loop:
    body: list[str]
    macs: int
    lanes: int
    stack: int
    mul_lanes: int = 0
    """lanes of float multiplies (not fused): a first tap starting its accumulator at zero"""
    vtype: tuple[int, float] = (32, 1.0)
    """RISC-V: (SEW, LMUL) in force in the loop (its vsetvli may be outside it)"""


_VTYPE = re.compile(r"^vset\w* [^,]+, [^,]+, e(\d+), (m|mf)(\d+)")


def vtype_at(insns: list[tuple[int, str]], lo: int, hi: int) -> tuple[int, float]:
    """RISC-V: (SEW, LMUL) of the loop's vector code: its own last vsetvli, else the nearest one before it."""
    for i in [*range(hi, lo - 1, -1), *range(lo - 1, -1, -1)]:
        m = _VTYPE.match(re.sub(r"\s+", " ", insns[i][1].strip()))
        if m:
            return int(m.group(1)), (1 / int(m.group(3)) if m.group(2) == "mf" else float(m.group(3)))
    return 32, 1.0


CHECK_MAC = re.compile(r"fmadd\.s\s+(fs11|f27),")
"""The U74 depthwise band's check multiply-adds (kernels/depthwise_tile.py CHECK = f27): not work."""


def hot_loop(insns: list[tuple[int, str]], arch: str, vlen: int = 0, routines: bool = False) -> Loop | None:
    """The innermost loop with the most multiply-adds, then the shortest; `routines` (the depthwise band routines):
    the checked Clip form's (the exact routine runs only over non-finite bands), then the longest (a band without
    zero rows), their check multiply-adds not counted as work."""
    addr_index = {a: i for i, (a, _) in enumerate(insns)}
    loops = []
    for i, (addr, insn) in enumerate(insns):
        if not _BRANCH[arch].match(insn + " "):
            continue
        m = re.search(r"(?:^|\s)(?:0x)?([0-9a-f]+)(?:\s*<|$)", insn.split(None, 1)[1] if " " in insn else "")
        if not m:
            continue
        target = int(m.group(1), 16)
        if target <= addr and target in addr_index:
            loops.append((addr_index[target], i))
    best, best_key = None, ()
    for lo, hi in loops:
        if any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b in loops):
            continue  # not innermost
        body = [clean(s, arch) for _, s in insns[lo:hi + 1]]
        macs = [s for s in body if _MAC[arch].match(s) and not (routines and CHECK_MAC.match(s))]
        vtype = vtype_at(insns, lo, hi) if arch == "riscv64" else (32, 1.0)
        loop = Loop(body, len(macs), sum(mac_lanes(s, arch, vtype, vlen) for s in macs), stack_count(body, arch),
                    sum(mac_lanes(s, arch, vtype, vlen) for s in body if _FMUL[arch].match(s)), vtype)
        key = (loop.macs, any(CHECK_MAC.match(s) for s in body), len(body)) if routines else (loop.macs, -len(body))
        if best is None or key > best_key:
            best, best_key = loop, key
    return best


def riscv_instruments(vtype: tuple[int, float]) -> list[str]:
    """llvm-mca's RISC-V instruments: the SEW and LMUL the loop's vector instructions run at (without them mca
    prices each at the worst LMUL when the loop's vsetvli is outside it)."""
    sew, lmul = vtype
    return [f"# LLVM-MCA-RISCV-LMUL {'MF' + str(round(1 / lmul)) if lmul < 1 else 'M' + str(int(lmul))}",
            f"# LLVM-MCA-RISCV-SEW E{sew}"]


def mca_input(body: list[str], arch: str, vtype: tuple[int, float] = (32, 1.0)) -> str:
    lines = [*(riscv_instruments(vtype) if arch == "riscv64" else []), ".Lhot:"]
    for s in body:
        if _BRANCH[arch].match(s + " "):
            parts = s.split(" ", 1)
            ops = [o.strip() for o in parts[1].split(",")] if len(parts) > 1 else []
            if arch == "riscv64":  # register names (a0, fa1) look like hex: only the last operand is the target
                ops = ops[:-1] + [".Lhot"] if ops else ops
            else:
                ops = [re.sub(r"^(0x)?[0-9a-f]+( <.*>)?$", ".Lhot", o) for o in ops]
            s = parts[0] + " " + ", ".join(ops)
        lines.append(re.sub(r"\s*<[^>]*>", "", s))
    return "\n".join(lines) + "\n"


def run_mca(asm: str, mca: str, triple: str, cpu: str, attrs: str) -> tuple[float, float, str]:
    cmd = [mca, f"-mtriple={triple}", f"-mcpu={cpu}", "-iterations=200"] + ([f"-mattr={attrs}"] if attrs else [])
    r = subprocess.run(cmd, input=asm, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[0] if r.stderr else "llvm-mca failed")
    out = r.stdout
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200
    rthr = float(re.search(r"Block RThroughput:\s+([\d.]+)", out).group(1))
    # busiest resource from "Resource pressure per iteration:" (header line of names, then values)
    m = re.search(r"Resource pressure per iteration:\n(.*)\n(.*)\n", out)
    busiest = "?"
    if m:
        names = re.findall(r"\[([\w.]+)\]", m.group(1))
        vals = [0.0 if v == "-" else float(v) for v in m.group(2).split()]
        # names map to the resource list above the table
        res = dict(re.findall(r"\[([\w.]+)\][ \t]+-[ \t]+(\w+)", out))  # not across a line end
        if vals:
            k = max(range(len(vals)), key=lambda i: vals[i])
            busiest = res.get(names[k], names[k]) if k < len(names) else "?"
    return cycles, rthr, busiest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", default="rpi3,rpi4,rpi5,jetson-nano,jetson-orin-nano,x86_64")
    ap.add_argument("--only", default="")
    ap.add_argument("--mca", default="llvm-mca-19" if Path("/usr/bin/llvm-mca-19").exists() else "llvm-mca")
    ap.add_argument("--objdump", default="llvm-objdump-19" if Path("/usr/bin/llvm-objdump-19").exists() else "llvm-objdump")
    ap.add_argument("--mca-riscv", default="llvm-mca-22",
                    help="llvm-mca for RISC-V: one with the SpacemiT X60 model (LLVM 21+; Debian 12: apt-get install llvm-22)")
    ap.add_argument("--objdump-riscv", default="llvm-objdump-22")
    ap.add_argument("--asm-dir", type=Path, help="write each hot loop's assembly here")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table (docs/ARM_KERNELS.md)")
    ap.add_argument("--measure", action="store_true",
                    help="also time the single-op x86_64 cases on this host (JIT, one thread, best of --runs calls "
                         "of the thread's CPU time) and print the clock at which the estimate would match the measurement")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--x86-cpus", default="", help="x86 boards: llvm-mca's models of these CPUs, one row each "
                    "(e.g. haswell,skylake,znver3; default the board's cpu)")
    args = ap.parse_args()
    checks = []

    from fluidml_xc.target.boards import get_board
    if args.markdown:
        print("| case | board | cpu (mca model) | insn | mac | lanes | mul | stack | cyc | rthr | per c | peak | % | %rthr | bottleneck |\n"
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    else:
        print(f"{'case':52} {'board':17} {'cpu (mca model)':26} {'insn':>5} {'mac':>4} {'lanes':>5} {'mul':>4} {'stack':>5} "
              f"{'cyc':>6} {'rthr':>6} {'per c':>6} {'peak':>5} {'%':>5} {'%rthr':>5} bottleneck")
    for case in cases():
        if args.only and args.only.lower() not in case.name.lower():
            continue
        for bname in args.boards.split(","):
            board = get_board(bname)
            arch = board.target.name
            try:
                obj, spec = model_object(case.model, board, case.conv_algo, case.precision, case.channels_last)
            except Exception as exc:  # a case this board cannot build is reported, not fatal
                print(f"{case.name:52} {bname:17} build failed: {exc}")
                continue
            objdump = args.objdump_riscv if arch == "riscv64" else args.objdump
            insns = disassemble(obj, objdump, spec.features if arch != "x86_64" else "")
            routines = [i for i in insns if i[0] >= DEPTHWISE_BASE] if "depthwise" in case.name else []
            loop = (routines and hot_loop(routines, arch, register_bits(spec), True)) or hot_loop(insns, arch, register_bits(spec))
            if loop is None or not loop.macs:
                print(f"{case.name:52} {bname:17} no MAC loop found")
                continue
            asm = mca_input(loop.body, arch, loop.vtype)
            if args.asm_dir:
                args.asm_dir.mkdir(parents=True, exist_ok=True)
                (args.asm_dir / f"{bname}-{re.sub(r'[^a-z0-9]+', '_', case.name.lower())}.s").write_text(asm)
            attrs = spec.features if arch != "x86_64" else ""
            for model_cpu in (args.x86_cpus.split(",") if arch == "x86_64" and args.x86_cpus else [spec.cpu]):
                _mca_row(args, case, bname, spec, arch, loop, asm, attrs, model_cpu, checks)
    if checks:
        ghz = host_ghz()
        print(f"\nx86_64 estimates against a measurement on this host, one thread: the whole op's best rate, the hot "
              f"loop's mca rate per cycle x the core's clock ({ghz:.2f} GHz, timed on a chain of dependent adds), their ratio")
        print("| case | cpu | measured | estimated | measured / estimated |\n|---|---|---:|---:|---:|")
        for name, cpu, per_cycle, rate, kind in checks:
            unit = "GFLOP/s" if kind == "fp" else "GMAC/s"
            print(f"| {name} | {cpu} | {rate:.1f} {unit} | {per_cycle * ghz:.1f} {unit} | {rate / (per_cycle * ghz):.2f} |")
    return 0


def measure(model: onnx.ModelProto, runs: int) -> float:
    """Seconds of the best of `runs` calls of the JIT-compiled model (one thread, the thread's CPU time)."""
    import ctypes
    import time

    from fluidml_xc.run.backend import compile_model
    jit = compile_model(model, "x86_64")
    gen = np.random.default_rng(0)
    arrays = [np.ascontiguousarray(gen.integers(0, 100, shape) if np.dtype(dt).kind in "iu" else gen.standard_normal(shape),
                                   dtype=dt) for _, dt, shape in jit.input_specs]
    outs = [np.zeros(shape, dtype=dt) for _, dt, shape in jit.output_specs]
    ins = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
    outp = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
    _raw, arena = jit._arena()
    arena = ctypes.c_void_p(arena)
    best = float("inf")
    for _ in range(runs):
        t = time.thread_time_ns()
        jit._fn(ins, outp, arena)
        best = min(best, time.thread_time_ns() - t)
    return best / 1e9


def host_ghz(runs: int = 20) -> float:
    """This core's clock now: a JIT-compiled chain of 1000 dependent integer adds (1 cycle each on x86-64)
    per iteration, the best of `runs` timings of 20000 iterations."""
    import ctypes
    import time

    import llvmlite.binding as llvm
    from llvmlite import ir
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    mod = ir.Module("clock")
    i64 = ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(i64, [i64]), "chain")
    b = ir.IRBuilder(fn.append_basic_block())
    loop, done = fn.append_basic_block(), fn.append_basic_block()
    entry = b.block
    b.branch(loop)
    b.position_at_end(loop)
    i, x = b.phi(i64), b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    x.add_incoming(fn.args[0], entry)
    y = b.call(ir.InlineAsm(ir.FunctionType(i64, [i64]), "addq $$1, $0\n" * 1000, "=r,0", side_effect=True), [x])
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, loop)
    x.add_incoming(y, loop)
    b.cbranch(b.icmp_signed("<", nxt, ir.Constant(i64, 20000)), loop, done)
    b.position_at_end(done)
    b.ret(y)
    tm = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), tm)
    engine.finalize_object()
    chain = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(engine.get_function_address("chain"))
    best = float("inf")
    for _ in range(runs):
        t = time.thread_time_ns()
        chain(0)
        best = min(best, time.thread_time_ns() - t)
    chain._engine = engine
    return 20000 * 1000 / best


def _mca_row(args, case: Case, bname: str, spec, arch: str, loop, asm: str, attrs: str, model_cpu: str, checks: list) -> None:
    """One row of the table: `loop` through llvm-mca's model of `model_cpu` (x86: the board's cpu or --x86-cpus)."""
    riscv, peak = arch == "riscv64", None
    mca = args.mca_riscv if riscv else args.mca
    if arch not in ("x86_64", "riscv64"):
        fp_peak, i8_peak, model_cpu, _src = PEAKS[spec.cpu]
        peak = {"fp": fp_peak, "fp16": 2 * fp_peak}.get(case.kind, i8_peak)
    try:
        cycles, rthr, busiest = run_mca(asm, mca, MCA_TRIPLE[arch], model_cpu, attrs)
    except RuntimeError as exc:
        print(f"{case.name:52} {bname:17} llvm-mca: {exc}")
        return
    if peak is None:  # x86_64 / riscv64: the same model's throughput of independent multiply-adds
        peak = (riscv_peak if riscv else x86_peak)(mca, model_cpu, case.kind, register_bits(spec), spec.features)
    work = 2 * loop.lanes + loop.mul_lanes if case.kind != "int8" else loop.lanes
    per_cycle, bound = work / cycles, 100 * work / rthr / peak
    neck = "deps" if cycles > 1.15 * rthr else busiest
    if args.measure and arch == "x86_64" and case.work:
        checks.append((case.name, spec.cpu, per_cycle, case.work / measure(case.model, args.runs) / 1e9, case.kind))
    if args.markdown:
        print(f"| {case.name} | {bname} | {spec.cpu} ({model_cpu}) | {len(loop.body)} | {loop.macs} | {loop.lanes} | {loop.mul_lanes} | "
              f"{loop.stack} | {cycles:.2f} | {rthr:.2f} | {per_cycle:.1f} | {peak:.0f} | "
              f"{100 * per_cycle / peak:.0f}% | {bound:.0f}% | {neck} |", flush=True)
        return
    print(f"{case.name:52} {bname:17} {spec.cpu + ' (' + model_cpu + ')':26} {len(loop.body):5} {loop.macs:4} "
          f"{loop.lanes:5} {loop.mul_lanes:4} {loop.stack:5} {cycles:6.2f} {rthr:6.2f} {per_cycle:6.1f} {peak:5.0f} "
          f"{100 * per_cycle / peak:4.0f}% {bound:4.0f}% {neck}", flush=True)


def x86_peak(mca: str, cpu: str, kind: str, bits: int, features: str) -> float:
    """FLOP (fp: vfmadd231ps) or MAC (int8: vpdpbusd with VNNI, else vpmaddubsw) per cycle of 16 independent
    instructions on the machine's widest vectors under the same mca model (8 left Haswell's 2 ports x 5 cycles of
    FMA latency a third idle)."""
    reg = {512: "zmm", 256: "ymm"}.get(bits, "xmm")
    vnni = {"+avx512vnni", "+avxvnni"} & set(features.split(","))
    op = "vfmadd231ps" if kind == "fp" else "vpdpbusd" if vnni else "vpmaddubsw"
    asm = "\n".join(f"{op} %{reg}20, %{reg}20, %{reg}{d}" for d in range(16)) + "\n"
    cycles, _, _ = run_mca(asm, mca, MCA_TRIPLE["x86_64"], cpu, "")
    return 16 * (bits // 16 if kind == "fp" else bits // 8) / cycles


def register_bits(spec) -> int:
    """Bits of one vector register: RISC-V's VLEN (its kernels' vectors, spec.vector_bits, are register groups of
    the target's vector_lmul registers), else spec.vector_bits."""
    from fluidml_xc.target.arch import riscv_vlen
    return riscv_vlen(spec.features) if spec.triple.startswith("riscv") and riscv_vlen(spec.features) else spec.vector_bits


def riscv_peak(mca: str, cpu: str, kind: str, bits: int, features: str) -> float:
    """FLOP (fp) or MAC (int8) per cycle of 8 independent multiply-adds under the cpu's mca model: vfmacc.vf at
    e32 m1 (int8: vwmacc.vx at e8 mf2, whose 16-bit products the int8 kernels accumulate) with V, else fmadd.s
    (int8: mul)."""
    vector = "+v" in features.split(",")
    if vector:
        vtype = (32, 1.0) if kind == "fp" else (8, 0.5)
        op = "vfmacc.vf v{d}, fa0, v24" if kind == "fp" else "vwmacc.vx v{d}, a0, v24"
        lanes = bits // 32 if kind == "fp" else bits // 16
        asm = "\n".join([*riscv_instruments(vtype), *(op.format(d=d + 8) for d in range(16))]) + "\n"
        cycles, _, _ = run_mca(asm, mca, MCA_TRIPLE["riscv64"], cpu, features)
        return 16 * lanes * (2 if kind == "fp" else 1) / cycles
    op = "fmadd.s fa{d}, fa0, fa1, fa{d}" if kind == "fp" else "mul a{d}, a0, a1"
    asm = "\n".join(op.format(d=d + 2) for d in range(6)) + "\n"
    cycles, _, _ = run_mca(asm, mca, MCA_TRIPLE["riscv64"], cpu, features)
    return 6 * (2 if kind == "fp" else 1) / cycles


if __name__ == "__main__":
    sys.exit(main())
