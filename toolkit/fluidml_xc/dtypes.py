"""The storage-only low-precision dtypes (ml_dtypes, as onnx uses them): kernels load and store their bits and
compute in a wider dtype (`compute_dtype`; the conversions are kernels/lowp.py), runner .npy files hold their bits
(run/execute.py)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

STORAGE_ONLY: dict[str, np.dtype] = {name: np.dtype(getattr(ml_dtypes, name)) for name in (
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "uint4", "int4", "float4_e2m1fn",
    "float8_e8m0fnu", "uint2", "int2")}
"""bfloat16, float8_*, float4_e2m1fn, float8_e8m0fnu, int4/uint4/int2/uint2, by name."""


_STORAGE_TYPES = frozenset(dt.type for dt in STORAGE_ONLY.values())


def is_storage_only(dtype) -> bool:
    """True for the ml_dtypes of STORAGE_ONLY (not for a plain numpy dtype of the same name, there is none)."""
    try:
        return np.dtype(dtype).type in _STORAGE_TYPES
    except TypeError:
        return False


SMALL_INTS = frozenset({"int4", "uint4", "int2", "uint2"})
"""Storage-only integers: computed in int8/uint8; the float formats are computed in float32."""


def compute_dtype(dtype) -> np.dtype:
    """The dtype a kernel computes a storage-only dtype in (the dtype itself for every other)."""
    dt = np.dtype(dtype)
    if not is_storage_only(dt):
        return dt
    if dt.name in SMALL_INTS:
        return np.dtype(np.uint8 if dt.name.startswith("u") else np.int8)
    return np.dtype(np.float32)


def has_scalar_type(dtype) -> bool:
    """Kernels compute in it (after compute_dtype): float16/32/64, bool and the integers have an LLVM type."""
    dt = compute_dtype(dtype)
    return dt.name in ("float16", "float32", "float64") or dt == np.bool_ or dt.kind in "iu"
