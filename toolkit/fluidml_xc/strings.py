"""String tensors (docs/STRINGS.md): each element is a fixed-size slot, an int64 byte length followed by room for
`max_string_bytes` UTF-8 bytes and a NUL, so a string tensor has a static byte size and the memory plan stays exact.

The slot is a numpy structured dtype (`slot_dtype`): the planner, the arena and the weights blob see an ordinary
fixed-size element; kernels (kernels/strings.py) address element i's length and bytes. ONNX's strings (numpy object,
`U` or `S` arrays) become slots with `to_slots` and come back with `from_slots`.
"""
from __future__ import annotations

import numpy as np

from .errors import InputError

DEFAULT_MAX_STRING_BYTES = 255
"""Bytes a string element may hold unless `build --max-string-bytes N` says otherwise."""
LENGTH_FIELD, BYTES_FIELD = "len", "bytes"
STRING_CODE = 8
"""ONNX TensorProto.STRING."""


def room_for(max_bytes: int) -> int:
    """The byte array of a slot: max_bytes and a NUL, rounded up to 8 (so every slot stays 8-aligned)."""
    return (int(max_bytes) + 1 + 7) // 8 * 8


def slot_dtype(max_bytes: int = DEFAULT_MAX_STRING_BYTES) -> np.dtype:
    """The slot of a string holding up to room_for(max_bytes) - 1 bytes."""
    if not 1 <= int(max_bytes) <= 1 << 20:
        raise InputError(f"--max-string-bytes {max_bytes} is out of range: give 1 to {1 << 20} bytes per string")
    return np.dtype([(LENGTH_FIELD, "<i8"), (BYTES_FIELD, "u1", (room_for(max_bytes),))])


def is_string(dtype) -> bool:
    """A string tensor's dtype: a slot, or ONNX's own (object / U / S) before the frontend turns it into slots."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return False
    return dt.kind in "OSU" or dt.names == (LENGTH_FIELD, BYTES_FIELD)


def is_slot(dtype) -> bool:
    dt = np.dtype(dtype)
    return dt.names == (LENGTH_FIELD, BYTES_FIELD)


def capacity(dtype) -> int:
    """The most bytes one element of a slot dtype holds (its NUL excluded)."""
    return np.dtype(dtype)[BYTES_FIELD].shape[0] - 1


def dtype_name(dtype) -> str:
    """numpy's name of a dtype, "string" for a slot (manifest, model.h)."""
    return "string" if is_string(dtype) else np.dtype(dtype).name


def manifest_dtype(name: str) -> np.dtype:
    """A manifest's dtype name as numpy's (object for "string", ONNX's in-memory form of strings)."""
    return np.dtype(object) if name == "string" else np.dtype(name)


def encode(value) -> bytes:
    """One ONNX string element as bytes (str as UTF-8; bytes as they are)."""
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value)
    return str(value).encode("utf-8", errors="surrogateescape")


def to_slots(values, dtype: np.dtype, what: str = "string tensor") -> np.ndarray:
    """An array of strings (object, U or S) as slots of `dtype`; an element longer than the slot is an InputError."""
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) or values.dtype.kind in "OSU" else values
    if arr.dtype == dtype:
        return arr
    cap, room = capacity(dtype), np.dtype(dtype)[BYTES_FIELD].shape[0]
    out = np.zeros(arr.shape, dtype)
    flat_out = out.reshape(-1)
    for i, value in enumerate(np.asarray(arr, dtype=object).reshape(-1)):
        data = encode(value)
        if len(data) > cap:
            raise InputError(f"{what} element {i} has {len(data)} bytes, more than the {cap} a string may hold: build "
                             f"with a larger --max-string-bytes (at least {len(data)})")
        flat_out[i][LENGTH_FIELD] = len(data)
        flat_out[i][BYTES_FIELD] = np.frombuffer(data.ljust(room, b"\0"), np.uint8)
    return out


def decode(data: bytes) -> str:
    """Output bytes as str: invalid UTF-8 becomes U+FFFD (as Python's errors="replace")."""
    return data.decode("utf-8", errors="replace")


def from_slots(slots: np.ndarray) -> np.ndarray:
    """Slots as an object array of str (ONNX's and ONNX Runtime's form of a string tensor)."""
    out = np.empty(slots.shape, dtype=object)
    flat = out.reshape(-1)
    for i, slot in enumerate(slots.reshape(-1)):
        n = int(slot[LENGTH_FIELD])
        flat[i] = decode(bytes(slot[BYTES_FIELD][:max(0, min(n, len(slot[BYTES_FIELD])))]))
    return out


def use_slots(graph, max_bytes: int = DEFAULT_MAX_STRING_BYTES) -> None:
    """Every string tensor of `graph` (an ir.Graph) as slots of `max_bytes`, constants' values converted."""
    dtype = slot_dtype(max_bytes)
    for t in graph.tensors.values():
        if is_string(t.dtype) and not is_slot(t.dtype):
            t.value = None if t.value is None else to_slots(t.value, dtype, f"string constant {t.name!r}")
            t.dtype = dtype


def string_stages(graph, arena_bytes: int, alignment: int) -> dict:
    """The C glue's staging slots of the graph's string inputs and outputs past `arena_bytes` (emit/capi.py
    TensorSpec.slot_bytes / stage_offset by ("in" | "out", index)) and "arena_bytes", the arena with them; {} when
    the graph has no string input or output."""
    out: dict = {}
    top = arena_bytes
    for kind, names in (("in", graph.inputs), ("out", graph.outputs)):
        for i, name in enumerate(names):
            t = graph.tensors[name]
            if not is_slot(t.dtype):
                continue
            top = -(-top // alignment) * alignment
            out[(kind, i)] = {"slot_bytes": int(np.dtype(t.dtype).itemsize), "stage_offset": top}
            top += max(t.nbytes, 1)
    if out:
        out["arena_bytes"] = -(-top // alignment) * alignment
    return out


def as_npy_strings(values, what: str) -> np.ndarray:
    """Strings (object, U or S) as a numpy 'S' array of their UTF-8 bytes: what the runner reads (lossless: a str
    from invalid UTF-8 bytes, decoded with surrogateescape, gets its bytes back)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "OSU":
        raise InputError(f"{what}: dtype {arr.dtype} is not strings: feed str or bytes (a numpy 'U', 'S' or object array)")
    flat = list(arr.reshape(-1)) if arr.dtype.kind == "S" else [encode(v) for v in arr.reshape(-1)]
    if any(b"\0" in b for b in flat):
        raise InputError(f"{what}: a string holds a NUL byte, which ends a C string: remove it")
    if arr.dtype.kind == "S":
        return np.ascontiguousarray(arr)
    return np.array(flat, dtype=f"S{max([len(b) for b in flat] + [1])}").reshape(arr.shape)


def as_text(values) -> np.ndarray:
    """Strings (object, U or S) as a numpy 'U' array (bytes decoded as UTF-8, invalid bytes kept as surrogates):
    what ONNX Runtime takes and .npz files hold."""
    arr = np.asarray(values)
    flat = [v.decode("utf-8", "surrogateescape") if isinstance(v, (bytes, np.bytes_)) else str(v) for v in arr.reshape(-1)]
    return np.array(flat, dtype=f"U{max([len(v) for v in flat] + [1])}").reshape(arr.shape)
