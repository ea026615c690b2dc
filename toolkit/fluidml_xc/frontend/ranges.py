"""Dims that vary at run time, as the user declares them: `--input-shape NAME=1x3x48x16..1024`, `--dim W=16..1024@320`,
`--opt-shape NAME=1x3x48x320`, `--max-dim NAME=N`, resolved against the model's declared input shapes.

A dim given one value stays static (the build is exactly the static one). A range on a declared symbol (dim_param)
ranges that symbol in every input that declares it; a range on a dim the model leaves unnamed makes a fresh symbol
named INPUT_AXIS. The optimization size of a symbol (where the optimizer decides) defaults to its maximum.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx

from ..errors import InputError
from ..strings import DEFAULT_MAX_STRING_BYTES, slot_dtype
from ..ir import DEFAULT_BOUND
from ..symbolic import Dim as SymDim, Sym, SymRange
from .input_shapes import Dim, tensor_inputs, declared, dims_text, shape_text

RANGE_HELP = ("a dim may be a range LO..HI (NAME=1x3x48x16..1024): one build serves every size in it; a range on a "
              "dim the model names (dim_param) ranges that name in every input, one on an unnamed dim makes a "
              "symbol INPUT_AXIS")
DIM_HELP = ("size or range of a dim the model names (dim_param) in every input that declares it: W=320 (static), "
            "W=16..1024, W=16..1024@320 (optimize the layouts at 320; default: at the maximum), repeatable")
OPT_SHAPE_HELP = ("the size the optimizer decides layouts and loop orders at, for an input with ranged dims "
                  "(default: every range at its maximum, where a run costs most), repeatable")
MAX_DIM_HELP = ("upper bound of a data-dependent dim the build asks for by name (a Loop's trip count, a Range's or "
                "window's length from run-time values), repeatable; '*=N' bounds every such dim not named")
MAX_STRING_BYTES_HELP = (f"bytes each element of a string tensor holds (default {DEFAULT_MAX_STRING_BYTES}, rounded up to "
                         "8k - 1): every string tensor is sized for it; a longer input or result fails the run (docs/STRINGS.md)")

Given = tuple  # per dim: int, or (lo, hi)
_RANGE = re.compile(r"(\d+)\.\.(\d+)")


def _parse_dims(flag: str, text: str, name: str, dims: str) -> Given:
    out = []
    for part in dims.split("x") if dims else ():
        if part.isdigit():
            out.append(int(part))
            continue
        m = _RANGE.fullmatch(part)
        if not m:
            raise InputError(f"bad {flag} {text!r}: each dim is a size (48) or a range (16..1024), separated by 'x': "
                             f"write {name}=1x3x48x16..1024")
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise InputError(f"bad {flag} {text!r}: range {part} has its minimum above its maximum: write {hi}..{lo}")
        out.append((lo, hi) if lo < hi else lo)
    return tuple(out)


def split_input_shapes(texts: list[str]) -> tuple[dict[str, tuple[int, ...]], dict[str, Given]]:
    """The --input-shape flags split into static shapes (parsed exactly as before) and shapes with a range."""
    from .input_shapes import parse_input_shapes

    static, ranged = [], {}
    for text in texts:
        name, sep, dims = text.rpartition("=")
        if sep and name and ".." in dims:
            given = _parse_dims("--input-shape", text, name, dims)
            if ranged.get(name, given) != given:
                raise InputError(f"--input-shape gives input {name!r} two shapes: pass it once")
            ranged[name] = given
        else:
            static.append(text)
    shapes = parse_input_shapes(static)
    both = set(shapes) & set(ranged)
    if both:
        name = sorted(both)[0]
        raise InputError(f"--input-shape gives input {name!r} two shapes: pass it once")
    return shapes, ranged


@dataclass(frozen=True)
class DimSpec:
    """One --dim: a symbol's size (lo == hi) or range, with its optimization size (None: not given)."""

    lo: int
    hi: int
    opt: int | None = None

    def __str__(self) -> str:
        return _text(self.lo, self.hi) + (f"@{self.opt}" if self.opt is not None else "")


