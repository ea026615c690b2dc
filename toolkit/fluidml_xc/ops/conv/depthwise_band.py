"""A 3x3 depthwise convolution (NCHW rows) on a CPU with the hand-scheduled tiles (kernels/scalar_tile.py: the
SiFive U74) as kernels/depthwise_tile.py's band routine: per image and channel, bands of 3 output rows over the
whole row width, the last band of the remaining 1 or 2; padding rows and columns are zeros in registers."""
from __future__ import annotations

import numpy as np

from ...kernels import depthwise_stride2 as s2, depthwise_tile as dt
from ...kernels.epilogue import Epilogue
from ...kernels.scalar import const


def emit_depthwise_band(k, x, w, bias, out, residual, epi: Epilogue | None, groups: int, k_sp, strides, dils,
                        pads) -> bool:
    """Emit the conv as band routines and say True, or False (nothing emitted) when it is not such a conv: float32,
    static, 2-D, one input and one output channel per group, 3 x 3, dilation 1, stride 1 (either layout; offsets
    within the routine's immediates) or 2 (kernels/depthwise_stride2.py), no residual, an activation of at most a
    Relu or a Clip."""
    stride = tuple(int(v) for v in strides)
    if (not dt.takes(k) or residual is not None or k.dynamic or x.rank != 4 or np.dtype(out.dtype) != np.float32
            or tuple(int(v) for v in k_sp) != (3, 3) or any(int(v) != 1 for v in dils) or stride not in ((1, 1), (2, 2))):
        return False
    n, c, h, wd = x.shape
    oh_count, ow_count = out.shape[2:]
    if groups != c or out.shape[1] != c or tuple(w.shape[:2]) != (c, 1):
        return False
    top, left = (int(v) for v in pads[:2])
    form = dt if stride == (1, 1) else s2
    bands = form.bands(h, wd, oh_count, ow_count, top, left, tuple(x.strides[2:]), tuple(out.strides[2:]), epi)
    if bands is None:
        return False
    _, low, high = dt.activation(epi)
    if w.value is not None:
        weights = k.constant_array(np.ascontiguousarray(w.value.reshape(c, 9).astype(np.float32)))
        w_step = 9
    elif tuple(w.strides[1:]) == (9, 3, 1):
        weights, w_step = w.ptr, w.strides[0]
    else:
        return False
    b = k.b
    runs: list[list] = []  # [band, first band index, count]
    for i, bd in enumerate(bands):
        if runs and runs[-1][0] == bd:
            runs[-1][2] += 1
        else:
            runs.append([bd, i, 1])
    with k.parallel_tiles([n, c], float(n) * c * oh_count * ow_count * 9) as (img, ch):
        plane_x = b.add(b.mul(img, k.index(x.strides[0])), b.mul(ch, k.index(x.strides[1])))
        plane_o = b.add(b.mul(img, k.index(out.strides[0])), b.mul(ch, k.index(out.strides[1])))
        w_ptr = b.gep(weights, [b.mul(ch, k.index(w_step))])
        bias_v = const(np.float32, 0) if bias is None else b.load(b.gep(bias.ptr, [b.mul(ch, k.index(bias.strides[0]))]))

        def run(bd, index) -> None:
            if form is s2:
                run_stride2(bd, index)
                return
            oh0 = b.mul(index, k.index(dt.ROWS))
            x_at = b.add(plane_x, b.mul(b.sub(oh0, k.index(top)), k.index(x.strides[2])))
            o_at = b.add(plane_o, b.mul(oh0, k.index(out.strides[2])))
            dt.call(k, bd, b.gep(x.ptr, [x_at]), b.gep(out.ptr, [o_at]), w_ptr, bias_v, low or 0.0, high or 0.0)
        def run_stride2(bd: s2.Band, index) -> None:
            """Band `index`'s row pointers (input row 2 oh0 - top + k, output row oh0 + r; a zero row's is never read)."""
            oh0 = b.mul(index, k.index(s2.ROWS))
            first_row = b.sub(b.mul(oh0, k.index(2)), k.index(top))
            block = {f"in{i}": b.gep(x.ptr, [b.add(plane_x, b.mul(b.add(first_row, k.index(i)), k.index(x.strides[2])))])
                     for i in range(bd.in_rows)}
            block |= {f"out{r}": b.gep(out.ptr, [b.add(plane_o, b.mul(b.add(oh0, k.index(r)), k.index(out.strides[2])))])
                      for r in range(bd.rows)}
            end_row, end = s2.loop_end(bd)
            block |= {"end": b.gep(block[f"in{end_row}"], [k.index(end // 4)]), "weights": w_ptr,
                      "x_step": k.index(bd.x_col), "out_step": k.index(bd.out_col), "x_big": k.index(4 * bd.x_col),
                      "out_big": k.index(2 * bd.out_col)}
            s2.call(k, bd, block, bias_v, low or 0.0, high or 0.0)
        for bd, first, count in runs:
            if count == 1:
                run(bd, k.index(first))
            else:
                with k.for_range(first + count, first) as i:
                    run(bd, i)
    return True
