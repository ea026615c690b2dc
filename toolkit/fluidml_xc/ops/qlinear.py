"""MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv: the blocked int8 GEMM forms where the shapes fit
(kernels/integer_matmul.py, kernels/integer_conv_gemm.py), else the direct loops, requantized per output
(kernels/integer.py)."""
from __future__ import annotations

import numpy as np

from ..kernels.epilogue import fused_epilogue
from ..kernels import qgemm
from ..kernels.integer import F64, opt_input, param_access, requantize, scalar_or_indexed
from ..kernels.integer_conv import conv_direct
from ..kernels.integer_conv_gemm import fast_conv
from ..kernels.integer_matmul import fast_matmul, matmul_points
from ..opspec import register


@register("MatMulInteger", dtypes=("uint8", "int8"), heavy=True)
def lower_matmul_integer(k):
    if fast_matmul(k, k.inputs[0], k.inputs[1], opt_input(k, 2), opt_input(k, 3)):
        return
    matmul_points(k, k.inputs[0], k.inputs[1], opt_input(k, 2), opt_input(k, 3), lambda acc, idx: acc)


@register("QLinearMatMul", dtypes=("uint8", "int8"), heavy=True)
def lower_qlinear_matmul(k):
    a, a_s, a_zp, b_op, b_s, b_zp, y_s, y_zp = (list(k.inputs) + [None] * 8)[:8]
    out = k.outputs[0]
    nb = max(a.rank, b_op.rank) - 2
    ndom = nb + 3
    m, n = a.shape[-2], b_op.shape[-1]
    if fast_matmul(k, a, b_op, a_zp, b_zp, (a_s, b_s, y_s, y_zp)):
        return

    def epilogue(acc, idx):
        s0 = scalar_or_indexed(k, a_s, idx, ndom, nb, m, "a_scale")
        s1 = scalar_or_indexed(k, b_s, idx, ndom, nb + 2, n, "b_scale")
        s2 = scalar_or_indexed(k, y_s, idx, ndom, nb, m, "y_scale")
        zp = scalar_or_indexed(k, y_zp, idx, ndom, nb, m, "y_zero_point")
        return requantize(k, acc, [(a_s.dtype, s0), (b_s.dtype, s1), (y_s.dtype, s2)],
                          None if zp is None else (y_zp.dtype, zp), out.dtype)
    matmul_points(k, a, b_op, a_zp, b_zp, epilogue)


@register("ConvInteger", dtypes=("uint8", "int8"), heavy=True)
def lower_conv_integer(k):
    if fast_conv(k, k.inputs[0], k.inputs[1], opt_input(k, 2), opt_input(k, 3), None):
        return
    conv_direct(k, k.inputs[0], k.inputs[1], opt_input(k, 2), opt_input(k, 3), None, lambda acc, m: acc, lambda acc, m: acc)


@register("QLinearConv", dtypes=("uint8", "int8"), heavy=True)
def lower_qlinear_conv(k):
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = (list(k.inputs) + [None] * 8)[:8]
    bias = opt_input(k, 8)
    out = k.outputs[0]
    m_out = out.shape[1]
    zero = [k.index(0)]
    if fast_conv(k, x, w, x_zp, w_zp, bias, (x_s, w_s, y_s, y_zp)):
        return

    def epilogue(acc, mi):
        s0 = k.load(param_access(k, x_s, "x_scale", 1, None, None), zero)
        s1 = k.load(param_access(k, w_s, "w_scale", 1, 0, m_out), [mi])
        s2 = k.load(param_access(k, y_s, "y_scale", 1, None, None), zero)
        zp = k.load(param_access(k, y_zp, "y_zero_point", 1, None, None), zero) if y_zp is not None else None
        return requantize(k, acc, [(x_s.dtype, s0), (w_s.dtype, s1), (y_s.dtype, s2)],
                          None if zp is None else (y_zp.dtype, zp), out.dtype)

    def vec_epilogue(acc, mi):
        """requantize on a vector of one channel: the same multiplier and zero point, lane-wise doubles."""
        lanes = acc.type.count
        s0 = k.load(param_access(k, x_s, "x_scale", 1, None, None), zero)
        s1 = k.load(param_access(k, w_s, "w_scale", 1, 0, m_out), [mi])
        s2 = k.load(param_access(k, y_s, "y_scale", 1, None, None), zero)
        sdt = np.dtype(x_s.dtype)
        mult = k.s.cast(sdt, F64, k.b.fdiv(k.b.fmul(s0, k.s.cast(w_s.dtype, sdt, s1)), k.s.cast(y_s.dtype, sdt, s2)))
        yz = None
        if y_zp is not None:
            yz = k.splat(k.s.cast(y_zp.dtype, F64, k.load(param_access(k, y_zp, "y_zero_point", 1, None, None), zero)), lanes)
        return qgemm.requantize_vec(k, acc, k.splat(mult, lanes), yz, out.dtype, fused_epilogue(k).relu_floor)
    conv_direct(k, x, w, x_zp, w_zp, bias, epilogue, vec_epilogue)
