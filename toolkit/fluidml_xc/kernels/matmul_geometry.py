"""MatMul/Gemm as its kernels see it: loop orders under actual layouts (docs/DESIGN.md 1.5), register tiles, and
the shapes and strides of a graph node the cost model (fluid/costs.py) prices (MatmulGeometry).

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

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..ir import Graph, Node
from ..target.arch import riscv_vector

MATMUL_ORDERS = ("ikj", "ijk", "jki", "kij")
"""ikj: C rows stream over B rows (unit stride in j); ijk: dot products (unit stride in k);
jki: C columns stream over A columns (unit stride in i); kij: outer products."""
"""Kernels with loop orders say so in their OpSpec (`loop_orders`: "matmul" for these, "conv" for Conv's
(kernels/conv_geometry.py CONV_ORDERS): "co>px" output-channel blocks outermost, "px>co" pixel rows (tiles when flat)
outermost; ops/conv/ implements both for its channel-vector blocking)."""

BLOCKED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""Dtypes the register-blocked kernels (kernels/matmul_blocked.py) handle; float16 too on a CPU with float16 vector
arithmetic (`blocked_dtype`), in kernels/half_blocks.py's blocks."""


def blocked_dtype(dtype, half: bool = False) -> bool:
    """The blocked kernels handle `dtype`; `half`: the target has float16 vector arithmetic (target/arch.py)."""
    dt = np.dtype(dtype)
    return dt in BLOCKED_DTYPES or (half and dt == np.float16)

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


RVV_FAR_ROWS_STEPS, RVV_FAR_ROW_BYTES = 4, 1024
"""K steps per iteration of a MatMul / Gemm tile on RVV whose A rows are more than RVV_FAR_ROW_BYTES apart (K > 256
floats): LLVM then gives the rows their own address `add`s per iteration, each waiting for a multiply-add's
write-back, and a fourth step spreads them. llvm-mca-22, % of the FMA peak at 3 / 4 steps: M = 128 by N = 128 at
K = 512 (BERT-tiny's output MatMul) 64.9 / 72.7, K = 1024 72.0 / 76.2, K = 384 (M 64, N 256) 74.2 / 76.8; closer
rows keep 3 (K = 128 by N = 512, BERT-tiny's intermediate MatMul, 75.9 / 72.8; docs/RISCV_KERNELS.md)."""


def gemm_steps(k, a_row_stride: int, dtype) -> int:
    """K steps per iteration of the MatMul / Gemm outer-product tiles (kernels/matmul_blocked.py): RVV_FAR_ROWS_STEPS
    on RVV for A rows far apart, else 0 (the target's, Arch.k_steps)."""
    spec = k.spec
    far = abs(a_row_stride) * np.dtype(dtype).itemsize > RVV_FAR_ROW_BYTES
    return RVV_FAR_ROWS_STEPS if spec is not None and far and riscv_vector(spec.triple, spec.features) else 0


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


@dataclass
class MatmulGeometry:
    """One MatMul/Gemm node as ops/matmul.py sees it: (m, n, k), batch points and element strides."""

    m: int
    n: int
    k: int
    batch_points: int
    a: tuple[int, int]
    """(m stride, k stride) of A in elements."""
    b: tuple[int, int]
    """(k stride, n stride) of B."""
    c: tuple[int, int]
    """(m stride, n stride) of C."""
    a_const: bool
    b_const: bool
    itemsize: int
    is_float: bool = True


def matmul_geometry(graph: Graph, node: Node, strides_of, half: bool = False) -> MatmulGeometry:
    """`half`: the target computes float16 in the blocked kernels (blocked_dtype)."""
    ta, tb, tc = (graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]])
    sa, sb, sc = strides_of(node.inputs[0]), strides_of(node.inputs[1]), strides_of(node.outputs[0])
    if node.op_type == "Gemm":
        trans_a, trans_b = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
        a = (sa[1], sa[0]) if trans_a else (sa[0], sa[1])
        b = (sb[1], sb[0]) if trans_b else (sb[0], sb[1])
        m, kk = (ta.shape[1], ta.shape[0]) if trans_a else ta.shape
        n = tb.shape[0] if trans_b else tb.shape[1]
        return MatmulGeometry(m, n, kk, 1, a, b, (sc[0], sc[1]), ta.is_const, tb.is_const, np.dtype(tc.dtype).itemsize,
                              blocked_dtype(tc.dtype, half))
    a_shape, b_shape = ta.shape, tb.shape
    a = (sa[-2], sa[-1]) if len(a_shape) >= 2 else (0, sa[-1])
    b = (sb[-2], sb[-1]) if len(b_shape) >= 2 else (sb[-1], 0)
    m = a_shape[-2] if len(a_shape) >= 2 else 1
    kk = a_shape[-1]
    n = b_shape[-1] if len(b_shape) >= 2 else 1
    if len(a_shape) >= 2 and len(b_shape) >= 2:
        c = (sc[-2], sc[-1])
    elif len(a_shape) >= 2:
        c = (sc[-1], 0)
    elif len(b_shape) >= 2:
        c = (0, sc[-1])
    else:
        c = (0, 0)
    batch = int(np.prod(tc.shape[:-2], dtype=np.int64)) if len(a_shape) >= 2 and len(b_shape) >= 2 else \
        int(np.prod(tc.shape[:-1], dtype=np.int64)) if len(tc.shape) >= 1 and (len(a_shape) >= 2) != (len(b_shape) >= 2) else 1
    return MatmulGeometry(m, n, kk, max(batch, 1), a, b, c, ta.is_const, tb.is_const, np.dtype(tc.dtype).itemsize,
                          blocked_dtype(tc.dtype, half))
