"""The LLVM optimization pipeline of a module, chosen from its IR (issue #27: LLVM's share of the build time).

Most of a model's IR is kernels written as explicit vector code with the loops and register tiles we want (Conv,
MatMul, Winograd). On those, O3's per-module pipeline spends its time in passes that find nothing to do or redo
what the emitter did (InstCombine, DSE, SLP, IndVarSimplify, GVN, LoopLoadElimination over long straight-line
vector loop bodies). A module that holds any vector type gets the function simplification pipeline alone (SROA,
EarlyCSE, InstCombine, LICM, GVN, DSE, loop rotation and deletion, full unrolling of constant-trip loops, SCCP,
ADCE, SimplifyCFG) on each of its functions; scalar code (elementwise loops, data movement) keeps O3 with the loop and
SLP vectorizers, which turn it into vector code. The choice is a function of the IR text and this module's source,
so the kernel cache's code key (IR text + package sources) covers it.
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


def pipeline_for(llvm_ir: str) -> Pipeline:
    """SIMPLIFY for a module of explicit vector code (a vector type anywhere in it), FULL for scalar code."""
    return SIMPLIFY if _VECTOR_TYPE.search(llvm_ir) else FULL


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
