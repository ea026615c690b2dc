"""Symbolic dimensions: a dim that varies over a declared range is an `Expr` of named symbols.

A build with `--dim W=16..1024` gives every tensor a *capacity* shape (each dim at its maximum over the
ranges, `Expr.bounds`) and, where a dim varies, its expression (`ir.Tensor.dyn`). Tensors are stored with the
strides of their capacity shape, so kernels keep compile-time strides and read only the varying loop extents at
run time (`Kernel.extent`); a memory plan made for the capacity shapes holds for every size in the ranges because
each tensor's elements at any size lie inside its capacity footprint.

Expressions are immutable and simplified as they are built: `Sym("W") * 2 + 1`, `(Sym("W") - 3) // 2 + 1`.
Only integer arithmetic ONNX shapes need: +, -, * (by anything), floor and ceil division by a positive
constant, min and max.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Union

ENUMERATE_LIMIT = 1 << 16
"""Bounds of an expression of one symbol are exact: every value of a range up to this many values is tried."""


@dataclass(frozen=True)
class SymRange:
    """A symbol's declared values: lo..hi, with `opt` the size the optimizer decides at."""

    name: str
    lo: int
    hi: int
    opt: int

    def __post_init__(self):
        if not 0 <= self.lo <= self.opt <= self.hi:
            raise ValueError(f"symbol {self.name}: need 0 <= min <= opt <= max, not {self.lo}..{self.hi} (opt {self.opt})")

    def __str__(self) -> str:
        return f"{self.name}={self.lo}..{self.hi}"


Dim = Union[int, "Expr"]


@dataclass(frozen=True)
class Expr:
    """`op` over `args`: ("sym", name) | ("add", *terms) | ("mul", a, b) | ("floordiv", a, c) | ("ceildiv", a, c)
    | ("min", a, b) | ("max", a, b). Integers appear as plain ints among the args."""

    op: str
    args: tuple

    # ---- construction -------------------------------------------------------------------------
    def __add__(self, other: Dim) -> Dim:
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other: Dim) -> Dim:
        return add(self, mul(other, -1))

    def __rsub__(self, other: Dim) -> Dim:
        return add(other, mul(self, -1))

    def __mul__(self, other: Dim) -> Dim:
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: int) -> Dim:
        return floordiv(self, other)

    def __neg__(self) -> Dim:
        return mul(self, -1)

    # ---- reading -------------------------------------------------------------------------------
    def free(self) -> frozenset[str]:
        if self.op == "sym":
            return frozenset(self.args)
        return frozenset().union(*(a.free() for a in self.args if isinstance(a, Expr)))

    def evaluate(self, env: Mapping[str, int]) -> int:
        return evaluate(self, env)

    def __str__(self) -> str:
        return _text(self)

    __repr__ = __str__


def Sym(name: str) -> Expr:  # noqa: N802 - reads as a constructor
    return Expr("sym", (name,))


def is_static(d: Dim) -> bool:
    return not isinstance(d, Expr)


def add(a: Dim, b: Dim) -> Dim:
    terms, const = [], 0
    for x in (a, b):
        for t in (x.args if isinstance(x, Expr) and x.op == "add" else (x,)):
            if isinstance(t, Expr):
                terms.append(t)
            else:
                const += int(t)
    merged: dict[Expr, int] = {}
    for t in terms:  # collect c * e terms: W + W -> W * 2, W - W -> 0
        coef, base = (t.args[1], t.args[0]) if t.op == "mul" and not isinstance(t.args[1], Expr) else (1, t)
        merged[base] = merged.get(base, 0) + coef
    terms = [mul(base, coef) for base, coef in merged.items() if coef]
    if not terms:
        return const
    if const == 0 and len(terms) == 1:
        return terms[0]
    return Expr("add", tuple(sorted(terms, key=str)) + ((const,) if const else ()))


def mul(a: Dim, b: Dim) -> Dim:
    if not isinstance(a, Expr):
        a, b = b, a
    if not isinstance(a, Expr):
        return int(a) * int(b)
    if not isinstance(b, Expr):
        b = int(b)
        if b == 0:
            return 0
        if b == 1:
            return a
        if a.op == "add":
            out: Dim = 0
            for t in a.args:
                out = add(out, mul(t, b))
            return out
        if a.op == "mul" and not isinstance(a.args[1], Expr):
            return mul(a.args[0], a.args[1] * b)
        return Expr("mul", (a, b))
    return Expr("mul", tuple(sorted((a, b), key=str)))


