"""Ops whose output is input 0's bytes with another shape. The planner aliases them; otherwise they copy."""
from __future__ import annotations

from ..kernels.kernel import Access
from ..kernels.scalar import const
from ..opspec import register
from .movement_runtime import transpose, view_copy


def _flat_copy(k) -> None:
    src, dst = k.inputs[0], k.outputs[0]
    if dst.size == 0:
        return
    k.generic((dst.size,), [_flat(dst)], [_flat(src)], lambda v, i: [v[0]])


def _flat(op):
    return Access(op.ptr, op.dtype, (1,), 0)


@register(("Reshape", "Squeeze", "Unsqueeze"), view=True, inplace=False, lowp_native=True, runtime_extents=True, strings=True)
@register("Flatten", view=True, inplace=False, lowp_native=True, axis_attr="boundary", runtime_extents=True, strings=True)
def lower_view(k):
    if k.dynamic:
        view_copy(k)
        return
    _flat_copy(k)


@register("Identity", view=True, inplace=False, lowp_native=True, runtime_extents=True, strings=True)
def lower_identity(k):
    """A flat copy; over varying dims an element copy to the run-time extents (beyond them is garbage), through the
    permutation of a Transpose that fluid's layouts made a byte copy ("_transpose_perm")."""
    perm = k.attr("_transpose_perm")
    if k.dynamic and perm is not None:
        dims = [0] * len(perm)
        for j, p in enumerate(perm):
            dims[p] = j
        transpose(k, dims)
        return
    if k.dynamic:
        k.copy(k.inputs[0], k.outputs[0])
        return
    _flat_copy(k)


@register("Dropout", view=True, lowp_native=True, heavy=True)
def lower_dropout(k):
    _flat_copy(k)
    mask = k.outputs[1] if len(k.outputs) > 1 else None
    if mask is not None:
        k.generic((mask.size,), [_flat(mask)], [], lambda v, i: [const(mask.dtype, 1)])
