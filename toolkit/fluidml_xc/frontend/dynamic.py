"""One graph for every size in the declared ranges: the model imported statically at the maximum (the capacity),
the minimum, the optimization size and sizes that are not special (`probe_sizes`: a prime inside the range and the
size next to it), and each tensor's varying dims as `symbolic.Expr`s.

The expressions come from ONNX Runtime's symbolic shape inference where it names the tensor and its expression
holds at every imported size; tensors the frontend or the passes create, and any ORT gets wrong, are matched
against the known expressions and simple combinations of them. Everything is checked at each imported size:
the graphs must have the same nodes and attributes, every shape must equal its expression evaluated there, and a
constant folded from a varying shape must be the leading slice of its capacity value (or feed only shape operands,
which kernels take from their output's dims), else the build is refused with the tensor and node named.
"""
from __future__ import annotations

import copy
import itertools
import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import onnx

from ..errors import InputError
from ..ir import Graph, Tensor
from ..symbolic import Dim, Expr, Sym, SymRange, add, at, bounds, capacity, ceildiv, floordiv, maximum, minimum, mul
from .ranges import Resolved
from .shapes import analyze

SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,)}
"""op -> inputs read as the output's shape: a constant folded from a varying size may feed them with its capacity
value, because the kernel reads the output's dims (Tensor.dyn) instead."""

SIZE_DECIDED_COPIES = re.compile(r"#remat\d+")
"""Name marks of node copies a pass makes only above a size (passes/rematerialize.py: REMAT_MIN_BYTES): decided at
the capacity, they recompute a tensor of the original's shape, so they are left out of the node comparison and
their tensors are read at the other sizes under the original's name."""

Importer = Callable[[Mapping[str, tuple[int, ...]]], Graph]
"""Static input shapes -> the graph imported and passed at those sizes (pipeline.import_graph without ranges)."""


# ---- ORT's sympy text -> Expr ------------------------------------------------------------------------
def to_expr(text: str, names: Mapping[str, str]) -> Dim | None:
    """A dim of ONNX Runtime's symbolic inference ('floor(W/2 - 1/2) + 1') as an exact Expr, None when it names
    symbols outside `names` (sympy name -> symbol) or needs arithmetic Expr has not (non-integer results)."""
    import sympy

    try:
        e = sympy.sympify(text, locals={k: sympy.Symbol(k, integer=True, positive=True) for k in names})
        return _convert(e, names)
    except (sympy.SympifyError, TypeError, ValueError, SyntaxError, _Unsupported):
        return None


class _Unsupported(Exception):
    pass


def _scaled(arg, names):
    """floor/ceiling argument a/d with integer coefficients: (integer expression a, positive int d)."""
    import sympy

    d = 1
    for coef in arg.as_coefficients_dict().values():
        d = math.lcm(d, int(sympy.Rational(coef).q))
    return _convert(sympy.expand(arg * d), names), d


def _convert(e, names) -> Dim:
    import sympy

    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        if e.name not in names:
            raise _Unsupported(e.name)
        return Sym(names[e.name])
    if e.is_Add:
        out: Dim = 0
        for a in e.args:
            out = add(out, _convert(a, names))
        return out
    if e.is_Mul:
        out = 1
        for a in e.args:
            if a.is_Rational and not a.is_Integer:
                raise _Unsupported(str(e))
            out = mul(out, _convert(a, names))
        return out
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, d = _scaled(e.args[0], names)
        return floordiv(num, d) if isinstance(e, sympy.floor) else ceildiv(num, d)
    if isinstance(e, sympy.Mod) and e.args[1].is_Integer and e.args[1] > 0:
        a, c = _convert(e.args[0], names), int(e.args[1])
        return add(a, mul(floordiv(a, c), -c))
    if isinstance(e, (sympy.Min, sympy.Max)):
        fold = minimum if isinstance(e, sympy.Min) else maximum
        parts = [_convert(a, names) for a in e.args]
        out = parts[0]
        for p in parts[1:]:
            out = fold(out, p)
        return out
    raise _Unsupported(str(e))


