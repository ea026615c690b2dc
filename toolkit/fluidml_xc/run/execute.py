"""Run an artifact's runner here (natively or under qemu-user): feeds in, outputs and bench JSON out."""
from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..artifact import Manifest, TensorEntry, read_manifest
from ..target.boards import get_target
from ..dtypes import is_storage_only
from ..strings import as_npy_strings, as_text
from ..errors import InputError, RunCheckFailed, RunError, ToolchainError
from ..emit.link import is_host_target

_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    """By name; an output the model lists more than once is one entry (every slot checked equal)."""
    bench: dict | None
    slots: tuple[np.ndarray, ...] = ()
    """Every output in manifest order, one per slot of the C API."""


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _random_tensor(shape: Sequence[int], dtype: np.dtype, seed: int, index: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        stream = _mix64(np.array([(seed + (index + 1) * _GOLDEN) & _MASK], dtype=np.uint64))[0]
        count = int(np.prod(shape, dtype=np.int64))
        counter = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(_GOLDEN)
        v = _mix64(counter + stream)
    if is_storage_only(dtype):
        values = _lowp_fill(dtype, v)
    elif dtype == np.float16:
        values = ((v >> np.uint64(54)).astype(np.float64) / 512.0 - 1.0).astype(np.float16)
    elif dtype.kind == "f":
        values = ((v >> np.uint64(40)).astype(np.float64) / 8388608.0 - 1.0).astype(dtype)
    elif dtype.kind == "b":
        values = (v >> np.uint64(63)).astype(np.bool_)
    else:
        values = (v % np.uint64(10)).astype(dtype)
    return values.reshape(tuple(shape))


def bits_dtype(dtype) -> np.dtype:
    """The unsigned integer dtype a storage-only dtype's .npy file (runner input/output) is written as."""
    return np.dtype(np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint8)


def _lowp_fill(dtype: np.dtype, v: np.ndarray) -> np.ndarray:
    """The runner's filler for a storage-only dtype (runtime_c/npy.c, LOWP_FILL)."""
    name = dtype.name
    small = (v % np.uint64(10)).astype(np.int64)
    if name == "bfloat16":
        return ((v >> np.uint64(57)).astype(np.float64) / 64.0 - 1.0).astype(np.float32).astype(dtype)
    if name == "float8_e8m0fnu":
        return (2.0 ** (small - 5)).astype(np.float32).astype(dtype)
    if name == "int4":
        return (small - 5).astype(dtype)
    if name == "uint4":
        return small.astype(dtype)
    if name == "int2":
        return (small % 4 - 2).astype(dtype)
    if name == "uint2":
        return (small % 4).astype(dtype)
    return ((small - 5) / 4).astype(np.float32).astype(dtype)


def random_feeds(manifest: Manifest, seed: int = 0, symbols: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Deterministic inputs: floats in [-1, 1), integers in [0, 10), bools; a dynamic model's at the sizes `symbols`
    gives (default: the maximum of each range).

    With seed 0 and no `symbols` these are exactly the values the runner fills in for inputs given no -i file."""
    def shape(spec: TensorEntry) -> tuple[int, ...]:
        if not symbols or not spec.dims:
            return spec.shape
        return tuple(int(symbols[d]) if isinstance(d, str) else d for d in spec.dims)
    def feed(spec: TensorEntry, i: int) -> np.ndarray:
        if spec.dtype == "string":  # the runner's: the integers' digits as text
            return _random_tensor(shape(spec), np.dtype(np.uint8), seed, i).astype(str).astype(object)
        return _random_tensor(shape(spec), np.dtype(spec.dtype), seed, i)
    return {spec.name: feed(spec, i) for i, spec in enumerate(manifest.inputs)}


def _load_array(path: Path) -> np.ndarray:
    from ..npyio import load_npy

    return load_npy(path)


def load_feeds(source: str | Path | Sequence[str]) -> dict[str, np.ndarray]:
    """Feeds from an .npz file (keys = input names) or from a list of "NAME=FILE.npy" strings (npyio: checked headers)."""
    from ..npyio import load_npz

    if isinstance(source, (str, Path)):
        return load_npz(Path(source))
    feeds = {}
    for item in source:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise InputError(f"bad input {item!r}: expected NAME=FILE.npy")
        if name in feeds:
            raise InputError(f"input {name!r} is given twice: pass each --input once")
        feeds[name] = _load_array(Path(file))
    return feeds


def _coerce(spec: TensorEntry, value: np.ndarray, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """`value` as the model's dtype, little-endian, C order; its shape must be `shape` (default: the spec's)."""
    name, shape = spec.name, spec.shape if shape is None else shape
    arr = np.asarray(value)
    if arr.shape != shape:
        raise InputError(f"input {name!r}: shape {arr.shape} does not match the model's {shape}")
    if spec.dtype == "string":
        return as_npy_strings(arr, f"input {name!r}")
    dtype = np.dtype(spec.dtype)
    if is_storage_only(dtype) and arr.dtype.kind == "V" and arr.dtype.names is None and arr.dtype.itemsize == dtype.itemsize:
        arr = arr.view(dtype)  # np.save writes ml_dtypes arrays as raw void items ('<V2'); np.load gives those back
    if arr.dtype != dtype and is_storage_only(dtype):
        floatlike = dtype.name not in ("int4", "uint4", "int2", "uint2")
        if (arr.dtype.kind == "f" or is_storage_only(arr.dtype)) if floatlike else arr.dtype.kind in "iu":
            cast = arr.astype(dtype)
            if floatlike or np.array_equal(cast.astype(np.int64), arr):
                return np.asarray(cast, order="C")  # (ascontiguousarray makes a 0-d array 1-d)
        raise InputError(f"input {name!r}: dtype {arr.dtype} cannot be converted to the model's {dtype}")
    if is_storage_only(dtype):
        return np.asarray(arr, order="C")
    if arr.dtype != dtype:
        same_family = (arr.dtype.kind == "f" and dtype.kind == "f") or (arr.dtype.kind in "iub" and dtype.kind in "iu")
        cast = arr.astype(dtype)
        if not same_family or (dtype.kind in "iu" and not np.array_equal(cast, arr)):
            raise InputError(f"input {name!r}: dtype {arr.dtype} cannot be converted to the model's {dtype}")
        arr = cast
    return np.require(arr, dtype=dtype.newbyteorder("<"), requirements="C")


def check_feeds(manifest: Manifest, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Feeds in manifest input order, cast to the model's dtypes; InputError on wrong names, shapes or dtypes."""
    expected = [spec.name for spec in manifest.inputs]
    unknown = [name for name in feeds if name not in expected]
    missing = [name for name in expected if name not in feeds]
    if unknown or missing:
        problems = ([f"unknown {', '.join(map(repr, unknown))}"] if unknown else []) + \
                   ([f"missing {', '.join(map(repr, missing))}"] if missing else [])
        raise InputError(f"feeds do not match the model's inputs ({'; '.join(problems)}); "
                         f"expected names: {', '.join(map(repr, expected))}")
    if manifest.symbols:  # a dynamic model: any size within its ranges, the same size for one symbol everywhere
        shapes = {spec.name: np.shape(feeds[spec.name]) for spec in manifest.inputs}
        manifest.bind_feeds(shapes)
        return [_coerce(spec, feeds[spec.name], shapes[spec.name]) for spec in manifest.inputs]
    return [_coerce(spec, feeds[spec.name]) for spec in manifest.inputs]


RVV_QEMU = 8
"""The first qemu-riscv64 that runs RVV 1.0 code: 7.2 (Debian 12's) aborts on vfcvt.rtz (decode_save_opc assertion)."""


@functools.cache
def _qemu_major(path: str) -> int:
    """The major version of the qemu at PATH (`--version`'s first line), 0 when unreadable."""
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    match = re.search(r"version (\d+)\.", text)
    return int(match.group(1)) if match else 0


def emulator_command(manifest: Manifest) -> list[str]:
    """The emulator prefix for the artifact's runner ([] when it runs natively here), with the options its code
    needs (qemu-riscv64's -cpu with V for RVV code)."""
    name = manifest.emulator
    if not name:
        return []
    target = None
    try:
        target = get_target(manifest.target) if manifest.target else None
        if target is not None and is_host_target(target):
            return []
    except InputError:
        pass
    path = shutil.which(name)
    if path:
        args = target.emulator_args(manifest.features) if target is not None else ()
        if args and name.startswith("qemu-riscv") and _qemu_major(path) < RVV_QEMU:
            raise ToolchainError(f"{name} {_qemu_major(path)} cannot run RVV code (qemu 7 aborts on vector float-to-int "
                                 f"conversions): install qemu-user {RVV_QEMU} or later (Debian 12: bookworm-backports' "
                                 f"qemu-user, as .ci/run does), or build for qemu-riscv64 (no vectors)")
        return [path, *args]
    if name.startswith("qemu-"):
        raise ToolchainError(f"{name} not found: install the Debian package qemu-user-static (apt-get install qemu-user-static)")
    raise ToolchainError(f"emulator {name} not found on PATH")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message on stderr"


RUNNER_EXIT_RUN = 3
"""The runner's exit status when the run's data failed a kernel's check (FXC_ERR_RUN, runtime_c/runner.c)."""


def run_check_failed(status: int, stderr: str) -> None:
    """RunCheckFailed with the runner's one line (without its prefix) when our runner exited RUNNER_EXIT_RUN (its
    line starts with "runner: error: "; another program's exit status 3 stays a RunError)."""
    line = _last_line(stderr)
    if status == RUNNER_EXIT_RUN and line.startswith("runner: error: "):
        raise RunCheckFailed(line.removeprefix("runner: error: "))


def _check_exit(proc: subprocess.CompletedProcess, runner: str) -> None:
    if proc.returncode == 0:
        return
    run_check_failed(proc.returncode, proc.stderr)
    if proc.returncode < 0:
        try:
            status = f"was killed by signal {signal.Signals(-proc.returncode).name}"
        except ValueError:
            status = f"was killed by signal {-proc.returncode}"
    else:
        status = f"failed with exit status {proc.returncode}"
    raise RunError(f"{runner} {status}: {_last_line(proc.stderr)}")


def run_artifact(artifact_dir: Path, feeds: Mapping[str, np.ndarray] | None = None, bench: int | None = None,
                 warmup: int = 5, profile: bool = False, timeout: float | None = None, threads: int | None = None) -> RunResult:
    """Run the artifact's runner (runner_prof with profile) and return its outputs and bench JSON;
    `threads`: the runner's --threads (None: the count built in)."""
    from ..emit.threads import check_run_threads

    artifact_dir = Path(artifact_dir)
    manifest = read_manifest(artifact_dir)
    check_run_threads(manifest.threads, threads)
    arrays = check_feeds(manifest, feeds) if feeds is not None else []
    runner = artifact_dir / ("runner_prof" if profile else "runner")
    if not runner.is_file():
        raise InputError(f"{runner} is missing; rebuild the artifact with `fluidml-xc build`")
    command = [*emulator_command(manifest), os.path.abspath(runner)]  # absolute: qemu reads a leading '-' as an option
    from ..tempfiles import prefix

    with tempfile.TemporaryDirectory(prefix=prefix("run")) as tmp:
        for i, arr in enumerate(arrays):
            path = os.path.join(tmp, f"in{i}.npy")
            np.save(path, arr.view(bits_dtype(arr.dtype)) if is_storage_only(arr.dtype) else arr, allow_pickle=False)
            command += ["-i", path]
        out_paths = [os.path.join(tmp, f"out{i}.npy") for i in range(len(manifest.outputs))]
        for path in out_paths:
            command += ["-o", path]
        if bench is not None:
            command += ["--bench", str(bench)]
        if bench is not None or profile:
            command += ["--warmup", str(warmup)]
        if profile:
            command.append("--profile")
        if threads is not None:
            command += ["--threads", str(threads)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunError(f"{runner.name} timed out after {timeout:g} s") from None
        except OSError as exc:
            raise RunError(f"cannot start {runner.name}: {exc}") from None
        _check_exit(proc, runner.name)
        slots = tuple(_load_output(path, spec) for spec, path in zip(manifest.outputs, out_paths))
    outputs = _by_name(manifest.outputs, slots, runner.name)
    report = None
    if bench is not None or profile:
        json_lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if not json_lines:
            raise RunError(f"{runner.name} printed no benchmark JSON: {_last_line(proc.stdout + proc.stderr)}")
        report = json.loads(json_lines[-1])
    return RunResult(outputs=outputs, bench=report, slots=slots)


def _by_name(specs: Sequence[TensorEntry], slots: Sequence[np.ndarray], runner: str) -> dict[str, np.ndarray]:
    """Outputs keyed by name; a name listed twice (ONNX allows it: both are the same tensor) must hold the same
    bytes in every slot, else RunError."""
    outputs: dict[str, np.ndarray] = {}
    for k, (spec, arr) in enumerate(zip(specs, slots)):
        first = outputs.setdefault(spec.name, arr)
        if first is not arr and (first.shape != arr.shape or first.tobytes() != arr.tobytes()):
            raise RunError(f"{runner} wrote different values into the slots of output {spec.name!r}, which the "
                           f"model lists more than once (slot {k}): rebuild with this version of fluidml-xc")
    return outputs


def _load_output(path: str, spec: TensorEntry) -> np.ndarray:
    """A runner output; storage-only dtypes come as their bits (uint8/uint16) and are viewed as the dtype."""
    arr = np.load(path, allow_pickle=False)
    if spec.dtype == "string":
        return arr.astype(object)
    dtype = np.dtype(spec.dtype)
    if is_storage_only(dtype) and arr.dtype == bits_dtype(dtype):
        arr = arr.view(dtype)
    return arr


def save_npz(path: Path, arrays: Mapping[str, np.ndarray], force: bool = False) -> Path:
    """Write arrays to an .npz (keys = exact names) atomically; refuses to overwrite unless force."""
    path = Path(path)
    if path.exists() and not force:
        raise InputError(f"{path} already exists; pass --force to overwrite it")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as archive:
            for name, arr in arrays.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    arr = np.asanyarray(arr)
                    np.lib.format.write_array(member, as_text(arr) if arr.dtype.kind == "O" else arr, allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _plain(value: np.ndarray):
    """A tensor as nested JSON lists; non-finite floats as the strings "nan", "inf", "-inf" (strict JSON)."""
    if value.dtype.kind != "f" and not is_storage_only(value.dtype):
        return value.tolist()

    def finite(v):
        return [finite(x) for x in v] if isinstance(v, list) else v if math.isfinite(v) else str(v)
    return finite(value.astype(np.float64).tolist())


def outputs_as_json(outputs: Mapping[str, np.ndarray], structures: Mapping) -> dict:
    """`run --outputs FILE.json`: each output by name as nested lists, a ZipMap output as ONNX gives it, a list of
    {label: probability} per row (labels as JSON keys, so text)."""
    from ..frontend.sequences import regroup

    described = (structures or {}).get("outputs", {})
    data = {}
    for name, value in outputs.items():
        desc = described.get(name, "tensor")
        if desc != "tensor" and desc[0] == "zipmap":
            data[name] = [{str(k): v for k, v in row.items()} for row in regroup(desc, [value])]
        else:
            data[name] = _plain(np.asarray(value))
    return data
