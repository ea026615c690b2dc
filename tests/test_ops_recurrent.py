"""RNN, GRU and LSTM against onnx.reference (the attribute combinations it implements) and against the
numpy reference below (what onnx.reference ignores: activations with alpha/beta, clip,
sequence_lens, input_forget), JIT-compiled on x86_64; one LSTM built and run under qemu-aarch64."""
from __future__ import annotations

import platform

import numpy as np
import pytest
from onnx import helper, numpy_helper

from modelrun import compile_and_run, jit_run, reference, require_emulator

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="JIT on x86_64")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _act(name, alpha, beta):
    name = name.lower()
    return {
        "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
        "affine": lambda x: alpha * x + beta, "leakyrelu": lambda x: np.where(x >= 0, x, alpha * x),
        "thresholdedrelu": lambda x: np.where(x > alpha, x, 0), "scaledtanh": lambda x: alpha * np.tanh(beta * x),
        "hardsigmoid": lambda x: np.clip(alpha * x + beta, 0, 1), "elu": lambda x: np.where(x >= 0, x, alpha * (np.exp(x) - 1)),
        "softsign": lambda x: x / (1 + np.abs(x)), "softplus": lambda x: np.log1p(np.exp(x)),
    }.get(name)


_AB = {"affine": (1, 1, 1.0, 0.0), "leakyrelu": (1, 0, 0.01, 0), "thresholdedrelu": (1, 0, 1.0, 0), "scaledtanh": (1, 1, 1.0, 1.0),
       "hardsigmoid": (1, 1, 0.2, 0.5), "elu": (1, 0, 1.0, 0)}


def _acts(op, attrs, dirs):
    names = attrs.get("activations") or DEFAULT_ACTS[op] * dirs
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    out = []
    for n in names:
        na, nb, da, db = _AB.get(n.lower(), (0, 0, 0, 0))
        a = alphas.pop(0) if na and alphas else da
        b = betas.pop(0) if nb and betas else db
        out.append(_act(n, a, b))
    return out


def numpy_rnn(op, attrs, X, W, R, B=None, seq_lens=None, h0=None, c0=None, P=None):
    """The spec's equations, per batch row, with sequence_lens; returns Y, Y_h(, Y_c) in the node's layout."""
    layout = attrs.get("layout", 0)
    if layout:
        X = X.swapaxes(0, 1)
        h0 = None if h0 is None else h0.swapaxes(0, 1)
        c0 = None if c0 is None else c0.swapaxes(0, 1)
    X, W, R = X.astype(np.float64), W.astype(np.float64), R.astype(np.float64)
    seq, batch, _ = X.shape
    dirs, H = W.shape[0], R.shape[-1]
    G = GATES[op]
    B = np.zeros((dirs, 2 * G * H)) if B is None else B.astype(np.float64)
    h0 = np.zeros((dirs, batch, H)) if h0 is None else h0.astype(np.float64)
    c0 = np.zeros((dirs, batch, H)) if c0 is None else c0.astype(np.float64)
    P = np.zeros((dirs, 3 * H)) if P is None else P.astype(np.float64)
    lens = np.full(batch, seq) if seq_lens is None else seq_lens
    clip = attrs.get("clip")
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    acts = _acts(op, attrs, dirs)
    per = len(DEFAULT_ACTS[op])
    Y = np.zeros((seq, dirs, batch, H))
    Yh = np.zeros((dirs, batch, H))
    Yc = np.zeros((dirs, batch, H))
    direction = attrs.get("direction", "forward")
    for d in range(dirs):
        rev = direction == "reverse" or d == 1
        fa = acts[d * per:(d + 1) * per]
        Wb, Rb = B[d, :G * H], B[d, G * H:]
        for b in range(batch):
            h, c = h0[d, b].copy(), c0[d, b].copy()
            n = lens[b]
            for s in range(n):
                t = n - 1 - s if rev else s
                x = X[t, b]
                if op == "RNN":
                    h = fa[0](cl(W[d] @ x + R[d] @ h + Wb + Rb))
                elif op == "GRU":
                    Wz, Wr, Wh = np.split(W[d], 3)
                    Rz, Rr, Rh = np.split(R[d], 3)
                    wbz, wbr, wbh = np.split(Wb, 3)
                    rbz, rbr, rbh = np.split(Rb, 3)
                    z = fa[0](cl(Wz @ x + Rz @ h + wbz + rbz))
                    r = fa[0](cl(Wr @ x + Rr @ h + wbr + rbr))
                    if attrs.get("linear_before_reset", 0):
                        hh = fa[1](cl(Wh @ x + r * (Rh @ h + rbh) + wbh))
                    else:
                        hh = fa[1](cl(Wh @ x + Rh @ (r * h) + rbh + wbh))
                    h = (1 - z) * hh + z * h
                else:
                    g = W[d] @ x + R[d] @ h + Wb + Rb
                    gi, go, gf, gc = np.split(g, 4)
                    pi, po, pf = np.split(P[d], 3)
                    i = fa[0](cl(gi + pi * c))
                    f = 1 - i if attrs.get("input_forget", 0) else fa[0](cl(gf + pf * c))
                    c = f * c + i * fa[1](cl(gc))
                    o = fa[0](cl(go + po * c))
                    h = o * fa[2](c)
                Y[t, d, b] = h
            Yh[d, b], Yc[d, b] = h, c
    if layout:
        Y, Yh, Yc = Y.transpose(2, 0, 1, 3), Yh.swapaxes(0, 1), Yc.swapaxes(0, 1)
    return [Y.astype(np.float32), Yh.astype(np.float32), Yc.astype(np.float32)]


