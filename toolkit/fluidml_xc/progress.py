"""Progress bars on stderr (tqdm), drawn only when stderr and stdout are both terminals: never in pipes, logs,
or beside output (JSON, tables) that goes to a file or another program."""
from __future__ import annotations

import shutil
import sys
from typing import TextIO


def _tty(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):
        return False


def screen() -> dict[str, int]:
    """tqdm's ncols/nrows: the terminal's size, or 80x24 when it reports 0x0 (a pty nobody sized), where
    tqdm would otherwise draw nothing."""
    size = shutil.get_terminal_size((80, 24))
    return {"ncols": size.columns or 80, "nrows": size.lines or 24}


def enabled(stream: TextIO | None = None) -> bool:
    """Whether to draw: the bar's stream (default stderr) and stdout are terminals."""
    return _tty(stream or sys.stderr) and _tty(sys.stdout)


def progress_bar(total: int | float | None, desc: str, unit: str = "it", unit_scale: bool = False,
                 leave: bool = False, show: bool | None = None):
    """A tqdm bar on stderr (a no-op object when stderr is not a terminal); use as a context manager."""
    from tqdm import tqdm

    on = enabled() if show is None else show
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, unit_divisor=1024 if unit == "B" else 1000,
                file=sys.stderr, disable=not on, leave=leave, **screen())


class Stages:
    """A bar over a job's named stages: call it with each stage's name as it starts; use as a context
    manager so the bar is cleared before any error message."""

    def __init__(self, desc: str, names: tuple[str, ...], show: bool | None = None):
        self.names = names
        self._bar = progress_bar(total=len(names), desc=desc, unit="stage", show=show)
        self._started = 0

    def __call__(self, name: str) -> None:
        if self._started:
            self._bar.update(1)
        self._started += 1
        self._bar.set_postfix_str(name)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> "Stages":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track(iterable, desc: str, unit: str = "it", total: int | None = None, show: bool | None = None):
    """Iterate with a bar on stderr (terminal only), like tqdm(iterable)."""
    from tqdm import tqdm

    on = enabled() if show is None else show
    return tqdm(iterable, desc=desc, unit=unit, total=total, file=sys.stderr, disable=not on, leave=False,
                **screen())