def ort_dims(model: onnx.ModelProto, resolved: Resolved) -> dict[str, tuple[Dim | None, ...]]:
    """Tensor name -> its dims by ONNX Runtime's symbolic shape inference on `model` with the inputs' dims set as
    resolved (None for a dim it leaves open or writes in a form Expr cannot hold); {} when it fails on the model."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    safe = {f"fxc_s{i}": name for i, name in enumerate(resolved.symbols)}
    back = {v: k for k, v in safe.items()}
    m = copy.deepcopy(model)
    del m.graph.value_info[:]
    for vi in m.graph.input:
        if vi.name in resolved.shapes:
            shape = vi.type.tensor_type.shape
            for d, r in zip(shape.dim, resolved.shapes[vi.name]):
                d.Clear()
                if isinstance(r, Expr):
                    d.dim_param = back[r.args[0]]
                else:
                    d.dim_value = r
    for vi in m.graph.output:
        vi.type.tensor_type.ClearField("shape")
    logger = logging.getLogger("onnxruntime.tools.symbolic_shape_infer")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its warnings ("Unable to determine if ...") are not ours to print
    try:
        inferred = SymbolicShapeInference.infer_shapes(m, auto_merge=True)
    except Exception:  # its failures are not errors of the model: every tensor is then matched instead
        return {}
    finally:
        logger.setLevel(level)
    out = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else to_expr(d.dim_param, safe) if d.dim_param
                                 else None for d in vi.type.tensor_type.shape.dim)
    return out


# ---- matching the imports ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One size the model was imported at: the symbols' values and the graph."""

    label: str
    env: dict[str, int]
    graph: Graph


