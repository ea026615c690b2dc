"""Sizes every stage shares: the runner's rank limit, this machine's memory, byte counts for messages."""
from __future__ import annotations

import os

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
