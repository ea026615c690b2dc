"""A 1x1 convolution as the MatMul kernel's GEMM on a CPU with a hand-scheduled GEMM tile (kernels/scalar_tile.py:
the SiFive U74): per image, out (Co x H*W) = W (Co x Ci) @ x (Ci x H*W), five output channels' weight rows times
five pixels of each input channel plane in the tile, the bias, a residual of the output's layout and a Relu in the
GEMM's epilogue (kernels/matmul_blocked.py)."""
from __future__ import annotations

import numpy as np

from ...kernels.epilogue import Epilogue
from ...kernels.kernel import row_major_strides
from ...kernels.matmul_blocked import Mat, Problem, emit_blocked
from ...kernels.scalar_tile import kernel_tile


def emit_pointwise_gemm(k, x, w, bias, out, residual, epi: Epilogue | None, groups: int, strides, pads) -> bool:
    """Emit the conv as the GEMM and say True, or False (nothing emitted) when it is not such a conv: float32,
    static, NCHW contiguous, constant 1 x 1 weights, stride 1, no padding, one group, an epilogue of at most a
    residual and a Relu, and at least a tile of output channels and pixels."""
    tile = kernel_tile(k)
    if (tile is None or k.dynamic or x.rank != 4 or np.dtype(out.dtype) != np.float32 or w.value is None or groups != 1
            or tuple(w.shape[2:]) != (1, 1) or any(int(v) != 1 for v in strides) or any(int(v) for v in pads)
            or tuple(out.shape[2:]) != tuple(x.shape[2:])):
        return False
    if epi is not None and epi.activation not in (None, "relu"):
        return False
    n, ci, h, wd = x.shape
    co, pixels = out.shape[1], h * wd
    if co < tile.rows or pixels < tile.cols:
        return False
    contiguous = [tuple(op.strides) == tuple(row_major_strides(op.shape)) for op in (x, out)]
    if not all(contiguous) or residual is not None and (tuple(residual.shape) != tuple(out.shape)
                                                        or tuple(residual.strides) != tuple(out.strides)):
        return False
    P = Problem(np.dtype(np.float32), (n,), co, pixels, ci,
                Mat(lambda: w.ptr, (0,), ci, 1),
                Mat(lambda: x.ptr, (ci * pixels,), pixels, 1),
                Mat(lambda: out.ptr, (co * pixels,), pixels, 1),
                None if bias is None else Mat(lambda: bias.ptr, (), 1, 0),
                residual=None if residual is None else Mat(lambda: residual.ptr, (), 0, 0),
                relu=epi is not None and epi.activation == "relu")
    emit_blocked(k, P, "outer")
    return True
