"""`--input-shape NAME=DIMS` against the shapes the model declares.

The rules (build, quantize and everything that imports a model share them):

- every declared fixed dimension must equal the given one (`x` declared [2, N] takes 2xK, not 3xK);
- dimensions that share a symbol (dim_param) take one value across all inputs (X [1, B, 3] and
  h0 [1, B, 4] take the same B);
- an input not given whose open dimensions are all symbols fixed by the given inputs gets its shape from
  them; any other input with an open dimension must be given.

A conflict is one InputError naming the input, the dimension's index, its declared name and both values.
A dimension given a range (16..1024) is build's (frontend/ranges.py); here it is refused.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ..errors import InputError
from .validate import check_input_shape

BASE_HELP = ("shape of an input, NAME=1x3x224x224 (a scalar: NAME=), repeatable. Rules: a size the model "
             "declares must be given as declared; dims that share a name (batch, sequence, ...) take one size across "
             "all inputs; an input whose open dims are all named by given inputs follows from them")
HELP = BASE_HELP + "; one size per dim (a range such as 16..1024 is not supported)"
"""The --input-shape help of the commands without ranges (build adds frontend/ranges.RANGE_HELP to BASE_HELP)."""

BATCH_NAMES = re.compile(r"(?i)(.*batch.*|n|b|bs|bsz)")
"""Symbols a suggested shape fills with 1 (other open dimensions are shown as <name>: the user picks)."""


@dataclass(frozen=True)
class Dim:
    """One declared dimension: a fixed size, a symbol, or neither (open and unnamed)."""

    size: int | None = None
    symbol: str | None = None

    def text(self) -> str:
        return str(self.size) if self.size is not None else self.symbol or "?"

    def to_json(self) -> int | str | None:
        return self.size if self.size is not None else self.symbol


def declared(vi: onnx.ValueInfoProto) -> tuple[Dim, ...] | None:
    """The declared dims of a tensor input (None: no shape declared). Sizes <= 0 are open, as the importer reads them."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    return tuple(Dim(size=d.dim_value) if d.HasField("dim_value") and d.dim_value > 0
                 else Dim(symbol=d.dim_param or None) for d in vi.type.tensor_type.shape.dim)


def shape_text(dims: tuple[Dim, ...] | None) -> str:
    """[batch, sequence, 80]."""
    return "(no shape declared)" if dims is None else "[" + ", ".join(d.text() for d in dims) + "]"


def dims_text(shape) -> str:
    return "x".join(str(d) for d in shape)


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`name=1x3x224x224` -> ("name", (1, 3, 224, 224)); the name may itself contain '='; a scalar is `name=`."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise InputError(f"bad --input-shape {text!r}: write NAME=1x3x224x224 (a scalar is NAME=)")
    if re.fullmatch(r"\d+(x\d+)*|", dims):
        return name, tuple(int(d) for d in dims.split("x")) if dims else ()
    ranged = re.search(r"(\d*)\.\.(\d*)", dims)
    if ranged:
        one = re.sub(r"\d*\.\.(\d*)", lambda m: m.group(1) or "1", dims, count=1)
        raise InputError(f"bad --input-shape {text!r}: a dimension given a range ({ranged.group(0)}) is taken by build "
                         f"only, here each dimension takes one size: pass one size, e.g. {name}={one}")
    if re.fullmatch(r"\d+([,*X]\d+)*", dims):
        raise InputError(f"bad --input-shape {text!r}: separate the sizes with 'x': {name}={re.sub(r'[,*X]', 'x', dims)}")
    raise InputError(f"bad --input-shape {text!r}: every dimension must be a size (0, 1, 2, ...), separated by 'x': "
                     "write NAME=1x3x224x224 (a scalar is NAME=)")


def parse_input_shapes(texts: list[str]) -> dict[str, tuple[int, ...]]:
    """Every --input-shape, by input name; one input given two different shapes is refused (not: the last wins)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, shape = parse_input_shape(text)
        if shapes.get(name, shape) != shape:
            given = lambda dims: "x".join(map(str, dims))  # noqa: E731
            raise InputError(f"--input-shape gives input {name!r} two shapes, {given(shapes[name])} and {given(shape)}: "
                             "pass it once")
        shapes[name] = shape
    return shapes


def tensor_inputs(model: onnx.ModelProto, skip=()) -> dict[str, onnx.ValueInfoProto]:
    """The model's tensor inputs that are not initializers (and not in `skip`), by name."""
    inits = {i.name for i in model.graph.initializer}
    return {vi.name: vi for vi in model.graph.input
            if vi.name not in inits and vi.name not in skip and vi.type.HasField("tensor_type")}


@dataclass(frozen=True)
class _Source:
    """Where a symbol got its value: the input, the dimension's index, the flag that gave it."""

    input: str
    index: int
    flag: str


def _fix(flag: str, name: str, shape) -> str:
    return f"pass --input-shape {name}={dims_text(shape)}" if flag.startswith("--input-shape") else \
        f"its shape must be {dims_text(shape)}"


def _check_fixed(name: str, dims: tuple[Dim, ...], shape: tuple[int, ...], flag: str) -> None:
    for i, (dim, size) in enumerate(zip(dims, shape)):
        if dim.size is not None and dim.size != size:
            fixed = [d.size if d.size is not None else s for d, s in zip(dims, shape)]
            raise InputError(f"{flag} gives dimension {i} of input {name!r} size {size}, but the model declares it "
                             f"{dim.size} (shape {shape_text(dims)}): {_fix(flag, name, fixed)}")


