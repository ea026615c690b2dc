"""Profile a runner: latency percentiles, per-op times, peak RSS beside the planned arena, board telemetry."""
from __future__ import annotations

import json
import posixpath
import secrets
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..errors import RunError
from ..shortnames import shorten_unique
from .artifact import Artifact
from .deploy import Deployment
from .progress import human_bytes
from .runner import DEFAULT_RUN_TIMEOUT, run_runner, upload_feeds
from .shell import LocalShell
from .ssh import Connection
from .telemetry import Telemetry, snapshot

LATENCY_KEYS = ("median", "p90", "p99", "min", "max", "mean")
OP_NAME_WIDTH = 60


@dataclass(frozen=True)
class ProfileOptions:
    runs: int = 100
    warmup: int = 10
    timeout: float = DEFAULT_RUN_TIMEOUT
    threads: int | None = None
    """The runner's --threads (None: the count the artifact was built for)."""
    feeds: Mapping[str, np.ndarray] | None = None
    """Inputs by name, checked (run/execute.check_feeds): a dynamic build's at the size to profile; None: the
    runner's own inputs (a dynamic build's at the maximum)."""


@dataclass
class ProfileReport:
    """One profile; `to_dict` is the JSON written by `profile --json`."""

    model: str
    board: str
    where: str
    emulator: str
    runs: int
    warmup: int
    latency_ms: dict[str, float]
    peak_rss_bytes: int | None
    arena_bytes: int | None
    lower_bound_bytes: int | None
    weights_bytes: int | None
    ops: list[dict] = field(default_factory=list)
    telemetry_before: Telemetry = field(default_factory=Telemetry)
    telemetry_after: Telemetry = field(default_factory=Telemetry)
    artifact: dict = field(default_factory=dict)
    """Which build was profiled: its directory, content digest and --opt (so `report` pairs them)."""
    threads: int | None = None
    """Threads the model ran on, and CPU time of all threads / wall time over the timed runs."""
    cpu_over_wall: float | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    """A dynamic build's symbols at the size profiled ({} for a static build)."""
    ranges: dict[str, list[int]] = field(default_factory=dict)
    """A dynamic build's symbols' ranges, [min, max]."""

    def to_dict(self) -> dict:
        return {
            "model": self.model, "board": self.board, "where": self.where, "emulator": self.emulator,
            "emulated": bool(self.emulator),
            "runs": self.runs, "warmup": self.warmup, "latency_ms": self.latency_ms,
            "peak_rss_bytes": self.peak_rss_bytes, "arena_bytes": self.arena_bytes,
            "lower_bound_bytes": self.lower_bound_bytes, "weights_bytes": self.weights_bytes, "ops": self.ops,
            "telemetry": {"before": self.telemetry_before.to_dict(), "after": self.telemetry_after.to_dict()},
            "artifact": self.artifact, "threads": self.threads, "cpu_over_wall": self.cpu_over_wall,
            **({"sizes": self.sizes, "ranges": self.ranges} if self.sizes else {}),
        }

    def table(self, top: int | None = None) -> str:
        lat = self.latency_ms
        via = f" through {self.emulator} (correctness only: emulated timing is not the board's)" if self.emulator else ""
        lines = [
            f"profile   {self.model} on {self.board} at {self.where}{via}",
            f"latency   median {fmt_ms(lat['median'])}  p90 {fmt_ms(lat['p90'])}  p99 {fmt_ms(lat['p99'])}  "
            f"min {fmt_ms(lat['min'])}  ({self.runs} runs after {self.warmup} warm-up)",
            f"memory    peak RSS {_bytes(self.peak_rss_bytes)}  arena {_bytes(self.arena_bytes)}"
            + (f" (lower bound {_bytes(self.lower_bound_bytes)})" if self.lower_bound_bytes is not None else "")
            + f"  weights {_bytes(self.weights_bytes)}",
            "cpu       " + _telemetry_line(self.telemetry_before, self.telemetry_after),
        ]
        if self.sizes:
            lines.insert(1, "size      " + ", ".join(f"{k}={v} (of {lo}..{hi})" for k, v in self.sizes.items()
                                                    for lo, hi in [self.ranges.get(k, (v, v))]))
        if self.threads is not None:
            lines.append(f"threads   {self.threads}" + (f"  CPU time / wall time {self.cpu_over_wall:.2f} (per-op times: wall clock)"
                                                       if self.cpu_over_wall is not None else ""))
        return "\n".join(lines + self.ops_table(top))

    def ops_table(self, top: int | None = None) -> list[str]:
        """Per-op times: every op in execution order, or the TOP slowest, slowest first; names shortened
        (uniquely) to OP_NAME_WIDTH characters."""
        if not self.ops:
            return []
        total = sum(op["ms"] for op in self.ops) or 1.0
        ops = self.ops if top is None else sorted(self.ops, key=lambda op: -op["ms"])[:top]
        names = shorten_unique([op["name"] for op in ops], OP_NAME_WIDTH)
        width = max(12, *(len(names[op["name"]]) for op in ops))
        type_width = max(8, *(len(op["type"]) for op in ops))
        title = f"top {len(ops)} of {len(self.ops)} ops by time" if top is not None else "ops in execution order"
        lines = ["", title, f"{'op':<{width}}  {'type':<{type_width}}  {'time':>10}  {'share':>6}"]
        lines += [f"{names[op['name']]:<{width}}  {op['type']:<{type_width}}  {fmt_ms(op['ms']):>10}  "
                  f"{100.0 * op['ms'] / total:5.1f}%" for op in ops]
        if len(ops) < len(self.ops):
            rest = total - sum(op["ms"] for op in ops)
            lines.append(f"... {len(self.ops) - len(ops)} more ops, {fmt_ms(rest)} ({100.0 * rest / total:.1f}%)")
        return lines

    def json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def fmt_ms(ms: float) -> str:
    return f"{ms * 1000:.1f} us" if ms < 1 else f"{ms:.3f} ms"


