"""CPU names and features: which instructions a build's code may use, and how a board or a running program tells
whether its CPU has them.

A CPU (an LLVM name such as x86-64-v3, haswell, cortex-a76, or native) plus a feature string (+avx512f,-fma)
implies a set of instruction-set extensions. zig's clang tells which (its predefined macros for the same
-mcpu); each extension we check is one `CpuFeature`: the macro that says the code may use it, where a program
finds it at run time (cpuid + xgetbv on x86, getauxval(AT_HWCAP/AT_HWCAP2) on ARM and RISC-V, the vlenb CSR for
RISC-V's vector length; rendered into the C glue) and its name in a board's /proc/cpuinfo (deploy and `boards
detect`)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from ..errors import InputError, ToolchainError


def cache_root() -> Path:
    """Root of fluidml-xc's caches: $FLUIDML_XC_CACHE, else $XDG_CACHE_HOME/fluidml-xc (~/.cache/fluidml-xc)."""
    if os.environ.get("FLUIDML_XC_CACHE"):
        return Path(os.environ["FLUIDML_XC_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fluidml-xc"


@dataclass(frozen=True)
class CpuFeature:
    """One instruction-set extension. x86: cpuid(leaf, subleaf) register `reg` (0 eax .. 3 edx) bit `bit`, and the
    XCR0 bits the OS must enable (`xcr0`: AVX state 0x6, AVX-512 0xe6). ARM: getauxval(AT_HWCAP) (leaf 1) or
    AT_HWCAP2 (leaf 2) bit `bit`. RISC-V: AT_HWCAP (leaf 1) bit letter - 'a', or (leaf 3) an RVV 1.0 vector unit
    whose VLEN (8 x the vlenb CSR, read with SIGILL caught: T-Head's RVV 0.7.1 has no vlenb) is at least `bit`."""

    name: str
    macro: str
    cpuinfo: str
    leaf: int
    bit: int
    subleaf: int = 0
    reg: int = 0
    xcr0: int = 0
    llvm: str = ""
    """LLVM's name when it differs from `name`."""
    min_value: int = 0
    """Needed only when clang defines `macro` to at least this value (RISC-V's __riscv_v_min_vlen); 0: when defined."""

    @property
    def llvm_name(self) -> str:
        return self.llvm or self.name

    @property
    def check_bit(self) -> int:
        """The bit number the runtime tests (runtime_c/cpu.c): reg * 32 + bit on x86, bit on ARM."""
        return self.reg * 32 + self.bit


EAX, EBX, ECX, EDX = range(4)
_AVX, _AVX512 = 0x6, 0xE6
X86_FEATURES = (
    CpuFeature("sse3", "__SSE3__", "pni", 1, 0, reg=ECX),
    CpuFeature("ssse3", "__SSSE3__", "ssse3", 1, 9, reg=ECX),
    CpuFeature("sse4.1", "__SSE4_1__", "sse4_1", 1, 19, reg=ECX),
    CpuFeature("sse4.2", "__SSE4_2__", "sse4_2", 1, 20, reg=ECX),
    CpuFeature("popcnt", "__POPCNT__", "popcnt", 1, 23, reg=ECX),
    CpuFeature("cx16", "__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16", "cx16", 1, 13, reg=ECX),
    CpuFeature("avx", "__AVX__", "avx", 1, 28, reg=ECX, xcr0=_AVX),
    CpuFeature("fma", "__FMA__", "fma", 1, 12, reg=ECX, xcr0=_AVX),
    CpuFeature("f16c", "__F16C__", "f16c", 1, 29, reg=ECX, xcr0=_AVX),
    CpuFeature("movbe", "__MOVBE__", "movbe", 1, 22, reg=ECX),
    CpuFeature("avx2", "__AVX2__", "avx2", 7, 5, reg=EBX, xcr0=_AVX),
    CpuFeature("bmi", "__BMI__", "bmi1", 7, 3, reg=EBX),
    CpuFeature("bmi2", "__BMI2__", "bmi2", 7, 8, reg=EBX),
    CpuFeature("lzcnt", "__LZCNT__", "abm", 0x80000001, 5, reg=ECX),
    CpuFeature("sse4a", "__SSE4A__", "sse4a", 0x80000001, 6, reg=ECX),
    CpuFeature("avx512f", "__AVX512F__", "avx512f", 7, 16, reg=EBX, xcr0=_AVX512),
    CpuFeature("avx512dq", "__AVX512DQ__", "avx512dq", 7, 17, reg=EBX, xcr0=_AVX512),
    CpuFeature("avx512cd", "__AVX512CD__", "avx512cd", 7, 28, reg=EBX, xcr0=_AVX512),
    CpuFeature("avx512bw", "__AVX512BW__", "avx512bw", 7, 30, reg=EBX, xcr0=_AVX512),
    CpuFeature("avx512vl", "__AVX512VL__", "avx512vl", 7, 31, reg=EBX, xcr0=_AVX512),
    CpuFeature("avx512ifma", "__AVX512IFMA__", "avx512ifma", 7, 21, reg=EBX, xcr0=_AVX512),
    CpuFeature("avx512vbmi", "__AVX512VBMI__", "avx512vbmi", 7, 1, reg=ECX, xcr0=_AVX512),
    CpuFeature("avx512vnni", "__AVX512VNNI__", "avx512_vnni", 7, 11, reg=ECX, xcr0=_AVX512),
    CpuFeature("avx512bf16", "__AVX512BF16__", "avx512_bf16", 7, 5, subleaf=1, reg=EAX, xcr0=_AVX512),
    CpuFeature("avx512fp16", "__AVX512FP16__", "avx512_fp16", 7, 23, reg=EDX, xcr0=_AVX512),
    CpuFeature("avxvnni", "__AVXVNNI__", "avx_vnni", 7, 4, subleaf=1, reg=EAX, xcr0=_AVX),
)
AARCH64_FEATURES = (  # Linux arch/arm64/include/uapi/asm/hwcap.h
    CpuFeature("fp", "__ARM_FP", "fp", 1, 0, llvm="fp-armv8"),
    CpuFeature("neon", "__ARM_NEON", "asimd", 1, 1),
    CpuFeature("crc", "__ARM_FEATURE_CRC32", "crc32", 1, 7),
    CpuFeature("lse", "__ARM_FEATURE_ATOMICS", "atomics", 1, 8),
    CpuFeature("fullfp16", "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC", "asimdhp", 1, 10),
    CpuFeature("rdm", "__ARM_FEATURE_QRDMX", "asimdrdm", 1, 12),
    CpuFeature("rcpc", "__ARM_FEATURE_RCPC", "lrcpc", 1, 15),
    CpuFeature("dotprod", "__ARM_FEATURE_DOTPROD", "asimddp", 1, 20),
    CpuFeature("sve", "__ARM_FEATURE_SVE", "sve", 1, 22),
    CpuFeature("fp16fml", "__ARM_FEATURE_FP16_FML", "asimdfhm", 1, 23),
    CpuFeature("i8mm", "__ARM_FEATURE_MATMUL_INT8", "i8mm", 2, 13),
    CpuFeature("bf16", "__ARM_FEATURE_BF16", "bf16", 2, 14),
)
ARMV7_FEATURES = (  # Linux arch/arm/include/uapi/asm/hwcap.h
    CpuFeature("neon", "__ARM_NEON", "neon", 1, 12),
    CpuFeature("vfp4", "__ARM_FEATURE_FMA", "vfpv4", 1, 16),
    CpuFeature("hwdiv-arm", "__ARM_FEATURE_IDIV", "idiva", 1, 17),
)
RVV_LEAF = 3
"""RISC-V's leaf for "an RVV 1.0 vector unit of VLEN >= bit" (runtime_c/cpu.c)."""
RISCV64_FEATURES = (  # Linux arch/riscv/include/uapi/asm/hwcap.h: COMPAT_HWCAP_ISA_<letter> = 1 << (letter - 'a')
    CpuFeature("m", "__riscv_m", "m", 1, ord("m") - ord("a")),
    CpuFeature("a", "__riscv_a", "a", 1, ord("a") - ord("a")),
    CpuFeature("f", "__riscv_f", "f", 1, ord("f") - ord("a")),
    CpuFeature("d", "__riscv_d", "d", 1, ord("d") - ord("a")),
    CpuFeature("c", "__riscv_c", "c", 1, ord("c") - ord("a")),
    CpuFeature("v", "__riscv_v", "v", RVV_LEAF, 128),
    CpuFeature("zvl256b", "__riscv_v_min_vlen", "", RVV_LEAF, 256, min_value=256),
    CpuFeature("zvl512b", "__riscv_v_min_vlen", "", RVV_LEAF, 512, min_value=512),
)
FEATURES: dict[str, tuple[CpuFeature, ...]] = {"x86_64": X86_FEATURES, "aarch64": AARCH64_FEATURES,
                                               "armv7": ARMV7_FEATURES, "riscv64": RISCV64_FEATURES}
"""Per target (targets/*.toml `name`): the extensions the runtime check and deploy know."""

REFUSAL_HINTS = {
    "x86_64": "rebuild with --board x86_64 (any x86-64-v2 CPU; AVX2/AVX-512 code where present) or for this CPU's level "
              "(`fluidml-xc boards detect --host BOARD`)",
    "aarch64": "rebuild for this board (`fluidml-xc boards detect --host BOARD` names its board file) or with a lower --cpu",
    "armv7": "rebuild for this board (`fluidml-xc boards detect --host BOARD` names its board file) or with a lower --cpu",
    "riscv64": "v is an RVV 1.0 vector unit (T-Head's RVV 0.7.1 is not one), zvlNb a VLEN of at least N bits: rebuild "
               "for this board (`fluidml-xc boards detect --host BOARD`) or with --board riscv64 (no vectors, any RV64GC)",
}
"""What the runner and fxc_strerror(FXC_ERR_CPU) tell the user, per target."""

X86_LEVELS = {"x86-64-v2": 128, "x86-64-v3": 256, "x86-64-v4": 512}
"""The x86-64 psABI levels the x86_64 board's code variants are built for, and their vector width in bits."""


def zig_cpu(cpu: str, features: str = "") -> str:
    """zig's -mcpu value for an LLVM cpu and feature string: x86-64-v3 + "+avx512f,-fma" -> x86_64_v3+avx512f-fma."""
    text = (cpu or "baseline").replace("-", "_").replace(".", "_")
    for feature in (f.strip() for f in features.split(",") if f.strip()):
        text += feature[0] + feature[1:].replace("-", "_").replace(".", "_")
    return text


def parse_features(text: str | None) -> str:
    """A --features value as LLVM's comma list: each entry +name or -name (a bare name means +name)."""
    entries = []
    for item in (text or "").replace(" ", ",").split(","):
        if not item:
            continue
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("+", item)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise InputError(f"--features entry {item!r} is not a feature name: give +name or -name, comma-separated "
                             f"(e.g. +avx512f,-fma)")
        entries.append(sign + name)
    return ",".join(entries)


def _zig_macros(zig_target: str, mcpu: str) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", zig_target, f"-mcpu={mcpu}", "-E", "-dM", "-x", "c",
           os.devnull]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120)
    except FileNotFoundError:
        raise ToolchainError("ziglang is not installed: pip install ziglang") from None
    return proc.returncode, proc.stdout if proc.returncode == 0 else proc.stderr


