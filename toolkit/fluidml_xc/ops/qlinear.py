"""MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv."""
from __future__ import annotations

from ..kernels import integer_conv, integer_matmul  # noqa: F401
