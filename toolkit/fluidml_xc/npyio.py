""".npy / .npz reading for user-supplied feeds that refuses what np.load would trust: headers declaring more
data than the file holds or than the memory limit allows, object dtypes, zip members that are encrypted,
compressed with an unknown method or given twice. Every refusal is one InputError naming the file."""
from __future__ import annotations

import io
import warnings
import zipfile
from pathlib import Path

import numpy as np

from .errors import InputError
from .sizes import MAX_RANK, format_bytes, host_memory_bytes

MAX_HEADER = 1 << 16


def default_max_bytes() -> int:
    return host_memory_bytes() // 2


def read_npy(fh, available: int, what: str, max_bytes: int | None = None) -> np.ndarray:
    """One .npy array from `fh`, whose remaining size is `available` bytes."""
    max_bytes = default_max_bytes() if max_bytes is None else max_bytes
    try:
        with warnings.catch_warnings():  # a header numpy parses with its Python 2 fallback: no warning on stderr
            warnings.simplefilter("ignore")
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh, max_header_size=MAX_HEADER)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh, max_header_size=MAX_HEADER)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
    except Exception as exc:  # numpy's header parser raises ValueError, SyntaxError, tokenize.TokenError, ...
        raise InputError(f"{what}: not a valid .npy file ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
    if dtype.hasobject or dtype.names is not None or dtype.subdtype is not None:
        raise InputError(f"{what}: .npy dtype {dtype} is not a plain numeric type: save a numeric array (strings: "
                         "arr.astype(str), numpy's 'U', which needs no pickle)")
    if len(shape) > MAX_RANK or any(not isinstance(d, int) or d < 0 for d in shape):
        raise InputError(f"{what}: bad shape {shape} in the .npy header")
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    if nbytes > max_bytes:
        raise InputError(f"{what}: the .npy header declares shape {shape} {dtype} ({format_bytes(nbytes)}), over the limit of "
                         f"{format_bytes(max_bytes)}: check the file")
    header_end = fh.tell() if hasattr(fh, "tell") else 0
    if available >= 0 and nbytes > available - header_end:
        raise InputError(f"{what}: truncated .npy data (the header declares {nbytes:,} bytes, the file holds "
                         f"{max(available - header_end, 0):,}): re-save it")
    data = fh.read(nbytes)
    if len(data) != nbytes:
        raise InputError(f"{what}: truncated .npy data (the header declares {nbytes:,} bytes, read {len(data):,}): re-save it")
    array = np.frombuffer(data, dtype=dtype, count=count)
    return array.reshape(shape[::-1]).transpose() if fortran else array.reshape(shape)


def load_npy(path: Path, max_bytes: int | None = None) -> np.ndarray:
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            size = _file_size(fh)
            return read_npy(fh, size, str(path), max_bytes).copy()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not an .npy file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _file_size(fh) -> int:
    try:
        fh.seek(0, io.SEEK_END)
        size = fh.tell()
        fh.seek(0)
        return size
    except (OSError, ValueError):
        return -1  # a pipe or a character device: read() finds the end


def load_npz(path: Path, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """Arrays of an .npz keyed by member name without `.npy`."""
    path = Path(path)
    max_bytes = default_max_bytes() if max_bytes is None else max_bytes
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not an .npz file") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        hint = " (an .npy? pass it as --input NAME=FILE.npy)" if _is_npy(path) else ""
        raise InputError(f"{path}: not a valid .npz file ({' '.join(str(exc).split())[:200] or 'empty'}){hint}") from None
    arrays: dict[str, np.ndarray] = {}
    total = 0
    with archive:
        infos = archive.infolist()
        names = [info.filename for info in infos]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise InputError(f"{path}: the archive holds {duplicate!r} twice: write each input once")
        for info in infos:
            what = f"{path}: member {info.filename!r}"
            if info.flag_bits & 0x1:
                raise InputError(f"{what} is encrypted: save the inputs without a password")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise InputError(f"{what} uses zip compression method {info.compress_type}: save it with np.savez "
                                 "or np.savez_compressed")
            total += info.file_size
            if total > max_bytes:
                raise InputError(f"{what}: the archive's arrays exceed {format_bytes(max_bytes)}: check the file")
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            try:
                with archive.open(info) as member:
                    arrays[key] = read_npy(member, info.file_size, what, max_bytes).copy()
            except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as exc:
                raise InputError(f"{what} cannot be read ({' '.join(str(exc).split())[:200]}): re-save the inputs") from None
    return arrays


def _is_npy(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(6) == b"\x93NUMPY"
    except OSError:
        return False
