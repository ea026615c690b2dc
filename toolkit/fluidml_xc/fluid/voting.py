"""Voting where segments disagree on a shared tensor (docs/DESIGN.md 1.4).

A tensor is shared when it appears in more than one place across the segments' solutions (a chain
tensor that is also a stand-in input elsewhere, a stand-in read by several nodes). Each candidate
layout proposed for it is scored by the cost it adds to every segment touching it, each segment
re-solved with the tensor pinned to that layout: the vote of a segment weighs exactly the cost
difference it would suffer. The least total wins and is pinned; the segments are re-solved with
all decided tensors pinned, so none keeps a plan built on a layout it lost.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .layouts import LayoutProblem, Perm, SegmentSolution, is_identity, solve_segment
from .segmentation import Segment


@dataclass
class Vote:
    tensor: str
    proposals: dict[Perm, int]
    """Layout -> number of appearances proposing it."""
    penalties: dict[Perm, float]
    """Layout -> total extra cost over the segments touching the tensor."""
    winner: Perm


@dataclass
class VotingResult:
    layouts: dict[str, Perm]
    """Every tensor that has candidates -> its layout."""
    solutions: list[SegmentSolution]
    votes: list[Vote] = field(default_factory=list)
    cost: float = 0.0


def _segment_tensors(problem: LayoutProblem, segment: Segment) -> set[str]:
    return {t for n in segment.nodes for t in problem.node_tensors[n]}


def vote_layouts(problem: LayoutProblem, segments: Sequence[Segment], pins: Mapping[str, Perm] = {},
                 priority: Mapping[str, float] | None = None) -> VotingResult:
    pins = dict(pins)
    touching: dict[str, list[int]] = {}
    tensors_of = [_segment_tensors(problem, s) for s in segments]
    for k, ts in enumerate(tensors_of):
        for t in ts:
            touching.setdefault(t, []).append(k)
    memo: dict = {}

    def solve(k: int, pinned: Mapping[str, Perm]) -> SegmentSolution:
        relevant = tuple(sorted((t, p) for t, p in pinned.items() if t in tensors_of[k]))
        key = (k, relevant)
        if key not in memo:
            memo[key] = solve_segment(problem, segments[k], dict(relevant))
        return memo[key]

    solutions = [solve(k, pins) for k in range(len(segments))]
    appearances: dict[str, list[Perm]] = {}
    for sol in solutions:
        for t, p in sol.proposals():
            appearances.setdefault(t, []).append(p)
    shared = [t for t, props in appearances.items() if len(props) > 1 and t not in pins
              and len(problem.candidates.get(t, ())) > 1]
    order = sorted(shared, key=lambda t: (-(priority or {}).get(t, 0.0), t))
    votes: list[Vote] = []
    for t in order:
        props: dict[Perm, int] = {}
        for p in appearances[t]:
            props[p] = props.get(p, 0) + 1
        if len(props) == 1:
            pins[t] = next(iter(props))
            continue
        base = {k: solve(k, pins).cost for k in touching[t]}
        penalties = {}
        for layout in props:
            trial = dict(pins)
            trial[t] = layout
            penalties[layout] = sum(solve(k, trial).cost - base[k] for k in touching[t])
        winner = min(penalties, key=lambda p: (penalties[p], not is_identity(p), -props[p], p))
        pins[t] = winner
        votes.append(Vote(t, props, penalties, winner))
    solutions = [solve(k, pins) for k in range(len(segments))]
    layouts: dict[str, Perm] = {}
    for sol in solutions:
        for t, p in sol.proposals():
            layouts.setdefault(t, pins.get(t, p))
    layouts.update({t: p for t, p in pins.items() if t in problem.candidates})
    cost = problem.total(layouts)
    return VotingResult(layouts, solutions, votes, cost)
