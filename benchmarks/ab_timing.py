"""The A/B timing the dynamic-shape benchmarks share (benchmarks/dynamic*.py, issue #26): measures taken in rounds
that alternate between the builds compared, so that load from other processes on a shared machine hits them alike,
and the least of each kept (it excludes the time slices other processes take)."""
from __future__ import annotations

import math
import time
from typing import Callable, Sequence


def alternate(measures: Sequence[Callable[[], float]], rounds: int) -> list[float]:
    """The least value of each measure over `rounds` rounds, each round taking every measure once, in order."""
    best = [math.inf] * len(measures)
    for _ in range(rounds):
        for j, measure in enumerate(measures):
            best[j] = min(best[j], measure())
    return best


def call_time(call: Callable[[], object], number: int = 1, reps: int = 1) -> Callable[[], float]:
    """A measure of `call`: one untimed call, then the least of `reps` timings of `number` calls, in seconds per call."""
    clock = time.perf_counter

    def measure() -> float:
        call()
        best = math.inf
        for _ in range(reps):
            start = clock()
            for _ in range(number):
                call()
            best = min(best, (clock() - start) / number)
        return best
    return measure


def least_times(calls: Sequence[Callable[[], object]], rounds: int, number: int = 1, reps: int = 1) -> list[float]:
    """Seconds per call of each of `calls`, A/B over `rounds` alternating rounds (call_time's measure)."""
    return alternate([call_time(call, number, reps) for call in calls], rounds)


def summary(ratios: Sequence[float]) -> str:
    """The geometric mean and the worst of dynamic/static latency ratios."""
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return f"geo-mean {geo:.3f}, worst {max(ratios):.3f} over {len(ratios)}"
