"""What `build` leaves behind and later commands find: the manifest (manifest.json, read and written only here),
the artifact directory's file digests and build/.last."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError
from .timings import BuildTimings

LAST_BUILD = Path("build") / ".last"
"""The most recent build's artifact directory (one line), read when a command is given no DIR."""

MANIFEST = "manifest.json"
FORMAT = 1


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_files(paths: list[Path]) -> dict[str, str]:
    """Each file's sha256 by name, on one thread per core (hashlib lets go of the GIL): a build's four programs and
    libraries are each about its weights' size."""
    with ThreadPoolExecutor(max(1, min(len(paths), os.cpu_count() or 1))) as pool:
        return dict(zip([p.name for p in paths], pool.map(sha256_file, paths)))


class ManifestError(InputError):
    """manifest.json is missing, unreadable or has a missing/bad field (exit code: InputError's)."""

    def __init__(self, path: Path, reason: str, fix: str = "rebuild the artifact"):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path} {reason}: {fix}")


@dataclass(frozen=True)
class TensorEntry:
    """A model input or output; an output whose shape depends on the data has `shape` = its upper bound and
    `dynamic_dims` = the dims known only at run time (the runner writes .npy files with the actual shape)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    dynamic_dims: tuple[int, ...] = ()
    dims: tuple[int | str, ...] = ()
    """A dynamic model's tensor whose dims vary with the run's input dims: per dim its size, or its symbolic
    expression (an input's: the symbol's name); `shape` is then the capacity. Empty: static."""

    def to_json(self) -> dict:
        entry = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.dynamic_dims:
            entry["dynamic_dims"] = list(self.dynamic_dims)
        return {**entry, "dims": list(self.dims)} if self.dims else entry

    @property
    def symbolic(self) -> tuple[str, tuple[int | str, ...]]:
        """(name, dims) for symbolic.bind_inputs: the entry's dims, or its static shape."""
        return self.name, tuple(self.dims or self.shape)


@dataclass(frozen=True)
class ModelRecord:
    """The model built: `path` relative to the artifact directory (older manifests: absolute), name, sha256."""

    path: str | None = None
    name: str | None = None
    sha256: str | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


_OPTIONAL_KEYS = ("declared_shapes", "structures", "bound", "cpu_variants", "cpu_needs", "timings", "symbols", "precision")
"""Written only when not empty."""


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """An artifact's manifest.json. Fields are in file order; defaults stand for keys older builds did not write."""

    format: int = FORMAT
    model: ModelRecord = ModelRecord()
    board: str | None = None
    target: str | None = None
    triple: str = ""
    cpu: str = ""
    features: str = ""
    cpu_variants: tuple[str, ...] = ()
    """CPUs model.o holds code for, widest first, chosen at init (`cpu` is the lowest); empty: one, `cpu`."""
    cpu_needs: tuple[str, ...] = ()
    """The CPU extensions (target/cpus.py names) the lowest code uses: the runner refuses a CPU without them, deploy
    a board whose /proc/cpuinfo lacks them."""
    emulator: str = ""
    """The emulator the runner needs off its target ("" runs natively)."""
    opt: str = "fluid"
    precision: Mapping = field(default_factory=dict)
    """build --precision fp16: {"mode": "fp16", "weights"/"activations": {dtype: bytes}} (build._precision_entry);
    empty (not written) for fp32."""
    tools: Mapping[str, str] = field(default_factory=dict)
    inputs: tuple[TensorEntry, ...]
    outputs: tuple[TensorEntry, ...]
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    declared_shapes: Mapping[str, tuple[int | str | None, ...]] = field(default_factory=dict)
    """Per input, the shape the model declares: sizes, symbols (dim_param) and null for open unnamed dims
    (frontend/input_shapes.declared_shapes)."""
    structures: Mapping = field(default_factory=dict)
    """Sequence/optional inputs and outputs -> ABI descriptor (frontend/sequences.py)."""
    bound: Mapping[str, Mapping] = field(default_factory=dict)
    """--bind values (frontend/binding.manifest_entry)."""
    symbols: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """A dynamic model's symbols: name -> {"min", "max", "opt"}, in the order of the run-time values (empty: static)."""
    op_counts: Mapping[str, int] = field(default_factory=dict)
    ops: tuple[Mapping, ...] = ()
    """Per kernel in execution order: name, type and `fused`."""
    memory: Mapping | None = None
    """The plan's facts, alignment, per-buffer map, dynamic tail bytes (build.compile_graph)."""
    weights_bytes: int = 0
    threads: int = 1
    """The threads the runner starts by default and at most."""
    parallel_ops: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    c_api: Mapping | None = None
    optimizer: Mapping = field(default_factory=dict)
    footprint: Mapping[str, int] = field(default_factory=dict)
    files: Mapping[str, str] | None = None
    """File name -> sha256 of every file but manifest.json (None: not recorded, not provably ours)."""
    timings: BuildTimings | None = None
    """Seconds per build stage up to this manifest's writing (timings.py; None: built before they were recorded)."""

    def to_json(self) -> str:
        """manifest.json's text."""
        data = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _OPTIONAL_KEYS and not value:
                continue
            if isinstance(value, (ModelRecord, TensorEntry, BuildTimings)):
                value = value.to_json()
            elif f.name in ("inputs", "outputs"):
                value = [entry.to_json() for entry in value]
            data[f.name] = value
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_file(cls, path: Path) -> Manifest:
        """Read and check PATH (a manifest.json); ManifestError naming the file and the missing or bad field."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ManifestError(path.parent, f"is not a fluidml-xc artifact (no {MANIFEST})",
                                "pass the directory `fluidml-xc build` wrote, or run `fluidml-xc build` first") from None
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise ManifestError(path, f"cannot be read ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise ManifestError(path, "is not a JSON object")
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise ManifestError(path, f"has no field {f.name!r}")
                continue
            try:
                values[f.name] = _READERS[f.name](data[f.name])
            except (TypeError, ValueError, KeyError, AttributeError):
                raise ManifestError(path, f"has a malformed field {f.name!r} ({_preview(data[f.name])})") from None
        return cls(**values)

    def ranges(self) -> dict:
        """symbolic.SymRange per symbol."""
        from .symbolic import SymRange

        return {k: SymRange(k, v["min"], v["max"], v["opt"]) for k, v in self.symbols.items()}

    def bind_feeds(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
        """The symbols' values for feeds of these shapes (symbolic.bind_inputs: InputError when out of range)."""
        from .symbolic import bind_inputs

        return bind_inputs([t.symbolic for t in self.inputs], self.ranges(), shapes)

    def model_path(self, artifact_dir: Path) -> Path | None:
        """The model the artifact was built from (its recorded path resolved against ARTIFACT_DIR); None when
        not recorded."""
        if not self.model.path:
            return None
        path = Path(self.model.path)
        return path if path.is_absolute() else Path(os.path.normpath(Path(artifact_dir).resolve() / path))