COMMON_CPUS = ("x86-64-v2", "x86-64-v3", "x86-64-v4", "haswell", "skylake-avx512", "icelake-server", "znver3", "znver4",
               "cortex-a53", "cortex-a72", "cortex-a76", "cortex-a78ae", "neoverse-n1", "generic")
"""Named first when a --cpu is unknown (zig lists the rest alphabetically)."""


def _unknown(kind: str, value: str, arch: str, listing: str) -> InputError:
    names = [line.split(":")[0].strip().replace("_", "-") for line in listing.splitlines()[1:] if line.startswith(" ")]
    if kind == "cpu":
        names = [n for n in COMMON_CPUS if n in names] + [n for n in names if n not in COMMON_CPUS]
    shown = ", ".join(names[:12])
    what = {"cpu": "CPU", "feature": "CPU feature"}[kind]
    hint = (f"LLVM's {arch} CPUs include {shown}, ...; or native for this machine" if kind == "cpu"
            else f"spell it as LLVM does (e.g. fullfp16, avx512f); LLVM's {arch} features include {shown}, ...")
    return InputError(f"unknown {what} {value!r} for {arch}: {hint}")


@cache
def compiler_macros(zig_target: str, cpu: str, features: str = "") -> frozenset[str]:
    """The macros clang predefines for code compiled for `cpu` + `features` (zig cc -E -dM), cached on disk per zig
    version. An unknown cpu or feature is an InputError."""
    mcpu = "native" if cpu == "native" else zig_cpu(cpu, features)
    key = hashlib.sha256("\0".join([metadata.version("ziglang"), zig_target, mcpu]).encode()).hexdigest()[:20]
    path = cache_root() / "cpus" / f"{key}.json"
    if cpu != "native":
        try:
            return frozenset(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    status, text = _zig_macros(zig_target, mcpu)
    arch = zig_target.split("-")[0]
    if status != 0:
        if "available CPUs" in text:
            raise _unknown("cpu", cpu, arch, text[text.index("available CPUs"):])
        if "available CPU features" in text:
            named = re.search(r"unknown CPU feature: '([^']+)'", text)
            bad = next((f for f in features.split(",") if named and zig_cpu("", f)[len("baseline") + 1:] == named.group(1)),
                       named.group(1) if named else features)
            raise _unknown("feature", bad, arch, text[text.index("available CPU features"):])
        raise ToolchainError(f"zig cc cannot tell what CPU {cpu!r} implies: {text.strip().splitlines()[0] if text.strip() else 'no output'}")
    macros = frozenset(line.split()[1] for line in text.splitlines() if line.startswith("#define "))
    if cpu != "native":
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(sorted(macros)))
            os.replace(tmp, path)
        except OSError:
            pass
    return macros


