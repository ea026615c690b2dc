"""The storage-only low-precision dtypes (ml_dtypes, as onnx uses them): kernels load and store their bits and
compute in a wider dtype (kernels/lowp.py), runner .npy files hold their bits (run/execute.py)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

STORAGE_ONLY: dict[str, np.dtype] = {name: np.dtype(getattr(ml_dtypes, name)) for name in (
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "uint4", "int4", "float4_e2m1fn",
    "float8_e8m0fnu", "uint2", "int2")}
"""bfloat16, float8_*, float4_e2m1fn, float8_e8m0fnu, int4/uint4/int2/uint2, by name."""


def is_storage_only(dtype) -> bool:
    """True for the ml_dtypes of STORAGE_ONLY (not for a plain numpy dtype of the same name, there is none)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return False
    return dt.name in STORAGE_ONLY and dt.type.__module__.startswith("ml_dtypes")
