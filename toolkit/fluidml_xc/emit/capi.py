"""Render the per-model C sources (model.h, model_glue.c, or NAME.h, NAME_glue.c) from templates/."""
from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import jinja2
import numpy as np

from ..dtypes import STORAGE_ONLY
from ..errors import InputError
from ..resources import data_dir, package_digest
from ..target.cpus import cache_root

# numpy dtype name -> ONNX TensorProto data type code (the runtime's dtype enum).
DTYPE_CODES: dict[str, int] = {
    "float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7,
    "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13,
    # storage-only dtypes (kernels/lowp.py): bfloat16 is 16 bits, the others one byte per element
    "bfloat16": 16, "float8_e4m3fn": 17, "float8_e4m3fnuz": 18, "float8_e5m2": 19, "float8_e5m2fnuz": 20,
    "uint4": 21, "int4": 22, "float4_e2m1fn": 23, "float8_e8m0fnu": 24, "uint2": 25, "int2": 26,
    "string": 8,  # const char * per element at the C API, slots inside the model (docs/STRINGS.md)
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    dims_offset: int = -1
    """Outputs whose shape depends on the data or on the run's input dims: `shape` is the upper bound (the
    capacity) and the run writes the actual dims (int64[rank]) at this byte offset of the arena
    (fxc_output_shape); -1 for a static shape."""
    dim_symbols: tuple[int, ...] = ()
    """Inputs of a dynamic model: per dim the index of its symbol in ModelSpec.symbols, -1 for a fixed dim
    (empty: every dim fixed)."""
    label: str = ""
    """A varying output's dims as model.h shows them ("[1, seq, 128]"; empty: its shape)."""
    slot_bytes: int = 0
    """A string tensor's slot size (strings.py: 8 length bytes, then the string's bytes and a NUL), else 0."""
    stage_offset: int = -1
    """A string tensor's slots in the arena, past everything the model uses, where the glue copies an input's
    strings in or leaves an output's for the caller's pointers (-1: not a string)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.dtype not in DTYPE_CODES:
            raise InputError(f"tensor {self.name!r} has dtype {self.dtype}, which the runtime does not support "
                             f"(supported: {', '.join(DTYPE_CODES)})")
        if any(d < 0 for d in self.shape):
            raise InputError(f"tensor {self.name!r} has a dynamic or negative dimension {self.shape}")

    @property
    def nbytes(self) -> int:
        """Bytes of the caller's buffer (a string tensor's: 8 per element, a 64-bit pointer each; C_nbytes in C)."""
        if self.dtype == "string":
            return math.prod(self.shape) * 8
        return math.prod(self.shape) * np.dtype(STORAGE_ONLY.get(self.dtype, self.dtype)).itemsize

    @property
    def c_nbytes(self) -> str:
        """nbytes as a C expression (a string tensor's: one const char * per element)."""
        if self.dtype == "string":
            return f"(size_t){math.prod(self.shape)}u * sizeof(const char *)"
        return f"(size_t){self.nbytes}u"

    @property
    def count(self) -> int:
        return math.prod(self.shape)


RUNTIME_PREFIX = "fxc"
"""The shared runtime's own prefix (runtime_c/: fxc_pool_*, fxc_npy_*, FXC_MAX_THREADS, ...)."""
RUNTIME_LIBRARY = "libfxc_runtime.a"
MAX_NAME_LENGTH = 64
C_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    alignas alignof bool constexpr false nullptr static_assert thread_local true typeof typeof_unqual
""".split())
"""C99 to C23 keywords (the underscore-capital ones, _Bool, _Atomic, ..., are refused as reserved)."""


def check_c_name(name: str) -> str:
    """`name` if it can prefix a C API (`NAME_init`, `NAME_ARENA_BYTES`), else an InputError naming the rule."""
    fix = "pick a name like detector or kws_v2"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise InputError(f"--name {name!r} is not a C identifier (letters, digits and '_', not starting with a digit): {fix}")
    if name in C_KEYWORDS:
        raise InputError(f"--name {name!r} is a C keyword: {fix}")
    if name.startswith("_") or name.endswith("_") or "__" in name:
        raise InputError(f"--name {name!r} would make reserved identifiers (a leading '_', or '__' in NAME_init): {fix}")
    if name.lower() == RUNTIME_PREFIX or name.lower().startswith(RUNTIME_PREFIX + "_"):
        raise InputError(f"--name {name!r} collides with the shared runtime's own {RUNTIME_PREFIX}_ / "
                         f"{RUNTIME_PREFIX.upper()}_ names: {fix}")
    if len(name) > MAX_NAME_LENGTH:
        raise InputError(f"--name is {len(name)} characters long, more than {MAX_NAME_LENGTH}: choose a shorter name")
    return name


@dataclass(frozen=True)
class CApi:
    """The names of one artifact's C API: `name` None is the default (model.h, fxc_*, FXC_*, libmodel.a with the
    runtime inside); a name prefixes every function, type and macro and ships the runtime as libfxc_runtime.a."""

    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None:
            check_c_name(self.name)

    @property
    def prefix(self) -> str:
        return (self.name or RUNTIME_PREFIX) + "_"

    @property
    def macro_prefix(self) -> str:
        return self.prefix.upper()

    @property
    def stem(self) -> str:
        """Base name of the header, glue source and model object."""
        return self.name or "model"

    @property
    def header(self) -> str:
        return f"{self.stem}.h"

    @property
    def glue(self) -> str:
        return f"{self.stem}_glue.c"

    @property
    def object(self) -> str:
        return f"{self.stem}.o"

    @property
    def library(self) -> str:
        return f"lib{self.stem}.a"

    @property
    def runtime_library(self) -> str | None:
        """The runtime's own archive beside a named library (None: it is inside libmodel.a)."""
        return RUNTIME_LIBRARY if self.name else None

    def manifest(self) -> dict:
        return {"name": self.name, "prefix": self.prefix, "macro_prefix": self.macro_prefix, "header": self.header,
                "library": self.library, "runtime_library": self.runtime_library}


