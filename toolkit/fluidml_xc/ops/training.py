"""The ai.onnx.preview.training optimizers: Adagrad, Adam, Momentum (standard and Nesterov).

Each takes the learning rate R and the step count T (scalars) and, per optimized tensor, X, its
gradient G and the optimizer state; it returns the updated X and state. The update is elementwise,
so each tensor group is one generic loop computing all of its outputs in one pass (formulas as in the
operator specs / onnx.reference).
"""
from __future__ import annotations


from ..kernels.scalar import const
from ..opspec import register

DOMAIN = "ai.onnx.preview.training"
FLOATS = ("float32", "float64")


def _groups(k, per_tensor: int):
    """(inputs, outputs) of every optimized tensor: inputs X, G, state...; outputs X_new, state_new..."""
    n = (len(k.inputs) - 2) // per_tensor
    for i in range(n):
        ins = [k.inputs[2 + j * n + i] for j in range(per_tensor)]
        outs = [k.outputs[j * n + i] if j * n + i < len(k.outputs) else None for j in range(per_tensor - 1)]
        yield ins, outs


def _update(k, per_tensor: int, step) -> None:
    """Run step(r, t, x, g, *state) -> [x_new, *state_new] over every tensor group (dt = X's dtype)."""
    r_op, t_op = k.inputs[0], k.inputs[1]
    for ins, outs in _groups(k, per_tensor):
        x = ins[0]
        if not x.size:
            continue
        dt, rank = x.dtype, x.rank
        scalars = [r_op.access([None] * r_op.rank, rank), t_op.access([None] * t_op.rank, rank)]
        live = [(i, out) for i, out in enumerate(outs) if out is not None]

        def body(values, idx, dt=dt, live=live):
            r = k.s.cast(r_op.dtype, dt, values[0])
            t = k.s.cast(t_op.dtype, dt, values[1])
            results = step(dt, r, t, *values[2:])
            return [results[i] for i, _ in live]
        k.generic(x.shape, [out.identity_access() for _, out in live], [*scalars, *(op.identity_access() for op in ins)], body)


def _regularized(k, dt, x, g):
    return k.s.add(dt, k.s.mul(dt, const(dt, float(k.attr("norm_coefficient", 0.0))), x), g)


@register("Adagrad", domain=DOMAIN, dtypes=FLOATS)
def lower_adagrad(k):
    s = k.s
    decay, eps = float(k.attr("decay_factor", 0.0)), float(k.attr("epsilon", 1e-6))

    def step(dt, r, t, x, g, h):
        rate = k.b.fdiv(r, s.add(dt, const(dt, 1.0), s.mul(dt, t, const(dt, decay))))
        gr = _regularized(k, dt, x, g)
        h_new = s.add(dt, h, s.mul(dt, gr, gr))
        root = s.add(dt, s.intrinsic("llvm.sqrt", h_new), const(dt, eps))
        return [s.sub(dt, x, k.b.fdiv(s.mul(dt, rate, gr), root)), h_new]
    _update(k, 3, step)


@register("Momentum", domain=DOMAIN, dtypes=FLOATS)
def lower_momentum(k):
    s = k.s
    alpha, beta = float(k.attr("alpha")), float(k.attr("beta"))
    nesterov = k.attr("mode", "standard") in ("nesterov", b"nesterov")

    def step(dt, r, t, x, g, v):
        gr = _regularized(k, dt, x, g)
        first = k.b.fcmp_ordered("<=", t, const(dt, 0.0))
        beta_t = k.b.select(first, const(dt, 1.0), const(dt, beta))
        v_new = s.add(dt, s.mul(dt, const(dt, alpha), v), s.mul(dt, beta_t, gr))
        move = s.add(dt, gr, s.mul(dt, const(dt, alpha), v_new)) if nesterov else v_new
        return [s.sub(dt, x, s.mul(dt, r, move)), v_new]
    _update(k, 3, step)


@register("Adam", domain=DOMAIN, dtypes=FLOATS)
def lower_adam(k):
    s = k.s
    alpha, beta = float(k.attr("alpha", 0.9)), float(k.attr("beta", 0.999))
    eps, post = float(k.attr("epsilon", 1e-6)), float(k.attr("norm_coefficient_post", 0.0))

    def step(dt, r, t, x, g, v, h):
        gr = _regularized(k, dt, x, g)
        v_new = s.add(dt, s.mul(dt, const(dt, alpha), v), s.mul(dt, const(dt, 1.0 - alpha), gr))
        h_new = s.add(dt, s.mul(dt, const(dt, beta), h), s.mul(dt, const(dt, 1.0 - beta), s.mul(dt, gr, gr)))
        root = s.add(dt, s.intrinsic("llvm.sqrt", h_new), const(dt, eps))
        power = lambda base: s.intrinsic_binary("llvm.pow", const(dt, base), t)
        corrected = k.b.fdiv(s.mul(dt, r, s.intrinsic("llvm.sqrt", s.sub(dt, const(dt, 1.0), power(beta)))),
                             s.sub(dt, const(dt, 1.0), power(alpha)))
        rate = k.b.select(k.b.fcmp_ordered(">", t, const(dt, 0.0)), corrected, r)
        x_new = s.sub(dt, x, s.mul(dt, rate, k.b.fdiv(v_new, root)))
        return [s.mul(dt, const(dt, 1.0 - post), x_new), v_new, h_new]
    _update(k, 4, step)