@cache
def macro_values(zig_target: str, cpu: str, features: str = "") -> dict[str, int]:
    """The integer values of the macros clang predefines for cpu + features (__riscv_v_min_vlen: 256)."""
    status, text = _zig_macros(zig_target, "native" if cpu == "native" else zig_cpu(cpu, features))
    if status != 0:
        compiler_macros(zig_target, cpu, features)  # raises the InputError naming the bad cpu or feature
        raise ToolchainError(f"zig cc cannot tell what CPU {cpu!r} implies")
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#define" and parts[2].isdigit():
            values[parts[1]] = int(parts[2])
    return values


def required_features(target_name: str, zig_target: str, cpu: str, features: str = "") -> tuple[CpuFeature, ...]:
    """The extensions (of FEATURES[target_name]) that code built for cpu + features may use."""
    macros = compiler_macros(zig_target, cpu, features)
    found = [f for f in FEATURES.get(target_name, ()) if f.macro in macros]
    if any(f.min_value for f in found):
        values = macro_values(zig_target, cpu, features)
        found = [f for f in found if values.get(f.macro, 0) >= f.min_value]
    return tuple(found)


def vector_length(zig_target: str, cpu: str, features: str = "") -> int:
    """RISC-V: the minimum VLEN in bits code for cpu + features may assume (0 without V; V alone means 128)."""
    if "__riscv_v" not in compiler_macros(zig_target, cpu, features):
        return 0
    return macro_values(zig_target, cpu, features).get("__riscv_v_min_vlen", 128)