@dataclass(frozen=True)
class CodeVariant:
    """One compilation of the model in model.o: entries `<prefix>model_run<suffix>` for `cpu`, which uses `needs`
    (target/cpus.CpuFeature: what the glue checks with cpuid / getauxval before choosing it)."""

    cpu: str = ""
    suffix: str = ""
    needs: tuple = ()


DEFAULT_CPU_HINT = "build the model for this board (`fluidml-xc boards detect --host BOARD` names it)"


@dataclass(frozen=True)
class SymbolSpec:
    """A symbol a dynamic model's input dims give at run time: its declared range and the size optimized for."""

    name: str
    lo: int
    hi: int
    opt: int


@dataclass
class ModelSpec:
    name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    arena_bytes: int
    arena_align: int = 64
    ops: list[tuple[str, str]] = field(default_factory=list)
    threads: int = 1
    """FXC_THREADS: the pool's thread count by default and the most fxc_set_threads accepts."""
    api: CApi = field(default_factory=CApi)
    variants: tuple[CodeVariant, ...] = (CodeVariant(),)
    """Widest first; the glue runs the first whose needs this CPU has and refuses (ERR_CPU) when the last's fail."""
    cpu_hint: str = DEFAULT_CPU_HINT
    """What the refusal tells the user to do."""
    symbols: tuple[SymbolSpec, ...] = ()
    """A dynamic model's symbols (empty: every shape static); model_run then takes their values (int64_t *syms)."""
    status_offset: int = -1
    """The arena offset of the run's status word (frontend/shapes.py TailLayout), -1 when no kernel checks its data."""
    run_errors: tuple[str, ...] = ()
    """Per kernel that may fail the run (TailLayout.checks), the FXC_ERR_RUN message."""
    output_labels: tuple[tuple[int, tuple], ...] = ()
    """(output index, class labels) of each ZipMap output (frontend/zipmap.py): its probabilities [rows, classes],
    column c being labels[c]; model.h declares `<prefix>output<index>_labels` (int64_t, or const char * for text)."""


def _label_tables(spec: ModelSpec) -> list[dict]:
    """model.h's label arrays: index, C element type and literals."""
    tables = []
    for index, labels in spec.output_labels:
        text = any(isinstance(v, str) for v in labels)
        tables.append(dict(index=index, count=len(labels), ctype="const char *const" if text else "const int64_t",
                           values=[c_string(str(v)) if text else f"INT64_C({int(v)})" for v in labels],
                           name=spec.outputs[index].name))
    return tables


def cpu_summary(variants: tuple[CodeVariant, ...]) -> str:
    """model.h's line on the CPUs the code is built for."""
    if len(variants) == 1:
        return f"built for {variants[0].cpu or 'the board'}; it uses {', '.join(f.name for f in variants[0].needs) or 'no extension we check'}."
    return (f"one code variant per CPU level ({', '.join(v.cpu for v in variants)}), the widest this CPU runs chosen "
            f"once at init; the lowest uses {', '.join(f.name for f in variants[-1].needs) or 'no extension we check'}.")


