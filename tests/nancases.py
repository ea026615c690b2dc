"""Random models whose inputs, weights, attributes, folded constants or fused chains carry NaN, +-Inf, -0.0,
denormals and huge values, one family of ops at a time, and the comparison under docs/GUARANTEES.md's rule
("NaN, infinities, signed zeros and denormals"): onnx.reference is the oracle, ONNX Runtime is reported beside it.

`family_model(family, source, seed, cases)` gives one model holding `cases` independent random cases (each node
reads graph inputs or its own initializers and writes its own graph output, so one compile checks them all), its
feeds and, per output, how it is compared (`Check`)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

NAN, INF = float("nan"), float("inf")
DENORMALS = (1e-40, -3e-42, 1.4e-45)
HUGE = 1e30
SPECIAL = (NAN, INF, -INF, -0.0, *DENORMALS)
ATTR_SPECIAL = (NAN, INF, -INF, -0.0, 1e-40)
SOURCES = ("input", "weight", "attribute", "folded", "fused")


@dataclass
class Check:
    """How one output is compared: `loose` where huge values may cancel in a sum (finite results then only
    agree in magnitude; NaN and infinities still exactly), `bitwise` for data movement (every bit, -0.0 too),
    `oracle` "ort" where the rule follows ONNX Runtime rather than onnx.reference (windowed MaxPool)."""

    loose: bool = False
    bitwise: bool = False
    oracle: str = "reference"
    """"reference" (with `_spec_ops` where onnx.reference departs from the spec) or "ort"."""
    rtol: float = 2e-5
    atol: float = 1e-6


@dataclass
class Built:
    nodes: list = field(default_factory=list)
    inputs: dict = field(default_factory=dict)
    inits: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)
    opset: int = 17


def hostile(rng, shape, huge: bool = False, p: float | None = None) -> np.ndarray:
    """Normal values with a fraction `p` replaced by NaN, +-Inf, -0.0, denormals (and +-1e30 when `huge`)."""
    x = rng.standard_normal(shape).astype(np.float32)
    pool = np.array(SPECIAL + ((HUGE, -HUGE) if huge else ()), np.float32)
    mask = rng.random(shape) < (rng.uniform(0.05, 0.3) if p is None else p)
    x[mask] = rng.choice(pool, int(mask.sum()))
    return x


def tame(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def attr_value(rng, huge: bool = False) -> float:
    """A non-finite, signed-zero or denormal attribute (and +-1e30 where `huge`: a float32 formula then loses
    what float64 keeps, a precision matter outside the rule)."""
    return float(rng.choice(np.array(ATTR_SPECIAL + ((HUGE, -HUGE) if huge else ()), np.float64)))


def rand_shape(rng, lo_rank=1, hi_rank=4, lo=1, hi=5) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(lo, hi + 1, size=int(rng.integers(lo_rank, hi_rank + 1))))


class Case:
    """One case's names (prefixed so cases share a model) and the tensors it adds to `Built`."""

    def __init__(self, built: Built, index: int, rng, source: str):
        self.b, self.p, self.rng, self.source = built, f"c{index}_", rng, source

    def name(self, n: str) -> str:
        return self.p + n

    def input(self, n: str, value: np.ndarray) -> str:
        self.b.inputs[self.name(n)] = value
        return self.name(n)

    def init(self, n: str, value) -> str:
        self.b.inits[self.name(n)] = np.asarray(value)
        return self.name(n)

    def node(self, op: str, ins: list[str], outs: list[str], **attrs) -> list[str]:
        outs = [self.name(o) for o in outs]
        self.b.nodes.append(helper.make_node(op, ins, outs, name=self.name(op), **attrs))
        return outs

    def output(self, name: str, check: Check | None = None) -> None:
        self.b.checks[name] = check or Check()

    def data(self, n: str, shape, huge: bool = False) -> str:
        """The case's activation: hostile when the source is the input, ordinary otherwise."""
        if self.source in ("input", "fused"):
            return self.input(n, hostile(self.rng, shape, huge))
        return self.input(n, tame(self.rng, shape))

    def weight(self, n: str, shape, huge: bool = False) -> str:
        """A constant operand: hostile initializer (weight), a constant folded at build time from an
        initializer divided by one holding zeros (folded: +-inf, NaN where 0/0), or ordinary."""
        if self.source in ("weight", "fused"):
            return self.init(n, hostile(self.rng, shape, huge))
        if self.source == "folded":
            num = tame(self.rng, shape)
            den = np.where(self.rng.random(shape) < 0.3, np.float32(0.0), np.float32(1.0)).astype(np.float32)
            num[self.rng.random(shape) < 0.1] = 0.0
            den[self.rng.random(shape) < 0.05] = -0.0
            return self.node("Div", [self.init(n + "_num", num), self.init(n + "_den", den)], [n])[0]
        return self.init(n, tame(self.rng, shape))

    def attr(self, normal: float, huge: bool = False) -> float:
        return attr_value(self.rng, huge) if self.source == "attribute" else normal


