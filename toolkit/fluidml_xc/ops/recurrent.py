"""Recurrent ops: RNN, GRU, LSTM (every attribute of the spec: activations with alpha/beta, clip,
direction forward/reverse/bidirectional, layout 0/1, sequence_lens, initial states, peepholes,
input_forget, linear_before_reset).

Per direction, the hidden (and cell) state of every batch row lives in a stack buffer. float32 and
float64 run the gate MatMuls through the register-blocked kernels of ops/matmul.py: the input
projections X . W^T of a chunk of time steps (CHUNK_BYTES of stack) are one batched GEMM, then each
step adds H . R^T into its rows in place (the GEMM's residual epilogue) and one fused loop applies
biases, peepholes and activations, updates the state and writes Y. GRU's candidate gate takes a
second GEMM on r * H (or on H, with linear_before_reset). float16, and sequence_lens given at run
time (each batch row then has its own time index), take a scalar path: per row and step, dot
products against W and R read along their contiguous last dimension. A row past its sequence_lens
entry gets zeros in Y and keeps its state, so Y_h / Y_c hold its last valid step. tanh is a
vectorizable rational approximation in float32 (< 4e-7 relative error), libm in float64.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.scalar import FAST, const, llvm_type
from ..kernels.matmul_blocked import Mat, Problem, RunDims
from ..kernels.matmul_runtime import emit_matmul
from ..opspec import register

CHUNK_BYTES = 32 * 1024
"""Stack bytes for the input projections of a chunk of time steps (X . W^T of several steps as one GEMM)."""
MAX_STEP_BYTES = 256 * 1024
"""Gate rows of one step (batch x gates x hidden) bigger than this take the scalar path (small stack)."""

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


_TANH_NUM = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
             1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_DEN = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def tanh_f32(b: ir.IRBuilder, s, x: ir.Value) -> ir.Value:
    """tanhf as x * P(x^2) / Q(x^2) on [-7.9, 7.9] (Eigen's rational approximation), no libm call so the
    gate loops vectorize; < 4e-7 relative error everywhere (x itself below 4e-4)."""
    f32 = ir.FloatType()
    limit = 7.90531110763549805
    xc = s.clamp(np.float32, x, ir.Constant(f32, -limit), ir.Constant(f32, limit))  # NaN stays NaN (maxnum dropped it)
    x2 = b.fmul(xc, xc)

    def poly(coefficients):
        acc = ir.Constant(f32, coefficients[0])
        for c in coefficients[1:]:
            acc = b.fadd(b.fmul(acc, x2), ir.Constant(f32, c))
        return acc
    y = b.fdiv(b.fmul(xc, poly(_TANH_NUM)), poly(_TANH_DEN))
    tiny = b.fcmp_ordered("<", s.intrinsic("llvm.fabs", x), ir.Constant(f32, 0.0004))
    return b.select(tiny, x, y)


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
        self.seq_v, self.batch_v = (k.extent(self.x, 1), k.extent(self.x, 0)) if self.layout else \
            (k.extent(self.x, 0), k.extent(self.x, 1))
        """The sequence length and batch at run time (ints when static; seq and batch are then the capacities)."""
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
        s, dt = self.k.s, self.ct
        if self.clip is not None:
            x = s.clamp(dt, x, self.c(-self.clip), self.c(self.clip))
        return self.apply(name, alpha, beta, x)

    def tanh(self, x):
        return tanh_f32(self.b, self.k.s, x) if self.ct == np.float32 else self.k.s.libm("tanh", self.ct, x)

    def apply(self, name, alpha, beta, x):
        b, s, dt, c = self.b, self.k.s, self.ct, self.c
        if name == "tanh":
            return self.tanh(x)
        if name == "sigmoid":
            return b.fdiv(c(1), b.fadd(c(1), s.intrinsic("llvm.exp", b.fneg(x))))
        if name == "relu":
            return b.select(b.fcmp_ordered("<", x, c(0)), c(0), x)
        if name == "affine":
            return b.fadd(b.fmul(c(alpha), x), c(beta))
        if name == "leakyrelu":
            return b.select(b.fcmp_ordered(">=", x, c(0)), x, b.fmul(c(alpha), x))
        if name == "thresholdedrelu":
            return b.select(b.fcmp_ordered(">", x, c(alpha)), x, c(0))
        if name == "scaledtanh":
            return b.fmul(c(alpha), self.tanh(b.fmul(c(beta), x)))
        if name == "hardsigmoid":
            return s.clamp(dt, b.fadd(b.fmul(c(alpha), x), c(beta)), c(0), c(1))
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
            with k.for_range(self.batch_v) as bi:
                with k.for_range(H) as j:
                    at = b.add(b.mul(bi, k.index(H)), j)
                    b.store(self.load(self.h0, self.state_index(d, bi, j)) if self.h0 is not None else self.c(0), self.cell(h_state, at))
                    if c_state is not None:
                        b.store(self.load(self.c0, self.state_index(d, bi, j)) if self.c0 is not None else self.c(0), self.cell(c_state, at))
            with k.for_range(self.seq_v) as s:
                with k.for_range(self.batch_v) as bi:
                    if self.seq_lens is not None:
                        length = k.s.cast(self.seq_lens.dtype, np.dtype(f"int{k.idx_t.width}"), b.load(self.ptr(self.seq_lens, [bi])))
                        length = b.select(b.icmp_signed(">", length, k.as_index(self.seq_v)), k.as_index(self.seq_v), length)
                    else:
                        length = k.as_index(self.seq_v)
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
            self.store_final_states(d, self.batch_v, h_state, c_state)

    def store_final_states(self, d, batch: int, h_state, c_state) -> None:
        """Y_h and Y_c (when asked for) of direction d from the state buffers."""
        k, b, H = self.k, self.b, self.hidden
        with k.for_range(batch) as bi:
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
        self.preactivations(d, t, bi, base, h_state, gates, 4 * H)   # i, o, f, c
        with k.for_range(H) as j:
            self.lstm_unit(d, t, bi, j, b.add(base, j), h_state, c_state,
                           lambda n: b.load(self.cell(gates, b.add(j, k.index(n * H)))))

    # -- the blocked path: GEMMs from ops/matmul.py ---------------------------------------------
    def blocked_ok(self) -> bool:
        """float32/float64 and every batch row running the whole sequence (no run-time sequence_lens)."""
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or self.hidden == 0 or self.inp == 0:
            return False
        if self.batch * self.gates * self.hidden * self.dtype.itemsize > MAX_STEP_BYTES:
            return False
        if self.seq_lens is None:
            return True
        value = self.seq_lens.value
        return value is not None and bool(np.all(np.asarray(value) == self.seq))

    def offset_ptr(self, op, offset: int) -> ir.Value:
        return self.b.gep(op.ptr, [self.k.index(offset)], inbounds=True) if offset else op.ptr

    def weight_mat(self, op, d: int, row0: int, rows: int) -> Mat:
        """op[d, row0 : row0 + rows, :]^T as the K x N operand B (the constant's value when op is constant)."""
        value = None if op.value is None else np.ascontiguousarray(op.value[d, row0:row0 + rows, :].T)
        # a constant is repacked by the kernel: its stored form is made only if something reads it
        storage = (lambda: op.ptr) if value is not None else self.offset_ptr(op, d * op.strides[0] + row0 * op.strides[1])
        return Mat(storage, (), op.strides[2], op.strides[1], value)

    def gemm(self, a: Mat, b_mat: Mat, c: Mat, m: int, n: int, kk: int, batch=(), accumulate=False, batch_run=None) -> None:
        """C (+)= A . B with the register-blocked kernels (dot products when both run along k, else outer products);
        m is the batch (its run-time value self.batch_v), batch_run the batch dims' run-time values."""
        residual = Mat(c.ptr, (), 0, 0) if accumulate else None
        run = RunDims(tuple(batch_run or batch), self.batch_v, n, kk) if self.k.dynamic else None
        P = Problem(self.dtype, tuple(batch), m, n, kk, a, b_mat, c, residual=residual, run=run)
        kind = "dot" if b_mat.value is None and a.cs == 1 and b_mat.rs == 1 else "outer"
        emit_matmul(self.k, P, kind)

    def emit_blocked(self):
        k, b, H, G = self.k, self.b, self.hidden, self.gates
        GH, nb = G * H, self.batch
        row = nb * GH
        tc = max(1, min(self.seq, CHUNK_BYTES // (row * self.dtype.itemsize)))
        seq = self.seq_v
        if isinstance(seq, int):
            chunks, tc_v, last, end = -(-seq // tc), tc, k.index(seq - tc), k.index(seq - 1)
        else:  # a varying length: tc steps per chunk at most, fewer when the whole sequence is shorter
            chunks = b.udiv(b.add(seq, k.index(tc - 1)), k.index(tc))
            tc_v = k.imin(k.index(tc), seq)
            last, end = b.sub(seq, tc_v), b.sub(seq, k.index(1))
        xs = self.x.strides
        t_stride, b_stride = (xs[1], xs[0]) if self.layout else (xs[0], xs[1])
        for d in range(self.dirs):
            reverse = self.direction == "reverse" or d == 1
            h_state = self.buffer(nb * H)
            c_state = self.buffer(nb * H) if self.op == "LSTM" else None
            xw = self.buffer(tc * row)
            tmp = self.buffer(nb * H) if self.op == "GRU" else None
            with k.for_range(self.batch_v) as bi:
                with k.for_range(H) as j:
                    at = b.add(b.mul(bi, k.index(H)), j)
                    b.store(self.load(self.h0, self.state_index(d, bi, j)) if self.h0 is not None else self.c(0), self.cell(h_state, at))
                    if c_state is not None:
                        b.store(self.load(self.c0, self.state_index(d, bi, j)) if self.c0 is not None else self.c(0), self.cell(c_state, at))
            w_mat = self.weight_mat(self.w, d, 0, GH)
            with k.for_range(chunks) as c:
                # the last chunk starts at seq - tc (re-projecting a few steps) so every chunk is tc steps
                s0 = b.mul(c, k.index(tc))
                s0 = b.select(b.icmp_signed(">", s0, last), last, s0)
                first = b.sub(b.mul(c, k.index(tc)), s0)
                t0 = b.sub(end, s0) if reverse else s0
                x_base = b.gep(self.x.ptr, [b.mul(t0, k.index(t_stride))], inbounds=True)
                a = Mat(x_base, (-t_stride if reverse else t_stride,), b_stride, xs[2])
                self.gemm(a, w_mat, Mat(xw, (row,), GH, 1), nb, GH, self.inp, batch=(tc,), batch_run=(tc_v,))
                with k.for_range(tc_v, first) as sl:
                    s = b.add(s0, sl)
                    t = b.sub(end, s) if reverse else s
                    gates = b.gep(xw, [b.mul(sl, k.index(row))], inbounds=True)
                    getattr(self, "blocked_" + self.op.lower())(d, t, gates, h_state, c_state, tmp)
            self.store_final_states(d, self.batch_v, h_state, c_state)

    def bias_value(self, d, g, which: str):
        """Wb[g] ("w"), Rb[g] ("r") or their sum ("wr") of direction d; g an index value."""
        if self.bias is None:
            return self.c(0)
        n = self.gates * self.hidden
        wb = lambda: self.load(self.bias, [d, g])  # noqa: E731
        rb = lambda: self.load(self.bias, [d, self.b.add(g, self.k.index(n))])  # noqa: E731
        if which == "w":
            return wb()
        if which == "r":
            return rb()
        return self.b.fadd(wb(), rb())

    def state_mat(self, buf):
        return Mat(buf, (), self.hidden, 1)

    def each(self, fn):
        """fn(bi, j, at) for every batch row and hidden unit (at = bi * H + j, the state buffer's index)."""
        k, b, H = self.k, self.b, self.hidden
        with k.for_range(self.batch_v) as bi:
            with k.for_range(H) as j:
                fn(bi, j, b.add(b.mul(bi, k.index(H)), j))

    def gate_cell(self, gates, bi, col):
        """gates[bi, col] (col an index value) of a step's gate rows (batch x G*H)."""
        b = self.b
        return b.gep(gates, [b.add(b.mul(bi, self.k.index(self.gates * self.hidden)), col)], inbounds=True)

    def blocked_rnn(self, d, t, gates, h_state, c_state, tmp):
        H, G = self.hidden, self.gates
        self.gemm(self.state_mat(h_state), self.weight_mat(self.r, d, 0, G * H), Mat(gates, (), G * H, 1),
                  self.batch, G * H, H, accumulate=True)
        f = self.acts[d]
        b = self.b

        def unit(bi, j, at):
            pre = b.fadd(b.load(self.gate_cell(gates, bi, j)), self.bias_value(d, j, "wr"))
            self.write_h(d, t, bi, j, at, h_state, self.activate(f, pre))
        self.each(unit)

    def blocked_gru(self, d, t, gates, h_state, c_state, tmp):
        k, b, H = self.k, self.b, self.hidden
        GH = 3 * H
        f, g_act = self.acts[2 * d], self.acts[2 * d + 1]
        lbr = int(k.attr("linear_before_reset", 0))
        self.gemm(self.state_mat(h_state), self.weight_mat(self.r, d, 0, 2 * H), Mat(gates, (), GH, 1),
                  self.batch, 2 * H, H, accumulate=True)
        with k.for_range(self.batch_v) as bi:
            with k.for_range(2 * H) as g:
                cell = self.gate_cell(gates, bi, g)
                b.store(self.activate(f, b.fadd(b.load(cell), self.bias_value(d, g, "wr"))), cell)
        r_at = lambda bi, j: b.load(self.gate_cell(gates, bi, b.add(j, k.index(H))))  # noqa: E731
        h_rows = self.weight_mat(self.r, d, 2 * H, H)
        if lbr:  # tmp = H . Rh^T, then pre = XWh + Wbh + r * (tmp + Rbh)
            self.gemm(self.state_mat(h_state), h_rows, self.state_mat(tmp), self.batch, H, H)

            def pre_h(bi, j, at):
                row = b.add(j, k.index(2 * H))
                rec = b.fadd(b.load(self.cell(tmp, at)), self.bias_value(d, row, "r"))
                return b.fadd(b.fadd(b.load(self.gate_cell(gates, bi, row)), self.bias_value(d, row, "w")), b.fmul(r_at(bi, j), rec))
        else:  # tmp = r * H, then XWh += tmp . Rh^T
            self.each(lambda bi, j, at: b.store(b.fmul(r_at(bi, j), b.load(self.cell(h_state, at))), self.cell(tmp, at)))
            self.gemm(self.state_mat(tmp), h_rows, Mat(b.gep(gates, [k.index(2 * H)], inbounds=True), (), GH, 1),
                      self.batch, H, H, accumulate=True)

            def pre_h(bi, j, at):
                row = b.add(j, k.index(2 * H))
                return b.fadd(b.load(self.gate_cell(gates, bi, row)), self.bias_value(d, row, "wr"))

        def unit(bi, j, at):
            z = b.load(self.gate_cell(gates, bi, j))
            hh = self.activate(g_act, pre_h(bi, j, at))
            new = b.fadd(b.fmul(b.fsub(self.c(1), z), hh), b.fmul(z, b.load(self.cell(h_state, at))))
            self.write_h(d, t, bi, j, at, h_state, new)
        self.each(unit)

    def blocked_lstm(self, d, t, gates, h_state, c_state, tmp):
        k, b, H = self.k, self.b, self.hidden
        self.gemm(self.state_mat(h_state), self.weight_mat(self.r, d, 0, 4 * H), Mat(gates, (), 4 * H, 1),
                  self.batch, 4 * H, H, accumulate=True)

        def unit(bi, j, at):
            def gate(n):
                col = b.add(j, k.index(n * H))
                return b.fadd(b.load(self.gate_cell(gates, bi, col)), self.bias_value(d, col, "wr"))
            self.lstm_unit(d, t, bi, j, at, h_state, c_state, gate)
        self.each(unit)

    def lstm_unit(self, d, t, bi, j, at, h_state, c_state, gate):
        """One hidden unit of an LSTM step from its four gate pre-activations gate(0..3) (i, o, f, c)."""
        k, b, H = self.k, self.b, self.hidden
        f, g_act, h_act = self.acts[3 * d], self.acts[3 * d + 1], self.acts[3 * d + 2]
        input_forget = int(k.attr("input_forget", 0))
        c_prev = b.load(self.cell(c_state, at))

        def peep(n):
            return self.load(self.p, [d, b.add(j, k.index(n * H))])

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
        if rec.blocked_ok():
            rec.emit_blocked()
        else:
            rec.emit()
    return lower


for _op in ("RNN", "GRU", "LSTM"):
    register(_op, dtypes=("float32", "float64", "float16"), heavy=True, runtime_extents=True)(_lower(_op))
