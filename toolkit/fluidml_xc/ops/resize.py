"""Resize / Upsample: nearest, (multi)linear and cubic from per-dim tap tables (input indices and weights per output
index) built at compile time, ONNX's coordinate transformations and rounding modes."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.kernel import Operand
from ..kernels.rows import normalize_axis
from ..kernels.scalar import const, is_float, llvm_type
from ..opspec import register
from ..symbolic import bounds
from .movement import each_point, index_dtype, linear_at


# -- Resize --------------------------------------------------------------------------------------
def _resize_scales(k, x: Operand, out: Operand) -> list[float]:
    """Per-dim scale factors as the coordinate transform uses them (given scales, else from the sizes)."""
    rank, axes = x.rank, [normalize_axis(a, x.rank) for a in (k.attr("axes") or range(x.rank))]
    given = None
    if k.graph.opset < 11:
        given = k.input_value(1) if len(k.inputs) > 1 else None
        given = given if given is not None else k.attr("scales")
    elif len(k.inputs) > 2 and k.input_value(2) is not None and k.input_value(2).size:
        given = k.input_value(2)
    scales = [o / i if i else 1.0 for o, i in zip(out.shape, x.shape)]
    if given is not None and len(np.ravel(given)):
        for a, sc in zip(axes if len(np.ravel(given)) != rank else range(rank), np.ravel(given)):
            scales[a] = float(sc)
    elif k.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        sizes = [int(v) for v in np.ravel(k.input_value(3))]
        ratios = [sz / x.shape[a] for a, sz in zip(axes, sizes)]
        uniform = min(ratios) if k.attr("keep_aspect_ratio_policy") == "not_larger" else max(ratios)
        for a in axes:
            scales[a] = uniform
    return scales


def _source_coord(mode: str, i: int, scale: float, n_in: int, n_out: int, roi: tuple[float, float]) -> float:
    """Input coordinate of output index i along one dim (ONNX coordinate_transformation_mode)."""
    width = scale * n_in
    if mode == "asymmetric":
        return i / scale
    if mode == "align_corners":
        return 0.0 if width == 1 else i * (n_in - 1) / (width - 1)
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if width != 1 else -0.5
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        return (n_in / 2) * (1 - n_out / width) + (i + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            return (hi - lo) * (n_in - 1) / 2 + lo * (n_in - 1)
        return i * (hi - lo) * (n_in - 1) / (width - 1) + lo * (n_in - 1)
    raise InputError(f"Resize: coordinate_transformation_mode {mode!r} is not supported")


def _nearest(x: float, mode: str) -> int:
    rounding = {"floor": math.floor, "ceil": math.ceil, "round_prefer_ceil": lambda v: math.floor(v + 0.5),
                "round_prefer_floor": lambda v: math.ceil(v - 0.5)}
    if mode not in rounding:
        raise InputError(f"Resize: nearest_mode {mode!r} is not supported")
    return rounding[mode](x)


def _coefficients(mode: str, ratio: float, scale: float, a: float, antialias: bool) -> list[float]:
    """Interpolation weights of the taps around x (ONNX: ratio in (0, 1], taps start at floor - n/2 + 1)."""
    if antialias and scale < 1:
        reach = 1 if mode == "linear" else 2
        start = math.floor(-reach / scale) + 1
        args = [scale * (j - ratio) for j in range(start, 2 - start)]
        if mode == "linear":
            w = [max(0.0, 1 - abs(t)) for t in args]
        else:
            w = [(a + 2) * abs(t) ** 3 - (a + 3) * t * t + 1 if abs(t) <= 1 else
                 (a * abs(t) ** 3 - 5 * a * t * t + 8 * a * abs(t) - 4 * a if abs(t) < 2 else 0.0) for t in args]
        total = sum(w)
        return [v / total for v in w]
    if mode == "linear":
        return [1 - ratio, ratio]
    r, q = ratio + 1, 2 - ratio
    return [((a * r - 5 * a) * r + 8 * a) * r - 4 * a, ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
            ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1, ((a * q - 5 * a) * q + 8 * a) * q - 4 * a]


def _resize_taps(k, mode, n_in, n_out, scale, roi):
    """Per output index: (input indices, weights, outside-the-crop flag) along one dim, all at build time."""
    coord = k.attr("coordinate_transformation_mode", "half_pixel" if k.graph.opset >= 11 else "asymmetric")
    nearest_mode = k.attr("nearest_mode", "round_prefer_floor") if k.graph.opset >= 11 else "floor"
    a, exclude, antialias = float(k.attr("cubic_coeff_a", -0.75)), int(k.attr("exclude_outside", 0)), int(k.attr("antialias", 0))
    taps = []
    for i in range(n_out):
        x = _source_coord(coord, i, scale, n_in, n_out, roi)
        outside = coord == "tf_crop_and_resize" and not 0 <= x <= n_in - 1
        if mode == "nearest":
            taps.append(([min(max(_nearest(x, nearest_mode), 0), n_in - 1)], [1.0], outside))
            continue
        base = math.ceil(x) - 1
        w = _coefficients(mode, x - base, scale, a, bool(antialias))
        n, pad = len(w), (len(w) + 1) // 2
        start = min(max(base - n // 2 + 1, -pad), n_in - 1 + pad - (n - 1))
        idx = list(range(start, start + n))
        if exclude:
            w = [v if 0 <= j < n_in else 0.0 for v, j in zip(w, idx)]
            w = [v / sum(w) for v in w]
        taps.append(([min(max(j, 0), n_in - 1) for j in idx], w, outside))
    return taps


@register(("Resize", "Upsample"), heavy=True, runtime_extents=True)
def lower_resize(k):
    """Nearest, (multi)linear and cubic resize from per-dim tap tables (indices and weights) built at compile time."""
    x, out = k.inputs[0], k.outputs[0]
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(k.attr("mode", "nearest"), k.attr("mode", "nearest"))
    if mode not in ("nearest", "linear", "cubic"):
        raise InputError(f"node {k.node.name!r} (Resize): mode {mode!r} is not supported (nearest, linear, cubic)")
    if mode != "nearest" and not is_float(x.dtype):
        raise InputError(f"node {k.node.name!r} (Resize): {mode} mode needs a float tensor, got {x.dtype}")
    scales = _resize_scales(k, x, out)
    rois = [(0.0, 1.0)] * x.rank
    roi = k.input_value(1) if k.graph.opset >= 11 and len(k.inputs) > 1 else None
    if roi is not None and roi.size:
        axes = [normalize_axis(a, x.rank) for a in (k.attr("axes") or range(x.rank))]
        half = roi.size // 2
        for j, a in enumerate(axes[:half]):
            rois[a] = (float(roi[j]), float(roi[half + j]))
    dt, idx_dt = x.dtype, index_dtype(k)
    moved = [d for d in range(x.rank) if not (x.shape[d] == out.shape[d] and scales[d] == 1.0 and rois[d] == (0.0, 1.0))]
    taps = {d: _resize_taps(k, mode, x.shape[d], out.shape[d], scales[d], rois[d]) for d in moved}
    width = {d: len(taps[d][0][1]) for d in moved}
    index_tables = {d: k.constant_array(np.array([t[0] for t in taps[d]], dtype=idx_dt)) for d in moved}
    weight_tables = {d: k.constant_array(np.array([t[1] for t in taps[d]], dtype=dt)) for d in moved if width[d] > 1}
    outside = {d: k.constant_array(np.array([t[2] for t in taps[d]], dtype=np.uint8)) for d in moved if any(t[2] for t in taps[d])}
    extrapolation = const(dt, k.attr("extrapolation_value", 0.0))
    wide = [d for d in moved if width[d] > 1]
    out_acc = out.identity_access()
    last = _runtime_last(k, x, out, moved)

    def entry(table, d, i, t):
        return k.b.load(k.b.gep(table, [k.b.add(k.b.mul(i, k.index(width[d])), t)], inbounds=True))

    def source(d, i, t):
        """Input index of tap t of output index i along d; along a varying dim clamped to its run-time end."""
        v = entry(index_tables[d], d, i, t)
        return k.imin(v, last[d]) if d in last else v

    def body(ix):
        dims = {d: ix[d] for d in range(x.rank) if d not in moved}
        dims.update({d: source(d, ix[d], k.index(0)) for d in moved if width[d] == 1})
        acc = k.local(llvm_type(dt), const(dt, 0))

        def tap(t):
            w, at = None, dict(dims)
            for j, d in enumerate(wide):
                at[d] = source(d, ix[d], t[j])
                wd = entry(weight_tables[d], d, ix[d], t[j])
                w = wd if w is None else k.b.fmul(w, wd)
            v = k.load_at(x, linear_at(k, x, at))
            k.b.store(k.s.add(dt, k.b.load(acc), v if w is None else k.b.fmul(v, w)), acc)
        k.loops([width[d] for d in wide], list(range(len(wide))), [None] * len(wide), tap)
        value = k.b.load(acc)
        for d, table in outside.items():
            flag = k.b.load(k.b.gep(table, [ix[d]], inbounds=True))
            value = k.b.select(k.b.icmp_unsigned("!=", flag, ir.Constant(flag.type, 0)), extrapolation, value)
        k.store(out_acc, ix, value)
    if k.dynamic:
        if out.size:
            k.loops_tiled(k.extents(out), list(range(out.rank)), [None] * out.rank, body,
                          float(out.size) * (2 + 3 * int(np.prod(list(width.values()) or [1]))), out.shape)
        return
    each_point(k, out.shape, body)


SCALE_ONLY = ("half_pixel", "asymmetric", "pytorch_half_pixel")
"""Coordinate transforms whose input coordinate of output index i depends only on i and the scale (pytorch_half_pixel
also on the output extent being 1): tap tables built at the capacity hold at every size up to it."""


def _runtime_last(k, x: Operand, out: Operand, moved) -> dict:
    """Per resized dim of x that varies: its run-time last index (tap indices are clamped to it). InputError where the
    taps would depend on the run-time extent: a coordinate transform beyond SCALE_ONLY, exclude_outside, output sizes
    given instead of scales."""
    varying = [d for d in moved if x.varies(d) or out.varies(d)]
    if not varying:
        return {}
    coord = k.attr("coordinate_transformation_mode", "half_pixel" if k.graph.opset >= 11 else "asymmetric")
    sizes = k.graph.opset >= 11 and len(k.inputs) > 3 and k.inputs[3] is not None
    problem = (f"coordinate_transformation_mode {coord!r}" if coord not in SCALE_ONLY else
               "exclude_outside=1" if int(k.attr("exclude_outside", 0)) else
               "output sizes (give scales)" if sizes else
               "an output extent of 1 (pytorch_half_pixel)" if coord == "pytorch_half_pixel" and
               any(bounds(out.dyn[d], k.graph.symbols)[0] <= 1 for d in varying if out.varies(d)) else None)
    if problem:
        d = varying[0]
        raise InputError(f"node {k.node.name!r} (Resize): {problem} along dim {d}, which varies at run time "
                         f"({x.dyn[d] if x.varies(d) else out.dyn[d]}), is not supported; give that dimension one value "
                         "(--input-shape or --dim NAME=N)")
    return {d: k.b.sub(k.extent(x, d), k.index(1)) for d in varying}
