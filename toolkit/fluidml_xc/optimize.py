"""Layout and loop-order decisions per --opt mode (plain | greedy | fluid)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .codegen.machine import MachineSpec
from .ir import Graph


@dataclass
class Decisions:
    mode: str
    layouts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """tensor -> dimension order (outermost first); absent = row-major."""
    loop_orders: dict[str, str] = field(default_factory=dict)
    segments: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {"mode": self.mode, "non_row_major": {k: list(v) for k, v in self.layouts.items()},
                "loop_orders": dict(self.loop_orders), "segments": list(self.segments)}


def optimize(graph: Graph, spec: MachineSpec, mode: str, costs: str = "analytic") -> Decisions:
    """Row-major layouts for every mode until the FluidML layout search is registered for `fluid`."""
    return Decisions(mode)
