"""`--bind NAME=VALUE`: graph inputs frozen to build-time constants.

A deployment that never changes an input (a sample rate, a sequence length, a mode flag) binds it:
the value becomes an initializer (pipeline.bind_inputs), so it folds like any constant, shapes that
depend on it become static, an `If` on it keeps one branch, and the input leaves the C API. VALUE is
a scalar or a comma list typed by the input's dtype (`sr=16000`, `shape=1,-1,64`, `flag=true`),
filling the input's declared shape, or the path of an .npy file (`mask=mask.npy`) whose dtype and
shape must match the input's. The manifest's `bound` records each value: inline up to INLINE_MAX
elements, else its sha256 (of the C-order bytes) and the file it came from; `verify` feeds these to
ONNX Runtime.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from ..errors import InputError
from ..npyio import load_npy

INLINE_MAX = 64
"""Bound values with at most this many elements are written into the manifest."""

HELP = ("freeze an input to a build-time constant: a scalar or comma list typed by the input's dtype, or NAME=FILE.npy; "
        "it leaves the C API (repeatable)")
"""The --bind help of every command that takes it."""

_TRUE, _FALSE = {"1", "true", "True"}, {"0", "false", "False"}


def parse_bind(text: str) -> tuple[str, str]:
    """`NAME=VALUE` -> (NAME, VALUE); the name may itself contain '=' (the value cannot)."""
    name, sep, value = text.rpartition("=")
    if not sep or not name or not value:
        raise InputError(f"bad --bind {text!r}: write NAME=VALUE (a scalar, a comma list such as 1,3,224) or NAME=FILE.npy")
    return name, value


def parse_binds(texts: list[str]) -> dict[str, str]:
    """Every --bind, each input at most once."""
    bind: dict[str, str] = {}
    for text in texts:
        name, value = parse_bind(text)
        if name in bind:
            raise InputError(f"--bind {name} is given twice: pass each input once")
        bind[name] = value
    return bind


def _runtime_inputs(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return {vi.name: vi for vi in model.graph.input if vi.name not in inits}


def _declared(vi: onnx.ValueInfoProto) -> tuple[np.dtype, list[int | None] | None]:
    tt = vi.type.tensor_type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    if not tt.HasField("shape"):
        return dtype, None
    return dtype, [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim]


def _shape_text(dims) -> str:
    return "x".join("?" if d is None else str(d) for d in dims) or "scalar"


def _parse_scalar(name: str, item: str, dtype: np.dtype):
    item = item.strip()
    try:
        if dtype.kind == "b":
            if item in _TRUE:
                return True
            if item in _FALSE:
                return False
            raise ValueError
        if dtype.kind in "iu":
            value = int(item, 0)
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise InputError(f"--bind {name}: {item} is out of range for the input's dtype {dtype.name} "
                                 f"({info.min}..{info.max})")
            return value
        if dtype.kind in "fc":
            return float(item)
    except ValueError:
        pass
    raise InputError(f"--bind {name}: {item!r} is not a value of the input's dtype {dtype.name}: write e.g. "
                     f"{name}={'true' if dtype.kind == 'b' else '16000' if dtype.kind in 'iu' else '0.5'}")


def _fill(name: str, flat: np.ndarray, dims: list[int | None] | None) -> np.ndarray:
    """A scalar or list of values shaped to the input's declared shape (one open dimension is derived)."""
    if dims is None:
        return flat.reshape(()) if flat.size == 1 else flat
    if not dims:
        if flat.size != 1:
            raise InputError(f"--bind {name}: the input is a scalar but {flat.size} values are given: pass one value")
        return flat.reshape(())
    known = int(np.prod([d for d in dims if d is not None], dtype=np.int64))
    open_dims = [i for i, d in enumerate(dims) if d is None]
    if not open_dims:
        if flat.size != known:
            raise InputError(f"--bind {name}: the input's shape is {_shape_text(dims)} ({known} values) but {flat.size} "
                             f"are given: pass {known} comma-separated values or an .npy file")
        return flat.reshape(dims)
    if len(open_dims) > 1 or known == 0 or flat.size % known:
        raise InputError(f"--bind {name}: {flat.size} values cannot fill the input's shape {_shape_text(dims)}: "
                         "pass an .npy file with the shape you want")
    shape = [flat.size // known if d is None else d for d in dims]
    return flat.reshape(shape)


def _check_file_value(name: str, path: str, value: np.ndarray, dtype: np.dtype, dims) -> np.ndarray:
    if value.dtype != dtype:
        raise InputError(f"--bind {name}={path}: the file holds {value.dtype.name} values but the input's dtype is "
                         f"{dtype.name}: save it as {dtype.name}")
    if dims is not None and (value.ndim != len(dims) or any(d is not None and d != s for d, s in zip(dims, value.shape))):
        raise InputError(f"--bind {name}={path}: the file's shape is {_shape_text(value.shape)} but the input's is "
                         f"{_shape_text(dims)}: save an array of the input's shape")
    return value


def resolve(model: onnx.ModelProto, bind: Mapping[str, object], base: Path | None = None) -> dict[str, np.ndarray]:
    """Bound values typed and shaped by the model's inputs: NAME -> a text value (scalar, comma list
    or .npy path) or an array. One-line InputErrors for an unknown name, a wrong dtype or shape, a missing file."""
    inputs = _runtime_inputs(model)
    values = {}
    for name, given in bind.items():
        if name not in inputs:
            raise InputError(f"--bind names {name!r}, which is not an input of the model; inputs: "
                             f"{', '.join(inputs) or '(none)'}")
        vi = inputs[name]
        if not vi.type.HasField("tensor_type"):
            raise InputError(f"--bind {name}: the input is not a tensor (sequence/optional inputs cannot be bound)")
        dtype, dims = _declared(vi)
        if isinstance(given, np.ndarray) or not isinstance(given, str):
            value = np.asarray(given)
            values[name] = _check_file_value(name, "(array)", value, dtype, dims)
            continue
        if given.endswith(".npy") or os.sep in given:
            path = Path(given) if base is None or Path(given).is_absolute() else base / given
            if not path.is_file():
                raise InputError(f"--bind {name}={given}: no such file: pass the path of an .npy file")
            values[name] = _check_file_value(name, given, load_npy(path), dtype, dims)
            continue
        if dtype.kind not in "biufc":
            raise InputError(f"--bind {name}: the input's dtype {dtype.name} cannot be written as text: pass an .npy file")
        flat = np.array([_parse_scalar(name, item, dtype) for item in given.split(",")], dtype=dtype)
        values[name] = _fill(name, flat, dims)
    return values


def manifest_entry(values: Mapping[str, np.ndarray], sources: Mapping[str, object], target: Path) -> dict:
    """The manifest's `bound`: per name its dtype, shape, and the value (small) or its sha256 and file."""
    entries = {}
    for name, value in values.items():
        value = np.asarray(value)  # not ascontiguousarray: it makes a scalar 1-d
        entry = {"dtype": value.dtype.name, "shape": list(value.shape)}
        if value.size <= INLINE_MAX:
            entry["value"] = value.ravel().tolist()
        else:
            entry["sha256"] = hashlib.sha256(value.tobytes()).hexdigest()
            source = sources.get(name)
            if isinstance(source, str):
                entry["file"] = os.path.relpath(Path(source).resolve(), target.resolve())
        entries[name] = entry
    return entries


def recorded_values(bound: Mapping[str, Mapping], artifact: Path) -> dict[str, np.ndarray]:
    """The bound values of an artifact from its manifest's `bound` (to feed a reference run of the original model)."""
    values = {}
    for name, entry in bound.items():
        dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
        if "value" in entry:
            values[name] = np.array(entry["value"], dtype=dtype).reshape(shape)
            continue
        path = Path(artifact) / entry["file"] if entry.get("file") else None
        if path is None or not path.is_file():
            raise InputError(f"input {name!r} was bound at build time to an .npy file that is not here "
                             f"({entry.get('file') or 'not recorded'}): rebuild, or put the file back")
        value = np.ascontiguousarray(load_npy(path))
        if value.dtype != dtype or value.shape != shape or hashlib.sha256(value.tobytes()).hexdigest() != entry["sha256"]:
            raise InputError(f"{path} changed since the artifact was built (its value for the bound input {name!r} "
                             "differs): rebuild with the file you mean")
        values[name] = value
    return values
