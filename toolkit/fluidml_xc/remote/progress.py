"""A one-line upload progress bar on stderr (only when stderr is a terminal)."""
from __future__ import annotations

import sys
import time
from typing import TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


class ProgressBar:
    """Callable as progress(done_bytes, total_bytes, file_name)."""

    def __init__(self, stream: TextIO = sys.stderr, width: int = 30):
        self.stream = stream
        self.width = width
        self.tty = stream.isatty()
        self.start = time.monotonic()
        self._last = 0.0

    def __call__(self, done: int, total: int, name: str) -> None:
        now = time.monotonic()
        if not self.tty or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * self.width)
        rate = done / max(now - self.start, 1e-6)
        self.stream.write(f"\r  [{bar:<{self.width}}] {frac:4.0%} {human_bytes(done)}/{human_bytes(total)} "
                          f"{human_bytes(rate)}/s {name[:24]:<24}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
