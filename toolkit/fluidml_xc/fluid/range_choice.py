"""FluidML's decisions for a build whose dims vary: one set of layouts and loop orders must serve every size.

The layout search (optimize) runs at each sample size of the ranges (at least min, opt and max: the same graph
imported at those sizes, so tensor and node names agree). Each candidate decision is then priced by the cost model
at every sample size, and the one whose worst ratio to the best decision of each size is smallest wins (ties go to
the optimization size's own decision). The ratios are kept for the build report: what the choice costs at the ends
of the range.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..ir import Graph
from ..target.machine import MachineSpec
from .costs import Costs, KernelTimer
from .optimize import Decisions, build_problem, optimize


@dataclass(frozen=True)
class SizePoint:
    """The graph at one size of the ranges: `label` ("min", "opt", "max", ...) and the symbols' values."""

    label: str
    env: Mapping[str, int]
    graph: Graph


@dataclass
class RangeChoice:
    decisions: Decisions
    chosen: str
    """The label of the size whose decisions were chosen."""
    ratios: dict[str, dict[str, float]] = field(default_factory=dict)
    """Candidate label -> size label -> predicted time of the candidate's layouts / the best candidate's there."""
    predicted_ns: dict[str, float] = field(default_factory=dict)
    """Size label -> predicted time of the chosen layouts at that size."""

    def summary(self) -> dict:
        return {"chosen": self.chosen, "worst_ratio": round(self.worst, 4),
                "ratios": {c: {s: round(r, 4) for s, r in by.items()} for c, by in self.ratios.items()},
                "predicted_ns": {s: round(v, 1) for s, v in self.predicted_ns.items()}}

    @property
    def worst(self) -> float:
        return max(self.ratios.get(self.chosen, {}).values(), default=1.0)


def layouts_cost(graph: Graph, layouts: Mapping[str, tuple[int, ...]], spec: MachineSpec, costs: str, threads: int,
                 timer: KernelTimer | None = None) -> float:
    """The cost model's time for `graph` with `layouts` (each loop-ordered kernel at its best order there)."""
    problem = build_problem(graph, Costs(graph, spec, costs, threads=threads, timer=timer))[0]
    return problem.total({t: p for t, p in layouts.items() if t in problem.candidates})


def decide_over_range(points: list[SizePoint], spec: MachineSpec, mode: str, costs: str = "analytic", threads: int = 1,
                      timer: KernelTimer | None = None, preferred: str = "opt") -> RangeChoice:
    """The decisions (of the sizes in `points`) whose worst cost ratio over all the sizes is smallest."""
    found = {p.label: optimize(p.graph, spec, mode, costs, threads, timer) for p in points}
    if mode != "fluid":
        label = preferred if preferred in found else points[0].label
        return RangeChoice(found[label], label)
    price = {(c, p.label): layouts_cost(p.graph, found[c].layouts, spec, costs, threads, timer)
             for c in found for p in points}
    best = {p.label: min(price[c, p.label] for c in found) for p in points}
    ratios = {c: {p.label: price[c, p.label] / best[p.label] if best[p.label] > 0 else 1.0 for p in points} for c in found}
    order = sorted(found, key=lambda c: (max(ratios[c].values()), c != preferred))
    chosen = order[0]
    return RangeChoice(found[chosen], chosen, ratios, {p.label: price[chosen, p.label] for p in points})
