"""llvmlite target machines and object emission for every board's triple."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from functools import cache

import llvmlite
import llvmlite.binding as llvm

from .boards import Board
from .code_sections import executable_code_sections
from .cpus import X86_LEVELS, compiler_macros, explicit_features, parse_features, vector_length
from .host import host_can_run
from .pipeline import pipeline_for, run_pipeline
from ..errors import InputError, ToolchainError


@dataclass(frozen=True)
class MachineSpec:
    triple: str
    cpu: str
    features: str
    pointer_bits: int
    vector_bits: int
    """Bits of the kernels' vectors (RISC-V with V: VLEN x the target's vector_lmul, a register group)."""
    alignment: int
    accumulators: int = 12
    """Vector registers the float GEMM register tile keeps accumulators in (the target file's `accumulators`)."""
    conv_accumulators: int = 12
    """The same for the Conv tiles (`conv_accumulators`)."""
    variant: str = ""
    """Suffix of the entry points when the model is built for several CPUs at once (`_x86_64_v3`; "" otherwise)."""
    private_caches: bool = False
    """The target's `private_caches` (target/boards.py)."""
    pack_vector_bits: int = 0
    """The vector width the build-time weight packs (Conv's channel blocks, MatMul's panels) are laid out for,
    one for all the code variants of a build so the weights blob holds one copy: half the widest variant's
    (a block of the widest's vector width each; the widest reads each of its vectors whole, two blocks per
    register tile, the narrower read sub-blocks). 0: vector_bits."""


@cache
def initialize_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def _vector_bits(board: Board, cpu: str, features: str) -> int:
    """The widest vectors the code may use: x86 from what cpu + features imply, RISC-V the minimum VLEN times the
    target's vector_lmul (register groups) when they enable V, else the target's."""
    target = board.target
    if target.vector_accumulators and cpu != "native":
        vlen = vector_length(target.zig_target, cpu, features)
        return vlen * target.vector_lmul if vlen else target.vector_bits
    if target.name != "x86_64":
        return target.vector_bits
    if cpu == "native":
        flags = set(features.split(","))
        return 512 if "+avx512f" in flags else 256 if flags & {"+avx2", "+avx"} else 128
    macros = compiler_macros(target.zig_target, cpu, features)
    return 512 if "__AVX512F__" in macros else 256 if "__AVX__" in macros else 128


def _has_vector_unit(target, cpu: str, features: str) -> bool:
    """The cpu + features enable the target's optional vector unit (RISC-V's V)."""
    if cpu == "native":
        return "+v" in features.split(",")
    return vector_length(target.zig_target, cpu, features) > 0


def _here_level(board: Board) -> str:
    """Of a board's cpu_variants, the widest this machine runs (the widest when it is another architecture)."""
    levels = sorted(board.cpu_variants, key=lambda name: -X86_LEVELS.get(name, 0))
    if not host_can_run(board.target.triple, "generic"):
        return levels[0]
    return next((level for level in levels if host_can_run(board.target.triple, level)), board.cpu)


def machine_spec(board: Board, cpu: str | None = None, features: str | None = None) -> MachineSpec:
    """Resolve the board's cpu, or `cpu` (--cpu; "native" = this machine), and its features plus `features`
    (--features) into a concrete LLVM cpu and feature string; an unknown name is an InputError. A board with
    cpu_variants gives the widest variant this machine runs: what the JIT, the measurer and analyses compile for
    (a build emits every variant: machine_specs)."""
    initialize_llvm()
    target = board.target
    cpu = cpu or (_here_level(board) if board.cpu_variants and not features else board.cpu)
    extra = parse_features(features)
    features = ",".join(f for f in ((board.features if cpu == board.cpu else ""), extra) if f)
    if cpu == "native":
        if not host_can_run(target.triple, "native"):
            raise InputError(f"--cpu native means this machine's CPU, which cannot run {target.name} code: "
                             f"name the board's CPU (e.g. --cpu {board.cpu})")
        cpu, host = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        features = ",".join(f for f in (host, extra) if f)
        vector_bits = _vector_bits(board, "native", features)
    else:
        vector_bits = _vector_bits(board, cpu, features)
        features = explicit_features(target.name, target.zig_target, cpu, features)
    vector_unit = bool(target.vector_accumulators) and _has_vector_unit(target, cpu, features)
    spec = MachineSpec(target.triple, cpu, features, target.pointer_bits, vector_bits, target.alignment,
                       target.vector_accumulators if vector_unit else target.accumulators,
                       target.vector_conv_accumulators if vector_unit else target.conv_accumulators,
                       private_caches=target.private_caches)
    check_accepted(spec)
    return spec


def machine_specs(board: Board, cpu: str | None = None, features: str | None = None) -> list[MachineSpec]:
    """The code variants a build emits, widest first: one per x86-64 level of the board's `cpu_variants` (the
    x86_64 board: v4, v3, v2, chosen at init from cpuid), or the one spec --cpu/--features or the board name."""
    if cpu or features or not board.cpu_variants:
        return [machine_spec(board, cpu, features)]
    specs = [replace(machine_spec(board, level, ""), variant="_" + level.replace("-", "_"))
             for level in sorted(board.cpu_variants, key=lambda name: -X86_LEVELS.get(name, 0))]
    return [replace(s, pack_vector_bits=max(specs[-1].vector_bits, specs[0].vector_bits // 2)) for s in specs]


_PROBE_IR = """target triple = "{triple}"
define <4 x float> @probe(<4 x float> %a, <4 x float> %b) {{
  %c = fmul <4 x float> %a, %b
  ret <4 x float> %c
}}
"""


@cache
def check_accepted(spec: MachineSpec) -> None:
    """Compile a probe function for the spec with LLVM's stderr captured: a cpu or feature LLVM does not know
    (it warns "is not a recognized ...", three times per build, and ignores it) is an InputError."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as err:
        os.dup2(err.fileno(), 2)
        try:
            tm = llvm.Target.from_triple(spec.triple).create_target_machine(cpu=spec.cpu, features=spec.features,
                                                                            opt=0, reloc="pic")
            tm.emit_object(llvm.parse_assembly(_PROBE_IR.format(triple=spec.triple)))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        captured = err.read().decode(errors="replace").splitlines()
    warning = [line for line in captured if "is not a recognized" in line]
    others = [line for line in captured if line not in warning]
    if others:
        print("\n".join(others), file=sys.stderr)
    if warning:
        raise InputError(f"LLVM {llvm_version()} rejects the CPU settings for {spec.triple} (cpu {spec.cpu!r}, features "
                         f"{spec.features!r}): {warning[0]}; spell CPU and features as LLVM does (e.g. fullfp16, not fp16)")


@cache
def target_machine(spec: MachineSpec):
    initialize_llvm()
    try:
        target = llvm.Target.from_triple(spec.triple)
    except RuntimeError as exc:
        raise ToolchainError(f"LLVM in llvmlite {llvmlite.__version__} cannot target {spec.triple}: {exc}") from None
    return target.create_target_machine(cpu=spec.cpu, features=spec.features, opt=3, reloc="pic", codemodel="default")


def data_layout(spec: MachineSpec) -> str:
    return str(target_machine(spec).target_data)


def optimized_module(llvm_ir: str, tm):
    """Parse (into a context of its own, so threads never share the global one), verify and optimize for `tm`
    with the pipeline its IR calls for (target/pipeline.py)."""
    module = llvm.parse_assembly(llvm_ir, context=llvm.create_context())
    module.verify()
    run_pipeline(module, tm, pipeline_for(llvm_ir))
    return module


def compile_module_timed(llvm_ir: str, spec: MachineSpec) -> tuple[bytes, float, float]:
    """compile_module's object with its CPU seconds (this thread's: llvmlite runs LLVM in the calling thread):
    (object, parse + verify + optimization, code generation)."""
    started = time.thread_time()
    tm = target_machine(spec)
    module = optimized_module(llvm_ir, tm)
    optimized = time.thread_time()
    code = executable_code_sections(tm.emit_object(module))
    return code, optimized - started, time.thread_time() - optimized


def compile_module(llvm_ir: str, spec: MachineSpec) -> bytes:
    """Parse, verify, optimize (target/pipeline.py) and emit an ELF object for the spec's target."""
    return compile_module_timed(llvm_ir, spec)[0]


def llvm_version() -> str:
    return ".".join(str(v) for v in llvm.llvm_version_info)