def parse_dim(text: str) -> tuple[str, DimSpec]:
    """`W=16..1024@320` -> ("W", DimSpec(16, 1024, 320)); `W=320` -> ("W", DimSpec(320, 320))."""
    name, sep, value = text.partition("=")
    m = re.fullmatch(r"(\d+)(?:\.\.(\d+))?(?:@(\d+))?", value)
    if not sep or not name or not m:
        raise InputError(f"bad --dim {text!r}: write NAME=320, NAME=16..1024 or NAME=16..1024@320 (optimize at 320)")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) else lo
    opt = int(m.group(3)) if m.group(3) else None
    if lo > hi:
        raise InputError(f"bad --dim {text!r}: the minimum {lo} is above the maximum {hi}: write {name}={hi}..{lo}")
    if opt is not None and not lo <= opt <= hi:
        raise InputError(f"bad --dim {text!r}: the optimization size {opt} is outside {lo}..{hi}: pick one inside")
    return name, DimSpec(lo, hi, opt)


def parse_max_dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.isdigit() or int(value) < 1:
        raise InputError(f"bad --max-dim {text!r}: write NAME=N with N >= 1 (the largest size that dim can take)")
    return name, int(value)


@dataclass(frozen=True)
class ShapeRanges:
    """Everything the user declared about varying dims (BuildOptions.ranges); empty: a static build."""

    inputs: dict[str, Given] = field(default_factory=dict)
    """--input-shape entries with at least one range."""
    dims: dict[str, DimSpec] = field(default_factory=dict)
    opt_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    max_dims: dict[str, int] = field(default_factory=dict)
    """--max-dim: bounds of data-dependent dims, kept for the ops that ask for them by name."""
    max_string_bytes: int = DEFAULT_MAX_STRING_BYTES
    """--max-string-bytes: the bytes each string element holds (strings.py, docs/STRINGS.md)."""

    def __bool__(self) -> bool:
        return bool(self.inputs or self.dims or self.opt_shapes)


def _once(flag: str, pairs, show=str) -> dict:
    out: dict = {}
    for name, value in pairs:
        if name in out and out[name] != value:
            raise InputError(f"{flag} gives {name!r} twice ({name}={show(out[name])} and {name}={show(value)}): pass it once")
        out[name] = value
    return out


def parse_ranges(input_ranges: dict[str, Given], dims: list[str], opt_shapes: list[str], max_dims: list[str],
                 max_string_bytes: int = DEFAULT_MAX_STRING_BYTES) -> ShapeRanges:
    """The flags of build (and every command that imports a model) as one ShapeRanges."""
    opt = {}
    for text in opt_shapes:
        name, sep, value = text.rpartition("=")
        if not sep or not name or not re.fullmatch(r"\d+(x\d+)*|", value):
            raise InputError(f"bad --opt-shape {text!r}: write NAME=1x3x48x320 (one size per dim)")
        opt = {**opt, **_once("--opt-shape", [(name, tuple(int(d) for d in value.split("x")) if value else ())], dims_text)}
    slot_dtype(max_string_bytes)  # its range checked
    return ShapeRanges(dict(input_ranges), _once("--dim", map(parse_dim, dims)), opt, _once("--max-dim", map(parse_max_dim, max_dims)),
                       int(max_string_bytes))


def _node_names(graph: onnx.GraphProto) -> set[str]:
    """Every node's name and output names, in nested subgraphs too."""
    out: set[str] = set()
    for node in graph.node:
        out.update(n for n in (node.name, *node.output) if n)
        for a in node.attribute:
            for g in (*([a.g] if a.type == onnx.AttributeProto.GRAPH else ()), *a.graphs):
                out |= _node_names(g)
    return out


