"""A per-node unit's large constants as pointer arguments of its node function (issue #27): the same code for
every layer of the same shapes, whatever its weights; the entry module passes each layer's constant symbols."""
from __future__ import annotations

import hashlib

from llvmlite import ir

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

    def here(self) -> bool:
        """Is the kernel emitting into the node function itself (a Loop body's functions name their constants)?"""
        return self.kernel.b.block is not None and self.kernel.b.block.parent is self.fn

    def get(self, data: bytes) -> ir.Argument:
        key = hashlib.sha256(data).digest()
        if key not in self.args:
            arg = ir.Argument(self.fn, I8P, f"c{len(self.args)}")
            for attr in ("noalias", "captures(none)"):
                arg.add_attribute(attr)
            set.add(arg.attributes, "readonly")  # llvmlite's list lacks it
            arg.attributes.align, arg.attributes.dereferenceable = self.alignment, len(data)
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