def explicit_features(target_name: str, zig_target: str, cpu: str, features: str = "") -> str:
    """`features` plus +NAME for every extension the cpu implies: the kernels choose their forms from the spec's
    feature string (kernels/qgemm.py: +avx2, +avx512vnni, +dotprod; kernels/vectors.py: +vfp4), whatever named them."""
    given = [f for f in features.split(",") if f]
    named = {f[1:] for f in given}
    implied = [f"+{f.llvm_name}" for f in required_features(target_name, zig_target, cpu, features) if f.llvm_name not in named]
    return ",".join(given + implied)


def isa_extensions(isa: str) -> frozenset[str]:
    """A RISC-V `isa` line's extensions: rv64imafdcv_zicsr_zba -> i m a f d c v zicsr zba (single letters up to
    the first multi-letter name, which start with z, s or x; older kernels glue them on: rv64imafdcxtheadc)."""
    first, *rest = isa.strip().lower().split("_")
    base = first[4:] if first.startswith(("rv64", "rv32")) else ""
    cut = min([i for i, ch in enumerate(base) if ch in "zsx"] + [len(base)])
    named = ([base[cut:]] if base[cut:] else []) + rest
    return frozenset(list(base[:cut]) + [name for name in named if name])


def cpuinfo_flags(cpuinfo: str) -> frozenset[str]:
    """The flags of a /proc/cpuinfo text: `flags` on x86, `Features` on ARM, the `isa` line's extensions on
    RISC-V (the first processor's)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
        if sep and key.strip().lower() == "isa":
            return isa_extensions(value)
    return frozenset()


def missing_on(required: tuple[CpuFeature, ...], flags: frozenset[str], target_name: str) -> list[CpuFeature]:
    """The required extensions a board whose /proc/cpuinfo shows `flags` lacks. An armv7 program on an aarch64
    kernel sees the 64-bit names (asimd ...): ARMv8 has every armv7 extension we check."""
    if not flags or (target_name == "armv7" and "asimd" in flags):
        return []
    return [f for f in required if f.cpuinfo and f.cpuinfo not in flags]
