"""Progress bars on stderr (tqdm), drawn only when stderr is a terminal: never in pipes, logs or JSON on stdout."""
from __future__ import annotations

import sys
from typing import TextIO


def enabled(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def progress_bar(total: int | float | None, desc: str, unit: str = "it", unit_scale: bool = False,
                 leave: bool = False, show: bool | None = None):
    """A tqdm bar on stderr (a no-op object when stderr is not a terminal); use as a context manager."""
    from tqdm import tqdm

    on = enabled() if show is None else show
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, unit_divisor=1024 if unit == "B" else 1000,
                file=sys.stderr, disable=not on, leave=leave, dynamic_ncols=True)
