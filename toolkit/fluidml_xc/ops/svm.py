"""PairwiseCoupling (domain "fluidml"): SVMClassifier's class probabilities (frontend/ml_svm.py) from its one-vs-one
decision values, as ONNX Runtime 1.32 computes them (ml_common.h), in float32 and in its order of operations.

Per row: each pair (i, j)'s probability r_ij = 1 - logistic(prob_a * s + prob_b), clamped to [1e-7, 1 - 1e-7],
r_ji = 1 - r_ij; then the pairwise coupling of Wu, Lin and Weng (libsvm's multiclass_probability): Q_ii = sum over
j != i of r_ji^2, Q_ij = -r_ji r_ij, p = 1/k, and up to 100 sweeps of p_i += (p'Qp - (Qp)_i) / Q_ii (renormalized),
stopping once every |(Qp)_i - p'Qp| < 0.005 / k. The row's r, Q, Qp and p live on the stack (k <= MAX_CLASSES).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.scalar import const
from ..opspec import OUR_DOMAIN, register

F32 = np.dtype(np.float32)
MAX_CLASSES = 128
"""Two k x k float tables per row on the stack: 128 KiB at most."""
SWEEPS = 100
CLAMP = np.float32(1e-7)


def _pairs(classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The classes i < j of each pair, in ONNX Runtime's order (i outer, j inner)."""
    first, second = zip(*[(i, j) for i in range(classes - 1) for j in range(i + 1, classes)])
    return np.asarray(first, np.int64), np.asarray(second, np.int64)


@register("PairwiseCoupling", domain=OUR_DOMAIN, dtypes=("float32",),
          notes="SVMClassifier's probabilities (frontend/ml_svm.py)")
def lower_pairwise_coupling(k):
    s, out = k.inputs[0], k.outputs[0]
    where = f"node {k.node.name!r} (PairwiseCoupling)"
    classes = int(k.attr("classes"))
    pairs = classes * (classes - 1) // 2
    prob_a, prob_b = [np.asarray(k.attr(n), np.float32) for n in ("prob_a", "prob_b")]
    if not 2 <= classes <= MAX_CLASSES:
        raise InputError(f"{where}: {classes} classes; SVMClassifier probabilities are compiled for 2 to {MAX_CLASSES}")
    if s.rank != 2 or s.shape[1] != pairs or prob_a.size != pairs or prob_b.size != pairs:
        raise InputError(f"{where}: expected {pairs} decision values and prob_a/prob_b per row for {classes} classes")
    rows = s.shape[0]
    if not rows:
        return
    b, f = k.b, ir.FloatType()

    def c(v):
        return const(F32, v)
    first, second = _pairs(classes)
    tables = {n: k.constant_array(v) for n, v in (("a", prob_a), ("b", prob_b), ("i", first), ("j", second))}
    s_acc, o_acc = s.identity_access(), out.identity_access()
    n = k.index(classes)

    def at(ptr, i):
        return b.gep(ptr, [i], inbounds=True)

    def cell(ptr, i, j):
        return at(ptr, b.add(b.mul(i, n), j))

    def logistic(v):
        e = b.fdiv(c(1), b.fadd(c(1), k.s.intrinsic("llvm.exp", b.fneg(k.s.intrinsic("llvm.fabs", v)))))
        return b.select(b.fcmp_ordered("<", v, c(0)), b.fsub(c(1), e), e)

    def body(idx):
        row = idx[0]
        with b.goto_entry_block():
            r, q = (b.alloca(f, size=ir.Constant(ir.IntType(32), classes * classes)) for _ in range(2))
            qp, p = (b.alloca(f, size=ir.Constant(ir.IntType(32), classes)) for _ in range(2))
        with k.for_range(pairs) as t:
            i, j = (b.load(at(tables[key], t)) for key in ("i", "j"))
            i, j = (k.s.cast(np.int64, np.dtype(f"int{k.idx_t.width}"), v) for v in (i, j))
            val = b.fadd(b.fmul(k.load(s_acc, [row, t]), b.load(at(tables["a"], t))), b.load(at(tables["b"], t)))
            v = b.fsub(c(1), logistic(val))
            v = b.select(b.fcmp_ordered("<", v, c(CLAMP)), c(CLAMP), v)
            top = np.float32(1) - CLAMP
            v = b.select(b.fcmp_ordered("<", c(top), v), c(top), v)
            b.store(v, cell(r, i, j))
            b.store(b.fsub(c(1), v), cell(r, j, i))
        with k.for_range(classes) as i:
            b.store(c(np.float32(1) / np.float32(classes)), at(p, i))
            b.store(c(0), cell(q, i, i))
            with k.for_range(classes) as j:
                with b.if_then(b.icmp_signed("!=", j, i)):
                    rji = b.load(cell(r, j, i))
                    b.store(b.fadd(b.load(cell(q, i, i)), b.fmul(rji, rji)), cell(q, i, i))
                    below = b.load(cell(q, j, i))
                    b.store(b.select(b.icmp_signed("<", j, i), below, b.fmul(b.fneg(rji), b.load(cell(r, i, j)))),
                            cell(q, i, j))
        done = k.local(ir.IntType(1), ir.Constant(ir.IntType(1), 0))
        pqp = k.local(f, c(0))
        eps = c(np.float32(0.005) / np.float32(classes))
        with k.for_range(SWEEPS):
            with b.if_then(b.not_(b.load(done))):
                b.store(c(0), pqp)
                with k.for_range(classes) as i:
                    b.store(c(0), at(qp, i))
                    with k.for_range(classes) as j:
                        b.store(b.fadd(b.load(at(qp, i)), b.fmul(b.load(cell(q, i, j)), b.load(at(p, j)))), at(qp, i))
                    b.store(b.fadd(b.load(pqp), b.fmul(b.load(at(p, i)), b.load(at(qp, i)))), pqp)
                worst = k.local(f, c(0))
                with k.for_range(classes) as i:
                    error = k.s.intrinsic("llvm.fabs", b.fsub(b.load(at(qp, i)), b.load(pqp)))
                    b.store(b.select(b.fcmp_ordered(">", error, b.load(worst)), error, b.load(worst)), worst)
                b.store(b.fcmp_ordered("<", b.load(worst), eps), done)
                with b.if_then(b.not_(b.load(done))):
                    with k.for_range(classes) as i:
                        qii, qpi = b.load(cell(q, i, i)), b.load(at(qp, i))
                        diff = b.fdiv(b.fadd(b.fneg(qpi), b.load(pqp)), qii)
                        b.store(b.fadd(b.load(at(p, i)), diff), at(p, i))
                        grow = b.fadd(c(1), diff)
                        inner = b.fmul(diff, b.fadd(b.fmul(diff, qii), b.fmul(c(2), qpi)))
                        b.store(b.fdiv(b.fdiv(b.fadd(b.load(pqp), inner), grow), grow), pqp)
                        with k.for_range(classes) as j:
                            b.store(b.fdiv(b.fadd(b.load(at(qp, j)), b.fmul(diff, b.load(cell(q, i, j)))), grow), at(qp, j))
                            b.store(b.fdiv(b.load(at(p, j)), grow), at(p, j))
        with k.for_range(classes) as i:
            k.store(o_acc, [row, i], b.load(at(p, i)))
    k.loops_tiled([rows], [0], [None], body, work=float(rows) * classes * classes * 40)
