"""A tensor as a kernel sees it (`Operand`) and an affine view of one (`Access`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from llvmlite import ir


@dataclass
class Operand:
    """A tensor as a kernel sees it: logical shape, storage strides, typed base pointer.

    `storage` is the pointer, or for a constant a function producing it, called only if the kernel
    reads `ptr` (so weights a kernel repacks are not also stored as they came).
    """

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    storage: ir.Value | Callable[[], ir.Value]
    value: np.ndarray | None = None
    dyn: tuple | None = None
    """ir.Tensor.dyn: per dim the symbolic.Expr of a dim that varies at run time (`shape` is then the capacity the
    strides are for; `Kernel.extent` gives the run-time value), None when every dim is static."""

    @property
    def ptr(self) -> ir.Value:
        if not isinstance(self.storage, ir.Value):
            self.storage = self.storage()
        return self.storage

    def varies(self, dim: int) -> bool:
        """Does dim `dim` vary at run time?"""
        return self.dyn is not None and not isinstance(self.dyn[dim], int)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def access(self, dims: Sequence[int | None], ndomain: int, offset: int = 0, scales: Sequence[int] | None = None) -> "Access":
        """Map operand dim k to domain dim dims[k] (None: the operand dim has extent 1 / is fixed).

        A domain dim reached by several operand dims adds their strides; scales multiply strides.
        """
        strides = [0] * ndomain
        for k, d in enumerate(dims):
            if d is not None and self.shape[k] != 1:
                strides[d] += self.strides[k] * (scales[k] if scales else 1)
        return Access(lambda: self.ptr, self.dtype, tuple(strides), offset)

    def broadcast_access(self, out_shape: Sequence[int]) -> "Access":
        """Numpy broadcasting of this operand against an output domain."""
        shift = len(out_shape) - self.rank
        return self.access([k + shift for k in range(self.rank)], len(out_shape))

    def identity_access(self) -> "Access":
        return self.access(list(range(self.rank)), self.rank)


@dataclass
class Access:
    """Element (offset + sum(strides * idx)) of `storage`: a pointer, or a function making it on first use."""

    storage: ir.Value | Callable[[], ir.Value]
    dtype: np.dtype
    strides: tuple[int, ...]
    offset: int = 0

    @property
    def ptr(self) -> ir.Value:
        if not isinstance(self.storage, ir.Value):
            self.storage = self.storage()
        return self.storage
