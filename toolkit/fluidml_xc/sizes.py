"""Sizes every stage shares: the runner's rank limit, this machine's memory, byte counts for messages."""
from __future__ import annotations

import os
import re

from .errors import InputError

MAX_RANK = 32
"""The runner's .npy reader (runtime_c/npy.c FXC_MAX_RANK) and the C specs take at most this many dims."""


def format_bytes(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 8 << 30


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'512M', '2G', '1.5GiB', '1000000' -> bytes (powers of 1024)."""
    match = _SIZE.fullmatch(str(text).strip())
    if not match:
        raise InputError(f"bad size {text!r}: write a byte count or a number with K, M, G or T (e.g. 2G)")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise InputError(f"bad size {text!r}: it must be positive")
    return value
