"""The upload progress bar on stderr (only when stderr and stdout are terminals)."""
from __future__ import annotations

import sys
from typing import TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


class ProgressBar:
    """Callable as progress(done_bytes, total_bytes, file_name): a tqdm bar in bytes, only on a terminal
    (the stream and stdout both)."""

    def __init__(self, stream: TextIO = sys.stderr, width: int = 30):
        self.stream = stream
        self.width = width
        from ..progress import enabled

        self.tty = enabled(stream)
        self._bar = None
        self._done = 0

    def __call__(self, done: int, total: int, name: str) -> None:
        if not self.tty:
            return
        from tqdm import tqdm

        from ..progress import screen

        if self._bar is None:
            self._bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=self.stream,
                             desc="  upload", leave=False, **screen())
        self._bar.set_postfix_str(name[:24], refresh=False)
        self._bar.update(max(0, done - self._done))
        self._done = done
        if done >= total:
            self._bar.close()
            self._bar = None
            self._done = 0
