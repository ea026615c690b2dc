"""Vector helpers over a Kernel: multiply-adds (fused where the target needs it spelled out) and loads /
stores of lanes at any element step."""
from __future__ import annotations

from llvmlite import ir

from ..target.arch import arch_of, half_arithmetic
from .loops import element, offset
from .scalar import is_float


def fused_f32(k) -> bool:
    """Float32 multiply-adds as llvm.fma: an architecture whose backend never fuses them (target/arch.py
    explicit_fma: armv7) on a CPU with VFPv4 (k.spec's features)."""
    spec = k.spec
    return spec is not None and arch_of(spec.triple).explicit_fma and "+vfp4" in str(spec.features).split(",")


def fma(k, acc, x, y):
    """acc + x * y for floats, as k.fma; float32 on armv7 with VFPv4 an explicit llvm.fma (vfma.f32):
    LLVM's ARM backend never fuses a NEON fmul + fadd and emits the unfused vmla.f32 (two roundings,
    unlike aarch64's fmla)."""
    elem = x.type.element if isinstance(x.type, ir.VectorType) else x.type
    if elem == ir.HalfType() and fused_f16(k):
        return fused(k, acc, x, y)
    if elem != ir.FloatType() or not fused_f32(k):
        return k.fma(acc, x, y)
    return fused(k, acc, x, y)


def fused_f16(k) -> bool:
    """float16 multiply-adds as llvm.fma on a CPU with float16 vector arithmetic (target/arch.py half_arithmetic):
    AArch64's instruction selection then takes a broadcast operand by lane (`ldr h` + `fmla v.8h, v.8h, v.h[0]`)
    where a contracted fmul + fadd gets an `ld1r` per broadcast, a second vector micro-op beside each row's fmlas."""
    spec = k.spec
    return spec is not None and half_arithmetic(spec.triple, spec.features)


def fused(k, acc, x, y):
    """acc + x * y as a call of llvm.fma (float scalar or vector): rounded once, and never reassociated (LLVM
    reorders a chain of fast fadds, e.g. to put values from outside a loop's body first)."""
    ty = x.type
    suffix = f"v{ty.count}{ty.element.intrinsic_name}" if isinstance(ty, ir.VectorType) else ty.intrinsic_name
    name = f"llvm.fma.{suffix}"
    fn = k.module.globals.get(name) or ir.Function(k.module, ir.FunctionType(ty, [ty] * 3), name)
    return k.b.call(fn, [x, y, acc])


def mac(k, dt, acc, x, y):
    """acc + x * y: fma for floats, multiply + add for integers."""
    return fma(k, acc, x, y) if is_float(dt) else k.s.add(dt, acc, k.s.mul(dt, x, y))


def load_lanes(k, ptr, off, lanes: int, step: int, wide: bool):
    """`lanes` elements step apart from ptr[off]; wide: one contiguous load + shuffle (stays in bounds)."""
    b, p = k.b, element(k, ptr, off)
    ft = p.type.pointee
    size = ft.width // 8 if isinstance(ft, ir.IntType) else {"float": 4, "double": 8, "half": 2}[str(ft)]
    if lanes == 1:
        return b.load(p)
    if step == 1 or wide:
        n = lanes * step if step > 1 else lanes
        v = b.load(b.bitcast(p, ir.VectorType(ft, n).as_pointer()), align=size)
        if step == 1:
            return v
        mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [i * step for i in range(lanes)])
        return b.shuffle_vector(v, v, mask)
    v = ir.Constant(ir.VectorType(ft, lanes), None)
    for i in range(lanes):
        x = b.load(element(k, ptr, offset(k, i * step, (off, 1))))
        v = b.insert_element(v, x, ir.Constant(ir.IntType(32), i))
    return v


def store_lanes(k, ptr, off, value, lanes: int, step: int):
    b, p = k.b, element(k, ptr, off)
    if lanes == 1:
        b.store(value, p)
    elif step == 1:
        ft = p.type.pointee
        size = {"float": 4, "double": 8, "half": 2}[str(ft)]
        b.store(value, b.bitcast(p, ir.VectorType(ft, lanes).as_pointer()), align=size)
    else:
        for i in range(lanes):
            b.store(b.extract_element(value, ir.Constant(ir.IntType(32), i)), element(k, ptr, offset(k, i * step, (off, 1))))


def column_lanes(V: int, width: int) -> int:
    """Lanes of the output-column vectors over a padding-free interior of `width` columns: the target's V, halved
    while the interior is narrower, down to 4 (a 3x3 pool over 14x14 has 12 interior columns: scalar at 16 lanes, an
    8-lane vector and an overlapping one at 8)."""
    while V > 4 and width < V:
        V //= 2
    return V
