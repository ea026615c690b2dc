"""Our results for the conversions ONNX leaves undefined, in numpy: what the kernels compute (kernels/
lowp.py, kernels/scalar.py) is what constant folding and the tests compute here. The rules and why
they were chosen are in docs/INTERNALS.md (Conversions).

- float -> any integer type (int64 ... int8, uint*, int4/uint4/int2/uint2): NaN -> 0, truncation
  toward zero, values beyond the type's range -> its min/max. ONNX says "undefined if out of range";
  ml_dtypes wraps (0.5) or gives 0 (0.7), ONNX Runtime wraps through a C cast, so without a rule of
  our own a result would depend on the library version and the target's instruction set.
- A computed value stored as float8_e8m0fnu (not a Cast, which has `round_mode`): the exponent
  rounds half up; float32 subnormals up to 2^-127 give code 0, above it code 1; zero, negatives,
  inf and NaN give NaN (0xFF).

Everything ONNX defines (float -> float8 with and without `saturate`, Cast to FLOAT8E8M0 with
`round_mode`, integer -> integer wrap, float -> float) is onnx.reference's own `cast_to`.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_cast import cast_to

SMALL_INTS = {np.dtype(getattr(ml_dtypes, n)) for n in ("int4", "uint4", "int2", "uint2")}


def is_integer(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype in SMALL_INTS or (np.issubdtype(dtype, np.integer) and dtype != np.bool_)


def is_float(dtype) -> bool:
    dtype = np.dtype(dtype)
    return np.issubdtype(dtype, np.floating) or (dtype.kind in "fV" and dtype not in SMALL_INTS)


def float_to_int(x: np.ndarray, dtype) -> np.ndarray:
    """NaN -> 0, truncation toward zero, saturation to `dtype`'s range."""
    dtype = np.dtype(dtype)
    info = ml_dtypes.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    v = np.trunc(np.asarray(x).astype(np.float64))
    out = np.zeros(v.shape, np.int64 if lo < 0 else np.uint64)
    with np.errstate(invalid="ignore"):
        below, above = v <= lo, v >= hi  # float64(hi) of a 64-bit type rounds up: compare before converting
        inside = ~(below | above | np.isnan(v))
    out[inside] = v[inside].astype(out.dtype)
    out[below] = lo
    out[above] = hi
    return out.astype(dtype)


def cast(x: np.ndarray, to: int, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """ONNX Cast of `x` to the TensorProto type `to`, with our rules where ONNX has none."""
    x = np.asarray(x)
    if to != onnx.TensorProto.STRING:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(to)
        if is_float(x.dtype) and is_integer(dtype):
            return float_to_int(x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float32), dtype)
    return cast_to(x, to, saturate, round_mode)


def e8m0_store(x: np.ndarray) -> np.ndarray:
    """The float8_e8m0fnu element a computed float32 value is stored as (see the module doc)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    e, m = (u & 0x7FFFFFFF) >> 23, u & 0x7FFFFF
    code = np.where(e == 0, (m > 0x400000).astype(np.int64), e + (m >= 0x400000))
    bad = (code > 0xFE) | ((u & 0x7FFFFFFF) == 0) | (u >= 0x80000000) | ((u & 0x7F800000) == 0x7F800000)
    return np.where(bad, 0xFF, code).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


class Cast(OpRun):
    """onnx.reference's Cast with our rules (ReferenceEvaluator(..., new_ops=REFERENCE_OPS))."""

    def _run(self, x, to=None, saturate=None, round_mode=None):
        return (cast(x, to, True if saturate is None else bool(saturate), round_mode or "up"),)


class CastLike(OpRun):
    def _run(self, x, y, saturate=None, round_mode=None):
        return (cast(x, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(y).dtype),
                     True if saturate is None else bool(saturate), round_mode or "up"),)


REFERENCE_OPS = [Cast, CastLike]