def _fix_symbols(given: Mapping[str, tuple[int, ...]], declared_dims: Mapping[str, tuple[Dim, ...]],
                 flags: Mapping[str, str]) -> dict[str, tuple[int, _Source]]:
    """Symbol -> (value, where it came from); InputError when two dimensions of one symbol differ."""
    values: dict[str, tuple[int, _Source]] = {}
    for name, shape in given.items():
        for i, (dim, size) in enumerate(zip(declared_dims[name], shape)):
            if dim.symbol is None:
                continue
            if dim.symbol not in values:
                values[dim.symbol] = (size, _Source(name, i, flags[name]))
                continue
            first, src = values[dim.symbol]
            if first != size:
                fixed = [first if d.symbol == dim.symbol else s for d, s in zip(declared_dims[name], shape)]
                raise InputError(f"{flags[name]} gives dimension {i} of input {name!r} (declared {dim.symbol!r}) size "
                                 f"{size}, but {src.flag} gives {dim.symbol!r} size {first} (dimension {src.index} of "
                                 f"input {src.input!r}): dimensions that share a name take one size: "
                                 f"{_fix(flags[name], name, fixed)}")
    return values


def resolve_shapes(model: onnx.ModelProto, given: Mapping[str, tuple[int, ...]], skip=(),
                   flags: Mapping[str, str] | None = None) -> dict[str, tuple[int, ...]]:
    """`given` checked against the declared shapes, plus the inputs whose open dims its symbols fix.
    `skip`: inputs handled elsewhere (sequences); `flags`: per input, how it was given (default `--input-shape NAME=DIMS`)."""
    inputs = tensor_inputs(model, skip)
    given = {k: tuple(v) for k, v in given.items() if k in inputs}
    flags = {k: (flags or {}).get(k) or f"--input-shape {k}={dims_text(v)}" for k, v in given.items()}
    decl: dict[str, tuple[Dim, ...]] = {}
    for name, shape in given.items():
        vi = inputs[name]
        check_input_shape(name, shape, vi.type.tensor_type)
        decl[name] = declared(vi) or tuple(Dim() for _ in shape)
        _check_fixed(name, decl[name], shape, flags[name])
    symbols = _fix_symbols(given, decl, flags)
    shapes = dict(given)
    for name, vi in inputs.items():
        dims = declared(vi)
        if name in shapes or dims is None or all(d.size is not None for d in dims):
            continue
        if all(d.size is not None or d.symbol in symbols for d in dims):
            shapes[name] = tuple(d.size if d.size is not None else symbols[d.symbol][0] for d in dims)
    return shapes


def _symbol_sizes(model: onnx.ModelProto, known: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    inputs, sizes = tensor_inputs(model), {}
    for name, shape in known.items():
        for dim, size in zip((declared(inputs[name]) or ()) if name in inputs else (), shape):
            if dim.symbol is not None:
                sizes.setdefault(dim.symbol, size)
    return sizes


def suggestions(model: onnx.ModelProto, names: list[str], known: Mapping[str, tuple[int, ...]]) -> list[str]:
    """Per input of `names` (open dims, not given): `input 'input' has shape [batch, sequence, 80]: pass
    --input-shape input=1x<sequence>x80`. Batch-like symbols and an unnamed leading dim are 1, symbols the
    `known` shapes fix take their size, the others are <name>; an input whose open dims all share symbols
    with an input listed before it is not listed (its shape follows)."""
    inputs, sizes = tensor_inputs(model), _symbol_sizes(model, known)
    listed: dict[str, int] = {}
    lines: list[str] = []
    follow: dict[int, list[str]] = {}
    for name in names:
        dims = declared(inputs[name]) if name in inputs else None
        if dims is None:
            lines.append(f"input {name!r} declares no shape: pass --input-shape {name}=DIMS (e.g. {name}=1x3x224x224)")
            continue
        open_symbols = {d.symbol for d in dims if d.size is None}
        if None not in open_symbols and open_symbols <= set(listed) | set(sizes):
            if open_symbols & set(listed):
                follow.setdefault(min(listed[sym] for sym in open_symbols if sym in listed), []).append(name)
            continue
        listed.update({sym: len(lines) for sym in open_symbols - {None} if sym not in listed})

        def size(i: int, d: Dim) -> str:
            if d.size is not None:
                return str(d.size)
            if d.symbol in sizes:
                return str(sizes[d.symbol])
            if d.symbol is None:
                return "1" if i == 0 else f"<dim{i}>"
            return "1" if BATCH_NAMES.fullmatch(d.symbol) else f"<{d.symbol}>"
        lines.append(f"input {name!r} has shape {shape_text(dims)}: pass --input-shape "
                     f"{name}={'x'.join(size(i, d) for i, d in enumerate(dims)) or '1'}")
    for k, names_after in follow.items():
        lines[k] += f" ({', '.join(map(repr, names_after))} then follow{'s' if len(names_after) == 1 else ''}: shared dimension names)"
    return lines


def declared_shapes(model: onnx.ModelProto, names) -> dict[str, list[int | str | None]]:
    """The manifest's `declared_shapes`: per input in `names` that the model declares, its dims (size, symbol or null)."""
    inputs = tensor_inputs(model)
    out = {}
    for name in names:
        dims = declared(inputs[name]) if name in inputs else None
        if dims is not None:
            out[name] = [d.to_json() for d in dims]
    return out
