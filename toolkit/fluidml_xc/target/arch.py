"""Per-architecture facts the kernels ask, one row per instruction-set family, keyed by the triple's first field.

A kernel asks `arch_of(triple)` instead of testing triple strings, so a new architecture is one row here (and
its targets/*.toml); a triple no row knows is an error naming the known ones, never another family's answers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True)
class Arch:
    family: str
    """"x86", "aarch64", "arm32" or "riscv": the instruction set the kernels' tiles and forms are written for."""
    nan_propagating_minmax: bool
    """float32 llvm.maximum / llvm.minimum are one NaN-propagating instruction (ARM's fmax/fmin, vmax/vmin);
    x86 has none, so a compare + select is shorter; RISC-V's fmax/fmin return the number, not the NaN (its
    NaN-propagating fmaxm needs Zfa)."""
    explicit_fma: bool
    """LLVM never fuses a vector fmul + fadd here on its own (armv7 NEON emits vmla.f32): float32 multiply-adds
    that must round once are spelled as llvm.fma when the CPU has VFPv4."""
    half_feature: str = ""
    """The LLVM feature that gives float16 vector arithmetic at twice float32's rate (aarch64: fullfp16, ARMv8.2's
    FEAT_FP16); "" where we emit none (x86's avx512fp16 is not implemented: --precision fp16 refuses x86)."""
    k_steps: int = 1
    """K steps per iteration of the GEMM outer-product loop (kernels/matmul_blocked.py): 3 on RISC-V, whose cores
    (U74, X60) issue in order and stall on an operand loaded right before its multiply-add; with several steps in
    one block the scheduler issues the next step's loads beside this step's multiply-adds, and the loop's pointer
    increments and branch (which wait for the multiply-adds before them on an in-order core) come once per three
    steps (benchmarks/mca.py: X60 GEMM 68% at 2 steps, 75% at 3; docs/RISCV_KERNELS.md)."""

    @property
    def x86(self) -> bool:
        return self.family == "x86"

    @property
    def aarch64(self) -> bool:
        return self.family == "aarch64"

    @property
    def arm32(self) -> bool:
        return self.family == "arm32"

    @property
    def riscv(self) -> bool:
        return self.family == "riscv"


X86 = Arch("x86", nan_propagating_minmax=False, explicit_fma=False)
AARCH64 = Arch("aarch64", nan_propagating_minmax=True, explicit_fma=False, half_feature="fullfp16")
ARM32 = Arch("arm32", nan_propagating_minmax=True, explicit_fma=True)
RISCV = Arch("riscv", nan_propagating_minmax=False, explicit_fma=False, k_steps=3)

ARCHES: dict[str, Arch] = {
    "x86_64": X86, "i386": X86, "i686": X86,
    "aarch64": AARCH64, "arm64": AARCH64,
    "arm": ARM32, "thumb": ARM32,
    "riscv64": RISCV,
}


def arch_of(triple: str) -> Arch:
    """The row for TRIPLE's architecture field ("aarch64-unknown-linux-gnu" -> AARCH64)."""
    name = str(triple).split("-", 1)[0]
    if name.startswith(("armv", "thumbv")):  # armv7a, armv7l, thumbv7em: the 32-bit ARM family
        name = "arm"
    if name in ARCHES:
        return ARCHES[name]
    raise InputError(f"no kernels for the architecture of triple {triple!r}; known: {', '.join(sorted(ARCHES))} "
                     "(add a row to target/arch.py ARCHES and a targets/*.toml)")


def half_arithmetic(triple: str, features: str) -> bool:
    """float16 vector arithmetic on this triple with these (explicit, target/cpus.explicit_features) LLVM features."""
    feature = arch_of(triple).half_feature
    return bool(feature) and feature_enabled(features, feature)


def riscv_vlen(features: str) -> int:
    """RISC-V: the minimum VLEN in bits the features promise (the largest +zvlNb; 128 for +v alone; 0 without V)."""
    flags = str(features).split(",")
    if "+v" not in flags:
        return 0
    return max([128, *(int(m.group(1)) for f in flags if (m := re.fullmatch(r"\+zvl(\d+)b", f.strip())))])


def riscv_vector(triple: str, features: str) -> bool:
    """A RISC-V target whose features enable the V extension (its kernels' vectors are RVV register groups)."""
    return bool(triple) and arch_of(triple).riscv and riscv_vlen(features) > 0


def feature_enabled(features: str, feature: str) -> bool:
    """Whether the LLVM features string turns FEATURE on: the last "+feature" / "-feature" in it decides, as in LLVM
    ("+neon,+fullfp16,-fullfp16" has it off)."""
    for token in reversed(str(features).split(",")):
        if token.strip() in (f"+{feature}", f"-{feature}"):
            return token.strip()[0] == "+"
    return False
