"""Recurrent ops: RNN, GRU, LSTM (every attribute of the spec: activations with alpha/beta, clip,
direction forward/reverse/bidirectional, layout 0/1, sequence_lens, initial states, peepholes,
input_forget, linear_before_reset).

Per direction, the hidden (and cell) state of every batch row lives in a stack buffer; each time
step computes the row's gate pre-activations as dot products against W (over the input) and R (over
the hidden state), both read along their contiguous last dimension (LLVM vectorizes the
reductions), then the fused gate activations update the state and write Y. A batch row past its
sequence_lens entry gets zeros in Y and keeps its state, so Y_h / Y_c hold the last valid step.
Math runs in float32 (float64 for double models); W, R, B, P may be constants or activations.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..codegen.scalar import FAST, const, llvm_type
from ..errors import InputError
from .registry import register

# name -> (number of alpha values, number of beta values, default alpha, default beta)
_ACTIVATIONS = {
    "relu": (0, 0, 0.0, 0.0), "tanh": (0, 0, 0.0, 0.0), "sigmoid": (0, 0, 0.0, 0.0),
    "affine": (1, 1, 1.0, 0.0), "leakyrelu": (1, 0, 0.01, 0.0), "thresholdedrelu": (1, 0, 1.0, 0.0),
    "scaledtanh": (1, 1, 1.0, 1.0), "hardsigmoid": (1, 1, 0.2, 0.5), "elu": (1, 0, 1.0, 0.0),
    "softsign": (0, 0, 0.0, 0.0), "softplus": (0, 0, 0.0, 0.0),
}
_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _activation_list(k, op: str, directions: int) -> list[tuple[str, float, float]]:
    """(name, alpha, beta) per activation, direction after direction; alpha/beta values are consumed
    in order by the activations that take them (as ONNX Runtime does), defaults otherwise."""
    per_dir = len(_DEFAULTS[op])
    names = list(k.attr("activations", None) or _DEFAULTS[op] * directions)
    if len(names) == per_dir and directions == 2:
        names = names * 2
    if len(names) != per_dir * directions:
        raise InputError(f"node {k.node.name!r} ({op}): activations lists {len(names)} functions, expected "
                         f"{per_dir * directions} ({per_dir} per direction)")
    alphas = list(k.attr("activation_alpha", None) or [])
    betas = list(k.attr("activation_beta", None) or [])
    out = []
    for name in names:
        key = str(name).lower()
        if key not in _ACTIVATIONS:
            raise InputError(f"node {k.node.name!r} ({op}): activation {name!r} is not supported; use one of "
                             "Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus")
        na, nb, da, db = _ACTIVATIONS[key]
        alpha = float(alphas.pop(0)) if na and alphas else da
        beta = float(betas.pop(0)) if nb and betas else db
        out.append((key, alpha, beta))
    return out


class _Recurrent:
    """Shared machinery of one RNN/GRU/LSTM node's lowering."""

    def __init__(self, k, op: str):
        self.k, self.op, self.b = k, op, k.b
        ins = list(k.inputs) + [None] * (8 - len(k.inputs))
        self.x, self.w, self.r, self.bias, self.seq_lens, self.h0 = ins[:6]
        self.c0 = ins[6] if op == "LSTM" else None
        self.p = ins[7] if op == "LSTM" else None
        outs = list(k.outputs) + [None] * (3 - len(k.outputs))
        self.y, self.y_h = outs[0], outs[1]
        self.y_c = outs[2] if op == "LSTM" else None
        self.dtype = self.x.dtype
        self.ct = np.dtype(np.float64) if self.dtype == np.float64 else np.dtype(np.float32)
        self.layout = int(k.attr("layout", 0))
        direction = k.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise InputError(f"node {k.node.name!r} ({op}): direction {direction!r} is not one of forward, reverse, bidirectional")
        self.direction = direction
        self.dirs = self.w.shape[0]
        if self.dirs != (2 if direction == "bidirectional" else 1):
            raise InputError(f"node {k.node.name!r} ({op}): W has {self.dirs} directions but direction is {direction!r}")
        self.hidden = self.r.shape[-1]
        if self.layout:
            self.batch, self.seq = self.x.shape[0], self.x.shape[1]
        else:
            self.seq, self.batch = self.x.shape[0], self.x.shape[1]
        self.inp = self.x.shape[2]
        self.gates = _GATES[op]
        clip = k.attr("clip", None)
        self.clip = None if clip is None else float(clip)
        self.acts = _activation_list(k, op, self.dirs)

    # -- addressing ---------------------------------------------------------------------------
    def ptr(self, op, idx):
        """Pointer to op[idx] (idx entries int or index values), through op's strides."""
        k = self.k
        total = None
        for i, s in zip(idx, op.strides):
            if s == 0 or (isinstance(i, int) and i == 0):
                continue
            term = k.index(i * s) if isinstance(i, int) else (i if s == 1 else k.b.mul(i, k.index(s), flags=("nsw",)))
            total = term if total is None else k.b.add(total, term, flags=("nsw",))
        return k.b.gep(op.ptr, [total if total is not None else k.index(0)], inbounds=True)

    def load(self, op, idx):
        return self.k.s.cast(op.dtype, self.ct, self.b.load(self.ptr(op, idx)))

    def store(self, op, idx, value):
        self.b.store(self.k.s.cast(self.ct, op.dtype, value), self.ptr(op, idx))

    def state_index(self, d, bi, j):
        """Index of (direction, batch, hidden) in initial_h / Y_h / Y_c."""
        return [bi, d, j] if self.layout else [d, bi, j]

    def y_index(self, t, d, bi, j):
        return [bi, t, d, j] if self.layout else [t, d, bi, j]

    def x_index(self, t, bi, i):
        return [bi, t, i] if self.layout else [t, bi, i]

    def buffer(self, n: int) -> ir.Value:
        k = self.k
        with k.b.goto_entry_block():
            return k.b.alloca(llvm_type(self.ct), size=ir.Constant(ir.IntType(32), max(1, n)))

    def cell(self, buf, i):
        return self.b.gep(buf, [i if isinstance(i, ir.Value) else self.k.index(i)], inbounds=True)

    # -- math ----------------------------------------------------------------------------------
    def c(self, v):
        return const(self.ct, v)

    def activate(self, act, x):
        name, alpha, beta = act
        b, s, dt = self.b, self.k.s, self.ct
        if self.clip is not None:
            x = s.min(dt, s.max(dt, x, self.c(-self.clip)), self.c(self.clip))
        return self.apply(name, alpha, beta, x)

    def apply(self, name, alpha, beta, x):
        b, s, dt, c = self.b, self.k.s, self.ct, self.c
        if name == "tanh":
            return s.libm("tanh", dt, x)
        if name == "sigmoid":
            return b.fdiv(c(1), b.fadd(c(1), s.intrinsic("llvm.exp", b.fneg(x))))
        if name == "relu":
            return b.select(b.fcmp_ordered(">", x, c(0)), x, c(0))
        if name == "affine":
            return b.fadd(b.fmul(c(alpha), x), c(beta))
        if name == "leakyrelu":
            return b.select(b.fcmp_ordered(">=", x, c(0)), x, b.fmul(c(alpha), x))
        if name == "thresholdedrelu":
            return b.select(b.fcmp_ordered(">", x, c(alpha)), x, c(0))
        if name == "scaledtanh":
            return b.fmul(c(alpha), s.libm("tanh", dt, b.fmul(c(beta), x)))
        if name == "hardsigmoid":
            return s.min(dt, s.max(dt, b.fadd(b.fmul(c(alpha), x), c(beta)), c(0)), c(1))
        if name == "elu":
            return b.select(b.fcmp_ordered(">=", x, c(0)), x, b.fmul(c(alpha), b.fsub(s.intrinsic("llvm.exp", x), c(1))))
        if name == "softsign":
            return b.fdiv(x, b.fadd(s.intrinsic("llvm.fabs", x), c(1)))
        if name == "softplus":
            return s.intrinsic("llvm.log", b.fadd(s.intrinsic("llvm.exp", x), c(1)))
        raise AssertionError(name)

    def dot(self, acc, op, d, row, vec_at, n):
        """acc + sum_j op[d, row, j] * vec_at(j) for j < n (op is W or R)."""
        k, b = self.k, self.b
        slot = k.local(llvm_type(self.ct), acc)
        with k.for_range(n) as j:
            prod = b.fmul(self.load(op, [d, row, j]), vec_at(j), flags=FAST)
            b.store(b.fadd(b.load(slot), prod, flags=FAST), slot)
        return b.load(slot)

    def bias_of(self, d, g):
        """Wb[g] + Rb[g] of direction d (0 without B), as one value; g an index value."""
        if self.bias is None:
            return self.c(0)
        n = self.gates * self.hidden
        return self.b.fadd(self.load(self.bias, [d, g]), self.load(self.bias, [d, self.b.add(g, self.k.index(n))]))

    # -- driver --------------------------------------------------------------------------------
    def emit(self):
        k, b, H = self.k, self.b, self.hidden
        for d in range(self.dirs):
            reverse = self.direction == "reverse" or d == 1
            h_state = self.buffer(self.batch * H)
            c_state = self.buffer(self.batch * H) if self.op == "LSTM" else None
            gates = self.buffer(self.gates * H)
            with k.for_range(self.batch) as bi:
                with k.for_range(H) as j:
                    at = b.add(b.mul(bi, k.index(H)), j)
                    b.store(self.load(self.h0, self.state_index(d, bi, j)) if self.h0 is not None else self.c(0), self.cell(h_state, at))
                    if c_state is not None:
                        b.store(self.load(self.c0, self.state_index(d, bi, j)) if self.c0 is not None else self.c(0), self.cell(c_state, at))
            with k.for_range(self.seq) as s:
                with k.for_range(self.batch) as bi:
                    if self.seq_lens is not None:
                        length = k.s.cast(self.seq_lens.dtype, np.dtype(f"int{k.idx_t.width}"), b.load(self.ptr(self.seq_lens, [bi])))
                        length = b.select(b.icmp_signed(">", length, k.index(self.seq)), k.index(self.seq), length)
                    else:
                        length = k.index(self.seq)
                    active = b.icmp_signed("<", s, length)
                    with b.if_else(active) as (then, otherwise):
                        with then:
                            t = b.sub(b.sub(length, k.index(1)), s) if reverse else s
                            base = b.mul(bi, k.index(H))
                            self.step(d, t, bi, base, h_state, c_state, gates)
                        with otherwise:
                            if self.y is not None:
                                with k.for_range(H) as j:
                                    self.store(self.y, self.y_index(s, d, bi, j), self.c(0))
            with k.for_range(self.batch) as bi:
                with k.for_range(H) as j:
                    at = b.add(b.mul(bi, k.index(H)), j)
                    if self.y_h is not None:
                        self.store(self.y_h, self.state_index(d, bi, j), b.load(self.cell(h_state, at)))
                    if self.y_c is not None:
                        self.store(self.y_c, self.state_index(d, bi, j), b.load(self.cell(c_state, at)))

    def preactivations(self, d, t, bi, base, h_state, gates, rows):
        """gates[g] = X[t, bi] . W[d, g] + H[bi] . R[d, g] + Wb[g] + Rb[g] for g in [0, rows)."""
        k, b = self.k, self.b
        with k.for_range(rows) as g:
            acc = self.dot(self.bias_of(d, g), self.w, d, g, lambda i: self.load(self.x, self.x_index(t, bi, i)), self.inp)
            acc = self.dot(acc, self.r, d, g, lambda j: b.load(self.cell(h_state, b.add(base, j))), self.hidden)
            b.store(acc, self.cell(gates, g))

    def step(self, d, t, bi, base, h_state, c_state, gates):
        getattr(self, "step_" + self.op.lower())(d, t, bi, base, h_state, c_state, gates)

    def write_h(self, d, t, bi, j, at, h_state, value):
        self.b.store(value, self.cell(h_state, at))
        if self.y is not None:
            self.store(self.y, self.y_index(t, d, bi, j), value)

    def step_rnn(self, d, t, bi, base, h_state, c_state, gates):
        k, b, H = self.k, self.b, self.hidden
        self.preactivations(d, t, bi, base, h_state, gates, H)
        f = self.acts[d]
        with k.for_range(H) as j:
            self.write_h(d, t, bi, j, b.add(base, j), h_state, self.activate(f, b.load(self.cell(gates, j))))

    def step_gru(self, d, t, bi, base, h_state, c_state, gates):
        k, b, H = self.k, self.b, self.hidden
        f, g_act = self.acts[2 * d], self.acts[2 * d + 1]
        lbr = int(k.attr("linear_before_reset", 0))
        self.preactivations(d, t, bi, base, h_state, gates, 2 * H)   # z, r
        with k.for_range(2 * H) as g:
            b.store(self.activate(f, b.load(self.cell(gates, g))), self.cell(gates, g))
        x_at = lambda i: self.load(self.x, self.x_index(t, bi, i))  # noqa: E731
        h_at = lambda j: b.load(self.cell(h_state, b.add(base, j)))  # noqa: E731
        n = self.gates * H
        with k.for_range(H) as j:
            row = b.add(j, k.index(2 * H))
            wb = self.load(self.bias, [d, row]) if self.bias is not None else self.c(0)
            rb = self.load(self.bias, [d, b.add(row, k.index(n))]) if self.bias is not None else self.c(0)
            xw = self.dot(wb, self.w, d, row, x_at, self.inp)
            if lbr:
                hr = self.dot(rb, self.r, d, row, h_at, H)
                pre = b.fadd(xw, b.fmul(b.load(self.cell(gates, b.add(j, k.index(H)))), hr))
            else:
                rh = lambda q: b.fmul(b.load(self.cell(gates, b.add(q, k.index(H)))), h_at(q))  # noqa: E731
                pre = self.dot(b.fadd(xw, rb), self.r, d, row, rh, H)
            b.store(self.activate(g_act, pre), self.cell(gates, row))
        with k.for_range(H) as j:
            at = b.add(base, j)
            z = b.load(self.cell(gates, j))
            hh = b.load(self.cell(gates, b.add(j, k.index(2 * H))))
            new = b.fadd(b.fmul(b.fsub(self.c(1), z), hh), b.fmul(z, b.load(self.cell(h_state, at))))
            self.write_h(d, t, bi, j, at, h_state, new)

    def step_lstm(self, d, t, bi, base, h_state, c_state, gates):
        k, b, H = self.k, self.b, self.hidden
        f, g_act, h_act = self.acts[3 * d], self.acts[3 * d + 1], self.acts[3 * d + 2]
        input_forget = int(k.attr("input_forget", 0))
        self.preactivations(d, t, bi, base, h_state, gates, 4 * H)   # i, o, f, c
        with k.for_range(H) as j:
            at = b.add(base, j)
            c_prev = b.load(self.cell(c_state, at))

            def gate(n):
                return b.load(self.cell(gates, b.add(j, k.index(n * H))))

            def peep(n):
                return self.load(self.p, [d, b.add(j, k.index(n * H))]) if self.p is not None else None

            pre_i, pre_o, pre_f, pre_c = gate(0), gate(1), gate(2), gate(3)
            if self.p is not None:
                pre_i = b.fadd(pre_i, b.fmul(peep(0), c_prev))
                pre_f = b.fadd(pre_f, b.fmul(peep(2), c_prev))
            i_g = self.activate(f, pre_i)
            f_g = b.fsub(self.c(1), i_g) if input_forget else self.activate(f, pre_f)
            c_new = b.fadd(b.fmul(f_g, c_prev), b.fmul(i_g, self.activate(g_act, pre_c)))
            if self.p is not None:
                pre_o = b.fadd(pre_o, b.fmul(peep(1), c_new))
            o_g = self.activate(f, pre_o)
            h_new = b.fmul(o_g, self.apply(h_act[0], h_act[1], h_act[2], c_new))
            b.store(c_new, self.cell(c_state, at))
            self.write_h(d, t, bi, j, at, h_state, h_new)


def _lower(op):
    def lower(k):
        rec = _Recurrent(k, op)
        if rec.seq == 0 or rec.batch == 0:
            return
        rec.emit()
    return lower


for _op in ("RNN", "GRU", "LSTM"):
    register(_op, dtypes=("float32", "float64", "float16"))(_lower(_op))
