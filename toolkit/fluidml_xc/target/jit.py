"""The one in-process JIT (llvmlite MCJIT) for this machine: the ONNX backend runs whole models with it
(run/backend.py), the cost model's measurer single kernels (emit/measure.py); whether this machine runs a
target's code is target/host.py."""
from __future__ import annotations

import ctypes.util
from functools import cache

import llvmlite.binding as llvm
from llvmlite.binding import ffi

from .machine import MachineSpec, initialize_llvm, optimized_module


@cache
def jit_setup() -> None:
    """Native target and asm printer once; libm's and libgcc_s's symbols (expf, erff, tanhf, fmodf, ...)
    made visible to every engine."""
    initialize_llvm()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for lib in ("m", "gcc_s"):
        path = ctypes.util.find_library(lib)
        if path:
            try:
                llvm.load_library_permanently(path)
            except RuntimeError:
                pass


def jit_target_machine(spec: MachineSpec, like_object: bool = False):
    """A new target machine per engine (MCJIT takes ownership of, and frees, the one it is given): the JIT code
    model, or with `like_object` the settings the build's object is compiled with (pic, default code model),
    so that a measured kernel is the code the build ships."""
    jit_setup()
    target = llvm.Target.from_triple(spec.triple)
    if like_object:
        return target.create_target_machine(cpu=spec.cpu, features=spec.features, opt=3, reloc="pic", codemodel="default")
    return target.create_target_machine(cpu=spec.cpu, features=spec.features, opt=3, reloc="default",
                                        codemodel="jitdefault", jit=True)


class JitEngine(llvm.ExecutionEngine):
    """An MCJIT engine that disposes its module's own context after itself. The garbage collector finalizes a
    reference cycle's objects in any order: a context disposed before the engine made the engine's disposal crash
    (its module leaves a freed context)."""

    _context = None

    def _dispose(self):
        context = self._context
        super()._dispose()
        if context is not None:
            ffi.lib.LLVMPY_ContextDispose(context)


def jit_engine(llvm_ir: str, spec: MachineSpec, like_object: bool = False) -> llvm.ExecutionEngine:
    """A finalized MCJIT engine holding `llvm_ir` optimized with compile_module's pipeline for `spec`; the
    caller keeps it alive while it calls into it."""
    tm = jit_target_machine(spec, like_object)
    module = optimized_module(llvm_ir, tm)
    engine = llvm.create_mcjit_compiler(module, tm)
    engine.__class__ = JitEngine
    engine._context, module._context._owned = module._context._ptr, True
    engine.finalize_object()
    return engine
