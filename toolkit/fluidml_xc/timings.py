"""Where a build's time goes (`build --timings`, manifest.json's `timings`): wall-clock seconds per stage, and the
CPU seconds of the build's process and of its children (forked workers, zig), which a busy machine inflates far
less than wall-clock time.

A Stopwatch charges the time since its previous mark to the stage a mark names, so the stages of one build
cover it without gaps or overlaps and add up to its total."""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

STAGES: dict[str, str] = {
    "load": "read the ONNX file, --bind and --input-shape checks",
    "import": "frontend: ONNX -> graph, shapes, limits",
    "passes": "graph rewrites and the support check",
    "optimize": "FluidML layouts and loop orders (the optimizer's search)",
    "memory plan": "arena plan and its verification",
    "kernels": "per-node unit keys computed and looked up in the kernel cache",
    "units": "the units missed: emitted, as IR text, LLVM optimization and code generation, on every core; the entry modules",
    "objects": "the merge of unit and entry objects, weights and labels started (ld.lld -r; it runs beside runtime and link)",
    "runtime": "the C runtime for the board's architecture (built once, then cached)",
    "link": "glue, the wait for the merge, runners and libraries (zig)",
    "artifact": "footprint, digests, manifest, directory renamed into place",
}
"""Stage name -> what it covers, in build order (docs/INTERNALS.md, "Build timings", lists the same)."""


@dataclass(frozen=True)
class CpuSeconds:
    """User + system CPU seconds: of the build's process, and of its children waited for (the forked unit workers
    once their pool is shut down, every zig run)."""

    build: float = 0.0
    children: float = 0.0

    @property
    def total(self) -> float:
        return self.build + self.children


class Stopwatch:
    """Marks on time.perf_counter: `mark(stage)` adds the seconds since the previous mark (or the start) to it;
    `cpu()`: the CPU seconds since the start (os.times)."""

    def __init__(self) -> None:
        self.started = self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self._times = os.times()

    def cpu(self) -> CpuSeconds:
        now, then = os.times(), self._times
        return CpuSeconds(now.user + now.system - then.user - then.system,
                          now.children_user + now.children_system - then.children_user - then.children_system)

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
    """One code variant's work (CPU seconds of the threads that did it, summed over the processes that compiled
    its units): LLVM optimization and code generation, and Python emission with the IR text (`emit`); `process`: 0
    this one, k > 0 the k-th child."""

    cpu: str
    optimize: float
    codegen: float
    process: int = 0
    emit: float = 0.0

    def to_json(self) -> dict:
        return {"cpu": self.cpu, "emit": round(self.emit, 4), "optimize": round(self.optimize, 4),
                "codegen": round(self.codegen, 4), "process": self.process}


@dataclass(frozen=True)
class KernelCounts:
    """A build's units: found in the kernel cache, compiled (distinct objects: units with the same IR compile once),
    the processes that compiled them, and the units emitted."""

    cached: int = 0
    compiled: int = 0
    processes: int = 1
    emitted: int = 0


@dataclass(frozen=True)
class BuildTimings:
    """Seconds per stage in build order (STAGES' names), their total, the per-variant LLVM figures, and whether
    the runtime was built by this build (False: it came from the cache)."""

    stages: Mapping[str, float]
    total: float
    variants: tuple[VariantTiming, ...] = ()
    llvm_processes: int = 1
    runtime_built: bool = False
    kernels: KernelCounts = KernelCounts()
    plan_cached: bool = False
    """The optimizer's decisions and the memory plan came from the plan cache (plan_cache.py)."""
    cpu: CpuSeconds = CpuSeconds()

    @classmethod
    def of(cls, watch: Stopwatch, variants: tuple[VariantTiming, ...] = (), runtime_built: bool = False,
           kernels: KernelCounts = KernelCounts(), plan_cached: bool = False) -> BuildTimings:
        stages = {name: watch.seconds[name] for name in STAGES if name in watch.seconds}
        return cls(stages, watch.total(), variants, kernels.processes, runtime_built, kernels, plan_cached, watch.cpu())

    def to_json(self) -> dict:
        return {"total": round(self.total, 4), "stages": {k: round(v, 4) for k, v in self.stages.items()},
                "llvm_variants": [v.to_json() for v in self.variants], "llvm_processes": self.llvm_processes,
                "runtime_built": self.runtime_built, "plan_cached": self.plan_cached,
                "kernels": {"cached": self.kernels.cached, "emitted": self.kernels.emitted,
                            "compiled": self.kernels.compiled},
                "cpu": {"build": round(self.cpu.build, 4), "children": round(self.cpu.children, 4)}}

    @classmethod
    def from_json(cls, data: Mapping) -> BuildTimings:
        """The manifest's `timings` (TypeError/ValueError/KeyError when malformed)."""
        if not isinstance(data, Mapping) or not isinstance(data["stages"], Mapping):
            raise TypeError(data)
        variants = tuple(VariantTiming(str(v["cpu"]), _seconds(v["optimize"]), _seconds(v["codegen"]), int(v.get("process", 0)),
                                       _seconds(v.get("emit", 0.0))) for v in data.get("llvm_variants", []))
        kernels, cpu = data.get("kernels", {}), data.get("cpu", {})
        processes = int(data.get("llvm_processes", 1))
        return cls({str(k): _seconds(v) for k, v in data["stages"].items()}, _seconds(data["total"]), variants,
                   processes, bool(data.get("runtime_built", False)),
                   KernelCounts(int(kernels.get("cached", 0)), int(kernels.get("compiled", 0)), processes,
                                int(kernels.get("emitted", 0))),
                   bool(data.get("plan_cached", False)),
                   CpuSeconds(_seconds(cpu.get("build", 0.0)), _seconds(cpu.get("children", 0.0))))

    def table(self) -> str:
        """Stage, seconds and share of the total, one line each, then the per-variant LLVM figures."""
        total = self.total or 1.0
        lines = [f"  {'stage':<12} {'seconds':>8} {'share':>6}"]
        for name, seconds in self.stages.items():
            note = _NOTES.get(name, lambda t: "")(self)
            lines.append(f"  {name:<12} {seconds:8.3f} {seconds / total:6.1%}{note}")
        lines.append(f"  {'total':<12} {self.total:8.3f} {1:6.1%}")
        if self.cpu.total:
            lines.append(f"  CPU: {self.cpu.total:.3f} s (user + system: the build's process {self.cpu.build:.3f} s, "
                         f"its workers and tools {self.cpu.children:.3f} s)")
        if self.kernels.cached or self.kernels.compiled:
            lines.append(f"  kernels: {self.kernels.cached} cached, {self.kernels.emitted} emitted, "
                         f"{self.kernels.compiled} compiled (units with the same code once)")
        if self.variants:
            lines.append(f"  per code variant, CPU seconds summed over {self.llvm_processes} "
                         f"process{'es' if self.llvm_processes > 1 else ''}:")
        for v in self.variants:
            lines.append(f"    {v.cpu:<18} emit {v.emit:.3f} s, optimize {v.optimize:.3f} s, codegen {v.codegen:.3f} s"
                         + (f" (child {v.process})" if v.process else ""))
        return "\n".join(lines)


_NOTES = {"runtime": lambda t: " (built now, once per architecture)" if t.runtime_built else " (cached)",
          "optimize": lambda t: " (plan cached)" if t.plan_cached else ""}
"""Stage -> the note its row of the table carries."""


def _seconds(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(value)
    return float(value)
