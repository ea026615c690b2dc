"""Names shortened for tables and legends so that different names never print the same."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

ELLIPSIS = "…"


def _cut(name: str, head: int, width: int) -> str:
    """NAME in WIDTH characters: its first HEAD, an ellipsis, and its last WIDTH - HEAD - 1."""
    if len(name) <= width:
        return name
    tail = width - 1 - head
    return name[:head] + ELLIPSIS + (name[-tail:] if tail > 0 else "")


def _heads(width: int) -> list[int]:
    """Split points to try, the default (a third of the width kept from the start) first, then outwards."""
    first = width // 3
    rest = sorted(range(width), key=lambda h: (abs(h - first), h))
    return [first, *(h for h in rest if h != first)]


def _separate(group: list[str], width: int, taken: set[str]) -> dict[str, str]:
    """Cuts of GROUP's names that differ from each other and from TAKEN (the other names' short forms): the
    narrowest width from WIDTH up, and at that width the split nearest the default."""
    fixed = {n: n for n in group if len(n) <= width}
    longest = max(len(n) for n in group)
    for w in range(width, longest + 1):
        for head in _heads(w):
            cut = {n: _cut(n, head, w) for n in group}
            values = set(cut.values())
            if len(values) == len(group) and not values & taken and all(cut[n] == v for n, v in fixed.items()):
                return cut
    return {n: n for n in group}


def shorten_unique(names: Iterable[str], width: int = 40) -> dict[str, str]:
    """Each distinct name -> at most WIDTH characters (an ellipsis in the middle: the start and the end of a
    name usually tell it apart), wider only where that is needed to keep two names apart."""
    width = max(width, 3)
    unique = list(dict.fromkeys(names))
    short = {n: _cut(n, width // 3, width) for n in unique}
    for _ in range(len(unique)):
        counts = Counter(short.values())
        clashes: dict[str, list[str]] = {}
        for n in unique:
            if counts[short[n]] > 1:
                clashes.setdefault(short[n], []).append(n)
        if not clashes:
            break
        for value, group in clashes.items():
            taken = {v for n, v in short.items() if n not in group}
            short.update(_separate(group, width, taken))
    return short