def build_model(built: Built) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in built.inputs.items()]
    inits = [numpy_helper.from_array(v, n) for n, v in built.inits.items()]
    outputs = [helper.make_empty_tensor_value_info(n) for n in built.checks]
    graph = helper.make_graph(built.nodes, "nan", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", built.opset)])
    model.ir_version = 8
    return model


def _spec_ops() -> list:
    """onnx.reference's ops where its implementation departs from the ONNX spec, replaced by the spec's formula
    (docs/GUARANTEES.md lists each): LRN (fills only the first batch-size channels, fails on fewer channels),
    LpNormalization (p=1 sums signed values; a zero norm gives 0 here, as in ORT and ours, where x / 0 would be
    NaN or +-inf), LogSoftmax (log of a float32 softmax: -inf wherever that
    underflows), LeakyRelu (alpha * x also where x >= 0, so 0 * inf = NaN there), ReduceLogSumExp (NaN for a
    row of -inf only, whose log(sum(exp(x))) is -inf)."""
    from onnx.reference.ops.op_leaky_relu import LeakyRelu as _LeakyRelu
    from onnx.reference.ops.op_log_softmax import LogSoftmax as _LogSoftmax
    from onnx.reference.ops.op_lp_normalization import LpNormalization as _LpNormalization
    from onnx.reference.ops.op_lrn import LRN as _LRN
    from onnx.reference.ops.op_max_pool import MaxPool as _MaxPool
    from onnx.reference.ops.op_reduce_log_sum_exp import ReduceLogSumExp_18 as _ReduceLogSumExp

    class LRN(_LRN):
        def _run(self, x, alpha=None, beta=None, bias=None, size=None):
            from modelrun import lrn_numpy
            return (lrn_numpy(x, self.size, self.alpha, self.beta, self.bias).astype(x.dtype),)

    class LpNormalization(_LpNormalization):
        def _run(self, x, axis=None, p=None):
            axis, p = self.axis, self.p
            norm = np.sum(np.abs(x), axis=axis, keepdims=True) if p == 1 else np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
            return (np.where(norm == 0, np.float32(0), x / norm).astype(x.dtype),)  # a zero norm gives 0, as ORT

    class LogSoftmax(_LogSoftmax):
        def _run(self, X):
            x, axis = X.astype(np.float64), self.axis
            top = np.max(x, axis=axis, keepdims=True)
            return ((x - top - np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True))).astype(X.dtype),)

    class LeakyRelu(_LeakyRelu):
        def _run(self, x, alpha=None):
            return (np.where(x >= 0, x, x * np.asarray(self.alpha, x.dtype)).astype(x.dtype),)
    class ReduceLogSumExp(_ReduceLogSumExp):
        def _run(self, data, axes=None, keepdims=1, noop_with_empty_axes=0):
            (result,) = super()._run(data, axes, keepdims, noop_with_empty_axes)
            empty = np.max(data, axis=None if axes is None or not len(axes) else tuple(int(a) for a in axes),
                           keepdims=bool(keepdims)) == -np.inf if data.size else False
            return (np.where(empty, np.float32(-np.inf), result).astype(data.dtype),)
    class MaxPool(_MaxPool):  # a window of NaN only crashes it (NaN is its padding marker); ORT is the oracle there
        def _run(self, x, *args, **kwargs):
            return super()._run(np.where(np.isnan(x), np.float32(-np.inf), x).astype(x.dtype), *args, **kwargs)
    return [LRN, LpNormalization, LogSoftmax, LeakyRelu, ReduceLogSumExp, MaxPool]


def reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """onnx.reference's outputs, with `_spec_ops` in place of its departures from the spec."""
    from onnx.reference import ReferenceEvaluator
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [np.asarray(v) for v in ReferenceEvaluator(model, new_ops=_spec_ops()).run(None, feeds)]


def onnxruntime(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray] | None:
    """ORT's outputs, or None where ORT refuses the model."""
    import onnxruntime as ort
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return [np.asarray(v) for v in session.run(None, feeds)]
    except Exception:  # ORT lacks a kernel for some op/opset pairs: the cross-check is then empty
        return None


def disagreement(got: np.ndarray, want: np.ndarray, check: Check) -> str | None:
    """Why `got` breaks the rule against `want`, or None: same shape; NaN exactly where `want` has NaN; each
    infinity with its sign; finite values within tolerance (the sign of zero only where `bitwise`)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    if want.dtype.kind != "f":
        bad = got != want
        return f"{int(bad.sum())} of {got.size} differ: got {got[bad][:4]}, want {want[bad][:4]}" if bad.any() else None
    g, w = got.astype(np.float64), want.astype(np.float64)
    if check.bitwise:
        same = (got.view(np.uint32) == want.astype(np.float32).view(np.uint32)) | (np.isnan(g) & np.isnan(w))
        return None if same.all() else f"bits differ at {np.argwhere(~same)[:3].tolist()}: got {got[~same][:4]}, want {want[~same][:4]}"
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    if (nan_g != nan_w).any():
        at = np.argwhere(nan_g != nan_w)[:3].tolist()
        return f"NaN mismatch at {at}: got {g[nan_g != nan_w][:4]}, want {w[nan_g != nan_w][:4]}"
    inf_w = np.isinf(w)
    if (g[inf_w] != w[inf_w]).any() or (np.isinf(g) & ~inf_w).any():
        bad = (np.isinf(g) | inf_w) & (g != w)
        return f"infinity mismatch at {np.argwhere(bad)[:3].tolist()}: got {g[bad][:4]}, want {w[bad][:4]}"
    fin = np.isfinite(w)
    if check.loose:
        scale = np.maximum(np.abs(w[fin]), 1.0) * 1e-4 + HUGE * 1e-6
        close = np.abs(g[fin] - w[fin]) <= scale
    else:
        close = np.isclose(g[fin], w[fin], rtol=check.rtol, atol=check.atol)
    if not close.all():
        return f"values differ: got {g[fin][~close][:4]}, want {w[fin][~close][:4]}"
    return None
