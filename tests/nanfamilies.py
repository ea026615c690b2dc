"""The op families of the NaN/Inf property test (tests/test_nan_properties.py): per family, a random case builder
for each source of the non-finite value it can have (input, weight, attribute, folded constant, fused chain).
Shapes and attributes are random within each op's schema; `nancases.Case` decides which operand is hostile."""
from __future__ import annotations

import numpy as np

from nancases import Built, Case, Check, hostile, rand_shape, tame

UNARY = {"Relu": {}, "LeakyRelu": {"alpha": 0.1}, "Elu": {"alpha": 1.0}, "Selu": {"alpha": 1.67, "gamma": 1.05},
         "Celu": {"alpha": 1.0}, "Sigmoid": {}, "HardSigmoid": {"alpha": 0.2, "beta": 0.5}, "HardSwish": {}, "Tanh": {},
         "Softplus": {}, "Softsign": {}, "Exp": {}, "Log": {}, "Sqrt": {}, "Abs": {}, "Neg": {}, "Reciprocal": {},
         "Floor": {}, "Ceil": {}, "Round": {}, "Sign": {}, "Erf": {}, "Sin": {}, "Cos": {}, "ThresholdedRelu": {"alpha": 1.0},
         "IsNaN": {}, "IsInf": {}, "Mish": {}, "Gelu": {}, "Identity": {}}
WITH_ATTRS = [op for op, a in UNARY.items() if a]
ZERO_SENSITIVE = {"IsNaN", "IsInf", "Log", "Sqrt", "Reciprocal", "Sign"}
"""Their result on a zero depends on its sign (1/-0 = -inf) or on a denormal kept (log(-1e-42) = NaN): the rule
does not fix the sign of a zero result or exp(x) - 1's denormals, so chains use them first only."""
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", "Equal", "Less", "Greater", "LessOrEqual", "Mod"]
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
          "ReduceLogSum", "ReduceLogSumExp"]
SUMS = {"ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd"}


def _pick(c: Case, seq):
    return seq[int(c.rng.integers(len(seq)))]


def _unary(c: Case, x: str, op: str, out: str, attrs: dict | None = None) -> str:
    attrs = dict(UNARY[op] if attrs is None else attrs)
    return c.node(op, [x], [out], **attrs)[0]


def _clip_bounds(c: Case) -> list[str]:
    lo, hi = sorted(c.rng.standard_normal(2).tolist())
    return [c.init("lo", np.float32(c.attr(lo))), c.init("hi", np.float32(c.attr(hi)))]


# ------------------------------------------------------------------------------------- elementwise unary
def unary(c: Case) -> None:
    shape = rand_shape(c.rng)
    if c.source == "attribute":
        op = _pick(c, WITH_ATTRS + ["Clip"])
        x = c.input("x", tame(c.rng, shape) * 3)
        if op == "Clip":
            y = c.node("Clip", [x, *_clip_bounds(c)], ["y"])[0]
        else:
            attrs = {k: c.attr(v) for k, v in UNARY[op].items()}
            y = _unary(c, x, op, "y", attrs)

    elif c.source == "folded":  # the op folded at build time on a hostile constant, then added to an input
        op = _pick(c, [o for o in UNARY if o not in ("IsNaN", "IsInf")])
        folded = _unary(c, c.weight("w", shape), op, "f")
        y = c.node("Add", [c.input("x", tame(c.rng, shape)), folded], ["y"])[0]
    elif c.source == "fused":  # a chain elementwise_fusion makes one FusedElementwise of
        x = c.data("x", shape, huge=True)
        for i in range(int(c.rng.integers(2, 5))):  # no op after the first that tells -0.0 or a lost denormal from +0.0
            ops = [o for o in UNARY if o not in ("IsNaN", "IsInf") and (o not in ZERO_SENSITIVE or i == 0)]
            x = _unary(c, x, _pick(c, ops), f"t{i}")
        y = x
    else:
        op = _pick(c, list(UNARY) + ["Clip"])
        x = c.data("x", shape, huge=True)
        y = c.node("Clip", [x, *_clip_bounds(c)], ["y"])[0] if op == "Clip" else _unary(c, x, op, "y")
    c.output(y)