def floordiv(a: Dim, c: int) -> Dim:
    c = int(c)
    if c <= 0:
        raise ValueError(f"symbolic division by {c}: only positive constant divisors")
    if not isinstance(a, Expr):
        return int(a) // c
    if c == 1:
        return a
    if a.op == "mul" and not isinstance(a.args[1], Expr) and a.args[1] % c == 0:
        return mul(a.args[0], a.args[1] // c)
    return Expr("floordiv", (a, c))


def ceildiv(a: Dim, c: int) -> Dim:
    if not isinstance(a, Expr):
        return -(-int(a) // int(c))
    return floordiv(add(a, int(c) - 1), c)


def minimum(a: Dim, b: Dim) -> Dim:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return min(int(a), int(b))
    if a == b:
        return a
    return Expr("min", tuple(sorted((a, b), key=str)))


def maximum(a: Dim, b: Dim) -> Dim:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return max(int(a), int(b))
    if a == b:
        return a
    return Expr("max", tuple(sorted((a, b), key=str)))


# ---- evaluation -----------------------------------------------------------------------------------
def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    if not isinstance(d, Expr):
        return int(d)
    return _fold(d, lambda name: int(env[name]), _INT_OPS)


_INT_OPS: dict[str, Callable] = {
    "add": lambda xs: sum(xs),
    "mul": lambda xs: xs[0] * xs[1],
    "floordiv": lambda xs: xs[0] // xs[1],
    "min": lambda xs: min(xs),
    "max": lambda xs: max(xs),
}


def _fold(e: Expr, sym: Callable[[str], object], ops: Mapping[str, Callable]):
    if e.op == "sym":
        return sym(e.args[0])
    values = [_fold(a, sym, ops) if isinstance(a, Expr) else a for a in e.args]
    return ops[e.op](values)


def emit(d: Dim, sym: Callable[[str], object], ops: Mapping[str, Callable]):
    """Fold `d` with `sym(name)` for symbols and `ops[op](values)` for operators (the kernels' IR arithmetic);
    constants are passed to `ops` as plain ints."""
    if not isinstance(d, Expr):
        return int(d)
    return _fold(d, sym, ops)


def free_symbols(dims: Iterable[Dim]) -> frozenset[str]:
    return frozenset().union(*(d.free() for d in dims if isinstance(d, Expr)))


def bounds(d: Dim, ranges: Mapping[str, SymRange]) -> tuple[int, int]:
    """(min, max) of `d` over `ranges`: exact for one symbol (every value tried), else an interval bound."""
    if not isinstance(d, Expr):
        return int(d), int(d)
    names = d.free()
    if len(names) == 1:
        (name,) = names
        r = ranges[name]
        if r.hi - r.lo < ENUMERATE_LIMIT:
            values = [evaluate(d, {name: v}) for v in range(r.lo, r.hi + 1)]
            return min(values), max(values)
    return _interval(d, ranges)


def _interval(e: Dim, ranges: Mapping[str, SymRange]) -> tuple[int, int]:
    if not isinstance(e, Expr):
        return int(e), int(e)
    if e.op == "sym":
        r = ranges[e.args[0]]
        return r.lo, r.hi
    parts = [_interval(a, ranges) for a in e.args]
    if e.op == "add":
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if e.op == "mul":
        (a0, a1), (b0, b1) = parts
        products = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
        return min(products), max(products)
    if e.op == "floordiv":
        (a0, a1), (c, _) = parts
        return a0 // c, a1 // c
    if e.op == "min":
        return min(p[0] for p in parts), min(p[1] for p in parts)
    if e.op == "max":
        return max(p[0] for p in parts), max(p[1] for p in parts)
    raise ValueError(f"unknown symbolic op {e.op!r}")


def capacity(dims: Iterable[Dim], ranges: Mapping[str, SymRange]) -> tuple[int, ...]:
    """Each dim at its maximum over `ranges`: the shape a buffer is planned and strided for."""
    return tuple(bounds(d, ranges)[1] for d in dims)


def at(dims: Iterable[Dim], env: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, env) for d in dims)


# ---- text -----------------------------------------------------------------------------------------
def _text(e: Dim, parent: str = "") -> str:
    if not isinstance(e, Expr):
        return str(e)
    if e.op == "sym":
        return e.args[0]
    if e.op == "add":
        out = ""
        for i, a in enumerate(e.args):
            neg = not isinstance(a, Expr) and a < 0 or isinstance(a, Expr) and a.op == "mul" and not isinstance(a.args[1], Expr) and a.args[1] < 0
            body = _text(mul(a, -1) if neg else a, "add")
            out += (" - " if neg else " + ") + body if i else ("-" if neg else "") + body
        return f"({out})" if parent in ("mul", "floordiv") else out
    if e.op == "mul":
        return f"{_text(e.args[0], 'mul')}*{_text(e.args[1], 'mul')}"
    if e.op == "floordiv":
        return f"floor({_text(e.args[0], 'floordiv')} / {e.args[1]})"
    return f"{e.op}({_text(e.args[0])}, {_text(e.args[1])})"



# ---- binding symbols from actual input shapes -----------------------------------------------------
def bind_inputs(inputs: Iterable[tuple[str, tuple]], ranges: Mapping[str, SymRange],
                shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """The symbols' values from actual input shapes. `inputs`: (name, dims) with each dim a fixed int or a symbol's
    name. A fixed dim given another size, a size outside its symbol's range, or two sizes for one symbol is an
    InputError naming the input, the dim and the range (the C glue's `check_input_shapes` says the same)."""
    from .errors import InputError

    env: dict[str, int] = {}
    setter: dict[str, str] = {}
    for name, dims in inputs:
        shape = tuple(int(d) for d in shapes[name])
        if len(shape) != len(dims):
            raise InputError(f"input {name!r} has rank {len(shape)}, the model's has rank {len(dims)}: feed "
                             f"[{', '.join(str(d) for d in dims)}]")
        for k, (size, dim) in enumerate(zip(shape, dims)):
            if not isinstance(dim, str):
                if size != dim:
                    raise InputError(f"input {name!r} dim {k} is {size}, but the model fixes it at {dim}: feed {dim}")
                continue
            r = ranges[dim]
            if not r.lo <= size <= r.hi:
                raise InputError(f"input {name!r} dim {k} is {size}, outside {r}: feed a size in the range "
                                 f"(or rebuild with a wider --dim {dim}=MIN..MAX)")
            if dim in env and env[dim] != size:
                raise InputError(f"input {name!r} dim {k} is {size}, but input {setter[dim]!r} set {dim}={env[dim]}: "
                                 f"feed one size for {dim} in every input")
            env.setdefault(dim, size)
            setter.setdefault(dim, name)
    return env