def _bytes(n: int | None) -> str:
    return "-" if n is None else human_bytes(n)


def _telemetry_line(before: Telemetry, after: Telemetry) -> str:
    parts = []
    if after.governor:
        parts.append(f"governor {after.governor}")
    if after.cur_mhz:
        parts.append(f"{after.cur_mhz:.0f} MHz" + (f" of {after.max_mhz:.0f}" if after.max_mhz else ""))
    if after.max_temperature is not None:
        start = f"{before.max_temperature:.1f} -> " if before.max_temperature is not None else ""
        parts.append(f"temperature {start}{after.max_temperature:.1f} C")
    if after.throttled:
        parts.append(f"throttled {after.throttled}" + (f" ({', '.join(after.throttle_flags)})" if after.throttle_flags
                                                        else " (none)"))
    return "  ".join(parts) or "(the board exposes no governor, frequency, temperature or throttle state)"


def parse_bench(stdout: str, runner: str) -> dict:
    """The runner's --bench JSON object (the last line that is one)."""
    for line in reversed(stdout.splitlines()):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    raise RunError(f"{runner} printed no benchmark JSON (is the artifact from this fluidml-xc version?)")


def profiled_sizes(artifact: Artifact, feeds: Mapping[str, np.ndarray] | None) -> dict[str, int]:
    """A dynamic build's symbols at the size the feeds give (no feeds: the runner's inputs, at the maximum)."""
    manifest = artifact.manifest
    if not manifest.symbols:
        return {}
    if feeds is None:
        return {k: int(v["max"]) for k, v in manifest.symbols.items()}
    return manifest.bind_feeds({spec.name: np.shape(feeds[spec.name]) for spec in manifest.inputs})


def make_report(artifact: Artifact, bench: dict, where: str, emulator: str,
                before: Telemetry, after: Telemetry, feeds: Mapping[str, np.ndarray] | None = None) -> ProfileReport:
    memory = artifact.manifest.memory or {}
    try:
        latency = {key: float(bench[f"{key}_ms"]) for key in LATENCY_KEYS}
    except (KeyError, TypeError, ValueError):
        raise RunError(f"the runner's benchmark JSON lacks latency fields: {sorted(bench)}") from None
    ops = [{"name": op["name"], "type": op["type"], "ms": float(op["ms"])} for op in bench.get("ops") or []]
    return ProfileReport(
        model=artifact.model_name, board=artifact.board.name, where=where, emulator=emulator,
        runs=int(bench.get("runs", 0)), warmup=int(bench.get("warmup", 0)), latency_ms=latency,
        peak_rss_bytes=bench.get("peak_rss_bytes"), arena_bytes=bench.get("arena_bytes", memory.get("arena_bytes")),
        lower_bound_bytes=memory.get("lower_bound_bytes"), weights_bytes=artifact.manifest.weights_bytes,
        ops=ops, telemetry_before=before, telemetry_after=after,
        artifact={"dir": str(artifact.path.resolve()), "digest": artifact.digest, "opt": artifact.manifest.opt},
        threads=bench.get("threads"), cpu_over_wall=bench.get("cpu_over_wall"), sizes=profiled_sizes(artifact, feeds),
        ranges={k: [int(v["min"]), int(v["max"])] for k, v in artifact.manifest.symbols.items()})


def profile_remote(conn: Connection, deployment: Deployment, artifact: Artifact,
                   options: ProfileOptions = ProfileOptions()) -> ProfileReport:
    """Run the profiling runner on the board with warm-up and N timed runs."""
    before = snapshot(conn)
    args = ["--bench", str(options.runs), "--warmup", str(options.warmup)]
    if artifact.runner(profiling=True) == "runner_prof":
        args.append("--profile")
    if options.threads is not None:
        args += ["--threads", str(options.threads)]
    scratch = posixpath.join(deployment.base_dir, f".profile-{secrets.token_hex(4)}")
    try:
        if options.feeds is not None:
            args += upload_feeds(conn, scratch, artifact.manifest.inputs, options.feeds)
        result = run_runner(conn, deployment, artifact, args, profiling=True, timeout=options.timeout)
    finally:
        if options.feeds is not None and conn.alive:
            conn.run(["rm", "-rf", "--", scratch])
    after = snapshot(conn)
    bench = parse_bench(result.out, artifact.runner(True))
    return make_report(artifact, bench, conn.label, deployment.plan.emulator, before, after, options.feeds)


def profile_local(artifact: Artifact, options: ProfileOptions = ProfileOptions()) -> ProfileReport:
    """Profile on this machine (natively, or under qemu-user for a foreign target)."""
    from ..run.execute import emulator_command, run_artifact

    local = LocalShell()
    before = snapshot(local)
    result = run_artifact(artifact.path, feeds=options.feeds, bench=options.runs, warmup=options.warmup, profile=True,
                          timeout=options.timeout, threads=options.threads)
    after = snapshot(local)
    emulator = " ".join(emulator_command(artifact.manifest))
    return make_report(artifact, result.bench or {}, "localhost", emulator.rsplit("/", 1)[-1], before, after, options.feeds)
