"""A 1x1 convolution as the MatMul kernel's GEMM on a CPU with a hand-scheduled GEMM tile (kernels/scalar_tile.py:
the SiFive U74): per image, out (Co x H*W) = W (Co x Ci) @ x (Ci x H*W) with x and out in either layout (NCHW:
B read in place, five pixels of each input channel plane; channels-last: the transposed GEMM, five pixels' channel
rows times the weights packed in panels), the bias, a residual of the output's layout and an activation in the GEMM's
epilogue (kernels/matmul_blocked.py)."""
from __future__ import annotations

import numpy as np

from ...kernels.epilogue import Epilogue
from ...kernels.matmul_blocked import Mat, Problem, emit_blocked
from ...kernels.scalar_tile import kernel_tile


def _pixels(op) -> tuple[int, int] | None:
    """(channel stride, pixel stride) of an N x C x H x W operand whose H x W pixels are one run of equal steps."""
    return (op.strides[1], op.strides[3]) if op.strides[2] == op.shape[3] * op.strides[3] else None


def emit_pointwise_gemm(k, x, w, bias, out, residual, epi: Epilogue | None, groups: int, strides, pads) -> bool:
    """Emit the conv as the GEMM and say True, or False (nothing emitted) when it is not such a conv: float32,
    static, constant 1 x 1 weights, stride 1, no padding, one group, x's or out's pixels contiguous, an epilogue of
    at most a residual (stored like out) and an activation (Relu, Clip, leaky Relu), and at least a tile of output
    channels and pixels."""
    tile = kernel_tile(k)
    if (tile is None or k.dynamic or x.rank != 4 or np.dtype(out.dtype) != np.float32 or w.value is None or groups != 1
            or tuple(w.shape[2:]) != (1, 1) or any(int(v) != 1 for v in strides) or any(int(v) for v in pads)
            or tuple(out.shape[2:]) != tuple(x.shape[2:])):
        return False
    if epi is not None and epi.activation not in (None, "relu", "clip", "leaky_relu"):
        return False
    n, ci, h, wd = x.shape
    co, pixels = out.shape[1], h * wd
    xs, os = _pixels(x), _pixels(out)
    if co < tile.rows or pixels < tile.cols or xs is None or os is None or 1 not in xs:
        return False
    if residual is not None and (tuple(residual.shape) != tuple(out.shape) or tuple(residual.strides) != tuple(out.strides)):
        return False
    P = Problem(np.dtype(np.float32), (n,), co, pixels, ci,
                Mat(lambda: w.ptr, (0,), ci, 1, w.value.reshape(co, ci)),
                Mat(lambda: x.ptr, (x.strides[0],), xs[0], xs[1]),
                Mat(lambda: out.ptr, (out.strides[0],), os[0], os[1]),
                None if bias is None else Mat(lambda: bias.ptr, (), 1, 0),
                residual=None if residual is None else Mat(lambda: residual.ptr, (), 0, 0),
                relu=epi is not None and epi.activation == "relu",
                activation=epi if epi is not None and epi.activation in ("clip", "leaky_relu") else None)
    if xs[1] == 1:
        emit_blocked(k, P, "outer")
    else:  # channels-last x: the weights, constant, are the transposed GEMM's packed B
        emit_blocked(k, P.transposed(), "outer")
    return True