def c_string(text: str) -> str:
    """A C99 string literal for `text` (UTF-8 bytes; quotes, backslashes, '?' and non-printables escaped)."""
    parts = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\?':
            parts.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            parts.append(char)
        else:
            parts.append(f"\\{byte:03o}")
    return '"' + "".join(parts) + '"'


def c_comment(text: str) -> str:
    """`text` quoted for use inside a C block comment."""
    return json.dumps(text).replace("*", "\\u002a").replace("?", "\\u003f")


def comment_text(text: str) -> str:
    """`text` as it is where it cannot end or open a block comment or start a trigraph, else quoted by c_comment."""
    return text if text.isprintable() and not any(s in text for s in ("*/", "/*", "??")) else c_comment(text)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _dims_text(t: TensorSpec, symbols: tuple[SymbolSpec, ...]) -> str:
    """A tensor's dims for model.h (safe inside its block comment): sizes, and symbols with their ranges."""
    if not t.dim_symbols:
        return f"{comment_text(t.label)}, at most {_shape_text(t.shape)}" if t.label else _shape_text(t.shape)
    return "[" + ", ".join(str(d) if s < 0 else f"{comment_text(symbols[s].name)}={symbols[s].lo}..{symbols[s].hi}"
                           for d, s in zip(t.shape, t.dim_symbols)) + "]"


class TemplateCache(jinja2.FileSystemBytecodeCache):
    """The templates' compiled code in cache_root()/templates, so a build's process does not compile them again
    (70 ms): jinja2 checks each file's source and Python's version, the key adds this package's sources (the
    environment's options); a cache that cannot be read or written is skipped."""

    def __init__(self):
        super().__init__(str(cache_root() / "templates"))

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return package_digest() + "-" + super().get_cache_key(name, filename)

    def load_bytecode(self, bucket) -> None:
        with contextlib.suppress(OSError):
            super().load_bytecode(bucket)

    def dump_bytecode(self, bucket) -> None:
        with contextlib.suppress(OSError):
            Path(self.directory).mkdir(parents=True, exist_ok=True)
            super().dump_bytecode(bucket)


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
                             undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True,
                             bytecode_cache=TemplateCache())
    env.filters.update(c_string=c_string, c_comment=c_comment, shape_text=_shape_text,
                       dtype_code=DTYPE_CODES.__getitem__)
    return env


def render_sources(spec: ModelSpec, out_dir: Path) -> list[Path]:
    """Write the header and the glue (model.h and model_glue.c, or NAME.h and NAME_glue.c) into out_dir; returns
    their paths."""
    align = spec.arena_align
    if align <= 0 or align & (align - 1):
        raise InputError(f"arena alignment must be a power of two, got {align}")
    context = dict(name=spec.name, inputs=spec.inputs, outputs=spec.outputs, arena_bytes=int(spec.arena_bytes),
                   arena_align=align, threads=max(1, int(spec.threads)), ops=[(str(n), str(t)) for n, t in spec.ops],
                   dtype_codes=sorted(DTYPE_CODES.items(), key=lambda item: item[1]), api=spec.api,
                   p=spec.api.prefix, P=spec.api.macro_prefix, variants=spec.variants, cpu_hint=spec.cpu_hint,
                   cpu_summary=cpu_summary(spec.variants), symbols=spec.symbols, status_offset=spec.status_offset,
                   run_errors=spec.run_errors, string_inputs=[(i, t) for i, t in enumerate(spec.inputs) if t.slot_bytes],
                   string_outputs=[(i, t) for i, t in enumerate(spec.outputs) if t.slot_bytes],
                   max_string_bytes=max([t.slot_bytes - 9 for t in (*spec.inputs, *spec.outputs)] + [0]),
                   label_tables=_label_tables(spec),
                   dim_symbols=[t.dim_symbols or (-1,) * len(t.shape) for t in spec.inputs],
                   dims_text=[_dims_text(t, spec.symbols) for t in spec.inputs],
                   out_text=[_dims_text(t, spec.symbols) for t in spec.outputs])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for template, filename in (("model.h.j2", spec.api.header), ("model_glue.c.j2", spec.api.glue)):
        path = out_dir / filename
        path.write_text(_environment().get_template(template).render(context), encoding="utf-8")
        written.append(path)
    return written
