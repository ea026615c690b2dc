"""Loop orders for MatMul/Gemm under actual layouts (DESIGN.md 1.5).

The iteration space is (batch..., i = rows of C, j = columns of C, k = reduction). An order names the
three matrix loops outermost first; batch loops are always outermost. The kernel (ops/matmul.py)
implements each order; the optimizer picks, per node, the order the cost model (analytic or
measured) finds fastest for the operands' real strides and passes it in node.attrs["_loop_order"].
"""
from __future__ import annotations

from typing import Sequence

MATMUL_ORDERS = ("ikj", "ijk", "jki", "kij")
"""ikj: C rows stream over B rows (unit stride in j); ijk: dot products (unit stride in k);
jki: C columns stream over A columns (unit stride in i); kij: outer products."""
LOOP_ORDER_OPS = ("MatMul", "Gemm")

_AXIS = {"i": 0, "k": 1, "j": 2}
"""Position of each loop in the kernel's (m, k, n) domain."""


def domain_order(order: str, batch_rank: int) -> list[int]:
    """Domain dims (batch..., m, k, n) outermost first for an order string."""
    return list(range(batch_rank)) + [batch_rank + _AXIS[c] for c in order]


def default_order(a_strides: Sequence[int], b_strides: Sequence[int], c_strides: Sequence[int]) -> str:
    """Order from strides alone (when the optimizer gave none): (m, k) of A, (k, n) of B, (m, n) of C."""
    if c_strides[1] == 1 and (b_strides[1] == 1 or b_strides[1] == 0):
        return "ikj"
    if a_strides[1] == 1 and b_strides[0] == 1:
        return "ijk"
    if c_strides[0] == 1 and a_strides[0] == 1:
        return "jki"
    return "ikj"
