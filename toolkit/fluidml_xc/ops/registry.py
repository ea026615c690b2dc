"""Transitional: ops/integer.py, matmul.py and pool.py import `register` from here until helper `split` has cut
them (#14); then their registrations carry these traits themselves and this module goes. The registry is
opspec.py."""
from __future__ import annotations

from ..opspec import register as _register

_MATMUL = dict(strided=True, layout_anchor=True, loop_orders="matmul", heavy=True)
_POOL = dict(strided=True, image=True, heavy=True)
PENDING_TRAITS: dict[str, dict] = {
    "MatMul": _MATMUL, "Gemm": _MATMUL,
    "MaxPool": _POOL, "AveragePool": _POOL, "GlobalAveragePool": dict(strided=True, image=True),
    "GlobalMaxPool": dict(strided=True, image=True), "LpPool": dict(heavy=True), "GlobalLpPool": dict(heavy=True),
    "MatMulInteger": dict(heavy=True), "QLinearMatMul": dict(heavy=True), "ConvInteger": dict(heavy=True),
    "QLinearConv": dict(heavy=True),
}


def register(op_types: str, **options):
    """opspec.register with the op's traits from PENDING_TRAITS."""
    return _register(op_types, **options, **PENDING_TRAITS[op_types])
