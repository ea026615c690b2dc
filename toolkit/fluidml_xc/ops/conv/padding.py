"""Conv's zero padding times a non-finite weight (docs/GUARANTEES.md, "NaN, infinities, signed zeros and denormals").

The conv kernels visit only the taps that land inside the image (kernels/conv_geometry.py tap ranges): a padded
tap adds 0 * w, which is exactly nothing for a finite w. For w = NaN or +-Inf it is NaN (ONNX's definition pads
with zeros and multiplies them, as onnx.reference does), so an output whose window reaches the padding with such a
tap is NaN whatever the input. Which outputs those are depends on the constant weights and the geometry only:
`padding_nan_mask` computes them at build time and `store_padding_nan` writes NaN there after the kernel (its
epilogue included: every epilogue keeps NaN)."""
from __future__ import annotations

import numpy as np

from ...kernels.kernel import Operand, row_major_strides


def _padded_taps(out_len: int, taps: int, stride: int, dil: int, pad: int, size: int) -> np.ndarray:
    """[o, t]: tap t of output position o reads padding."""
    where = np.arange(out_len)[:, None] * stride + np.arange(taps)[None, :] * dil - pad
    return (where < 0) | (where >= size)


def padding_nan_mask(weight: np.ndarray, in_sp, out_sp, strides, dils, pads) -> np.ndarray | None:
    """[Cout, *out_sp] True where a non-finite weight meets padding; None when no output does."""
    weight = np.asarray(weight)
    if weight.dtype.kind != "f" or np.isfinite(weight).all():
        return None
    k_sp = weight.shape[2:]
    sp = len(k_sp)
    padded = np.zeros((*out_sp, *k_sp), bool)
    for d in range(sp):
        table = _padded_taps(out_sp[d], k_sp[d], strides[d], dils[d], pads[d], in_sp[d])
        shape = [1] * (2 * sp)
        shape[d], shape[sp + d] = out_sp[d], k_sp[d]
        padded |= table.reshape(shape)
    bad = ~np.isfinite(weight).all(axis=1)  # [Cout, *k_sp]: a tap some input channel multiplies by NaN / Inf
    hits = np.tensordot(bad.reshape(bad.shape[0], -1).astype(np.float32),
                        padded.reshape(-1, bad[0].size).astype(np.float32), axes=([1], [1])) > 0
    return hits.reshape(bad.shape[0], *out_sp) if hits.any() else None


def store_padding_nan(k, x: Operand, w: Operand, out: Operand, strides, dils, pads) -> None:
    """After the conv: NaN into the outputs `padding_nan_mask` names (nothing for finite or runtime weights)."""
    if w.value is None or out.size == 0:
        return
    mask = padding_nan_mask(w.value, x.shape[2:], out.shape[2:], strides, dils, pads)
    if mask is None:
        return
    dt = np.dtype(out.dtype)
    value = np.where(mask, np.array(np.nan, dt), np.array(0, dt))[None]
    nan = Operand(w.name + ".padding_nan", dt, value.shape, row_major_strides(value.shape), k.constant_array(value), value)
    b = k.b
    k.generic(out.shape, [out.identity_access()], [out.identity_access(), nan.broadcast_access(out.shape)],
              lambda v, i: [b.select(b.fcmp_unordered("uno", v[1], v[1]), v[1], v[0])])
