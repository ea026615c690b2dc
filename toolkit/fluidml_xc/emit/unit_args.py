"""A per-node unit's large constants as pointer arguments of its node function (issue #27): the same code for
every layer of the same shapes, whatever its weights; the entry module passes each layer's constant symbols."""
from __future__ import annotations

import hashlib

from llvmlite import ir

from ..kernels.derived import derived_origins, reads_values_only_derived
from ..kernels.kernel import Kernel

I8P = ir.IntType(8).as_pointer()


class ConstantArgs:
    """A unit's large constants as pointer arguments of its node function `fn` (in first use order, after its other
    arguments), with what LLVM knows of a constant symbol: not written, not aliased, aligned, its size readable."""

    def __init__(self, fn: ir.Function, kernel: Kernel, alignment: int):
        self.fn, self.kernel, self.alignment = fn, kernel, alignment
        self.args: dict[bytes, ir.Argument] = {}
        self.data: list[bytes] = []
        self._casts: dict[tuple, ir.Value] = {}
        self.origins: list[tuple[bytes, tuple | None]] = []
        """Every constant that became an argument: (its sha256, kernels/derived origin or None), in call order."""
        self.inlined: list[tuple] = []
        """The origins of derived constants kept inline (under INLINE_LIMIT bytes)."""

    def here(self) -> bool:
        """Is the kernel emitting into the node function itself (a Loop body's functions name their constants)?"""
        return self.kernel.b.block is not None and self.kernel.b.block.parent is self.fn

    def get(self, data: bytes, origin: tuple | None = None, sized: bool = True) -> ir.Argument:
        """The argument of `data`; sized: LLVM is told how many bytes it may read (else the code does not depend
        on the size: Kernel.argument_data)."""
        key = hashlib.sha256(data).digest()
        self.origins.append((key, origin))
        if key not in self.args:
            arg = ir.Argument(self.fn, I8P, f"c{len(self.args)}")
            for attr in ("noalias", "captures(none)"):
                arg.add_attribute(attr)
            set.add(arg.attributes, "readonly")  # llvmlite's list lacks it
            arg.attributes.align = self.alignment
            if sized:
                arg.attributes.dereferenceable = len(data)
            self.args[key] = arg
            self.data.append(data)
        return self.args[key]

    def cast(self, arg: ir.Argument, ty: ir.Type) -> ir.Value:
        """`arg` as a `ty` pointer, cast at the top of the function (so it dominates every use)."""
        if (arg.name, str(ty)) not in self._casts:
            b = ir.IRBuilder(self.fn.entry_basic_block)
            b.position_at_start(self.fn.entry_basic_block)
            self._casts[arg.name, str(ty)] = b.bitcast(arg, ty)
        return self._casts[arg.name, str(ty)]

    def splice(self, types: list[ir.Type]) -> list[ir.Type]:
        """The constants' arguments put after the function's `types` (before a tiled body's begin and end)."""
        fn, extra = self.fn, list(self.args.values())
        fn.args = (*fn.args[:len(types)], *extra, *fn.args[len(types):])
        types = types + [I8P] * len(extra)
        fn.ftype = ir.FunctionType(fn.ftype.return_type, [a.type for a in fn.args])
        fn.type = fn.ftype.as_pointer()
        return types

    def recipes(self, large: set[str]) -> tuple[tuple[int, object, tuple[str, ...]], ...] | None:
        """How the arguments follow from the view's constant tensors: (argument index, fn, tensor names) for each
        derived one; None when the kernel did not opt in (kernels/derived.values_derived), when one argument
        stands for a derived constant and another constant (their bytes happened to be equal), when a derived
        constant computed from a `large` tensor (one described by shape only) was kept inline, or when one the kernel
        derived reached its constants without its origin."""
        if not reads_values_only_derived(self.kernel) or any(set(names) & large for _, names in self.inlined):
            return None
        recorded = {id(origin) for _, origin in self.origins} | {id(origin) for origin in self.inlined}
        if any(id(origin) not in recorded for origin in derived_origins(self.kernel)):
            return None  # a derived array that lost its origin on its way (a memo of constants, a copy)
        origin_of: dict[bytes, tuple | None] = {}
        for key, origin in self.origins:
            if origin_of.setdefault(key, origin) is not origin:
                return None
        return tuple((i, *origin_of[key]) for i, key in enumerate(self.args) if origin_of[key] is not None)