# ------------------------------------------------------------------------------------- elementwise binary
def _broadcast(c: Case, shape) -> tuple[int, ...]:
    tail = list(shape[len(shape) - int(c.rng.integers(0, len(shape) + 1)):])
    return tuple(1 if c.rng.random() < 0.3 else d for d in tail)


def _binary(c: Case, op: str, a: str, b: str, out: str) -> str:
    return c.node(op, [a, b], [out], **({"fmod": 1} if op == "Mod" else {}))[0]


def binary(c: Case) -> None:
    shape = rand_shape(c.rng)
    op = _pick(c, BINARY)
    other = _broadcast(c, shape)
    if c.source == "fused":
        x = c.data("x", shape, huge=True)
        for i in range(int(c.rng.integers(2, 4))):
            op = _pick(c, ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
            x = _binary(c, op, x, c.weight(f"w{i}", _broadcast(c, shape)), f"t{i}")
        x = _unary(c, x, _pick(c, ["Relu", "Sigmoid", "Tanh", "Abs", "Exp"]), "y")
        c.output(x)
        return
    a = c.data("a", shape, huge=True)
    b = c.data("b", other, huge=True) if c.source == "input" else c.weight("w", other, huge=True)
    if c.rng.random() < 0.5 and op != "PRelu":
        a, b = b, a
    c.output(_binary(c, op, a, b, "y"))


# ------------------------------------------------------------------------------------- reductions
def reduction(c: Case) -> None:
    shape = rand_shape(c.rng, 1, 4, 1, 6)
    op = _pick(c, REDUCE + ["ArgMax", "ArgMin", "CumSum"])
    huge = c.rng.random() < 0.3
    x = c.data("x", shape, huge=huge)
    if c.source == "folded":
        x = c.node("Add", [x, c.weight("w", shape)], ["s"])[0]
    rank = len(shape)
    keep = int(c.rng.integers(0, 2))
    if op in ("ArgMax", "ArgMin"):
        y = c.node(op, [x], ["y"], axis=int(c.rng.integers(-rank, rank)), keepdims=keep)[0]
    elif op == "CumSum":
        y = c.node(op, [x, c.init("axis", np.int64(c.rng.integers(-rank, rank)))], ["y"],
                   exclusive=int(c.rng.integers(0, 2)), reverse=int(c.rng.integers(0, 2)))[0]
    else:
        axes = sorted(c.rng.choice(rank, size=int(c.rng.integers(1, rank + 1)), replace=False).tolist())
        ins = [x] if c.rng.random() < 0.2 else [x, c.init("axes", np.array(axes, np.int64))]
        y = c.node(op, ins, ["y"], keepdims=keep)[0]
    c.output(y, Check(loose=huge and op in SUMS | {"CumSum"}, rtol=1e-4, atol=1e-5))


# ------------------------------------------------------------------------------------- softmax-like
def softmax(c: Case) -> None:
    shape = rand_shape(c.rng, 1, 4, 1, 6)
    op = _pick(c, ["Softmax", "LogSoftmax", "Hardmax"])
    rank = len(shape)
    axis = -1 if c.source == "input" and c.rng.random() < 0.5 else int(c.rng.integers(-rank, rank))
    if c.source == "fused":  # off the last axis: passes/softmax_axis.py rewrites it into reductions
        shape = (*shape, int(c.rng.integers(2, 5))) if rank == 1 else shape
        axis = int(c.rng.integers(0, len(shape) - 1))
    x = c.data("x", shape, huge=True)
    if c.source == "folded":
        x = c.node("Add", [x, c.weight("w", shape)], ["s"])[0]
    c.output(c.node(op, [x], ["y"], axis=axis)[0], Check(rtol=1e-4, atol=1e-5))


# ------------------------------------------------------------------------------------- matmul / gemm
def matmul(c: Case) -> None:
    m, k, n = (int(v) for v in c.rng.integers(1, 20, size=3))
    if c.source in ("attribute", "weight") or (c.source != "fused" and c.rng.random() < 0.5):
        return _gemm(c, m, k, n)
    batch = rand_shape(c.rng, 0, 2, 1, 3)
    a = c.data("a", (*batch, m, k), huge=True)  # huge only in A: a huge*huge product beside an infinity is fma's case
    b = c.input("b", hostile(c.rng, (k, n)) if c.source == "input" else tame(c.rng, (k, n))) if c.rng.random() < 0.3 \
        else c.weight("b", (k, n))
    y = c.node("MatMul", [a, b], ["mm"])[0]
    if c.source == "fused":  # passes/epilogues.py: bias, residual and Relu in the kernel's epilogue
        y = c.node("Add", [y, c.weight("bias", (n,))], ["biased"])[0]
        if c.rng.random() < 0.5:
            y = c.node("Add", [y, c.input("res", hostile(c.rng, (*batch, m, n)))], ["res_out"])[0]
        if c.rng.random() < 0.7:
            y = c.node("Relu", [y], ["relu"])[0]
    c.output(y, Check(loose=True))


def _gemm(c: Case, m: int, k: int, n: int) -> None:
    ta, tb = (int(v) for v in c.rng.integers(0, 2, size=2))
    a = c.data("a", (k, m) if ta else (m, k), huge=True)
    b = c.weight("b", (n, k) if tb else (k, n)) if c.source != "input" or c.rng.random() < 0.5 \
        else c.input("b", hostile(c.rng, (n, k) if tb else (k, n)))
    cshape = _pick(c, [(m, n), (n,), (1,), (1, n), (m, 1)])
    ins = [a, b] + ([c.weight("c", cshape)] if c.rng.random() < 0.8 else [])
    alpha, beta = c.attr(float(c.rng.uniform(0.5, 2)), huge=True), c.attr(float(c.rng.uniform(0.5, 2)), huge=True)
    if c.source == "attribute" and c.rng.random() < 0.3:
        alpha = 1.0 if c.rng.random() < 0.5 else alpha
        beta = 0.0 if c.rng.random() < 0.5 else beta
    y = c.node("Gemm", ins, ["g"], alpha=alpha, beta=beta, transA=ta, transB=tb)[0]
    if c.source == "fused" or c.rng.random() < 0.3:
        y = c.node("Relu", [y], ["relu"])[0]
    c.output(y, Check(loose=True))


# ------------------------------------------------------------------------------------- conv / pool
def _conv_geometry(c: Case):
    rank = int(c.rng.integers(1, 3))
    group = int(_pick(c, [1, 1, 2]))
    cin, cout = group * int(c.rng.integers(1, 4)), group * int(c.rng.integers(1, 4))
    if c.rng.random() < 0.2:  # depthwise
        group, cin, cout = 4, 4, 4
    kernel = [int(v) for v in c.rng.integers(1, 4, size=rank)]
    image = [int(v) for v in c.rng.integers(max(kernel) + 1, 9, size=rank)]
    attrs = {"kernel_shape": kernel, "group": group, "strides": [int(v) for v in c.rng.integers(1, 3, size=rank)],
             "pads": [int(v) for v in c.rng.integers(0, 2, size=2 * rank)]}
    return (1, cin, *image), (cout, cin // group, *kernel), attrs


def conv(c: Case) -> None:
    if c.source == "input" and c.rng.random() < 0.4:
        return _pool(c)
    xshape, wshape, attrs = _conv_geometry(c)
    x = c.data("x", xshape, huge=True)
    ins = [x, c.weight("w", wshape), c.weight("bias", (wshape[0],))]
    if c.source == "attribute":  # BatchNormalization's epsilon, folded into the conv (passes/batchnorm.py)
        ins = [x, c.init("w", tame(c.rng, wshape))]
    y = c.node("Conv", ins, ["conv"], **attrs)[0]
    if c.source in ("folded", "attribute") and c.rng.random() < (1.0 if c.source == "attribute" else 0.5):
        cout = wshape[0]
        params = [c.weight(n, (cout,)) for n in ("scale", "shift", "mean")] + [c.init("var", np.abs(tame(c.rng, (cout,))))]
        y = c.node("BatchNormalization", [y, *params], ["bn"], epsilon=c.attr(1e-5))[0]
    if c.source == "fused":  # passes/epilogues.py: per-channel Mul folded, residual Add, activation
        if c.rng.random() < 0.3:
            y = c.node("Mul", [y, c.weight("scale", (1, wshape[0], *([1] * (len(xshape) - 2))))], ["scaled"])[0]
        if c.rng.random() < 0.5:
            out_shape = _conv_out(xshape, wshape, attrs)
            y = c.node("Add", [y, c.input("res", hostile(c.rng, out_shape))], ["res_out"])[0]
        act = _pick(c, ["Relu", "LeakyRelu", "Clip"])
        extra = {"alpha": 0.2} if act == "LeakyRelu" else {}
        y = c.node(act, [y] + (_clip_bounds(c) if act == "Clip" else []), ["act"], **extra)[0]
    c.output(y, Check(loose=True))


def _conv_out(xshape, wshape, attrs) -> tuple[int, ...]:
    rank = len(xshape) - 2
    dims = [(xshape[2 + i] + attrs["pads"][i] + attrs["pads"][i + rank] - attrs["kernel_shape"][i]) // attrs["strides"][i] + 1
            for i in range(rank)]
    return (xshape[0], wshape[0], *dims)


def _pool(c: Case) -> None:
    op = _pick(c, ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"])
    rank = 2 if op.startswith("Global") else int(c.rng.integers(1, 3))  # onnx.reference's 1-D GlobalMaxPool drops a dim
    shape = (int(c.rng.integers(1, 3)), int(c.rng.integers(1, 5)), *(int(v) for v in c.rng.integers(3, 8, size=rank)))
    x = c.data("x", shape, huge=True)
    attrs = {}
    if not op.startswith("Global"):
        attrs = {"kernel_shape": [int(v) for v in c.rng.integers(1, 4, size=rank)],
                 "strides": [int(v) for v in c.rng.integers(1, 3, size=rank)]}
        if op == "AveragePool":
            attrs["count_include_pad"] = int(c.rng.integers(0, 2))
            attrs["pads"] = [int(v) for v in c.rng.integers(0, 2, size=2 * rank)]
            attrs["pads"] = [min(p, k - 1) for p, k in zip(attrs["pads"], attrs["kernel_shape"] * 2)]
    # onnx.reference's windowed pools skip NaN (its marker of padding); the spec's average of a window holding NaN
    # is NaN, as in ONNX Runtime, which is the oracle here (MaxPool: its NaN rule, a documented deviation)
    windowed = not op.startswith("Global")
    c.output(c.node(op, [x], ["y"], **attrs)[0], Check(loose=True, oracle="ort" if windowed else "reference"))


# ------------------------------------------------------------------------------------- normalization
def normalization(c: Case) -> None:
    op = _pick(c, ["BatchNormalization", "LayerNormalization", "InstanceNormalization", "LRN", "LpNormalization"])
    if c.source == "fused":
        op = "BatchNormalization"
    spatial = rand_shape(c.rng, 2, 2, 2, 6) if op == "LRN" else rand_shape(c.rng, 1, 2, 2, 6)  # LRN: 4-D only
    shape = (int(c.rng.integers(1, 3)), int(c.rng.integers(1, 5)), *spatial)
    x = c.data("x", shape)
    ch = shape[1]
    eps = c.attr(1e-5)
    if op == "BatchNormalization":
        var = np.abs(tame(c.rng, (ch,)))
        params = [c.weight(n, (ch,)) for n in ("scale", "shift", "mean")]
        y = c.node(op, [x, *params, c.weight("var", (ch,)) if c.source != "input" else c.init("var", var)], ["y"], epsilon=eps)[0]
        if c.source == "fused":
            y = c.node(_pick(c, ["Relu", "LeakyRelu"]), [y], ["act"])[0]
    elif op == "LayerNormalization":
        axis = int(c.rng.integers(1, len(shape)))
        norm = shape[axis:]
        y = c.node(op, [x, c.weight("scale", norm), c.weight("shift", norm)], ["y"], axis=axis, epsilon=eps)[0]
    elif op == "InstanceNormalization":
        y = c.node(op, [x, c.weight("scale", (ch,)), c.weight("shift", (ch,))], ["y"], epsilon=eps)[0]
    elif op == "LRN":
        y = c.node(op, [x], ["y"], size=int(_pick(c, [1, 3, 5])), alpha=c.attr(1e-4), beta=c.attr(0.75), bias=c.attr(1.0))[0]
    else:
        y = c.node(op, [x], ["y"], axis=int(c.rng.integers(-len(shape), len(shape))), p=int(_pick(c, [1, 2])))[0]
    c.output(y, Check(rtol=1e-4, atol=1e-5))


# ------------------------------------------------------------------------------------- movement
def movement(c: Case) -> None:
    shape = rand_shape(c.rng, 1, 4, 1, 5)
    rank = len(shape)
    x = c.data("x", shape, huge=True)
    op = _pick(c, ["Transpose", "Reshape", "Flatten", "Concat", "Slice", "Gather", "Pad", "Tile", "Expand", "Split"])
    if c.source in ("weight", "folded"):
        op = _pick(c, ["Concat", "Gather", "Expand"])
    if c.source == "attribute":
        op = "Pad"
    if op == "Transpose":
        y = c.node(op, [x], ["y"], perm=[int(v) for v in c.rng.permutation(rank)])[0]
    elif op == "Reshape":
        y = c.node(op, [x, c.init("shape", np.array([-1], np.int64))], ["y"])[0]
    elif op == "Flatten":
        y = c.node(op, [x], ["y"], axis=int(c.rng.integers(0, rank + 1)))[0]
    elif op == "Concat":
        axis = int(c.rng.integers(0, rank))
        y = c.node(op, [x, c.weight("w", shape) if c.source != "input" else x], ["y"], axis=axis)[0]
    elif op == "Slice":
        y = c.node(op, [x, c.init("st", np.array([1], np.int64)), c.init("en", np.array([-1], np.int64)),
                        c.init("ax", np.array([0], np.int64))], ["y"])[0]
    elif op == "Gather":
        data = c.weight("w", shape) if c.source != "input" else x
        idx = c.input("i", c.rng.integers(-shape[0], shape[0], size=(3,)).astype(np.int64))
        y = c.node(op, [data, idx], ["y"], axis=0)[0]
    elif op == "Pad":
        pads = np.array(c.rng.integers(0, 3, size=2 * rank), np.int64)
        value = np.float32(c.attr(float(c.rng.standard_normal())))
        y = c.node(op, [x, c.init("pads", pads), c.init("value", value)], ["y"], mode="constant")[0]
    elif op == "Tile":
        y = c.node(op, [x, c.init("rep", np.array(c.rng.integers(1, 3, size=rank), np.int64))], ["y"])[0]
    elif op == "Expand":
        data = c.weight("w", shape) if c.source != "input" else x
        y = c.node(op, [data, c.init("to", np.array((2, *shape), np.int64))], ["y"])[0]
        y = c.node("Add", [y, c.input("z", np.zeros((2, *shape), np.float32))], ["sum"])[0] if c.source != "input" else y
    else:
        y = c.node(op, [x], ["y"], axis=0, num_outputs=1)[0]
    exact = c.source == "input" or op != "Expand"
    c.output(y, Check(bitwise=exact))


FAMILIES = {
    "elementwise_unary": (unary, ("input", "attribute", "folded", "fused")),
    "elementwise_binary": (binary, ("input", "weight", "folded", "fused")),
    "reduction": (reduction, ("input", "folded")),
    "softmax": (softmax, ("input", "folded", "fused")),
    "matmul_gemm": (matmul, ("input", "weight", "attribute", "folded", "fused")),
    "conv_pool": (conv, ("input", "weight", "attribute", "folded", "fused")),
    "normalization": (normalization, ("input", "weight", "attribute", "folded", "fused")),
    "movement": (movement, ("input", "weight", "attribute", "folded")),
}


def family_model(family: str, source: str, seed: int, cases: int):
    """One model of `cases` random cases of `family` with the non-finite values coming from `source`."""
    from nancases import build_model
    build, sources = FAMILIES[family]
    assert source in sources, (family, source)
    rng = np.random.default_rng([seed, list(FAMILIES).index(family), sources.index(source)])
    built = Built(opset=20)
    for i in range(cases):
        build(Case(built, i, rng, source))
    return build_model(built), built.inputs, built.checks


def mixed_model(seed: int, per_pair: int):
    """One model holding `per_pair` cases of every (family, source): the cross-target check builds it once per board."""
    from nancases import build_model
    rng = np.random.default_rng([seed, 99])
    built = Built(opset=20)
    index = 0
    for family, (build, sources) in FAMILIES.items():
        for source in sources:
            for _ in range(per_pair):
                build(Case(built, index, rng, source))
                index += 1
    return build_model(built), built.inputs, built.checks