def _differs(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return not (np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() != b.keys() or any(_differs(a[k], b[k]) for k in a)
    try:
        return bool(a != b)
    except (TypeError, ValueError):
        return True


def _fix_hint(symbols: Mapping[str, SymRange]) -> str:
    return "give " + ("that dim one value" if len(symbols) == 1 else "those dims one value") + \
        " (--dim " + " --dim ".join(f"{s}=N" for s in symbols) + ")"


def _check_nodes(base: Point, other: Point, symbols: Mapping[str, SymRange]) -> None:
    at_text = lambda p: ", ".join(f"{k}={v}" for k, v in p.env.items())  # noqa: E731
    a, b = ([n for n in g.nodes if not SIZE_DECIDED_COPIES.search(n.name)] for g in (base.graph, other.graph))
    def key(n):
        return n.name, n.op_type, [SIZE_DECIDED_COPIES.sub("", t) for t in (*n.inputs, "|", *n.outputs)]
    for x, y in itertools.zip_longest(a, b):
        if x is None or y is None or key(x) != key(y):
            node = x or y
            raise InputError(f"the model imports to different graphs at {at_text(base)} and at {at_text(other)} (node "
                             f"{node.name!r}, {node.op_type}): its structure depends on the size: {_fix_hint(symbols)}")
        for k in x.attrs.keys() | y.attrs.keys():
            if _differs(x.attrs.get(k), y.attrs.get(k)):
                raise InputError(f"attribute {k!r} of node {x.name!r} ({x.op_type}) is computed from the size of a varying "
                                 f"tensor (it differs at {at_text(base)} and {at_text(other)}): {_fix_hint(symbols)}")


class _Candidates:
    """Known expressions (from ORT and the inputs) by their values at the imported points."""

    def __init__(self, exprs, points: list[Point], ranges: Mapping[str, SymRange]):
        self.points, self.ranges = points, ranges
        self.exprs = sorted({e for e in exprs if isinstance(e, Expr)}, key=lambda e: (len(str(e)), str(e)))
        self.values = {e: self.at(e) for e in self.exprs}

    def at(self, e: Dim) -> tuple[int, ...]:
        return tuple(at((e,), p.env)[0] for p in self.points)

    def match(self, target: tuple[int, ...]) -> list[Dim]:
        """Every simple form (e, e*c, e+c, e1*e2) over the known expressions that takes `target`'s values."""
        found = []
        for e, v in self.values.items():
            if v == target:
                found.append(e)
            elif all(x for x in v) and all(t % x == 0 for t, x in zip(target, v)) and len({t // x for t, x in zip(target, v)}) == 1:
                found.append(mul(e, target[0] // v[0]))
            elif len({t - x for t, x in zip(target, v)}) == 1:
                found.append(add(e, target[0] - v[0]))
        for (e1, v1), (e2, v2) in itertools.combinations_with_replacement(self.values.items(), 2):
            if tuple(x * y for x, y in zip(v1, v2)) == target:
                found.append(mul(e1, e2))
        return list(dict.fromkeys(found))


def _varying_text(name: str, graph: Graph) -> str:
    node = next((n for n in graph.nodes if name in n.outputs), None)
    return f"tensor {name!r}" + (f" (output of {node.op_type} node {node.name!r})" if node else "")


class _Deriver:
    """Per tensor its dims over the ranges, from the imports at `points` (points[0] is the capacity import)."""

    def __init__(self, points: list[Point], inferred: Mapping[str, tuple], resolved: Resolved):
        self.points, self.inferred, self.resolved = points, inferred, resolved
        self.ranges = resolved.symbols
        known = [d for dims in [*inferred.values(), *resolved.shapes.values()] for d in dims]
        self.candidates = _Candidates(known + [Sym(s) for s in self.ranges], points, self.ranges)

    def shapes(self, name: str) -> list[tuple[int, ...]]:
        return [tuple(tensor_at(p.graph, name).shape) for p in self.points]

    def dims(self, name: str) -> tuple[Dim, ...] | None:
        """The tensor's dims (None: none of them matches a known expression)."""
        shapes = self.shapes(name)
        if len({len(s) for s in shapes}) != 1:
            return None
        ort = self.inferred.get(name, ())
        out = []
        for i, values in enumerate(zip(*shapes)):
            expr = ort[i] if i < len(ort) and len(ort) == len(shapes[0]) else None
            if expr is not None and self.candidates.at(expr) == values:
                out.append(expr if bounds(expr, self.ranges)[0] != bounds(expr, self.ranges)[1] else values[0])
                continue
            if len(set(values)) == 1:
                out.append(values[0])
                continue
            found = self.candidates.match(values)
            if len(found) != 1:
                return None
            out.append(found[0])
        return tuple(out)


def tensor_at(graph: Graph, name: str) -> Tensor | None:
    """The tensor `name` of an import at another size (a size-decided copy: its original)."""
    return graph.tensors.get(name) or graph.tensors.get(SIZE_DECIDED_COPIES.sub("", name))


def _is_prefix(small: np.ndarray, big: np.ndarray) -> bool:
    if small.ndim != big.ndim or any(s > b for s, b in zip(small.shape, big.shape)):
        return False
    return np.array_equal(big[tuple(slice(0, s) for s in small.shape)], small)


def _shape_operand_only(graph: Graph, name: str) -> bool:
    users = [(n, i) for n in graph.nodes for i, x in enumerate(n.inputs) if x == name]
    return bool(users) and all(i in SHAPE_OPERANDS.get(n.op_type, ()) for n, i in users) and name not in graph.outputs


def _constant_dyn(d: _Deriver, name: str, graph: Graph) -> tuple | None:
    """A constant's dims: None when it is the same at every point or feeds only shape operands; its dims when its
    value at each point is the leading slice of the capacity value; else an InputError."""
    values = [tensor_at(p.graph, name).value for p in d.points]
    if all(not _differs(values[0], v) for v in values[1:]) or _shape_operand_only(graph, name):
        return None
    dims = d.dims(name)
    user = next((n for n in graph.nodes if name in n.inputs), None)
    where = f" (read by {user.op_type} node {user.name!r})" if user else ""
    if dims is None or not all(_is_prefix(np.asarray(v), np.asarray(values[0])) for v in values[1:]) or \
            capacity(dims, d.ranges) != tuple(graph.tensors[name].shape):
        raise InputError(f"constant {name!r}{where} is computed from the shape of a varying tensor, and its values at the "
                         f"smaller sizes are not a leading slice of those at the largest: {_fix_hint(d.ranges)}")
    return dims


def attach_dyn(points: list[Point], inferred: Mapping[str, tuple], resolved: Resolved,
               probe: Callable[[], list[Point]]) -> Graph:
    """The capacity import (points[0]) with every tensor's `dyn`, capacity shapes and `symbols` set; every graph,
    dim and constant is checked at the given points and at the imports `probe` makes at sizes no other uses."""
    graph = points[0].graph
    points = list(points) if any(p.label.startswith("probe") for p in points) else [*points, *probe()]
    for other in points[1:]:
        _check_nodes(points[0], other, resolved.symbols)
    d = _Deriver(points, inferred, resolved)
    data_dependent = analyze(graph).root
    for name, t in graph.tensors.items():
        if any(tensor_at(p.graph, name) is None for p in points[1:]):
            raise InputError(f"{_varying_text(name, graph)} exists only at some sizes: {_fix_hint(resolved.symbols)}")
        if name in data_dependent:  # stored at its bound, written dense at its actual dims (frontend/shapes.py)
            dims = None
        elif t.is_const:
            dims = _constant_dyn(d, name, graph)
        elif name in resolved.shapes:
            dims = resolved.shapes[name]
        else:
            dims = d.dims(name)
            if dims is None:
                shapes = " and ".join("x".join(map(str, s)) for s in d.shapes(name))
                raise InputError(f"the shape of {_varying_text(name, graph)} varies with the size ({shapes}) in a way the "
                                 f"build cannot express: {_fix_hint(resolved.symbols)}")
        if dims is not None and any(isinstance(x, Expr) for x in dims):
            t.dyn = tuple(dims)
            t.shape = capacity(dims, resolved.symbols)
    graph.symbols = dict(resolved.symbols)
    return graph


def graph_at(graph: Graph, env: Mapping[str, int]) -> Graph:
    """`graph` with every varying shape at the sizes `env` (constants cut to their leading slice), no dyn: what the
    optimizer decides on at the optimization size."""
    tensors = {}
    for name, t in graph.tensors.items():
        if t.dyn is None:
            tensors[name] = t
            continue
        shape = at(t.dyn, env)
        value = None if t.value is None else t.value[tuple(slice(0, s) for s in shape)]
        tensors[name] = Tensor(name, t.dtype, shape, value)
    return replace(graph, tensors=tensors, symbols={})


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % k for k in range(2, math.isqrt(n) + 1))


def probe_sizes(symbols: Mapping[str, SymRange]) -> list[dict[str, int]]:
    """Sizes that are not special. First, per symbol, the largest prime inside its range that is not its opt and
    that no other symbol takes (else the largest such odd value; else its min: every value is imported already).
    Then, where free, the value next to it: consecutive sizes differ modulo every k >= 2, so a constant computed
    from W % k (padding up to a multiple of k) differs between them, whatever it is at min/opt/max."""
    first: dict[str, int] = {}
    for s, r in symbols.items():
        free = [v for v in range(r.hi - 1, r.lo, -1) if v not in {r.opt, *first.values()}]
        first[s] = next((v for v in free if _is_prime(v)), next((v for v in free if v % 2), free[0] if free else r.lo))
    second: dict[str, int] = {}
    for s, r in symbols.items():
        taken = {r.lo, r.opt, r.hi, *first.values(), *second.values()}
        second[s] = next((v for v in (first[s] - 1, first[s] + 1) if r.lo < v < r.hi and v not in taken), first[s])
    return [first] + ([second] if second != first else [])


def import_ranges(model: onnx.ModelProto, resolved: Resolved, importer: Importer) -> Graph:
    """The model imported at the capacity, the minimum, the optimization size and the probe sizes (probe_sizes),
    merged into one graph with dyn."""
    labels = resolved.points()
    points: list[Point] = []
    for label in ("max", "min", "opt"):
        env = labels[label]
        if any(p.env == env for p in points):
            continue
        points.append(Point(label, env, importer(resolved.at(env))))

    def probe() -> list[Point]:
        return [Point(f"probe{k}", env, importer(resolved.at(env))) for k, env in enumerate(probe_sizes(resolved.symbols))]
    return attach_dyn(points, ort_dims(model, resolved), resolved, probe)