def make_case(op, seq=5, batch=3, inp=4, hidden=6, direction="forward", layout=0, bias=True, seq_lens=None,
              init=True, peep=False, const_weights=False, seed=0, expected=True, **attrs):
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    G = GATES[op]
    x_shape = (batch, seq, inp) if layout else (seq, batch, inp)
    s_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    vals = {"X": rng.uniform(-1, 1, x_shape).astype(np.float32),
            "W": rng.uniform(-0.5, 0.5, (dirs, G * hidden, inp)).astype(np.float32),
            "R": rng.uniform(-0.5, 0.5, (dirs, G * hidden, hidden)).astype(np.float32)}
    names = ["X", "W", "R"]
    names.append("B" if bias else "")
    if bias:
        vals["B"] = rng.uniform(-0.5, 0.5, (dirs, 2 * G * hidden)).astype(np.float32)
    names.append("L" if seq_lens is not None else "")
    if seq_lens is not None:
        vals["L"] = np.array(seq_lens, dtype=np.int32)
    names.append("H0" if init else "")
    if init:
        vals["H0"] = rng.uniform(-1, 1, s_shape).astype(np.float32)
    if op == "LSTM":
        names.append("C0" if init else "")
        if init:
            vals["C0"] = rng.uniform(-1, 1, s_shape).astype(np.float32)
        names.append("P" if peep else "")
        if peep:
            vals["P"] = rng.uniform(-0.5, 0.5, (dirs, 3 * hidden)).astype(np.float32)
    while names and not names[-1]:
        names.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node_attrs = dict(hidden_size=hidden, direction=direction, **attrs)
    if layout:
        node_attrs["layout"] = layout
    node = helper.make_node(op, names, outs, **node_attrs)
    consts = {"W", "R", "B", "P"} if const_weights else set()
    feeds = {n: v for n, v in vals.items() if n not in consts}
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    inits = [numpy_helper.from_array(v, n) for n, v in vals.items() if n in consts]
    graph = helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    if not expected:
        return model, feeds, {}
    want = numpy_rnn(op, {**node_attrs}, vals["X"], vals["W"], vals["R"], vals.get("B"), vals.get("L"), vals.get("H0"),
                     vals.get("C0"), vals.get("P"))
    return model, feeds, dict(zip(outs, want))


def check(got, want, rtol=1e-4, atol=1e-5):
    for name, expected in want.items():
        assert got[name].shape == expected.shape, name
        np.testing.assert_allclose(got[name], expected, rtol=rtol, atol=atol, err_msg=name)


