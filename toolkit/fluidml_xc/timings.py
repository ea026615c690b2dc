"""Where a build's time goes (`build --timings`, manifest.json's `timings`): wall-clock seconds per stage.

A Stopwatch charges the time since its previous mark to the stage a mark names, so the stages of one build
cover it without gaps or overlaps and add up to its total."""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

STAGES: dict[str, str] = {
    "load": "read the ONNX file, --bind and --input-shape checks",
    "import": "frontend: ONNX -> graph, shapes, limits",
    "passes": "graph rewrites and the support check",
    "optimize": "FluidML layouts and loop orders (the optimizer's search)",
    "memory plan": "arena plan and its verification",
    "emit": "lowering every kernel into llvmlite IR objects",
    "ir text": "the llvmlite module turned into LLVM IR text",
    "llvm": "LLVM parse, O3 optimization and code generation (all code variants, wall time)",
    "objects": "code objects written, weights attached",
    "runtime": "the C runtime for the board's architecture (built once, then cached)",
    "link": "glue, runners and libraries (zig)",
    "artifact": "footprint, digests, manifest, directory renamed into place",
}
"""Stage name -> what it covers, in build order (docs/INTERNALS.md, "Build timings", lists the same)."""


class Stopwatch:
    """Marks on time.perf_counter: `mark(stage)` adds the seconds since the previous mark (or the start) to it."""

    def __init__(self) -> None:
        self.started = self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def mark(self, stage: str) -> None:
        if stage not in STAGES:
            raise KeyError(f"unknown build stage {stage!r}")
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + (now - self._last)
        self._last = now

    def total(self) -> float:
        return self._last - self.started


@dataclass(frozen=True)
class VariantTiming:
    """One code variant's LLVM work (seconds; `process`: 0 this one, k > 0 the k-th child, target/objects.py)."""

    cpu: str
    optimize: float
    codegen: float
    process: int = 0

    def to_json(self) -> dict:
        return {"cpu": self.cpu, "optimize": round(self.optimize, 4), "codegen": round(self.codegen, 4),
                "process": self.process}


@dataclass(frozen=True)
class BuildTimings:
    """Seconds per stage in build order (STAGES' names), their total, the per-variant LLVM figures, and whether
    the runtime was built by this build (False: it came from the cache)."""

    stages: Mapping[str, float]
    total: float
    variants: tuple[VariantTiming, ...] = ()
    llvm_processes: int = 1
    runtime_built: bool = False

    @classmethod
    def of(cls, watch: Stopwatch, variants: tuple[VariantTiming, ...] = (), runtime_built: bool = False) -> BuildTimings:
        stages = {name: watch.seconds[name] for name in STAGES if name in watch.seconds}
        return cls(stages, watch.total(), variants, len({v.process for v in variants}) or 1, runtime_built)

    def to_json(self) -> dict:
        return {"total": round(self.total, 4), "stages": {k: round(v, 4) for k, v in self.stages.items()},
                "llvm_variants": [v.to_json() for v in self.variants], "llvm_processes": self.llvm_processes,
                "runtime_built": self.runtime_built}

    @classmethod
    def from_json(cls, data: Mapping) -> BuildTimings:
        """The manifest's `timings` (TypeError/ValueError/KeyError when malformed)."""
        if not isinstance(data, Mapping) or not isinstance(data["stages"], Mapping):
            raise TypeError(data)
        variants = tuple(VariantTiming(str(v["cpu"]), _seconds(v["optimize"]), _seconds(v["codegen"]), int(v.get("process", 0)))
                         for v in data.get("llvm_variants", []))
        return cls({str(k): _seconds(v) for k, v in data["stages"].items()}, _seconds(data["total"]), variants,
                   int(data.get("llvm_processes", 1)), bool(data.get("runtime_built", False)))

    def table(self) -> str:
        """Stage, seconds and share of the total, one line each, then the per-variant LLVM figures."""
        total = self.total or 1.0
        lines = [f"  {'stage':<12} {'seconds':>8} {'share':>6}"]
        for name, seconds in self.stages.items():
            note = (" (built now, once per architecture)" if self.runtime_built else " (cached)") if name == "runtime" else ""
            lines.append(f"  {name:<12} {seconds:8.3f} {seconds / total:6.1%}{note}")
        lines.append(f"  {'total':<12} {self.total:8.3f} {1:6.1%}")
        if self.variants:
            lines.append(f"  llvm per code variant ({self.llvm_processes} process{'es' if self.llvm_processes > 1 else ''}):")
        for v in self.variants:
            lines.append(f"    {v.cpu:<18} optimize {v.optimize:.3f} s, codegen {v.codegen:.3f} s"
                         + (f" (child {v.process})" if v.process else ""))
        return "\n".join(lines)


def _seconds(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(value)
    return float(value)
