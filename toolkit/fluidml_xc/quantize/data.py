"""Calibration and evaluation samples: a directory of .npz feeds (one per sample, keys = input names)
or one .npz whose arrays carry a leading sample axis; checked against the model's inputs."""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from ..errors import InputError


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...]
    """None for a dynamic dimension (dim_param or unset)."""


@dataclass
class Samples:
    """Feeds, one dict per sample, every sample with the same shapes; `source` names where they came from."""

    feeds: list[dict[str, np.ndarray]]
    source: str

    def __len__(self) -> int:
        return len(self.feeds)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(value.shape) for name, value in self.feeds[0].items()}


def model_inputs(model: onnx.ModelProto) -> list[InputSpec]:
    """The graph inputs that are not initializers, with element type and (possibly dynamic) dims."""
    inits = {init.name for init in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise InputError(f"input {vi.name!r} is not a tensor; quantize takes models whose inputs are tensors")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim)
        specs.append(InputSpec(vi.name, dtype, dims))
    return specs


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise InputError(f"{path}: expected an .npz archive keyed by input name (np.savez(path, **feeds))")
            return {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # EOFError: an empty file
        raise InputError(f"{path}: not a valid .npz file ({exc})") from None


def _drop_bound(arrays: dict[str, np.ndarray], bound: dict[str, np.ndarray], where: str, stacked: bool = False) -> dict:
    """The arrays without the inputs frozen by --bind, which a sample may carry if it holds the bound value."""
    for name, value in bound.items():
        if name not in arrays:
            continue
        given = np.asarray(arrays[name])
        rows = list(given) if stacked and given.ndim == value.ndim + 1 else [given]
        for row in rows:
            if row.shape != value.shape or not np.array_equal(row, value):
                shown = row.ravel()[0].item() if row.size == 1 else f"an array of shape {'x'.join(map(str, row.shape))}"
                raise InputError(f"{where}: input {name!r} is {shown} but --bind {name} freezes it to "
                                 f"{value.ravel()[0].item() if value.size == 1 else 'another value'}: "
                                 "drop it from the samples or bind the value they hold")
    return {k: v for k, v in arrays.items() if k not in bound}


def _check_names(arrays: dict, specs: list[InputSpec], where: str) -> None:
    expected = [s.name for s in specs]
    unknown = [n for n in arrays if n not in expected]
    missing = [n for n in expected if n not in arrays]
    if unknown or missing:
        problems = ([f"unknown {', '.join(map(repr, unknown))}"] if unknown else []) + \
                   ([f"missing {', '.join(map(repr, missing))}"] if missing else [])
        raise InputError(f"{where}: keys do not match the model's inputs ({'; '.join(problems)}); "
                         f"save one array per input named {', '.join(map(repr, expected))}")


def _check_sample(feed: dict[str, np.ndarray], specs: list[InputSpec], where: str) -> dict[str, np.ndarray]:
    _check_names(feed, specs, where)
    out = {}
    for spec in specs:
        value = feed[spec.name]
        if value.dtype != spec.dtype:
            raise InputError(f"{where}: input {spec.name!r} has dtype {value.dtype}, the model takes {spec.dtype}; "
                             f"save it as {spec.dtype} (arr.astype(np.{spec.dtype.name}))")
        wanted = "x".join("?" if d is None else str(d) for d in spec.dims)
        if value.ndim != len(spec.dims) or any(d is not None and d != s for d, s in zip(spec.dims, value.shape)):
            raise InputError(f"{where}: input {spec.name!r} has shape {'x'.join(map(str, value.shape)) or 'scalar'}, "
                             f"the model takes {wanted or 'scalar'}")
        out[spec.name] = np.asarray(value, order="C")  # not ascontiguousarray: it makes a scalar 1-d
    return out


def load_samples(source: str | Path, model: onnx.ModelProto, what: str = "--calibration",
                 bound: dict[str, np.ndarray] | None = None) -> Samples:
    """Samples from a directory of .npz files (sorted by name) or one .npz with a leading sample axis
    (arrays of rank = input rank + 1; arrays of the input's own rank are one sample). `model` has the
    inputs in `bound` (--bind) frozen already; a sample may still carry them, holding the bound value."""
    path = Path(source)
    specs = model_inputs(model)
    bound = bound or {}
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".npz" and p.is_file())
        if not files:
            raise InputError(f"{what} {str(path)!r} holds no .npz files; save one np.savez(file, **feeds) per sample there")
        feeds = [_check_sample(_drop_bound(_read_npz(f), bound, str(f)), specs, str(f)) for f in files]
    elif path.exists():
        arrays = _drop_bound(_read_npz(path), bound, str(path), stacked=True)
        _check_names(arrays, specs, str(path))
        stacked = {s.name: arrays[s.name].ndim == len(s.dims) + 1 for s in specs}
        if all(stacked.values()):
            counts = {arrays[n].shape[0] for n in stacked}
            if len(counts) != 1:
                raise InputError(f"{path}: the arrays have different sample counts (leading axis) {sorted(counts)}; "
                                 "stack the same number of samples for every input")
            n = counts.pop()
            if n == 0:
                raise InputError(f"{path}: the leading sample axis is empty; save at least one sample")
            feeds = [_check_sample({k: arrays[k][i] for k in stacked}, specs, f"{path} sample {i}") for i in range(n)]
        elif not any(stacked.values()):
            feeds = [_check_sample(arrays, specs, str(path))]
        else:
            raise InputError(f"{path}: some arrays have a leading sample axis and some do not; "
                             "stack every input along a new first axis (np.stack) or save one sample per file")
    else:
        raise InputError(f"{what} {str(path)!r}: no such file or directory")
    first = {n: v.shape for n, v in feeds[0].items()}
    for k, feed in enumerate(feeds[1:], 1):
        for name, value in feed.items():
            if value.shape != first[name]:
                raise InputError(f"{what} sample {k}: input {name!r} has shape {value.shape}, sample 0 has {first[name]}; "
                                 "every sample needs the same shapes (the build is for static shapes)")
    return Samples(feeds, str(path))


def split_samples(samples: Samples, eval_samples: Samples | None) -> tuple[Samples, Samples, str]:
    """(calibration, evaluation, how): with --eval given, all samples calibrate; otherwise a quarter
    (at least one) is held out when there are 8 or more, else every sample does both."""
    if eval_samples is not None:
        return samples, eval_samples, f"held-out samples from {eval_samples.source}"
    n = len(samples)
    if n >= 8:
        held = max(1, n // 4)
        return (Samples(samples.feeds[:n - held], samples.source), Samples(samples.feeds[n - held:], samples.source),
                f"the last {held} of {n} samples, held out from calibration")
    return samples, samples, f"all {n} calibration samples (fewer than 8: none held out)"
