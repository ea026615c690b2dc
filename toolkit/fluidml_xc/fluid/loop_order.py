"""Loop orders for MatMul/Gemm under actual layouts (docs/DESIGN.md 1.5).

The iteration space is (batch..., i = rows of C, j = columns of C, k = reduction). An order names the
three matrix loops outermost first; batch loops are always outermost. The kernel (ops/matmul.py)
implements each order; the optimizer picks, per node, the order the cost model (analytic or
measured) finds fastest for the operands' real strides and passes it in Decisions.loop_orders
(the emitter hands it to the kernel as Kernel.loop_order).

For floats, three orders have register-blocked kernels with explicit target vectors when the
operands' strides allow (`blocked_kind`); otherwise every order runs as scalar loops:

- ikj "outer": an MR x NR tile of C in registers, K loop of outer products: broadcast A[i, k] times
  a vector of B's row k. B unit-stride along n is read in place, constant B is repacked into
  NR-column panels at build time, any other B is gathered panel by panel into a stack buffer.
- jki "outer_t": the same kernel on the transposed problem C^T = B^T A^T. Needs A unit-stride along
  m, or A constant.
- ijk "dot": MR x NC dot products, vectors along k, summed across lanes at the end. Needs A and B
  unit-stride along k (B stored transposed, e.g. attention's K^T kept in K's layout), or constants.
- kij: scalar outer products (never blocked).
"""
from __future__ import annotations

from typing import Sequence

MATMUL_ORDERS = ("ikj", "ijk", "jki", "kij")
"""ikj: C rows stream over B rows (unit stride in j); ijk: dot products (unit stride in k);
jki: C columns stream over A columns (unit stride in i); kij: outer products."""
"""Kernels with loop orders say so in their OpSpec (`loop_orders`: "matmul" for these, "conv" for Conv's
(kernels/conv_geometry.py CONV_ORDERS): "co>px" output-channel blocks outermost, "px>co" pixel rows (tiles when flat)
outermost; ops/conv/ implements both for its channel-vector blocking)."""

MR_OUTER, ACC_BUDGET = 6, 12
"""Outer-product tiles: up to MR_OUTER rows of C, NR columns in vectors, about ACC_BUDGET accumulators."""
MR_DOT, NC_DOT = 3, 4
"""Dot-product tiles: rows x columns of C (12 vector accumulators)."""


def outer_tile(m: int, n: int, lanes: int, accumulators: int = ACC_BUDGET) -> tuple[int, int]:
    """(MR, NR) of the outer-product kernel for an m x n result, about `accumulators` vector accumulators
    (the target's register budget: 12 on aarch64/x86_64 gives 6 x 2 vectors, 8 on armv7 4 x 2)."""
    mr = max(1, min(MR_OUTER, accumulators // 2, m))
    nv = max(1, min(4, accumulators // mr, -(-n // lanes)))
    return mr, nv * lanes


_AXIS = {"i": 0, "k": 1, "j": 2}
"""Position of each loop in the kernel's (m, k, n) domain."""


def domain_order(order: str, batch_rank: int) -> list[int]:
    """Domain dims (batch..., m, k, n) outermost first for an order string."""
    return list(range(batch_rank)) + [batch_rank + _AXIS[c] for c in order]


def blocked_kind(order: str, a_strides: Sequence[int], b_strides: Sequence[int], m: int, n: int,
                 a_const: bool = False, b_const: bool = False, is_float: bool = True) -> str | None:
    """The register-blocked kernel `order` runs as under these strides ((m, k) of A, (k, n) of B), or None (scalar)."""
    if not is_float:
        return None
    if order == "ikj":  # B strided along n is gathered panel by panel into a stack buffer
        return "outer"
    if order == "jki" and (a_const or a_strides[0] == 1 or m == 1):
        return "outer_t"
    if order == "ijk" and (a_const or a_strides[1] == 1) and (b_const or b_strides[0] == 1):
        return "dot"
    return None


def default_order(a_strides: Sequence[int], b_strides: Sequence[int], c_strides: Sequence[int], m: int = 2, n: int = 2,
                  a_const: bool = False, b_const: bool = False, is_float: bool = True) -> str:
    """Order from strides alone (when the optimizer gave none): (m, k) of A, (k, n) of B, (m, n) of C."""
    for order in ("ikj", "ijk", "jki"):
        if blocked_kind(order, a_strides, b_strides, m, n, a_const, b_const, is_float):
            return order
    if c_strides[1] == 1 and (b_strides[1] == 1 or b_strides[1] == 0):
        return "ikj"
    if a_strides[1] == 1 and b_strides[0] == 1:
        return "ijk"
    if c_strides[0] == 1 and a_strides[0] == 1:
        return "jki"
    return "ikj"
