"""The LLVM optimization pipeline of a module, chosen from its IR (issue #27: LLVM's share of the build time).

Most of a model's IR is kernels written as explicit vector code with the loops and register tiles we want (Conv,
MatMul, Winograd). On those, O3's per-module pipeline spends its time in passes that find nothing to do or redo
what the emitter did (InstCombine, DSE, SLP, IndVarSimplify, GVN, LoopLoadElimination over long straight-line
vector loop bodies). A module of vector code gets O2's function simplification pipeline alone (SROA, EarlyCSE,
InstCombine, LICM, GVN, DSE, loop rotation and deletion, full unrolling of constant-trip loops, SCCP, ADCE,
SimplifyCFG) on each of its functions. A module with a loop of scalar code (elementwise, data movement; also a
whole model for the JIT) keeps O3 with the loop and SLP vectorizers, which turn such loops into vector code. The
choice is a function of the IR text and of this file, so the kernel cache's code key (IR text and the package's
sources) covers it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import llvmlite.binding as llvm


@dataclass(frozen=True)
class Pipeline:
    name: str
    speed_level: int
    whole_module: bool
    """PassBuilder's per-module default pipeline (inliner and IPO, vectorizers, unrolling, late cleanups); False:
    its function simplification pipeline run on each function defined in the module."""
    vectorize: bool = True
    """The loop and SLP vectorizers (whole_module only)."""


FULL = Pipeline("o3", 3, True, True)
SIMPLIFY = Pipeline("simplify-o2", 2, False, False)

_VECTOR_TYPE = re.compile(r"<(?:vscale x )?\d+ x ")
_LABEL = re.compile(r'^"?([^":\s]+)"?:')
_TARGET = re.compile(r'label %"?([^",\s]+)"?')
_O3_TRIPLES = re.compile(r'^target triple = "(?:arm|thumb)', re.M)
"""32-bit Arm keeps O3 for vector code too: there (16 q registers) its Winograd GEMM and 3x3 Conv loops spill or
take an instruction more without O3's late passes (benchmarks/mca.py, rpi3)."""


def _functions(llvm_ir: str) -> list[list[str]]:
    """The body lines of each function the module defines."""
    bodies, body = [], None
    for line in llvm_ir.splitlines():
        if line.startswith("define "):
            body = []
        elif body is not None and line == "}":
            bodies.append(body)
            body = None
        elif body is not None:
            body.append(line)
    return bodies


def _scalar_loop(body: list[str]) -> bool:
    """A function without vector types whose blocks branch back to an earlier block (a loop for LLVM's
    vectorizers)."""
    if any(_VECTOR_TYPE.search(line) for line in body):
        return False
    seen: set[str] = set()
    for line in body:
        label = _LABEL.match(line)
        if label:
            seen.add(label.group(1))
        elif seen.intersection(_TARGET.findall(line)):
            return True
    return False


def pipeline_for(llvm_ir: str) -> Pipeline:
    """SIMPLIFY for a module of explicit vector code (a vector type in it, no loop of scalar code), FULL else."""
    if (not _VECTOR_TYPE.search(llvm_ir) or _O3_TRIPLES.search(llvm_ir)
            or any(_scalar_loop(body) for body in _functions(llvm_ir))):
        return FULL
    return SIMPLIFY


def run_pipeline(module, tm, pipeline: Pipeline) -> None:
    """Optimize `module` in place for the target machine `tm`."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=pipeline.speed_level)
    tuning.loop_vectorization = pipeline.vectorize
    tuning.slp_vectorization = pipeline.vectorize
    builder = llvm.create_pass_builder(tm, tuning)
    if pipeline.whole_module:
        builder.getModulePassManager().run(module, builder)
        return
    passes = builder.getFunctionPassManager()
    for function in module.functions:
        if not function.is_declaration:
            passes.run(function, builder)