def read_manifest(artifact_dir: Path) -> Manifest:
    """ARTIFACT_DIR/manifest.json (ManifestError when it is not a readable artifact)."""
    return Manifest.from_file(Path(artifact_dir) / MANIFEST)


def _preview(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _str(value) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _opt_str(value) -> str | None:
    return None if value is None else _str(value)


def _int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    return value


def _dims(value) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise TypeError(value)
    return tuple(_int(d) for d in value)


def _object(value) -> dict:
    if not isinstance(value, dict):
        raise TypeError(value)
    return value


def _opt_object(value) -> dict | None:
    return None if value is None else _object(value)


def _tensors(value) -> tuple[TensorEntry, ...]:
    if not isinstance(value, list):
        raise TypeError(value)
    return tuple(TensorEntry(_str(e["name"]), _dims(e["shape"]), _str(e["dtype"]), _dims(e.get("dynamic_dims", [])),
                             _sym_dims(e.get("dims", []))) for e in value)


def _sym_dims(value) -> tuple[int | str, ...]:
    if not isinstance(value, list):
        raise TypeError(value)
    return tuple(v if isinstance(v, str) else _int(v) for v in value)


def _symbols(value) -> dict[str, dict[str, int]]:
    return {_str(k): {key: _int(_object(v)[key]) for key in ("min", "max", "opt")} for k, v in _object(value).items()}


def _strings(value) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError(value)
    return tuple(_str(v) for v in value)


def _model(value) -> ModelRecord:
    value = _object(value)
    return ModelRecord(_opt_str(value.get("path")), _opt_str(value.get("name")), _opt_str(value.get("sha256")))


def _ops(value) -> tuple[dict, ...]:
    if not isinstance(value, list):
        raise TypeError(value)
    return tuple(_object(op) for op in value)


def _dims_by_name(value) -> dict[str, tuple[int, ...]]:
    return {_str(k): _dims(v) for k, v in _object(value).items()}


def _declared_dim(value) -> int | str | None:
    return value if value is None or isinstance(value, str) else _int(value)


def _declared_by_name(value) -> dict[str, tuple[int | str | None, ...]]:
    def dims(v) -> tuple:
        if not isinstance(v, list):
            raise TypeError(v)
        return tuple(_declared_dim(d) for d in v)
    return {_str(k): dims(v) for k, v in _object(value).items()}


_READERS: dict[str, Callable] = {
    "format": _int, "model": _model, "board": _opt_str, "target": _opt_str, "triple": _str, "cpu": _str,
    "features": _str, "cpu_variants": _strings, "cpu_needs": _strings, "emulator": lambda v: "" if v is None else _str(v), "opt": _str, "precision": _object, "tools": _object,
    "inputs": _tensors, "outputs": _tensors, "input_shapes": _dims_by_name, "declared_shapes": _declared_by_name,
    "structures": _object, "bound": _object, "symbols": _symbols,
    "op_counts": _object, "ops": _ops, "memory": _opt_object, "weights_bytes": _int, "threads": _int,
    "parallel_ops": _dims_by_name, "c_api": _opt_object, "optimizer": _object, "footprint": _object,
    "files": _opt_object, "timings": lambda v: None if v is None else BuildTimings.from_json(_object(v)),
}
"""Per Manifest field: JSON value -> field value (TypeError/ValueError/KeyError when malformed)."""