# combinations onnx.reference implements: checked against it as well as against numpy_rnn
REFERENCE_CASES = [
    ("RNN", {}), ("GRU", {}), ("LSTM", {}),
    ("RNN", {"direction": "bidirectional", "layout": 1}),
    ("GRU", {"direction": "reverse", "linear_before_reset": 1}),
    ("GRU", {"direction": "bidirectional", "init": False, "bias": False}),
    ("LSTM", {"direction": "bidirectional", "peep": True}),
    ("LSTM", {"direction": "reverse", "layout": 1, "peep": True}),
    ("LSTM", {"const_weights": True, "batch": 1, "hidden": 16, "inp": 9}),
    # long sequences: several chunks of input projections, the last one overlapping the one before
    ("LSTM", {"direction": "bidirectional", "seq": 23, "batch": 3, "hidden": 37, "inp": 19}),
    ("GRU", {"direction": "bidirectional", "seq": 41, "batch": 2, "hidden": 45, "inp": 7, "const_weights": True}),
    ("RNN", {"direction": "reverse", "seq": 70, "batch": 4, "hidden": 33, "inp": 5, "layout": 1}),
]


@pytest.mark.parametrize("op,kw", REFERENCE_CASES, ids=[f"{op}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'defaults'}"
                                                        for op, kw in REFERENCE_CASES])
def test_against_onnx_reference(op, kw):
    model, feeds, want = make_case(op, **kw)
    got = jit_run(model, feeds)
    check(got, want)
    check(got, reference(model, feeds))


# what onnx.reference ignores: only against the numpy equations
SPEC_CASES = [
    ("RNN", {"seq_lens": [5, 2, 0], "direction": "bidirectional"}),
    ("GRU", {"seq_lens": [3, 5, 1], "direction": "reverse", "linear_before_reset": 1}),
    ("LSTM", {"seq_lens": [1, 4, 5], "peep": True, "layout": 1}),
    ("RNN", {"activations": ["Relu"], "clip": 0.7}),
    ("RNN", {"activations": ["LeakyRelu", "ScaledTanh"], "activation_alpha": [0.2, 0.8], "activation_beta": [1.5],
             "direction": "bidirectional"}),
    ("GRU", {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.4]}),
    ("GRU", {"activations": ["Sigmoid", "Elu", "Affine", "ThresholdedRelu"], "activation_alpha": [0.5, 0.9, 0.1],
             "activation_beta": [0.2], "direction": "bidirectional", "clip": 2.0}),
    ("LSTM", {"activations": ["Sigmoid", "Softplus", "Tanh"], "input_forget": 1, "clip": 1.5}),
]


@pytest.mark.parametrize("op,kw", SPEC_CASES, ids=[f"{op}-{i}" for i, (op, _) in enumerate(SPEC_CASES)])
def test_against_spec_equations(op, kw):
    model, feeds, want = make_case(op, **kw)
    check(jit_run(model, feeds), want)


@pytest.mark.parametrize("op,dtype", [("LSTM", np.float64), ("GRU", np.float64), ("RNN", np.float16), ("GRU", np.float16)])
def test_other_float_types(op, dtype):
    """float64 takes the blocked path, float16 the scalar one (math in float32)."""
    model, feeds, _ = make_case(op, direction="bidirectional", expected=False)
    for t in list(model.graph.input):
        t.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    feeds = {n: v.astype(dtype) for n, v in feeds.items()}
    want = {n: v.astype(dtype) for n, v in reference(model, {n: v.astype(np.float32) for n, v in feeds.items()}).items()}
    tol = 2e-3 if dtype == np.float16 else 1e-6
    check(jit_run(model, feeds), want, rtol=tol, atol=tol)


def test_constant_full_sequence_lens_takes_the_blocked_path():
    model, feeds, want = make_case("LSTM", seq_lens=[5, 5, 5], peep=True, expected=True)
    lens = feeds.pop("L")
    model.graph.initializer.append(numpy_helper.from_array(lens, "L"))
    del model.graph.input[[i.name for i in model.graph.input].index("L")]
    check(jit_run(model, feeds), want)


def test_unsupported_activation_is_one_line_error():
    from fluidml_xc.errors import InputError
    model, feeds, _ = make_case("RNN", activations=["Gelu"], expected=False)
    with pytest.raises(InputError, match="activation 'Gelu' is not supported"):
        jit_run(model, feeds)


def test_lstm_gru_cross_aarch64(tmp_path):
    require_emulator("qemu-aarch64")
    model, feeds, want = make_case("LSTM", direction="bidirectional", peep=True, seq_lens=[4, 5, 2])
    check(compile_and_run(model, feeds, tmp_path / "lstm", "qemu-aarch64", profile_runner=False), want)
    model, feeds, want = make_case("GRU", layout=1, linear_before_reset=1, const_weights=True)
    check(compile_and_run(model, feeds, tmp_path / "gru", "qemu-aarch64", profile_runner=False), want)
