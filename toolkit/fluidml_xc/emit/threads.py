"""Thread counts: the build's default (the board's `cores`), the limits the runtime accepts (runtime_c/pool.c)."""
from __future__ import annotations

import os

from ..errors import InputError
from ..target.boards import Board

MAX_THREADS = 64
"""FXC_MAX_THREADS in runtime_c/fxc_runtime.h."""


def host_cores() -> int:
    """Cores this process may run on (the affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_run_threads(built: int, threads: int | None) -> None:
    """A run-time --threads must lie in 1..BUILT, the count the artifact was built for (one line otherwise)."""
    if threads is None:
        return
    if not 1 <= threads <= built:
        raise InputError(f"--threads {threads}: this artifact was built for 1 to {built} threads; "
                         f"give 1..{built} or rebuild with `fluidml-xc build --threads N`")


def resolve_threads(board: Board, requested: int | None) -> int:
    """The thread count a build uses: `requested`, else the board's `cores` (0 there: this machine's)."""
    if requested is None:
        return min(MAX_THREADS, board.cores if board.cores > 0 else host_cores())
    if not 1 <= int(requested) <= MAX_THREADS:
        raise InputError(f"--threads {requested} is out of range: give 1 to {MAX_THREADS} (1 builds a runner that starts no thread)")
    return int(requested)
