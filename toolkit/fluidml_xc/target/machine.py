"""llvmlite target machines and object emission for every board's triple."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import llvmlite
import llvmlite.binding as llvm

from .boards import Board
from ..errors import ToolchainError


@dataclass(frozen=True)
class MachineSpec:
    triple: str
    cpu: str
    features: str
    pointer_bits: int
    vector_bits: int
    alignment: int
    accumulators: int = 12
    """Vector registers the float GEMM register tile keeps accumulators in (the target file's `accumulators`)."""
    conv_accumulators: int = 12
    """The same for the Conv tiles (`conv_accumulators`)."""


@cache
def _initialize() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def machine_spec(board: Board) -> MachineSpec:
    """Resolve the board's cpu ("native" = this machine) into a concrete LLVM cpu and feature string."""
    _initialize()
    target = board.target
    cpu, features = board.cpu, board.features
    if cpu == "native":
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    vector_bits = target.vector_bits
    if target.name == "x86_64":
        flags = set(features.split(","))
        vector_bits = 512 if "+avx512f" in flags else 256 if flags & {"+avx2", "+avx"} else 128
    return MachineSpec(target.triple, cpu, features, target.pointer_bits, vector_bits, target.alignment,
                       target.accumulators, target.conv_accumulators)


@cache
def target_machine(spec: MachineSpec):
    _initialize()
    try:
        target = llvm.Target.from_triple(spec.triple)
    except RuntimeError as exc:
        raise ToolchainError(f"LLVM in llvmlite {llvmlite.__version__} cannot target {spec.triple}: {exc}") from None
    return target.create_target_machine(cpu=spec.cpu, features=spec.features, opt=3, reloc="pic", codemodel="default")


def data_layout(spec: MachineSpec) -> str:
    return str(target_machine(spec).target_data)


def optimized_module(llvm_ir: str, tm):
    """Parse, verify and optimize at O3 (loop and SLP vectorizers on) for `tm`."""
    module = llvm.parse_assembly(llvm_ir)
    module.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, tuning)
    builder.getModulePassManager().run(module, builder)
    return module


def compile_module(llvm_ir: str, spec: MachineSpec) -> bytes:
    """Parse, verify, optimize at O3 and emit an ELF object for the spec's target."""
    tm = target_machine(spec)
    return tm.emit_object(optimized_module(llvm_ir, tm))


def llvm_version() -> str:
    return ".".join(str(v) for v in llvm.llvm_version_info)
