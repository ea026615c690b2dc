"""Whether a node's function may run once per tile range: what it writes outside its parallel region."""
from __future__ import annotations

from llvmlite import ir


def parallel_safe(fn: ir.Function, region: set) -> bool:
    """True when every store or memory intrinsic outside the parallel region writes the function's own
    stack: then running the function once per tile range has the effect of running it once."""
    def on_stack(ptr) -> bool:
        while isinstance(ptr, (ir.GEPInstr, ir.CastInstr)):
            ptr = ptr.operands[0]
        return isinstance(ptr, ir.AllocaInstr)

    for blk in fn.blocks:
        if blk in region:
            continue
        for ins in blk.instructions:
            if isinstance(ins, ir.StoreInstr) and not on_stack(ins.operands[1]):
                return False
            if isinstance(ins, ir.CallInstr):
                name = getattr(ins.callee, "name", "")
                if name.startswith(("llvm.memcpy", "llvm.memset", "llvm.memmove")) and not on_stack(ins.args[0]):
                    return False
                if not name.startswith("llvm.") and name not in PURE_CALLS:
                    return False
            if isinstance(ins, (ir.instructions.AtomicRMW, ir.instructions.CmpXchg)):
                return False
    return True


PURE_CALLS = frozenset(("expf", "exp", "logf", "log", "tanhf", "tanh", "erff", "erf", "powf", "pow", "sinf", "sin", "cosf",
                        "cos", "tanf", "tan", "asinf", "asin", "acosf", "acos", "atanf", "atan", "sinhf", "sinh", "coshf",
                        "cosh", "asinhf", "asinh", "acoshf", "acosh", "atanhf", "atanh", "fmodf", "fmod", "roundf",
                        "round", "nearbyintf", "nearbyint", "rintf", "rint", "expm1f", "expm1", "log1pf", "log1p",
                        "atan2f", "atan2", "cbrtf", "cbrt", "lgammaf", "lgamma", "tgammaf", "tgamma"))