def check_max_dims(model: onnx.ModelProto, max_dims: Mapping[str, int]) -> None:
    """InputError for a --max-dim that names no node and no node output of the model (it could bound nothing)."""
    names = _node_names(model.graph)
    for name, value in max_dims.items():
        if name not in names and name != DEFAULT_BOUND:
            raise InputError(f"--max-dim {name}={value} names no node or node output of the model: give the name of the "
                             "node whose bound it is (a Loop, a TopK with a run-time K, an ImageDecoder, a Range or "
                             "window sized at run time) or of its output, or '*=N' for every such size")


@dataclass(frozen=True)
class Resolved:
    """Per model input its dims (int, or Sym where it varies) and the ranges of the symbols, in input order."""

    shapes: dict[str, tuple[SymDim, ...]]
    symbols: dict[str, SymRange]

    @property
    def dynamic(self) -> bool:
        return bool(self.symbols)

    def at(self, env: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        from ..symbolic import at
        return {name: at(dims, env) for name, dims in self.shapes.items()}

    def points(self) -> dict[str, dict[str, int]]:
        """The sizes the model is imported at: "max" (the capacity), "min", "opt" (where the optimizer decides)."""
        return {"max": {s: r.hi for s, r in self.symbols.items()}, "min": {s: r.lo for s, r in self.symbols.items()},
                "opt": {s: r.opt for s, r in self.symbols.items()}}


class _Symbols:
    """Symbol -> (lo, hi) as the flags give them, and where each came from (for the two-ranges error)."""

    def __init__(self):
        self.values: dict[str, tuple[int, int]] = {}
        self.where: dict[str, str] = {}

    def set(self, name: str, lo: int, hi: int, where: str) -> None:
        if name in self.values and self.values[name] != (lo, hi):
            old = self.values[name]
            raise InputError(f"{where} gives {name!r} {_text(lo, hi)}, but {self.where[name]} gives it {_text(*old)}: "
                             "a symbol takes one size or range: give it once")
        self.values.setdefault(name, (lo, hi))
        self.where.setdefault(name, where)


def _text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}..{hi}"


def _given_text(given: Given) -> str:
    return "x".join(_text(*d) if isinstance(d, tuple) else str(d) for d in given)


def _declared_symbols(inputs: Mapping[str, onnx.ValueInfoProto]) -> list[str]:
    return list(dict.fromkeys(d.symbol for vi in inputs.values() for d in declared(vi) or () if d.symbol))


def _given_dims(name: str, given: Given, decl: tuple[Dim, ...], symbols: _Symbols, fresh: dict) -> None:
    """One input's --input-shape against its declared dims: each range or size goes to its symbol."""
    flag = f"--input-shape {name}={_given_text(given)}"
    if len(given) != len(decl):
        raise InputError(f"{flag} has {len(given)} dims but the model declares {name} as {shape_text(decl)}: give one size "
                         "or range per dim")
    for i, (d, g) in enumerate(zip(decl, given)):
        lo, hi = g if isinstance(g, tuple) else (g, g)
        if d.size is not None and (lo, hi) != (d.size, d.size):
            what = f"a range {lo}..{hi}" if lo != hi else f"size {lo}"
            raise InputError(f"{flag} gives dim {i} of input {name!r} {what}, but the model fixes it at {d.size} "
                             f"(shape {shape_text(decl)}): give that dim {d.size}")
        if d.symbol is not None:
            symbols.set(d.symbol, lo, hi, flag)
        elif d.size is None:
            fresh[(name, i)] = f"{name}_{i}"
            symbols.set(fresh[(name, i)], lo, hi, flag)


