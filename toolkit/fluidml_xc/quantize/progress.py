"""A progress bar over samples on stderr (tqdm), shown only when stderr is a terminal."""
from __future__ import annotations

import sys


def progress_bar(total: int, label: str, enabled: bool | None = None):
    from tqdm import tqdm

    show = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(total=total, desc=label, unit="sample", file=sys.stderr, disable=not show, leave=False)