def _opt_sizes(ranges: ShapeRanges, shapes: Mapping[str, tuple[SymDim, ...]], bounds: Mapping[str, tuple[int, int]]) -> dict:
    opt = {s: spec.opt for s, spec in ranges.dims.items() if spec.opt is not None}
    for name, given in ranges.opt_shapes.items():
        if name not in shapes:
            raise InputError(f"--opt-shape names {name!r}, which is not an input of the model; inputs: {', '.join(shapes)}")
        dims = shapes[name]
        if len(given) != len(dims):
            raise InputError(f"--opt-shape {name}={dims_text(given)} has {len(given)} dims, the input has {len(dims)}: "
                             "give one size per dim")
        for i, (d, v) in enumerate(zip(dims, given)):
            sym = d.args[0] if not isinstance(d, int) else None
            if sym is None:
                if v != d:
                    raise InputError(f"--opt-shape {name}={dims_text(given)} gives dim {i} size {v}, but it is fixed at "
                                     f"{d}: give {d}")
                continue
            lo, hi = bounds[sym]
            if not lo <= v <= hi:
                raise InputError(f"--opt-shape {name}={dims_text(given)} gives dim {i} ({sym}) size {v}, outside its "
                                 f"range {lo}..{hi}: pick a size inside")
            if opt.setdefault(sym, v) != v:
                raise InputError(f"--opt-shape {name}={dims_text(given)} gives {sym!r} the optimization size {v}, but it "
                                 f"already has {opt[sym]}: give one")
    return opt


def resolve_ranges(model: onnx.ModelProto, static: Mapping[str, tuple[int, ...]], ranges: ShapeRanges,
                   skip=()) -> Resolved:
    """Every tensor input's dims under the static --input-shape entries and `ranges` (one-line InputErrors: unknown
    input or symbol, lo > hi, a range on a dim the model fixes, a symbol given two ranges, a dim left open)."""
    inputs = tensor_inputs(model, skip)
    known = _declared_symbols(inputs)
    for name in ranges.inputs:
        if name not in inputs:
            raise InputError(f"--input-shape names {name!r}, which is not an input of the model; inputs: {', '.join(inputs)}")
    symbols, fresh = _Symbols(), {}
    for name, spec in ranges.dims.items():
        if name not in known:
            raise InputError(f"--dim {name}=... names no dim of the model's inputs; the named dims are: "
                             f"{', '.join(known) or 'none (use --input-shape NAME=1x16..1024 for an unnamed dim)'}")
        symbols.set(name, spec.lo, spec.hi, f"--dim {name}={_text(spec.lo, spec.hi)}")
    for name, shape in ((k, v) for k, v in static.items() if k in inputs):  # the importer checks the others
        _given_dims(name, tuple(shape), declared(inputs[name]) or tuple(Dim() for _ in shape), symbols, fresh)
    for name, given in ranges.inputs.items():
        _given_dims(name, given, declared(inputs[name]) or tuple(Dim() for _ in given), symbols, fresh)
    shapes: dict[str, tuple[SymDim, ...]] = {}
    for name, vi in inputs.items():
        decl = declared(vi)
        if decl is None:
            raise InputError(f"input {name!r} declares no shape: pass --input-shape {name}=DIMS")
        dims = []
        for i, d in enumerate(decl):
            sym = d.symbol if d.symbol is not None else fresh.get((name, i))
            if d.size is not None:
                dims.append(d.size)
            elif sym is None or sym not in symbols.values:
                hint = f"--dim {d.symbol}=LO..HI" if d.symbol else f"--input-shape {name}=..."
                raise InputError(f"input {name!r} has shape {shape_text(decl)}: dim {i} has no size or range: pass {hint}")
            else:
                lo, hi = symbols.values[sym]
                dims.append(lo if lo == hi else Sym(sym))
        shapes[name] = tuple(dims)
    bounds = {s: v for s, v in symbols.values.items() if v[0] < v[1]}
    opt = _opt_sizes(ranges, shapes, bounds)
    order = list(dict.fromkeys(d.args[0] for dims in shapes.values() for d in dims if not isinstance(d, int)))
    return Resolved(shapes, {s: SymRange(s, bounds[s][0], bounds[s][1], opt.get(s, bounds[s][1])) for s in order})
