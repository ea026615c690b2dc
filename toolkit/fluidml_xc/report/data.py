"""What a report shows, read from artifact directories (manifest.json) and profile JSON files (`profile --json`)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..artifact import MANIFEST, ManifestError, read_manifest
from ..errors import InputError


@dataclass(frozen=True)
class MemoryPlan:
    """Per arena buffer: live steps [first, last] (inclusive, in execution order), offset and aligned size."""

    intervals: dict[str, tuple[int, int]]
    offsets: dict[str, int]
    sizes: dict[str, int]

    @property
    def steps(self) -> int:
        return max((last for _, last in self.intervals.values()), default=-1) + 1

    def live_bytes(self) -> list[int]:
        """Bytes of the buffers live at each step (what the arena must hold while that op runs)."""
        live = [0] * (self.steps + 1)
        for name, (first, last) in self.intervals.items():
            live[first] += self.sizes.get(name, 0)
            live[last + 1] -= self.sizes.get(name, 0)
        out, total = [], 0
        for delta in live[:-1]:
            total += delta
            out.append(total)
        return out

    def extent(self) -> int:
        """The highest byte any buffer reaches (equals the arena when the plan is the manifest's)."""
        return max((self.offsets[n] + self.sizes.get(n, 0) for n in self.offsets), default=0)

    def at(self, sizes: dict[str, int]) -> "MemoryPlan":
        """The same offsets and live steps with each buffer's bytes from `sizes` (a dynamic build's at its minimum)."""
        return MemoryPlan(self.intervals, self.offsets, {n: int(sizes.get(n, self.sizes.get(n, 0))) for n in self.intervals})


@dataclass(frozen=True)
class Ranges:
    """A dynamic build's ranges: one artifact for every size in them, planned at the maximum."""

    symbols: dict[str, tuple[int, int, int]]
    """Symbol -> (min, max, opt)."""
    inputs: dict[str, str]
    """Input -> its dims with the ranges ("[2, W=2..40]")."""
    plan_at_min: MemoryPlan | None
    """The plan's offsets with each buffer's bytes at the minimum of every range."""

    def text(self) -> str:
        return ", ".join(f"{k} {lo}..{hi} (opt {opt})" for k, (lo, hi, opt) in self.symbols.items())

    def at(self, end: str) -> str:
        """'W=2' at "min", 'W=40' at "max"."""
        return ", ".join(f"{k}={v[0] if end == 'min' else v[1]}" for k, v in self.symbols.items())


@dataclass(frozen=True)
class ArtifactFacts:
    """One artifact as the report shows it."""

    path: Path
    model: str
    board: str
    triple: str
    cpu: str
    threads: int
    opt: str
    weights_bytes: int
    arena_bytes: int
    lower_bound_bytes: int
    live_peak_bytes: int
    order_bound_bytes: int
    naive_bytes: int
    strategy: str
    strategies: dict[str, int]
    footprint: dict[str, int]
    tools: dict[str, str]
    ops: list[dict]
    optimizer: dict
    plan: MemoryPlan | None
    label: str = ""
    ranges: Ranges | None = None
    """A dynamic build's ranges (None: every shape static)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.model, self.board)

    def fused_ops(self) -> set[str]:
        return {op["name"] for op in self.ops if op.get("fused")}


@dataclass(frozen=True)
class ProfileFacts:
    """One profile (`fluidml-xc profile --json`), on a board or locally."""

    source: str
    model: str
    board: str
    where: str
    emulator: str
    runs: int
    threads: int
    """0 when the profile does not say."""
    latency_ms: dict[str, float]
    peak_rss_bytes: int | None
    arena_bytes: int | None
    ops: list[dict] = field(default_factory=list)
    artifact_dir: str = ""
    opt: str = ""
    label: str = ""
    sizes: dict[str, int] = field(default_factory=dict)
    """A dynamic build's symbols at the size profiled (empty: a static build, or a profile that does not say)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.model, self.board)

    @property
    def size_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.sizes.items())

    @property
    def emulated(self) -> bool:
        """Timed under an emulator (qemu-user): its times are the emulator's, never compared for speed."""
        return bool(self.emulator)

    def ops_ms(self) -> float:
        return sum(op["ms"] for op in self.ops)


def _int(value, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _plan(memory: dict) -> MemoryPlan | None:
    plan = memory.get("plan")
    if not isinstance(plan, dict) or not plan.get("intervals"):
        return None
    intervals = {name: (int(iv[0]), int(iv[1])) for name, iv in plan["intervals"].items()}
    return MemoryPlan(intervals, {n: int(plan["offsets"].get(n, 0)) for n in intervals},
                      {n: int(plan["sizes"].get(n, 0)) for n in intervals})


def load_artifact(directory: str | Path) -> ArtifactFacts:
    """The facts in DIR/manifest.json (one-line InputError when it is not an artifact)."""
    path = Path(directory)
    m = read_manifest(path)
    if m.memory is None:
        raise ManifestError(path / MANIFEST, "has no memory plan")
    memory = m.memory
    return ArtifactFacts(
        path=path, model=m.model.name or path.name, board=m.board or "?", triple=m.triple or "?", cpu=m.cpu or "?",
        threads=m.threads or 1, opt=m.opt, weights_bytes=m.weights_bytes, arena_bytes=_int(memory.get("arena_bytes")),
        lower_bound_bytes=_int(memory.get("lower_bound_bytes")), live_peak_bytes=_int(memory.get("live_peak_bytes")),
        order_bound_bytes=_int(memory.get("order_bound_bytes")), naive_bytes=_int(memory.get("naive_bytes")),
        strategy=str(memory.get("strategy", "")), strategies=dict(memory.get("strategies") or {}),
        footprint=dict(m.footprint), tools=dict(m.tools), ops=list(m.ops), optimizer=dict(m.optimizer), plan=_plan(memory),
        ranges=_ranges(m, _plan(memory), memory))


def _ranges(m, plan: MemoryPlan | None, memory: dict) -> Ranges | None:
    if not m.symbols:
        return None
    symbols = {k: (int(v["min"]), int(v["max"]), int(v["opt"])) for k, v in m.symbols.items()}

    def dims(entry) -> str:
        return "[" + ", ".join(f"{d}={symbols[d][0]}..{symbols[d][1]}" if isinstance(d, str) else str(d)
                               for d in (entry.dims or entry.shape)) + "]"
    at_min = (memory.get("plan") or {}).get("sizes_at_min")
    return Ranges(symbols, {e.name: dims(e) for e in m.inputs}, plan.at(at_min) if plan and at_min else None)


def profile_from_dict(data: dict, source: str) -> ProfileFacts:
    """A ProfileFacts from `profile --json`'s object (InputError naming `source` when fields are missing)."""
    try:
        latency = {k: float(v) for k, v in data["latency_ms"].items()}
        ops = [{"name": str(op["name"]), "type": str(op["type"]), "ms": float(op["ms"])} for op in data.get("ops") or []]
        return ProfileFacts(source=source, model=str(data["model"]), board=str(data["board"]),
                            where=str(data.get("where", "")), emulator=_emulator(data),
                            runs=_int(data.get("runs")), threads=_int(data.get("threads"), 0), latency_ms=latency,
                            peak_rss_bytes=data.get("peak_rss_bytes"), arena_bytes=data.get("arena_bytes"), ops=ops,
                            artifact_dir=str((data.get("artifact") or {}).get("dir") or ""),
                            opt=str((data.get("artifact") or {}).get("opt") or ""),
                            sizes={str(k): int(v) for k, v in (data.get("sizes") or {}).items()})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{source} is not a `fluidml-xc profile --json` result (bad or missing {exc}): "
                         f"write it with `fluidml-xc profile ... --json-out FILE`") from None


def _emulator(data: dict) -> str:
    """The emulator a profile ran under ("" natively); `emulated: true` without a name still counts."""
    name = str(data.get("emulator") or "")
    return name or ("an emulator" if data.get("emulated") else "")


def load_profile(path: str | Path) -> list[ProfileFacts]:
    """The profiles in a `profile --json` file: one, or one per host that succeeded for `--inventory` runs."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"profile {str(path)!r} does not exist: write one with `fluidml-xc profile ... --json-out FILE`") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"profile {str(path)!r} cannot be read as JSON ({type(exc).__name__}): pass the file "
                         f"`fluidml-xc profile ... --json-out FILE` wrote") from None
    if not isinstance(data, dict):
        raise InputError(f"profile {str(path)!r} is not a `fluidml-xc profile --json` result")
    if isinstance(data.get("hosts"), dict):  # profile --inventory --json
        found = [profile_from_dict(h["profile"], f"{path} ({name})") for name, h in data["hosts"].items()
                 if isinstance(h, dict) and isinstance(h.get("profile"), dict)]
        if not found:
            raise InputError(f"profile {str(path)!r} holds no successful host profile")
        return found
    return [profile_from_dict(data, str(path))]


def _distinct_labels(items: list, base) -> list[str]:
    """Short labels naming only what differs (model, board, --opt, threads); the source breaks ties."""
    labels = [base(item) for item in items]
    if len(set(labels)) < len(labels):
        labels = [f"{label} ({getattr(item, 'path', None) or getattr(item, 'source', '')})" for label, item in zip(labels, items)]
    return labels


def label_all(artifacts: list[ArtifactFacts], profiles: list[ProfileFacts]) -> tuple[list[ArtifactFacts], list[ProfileFacts]]:
    """Copies with labels: model and board, plus --opt and threads when they differ between the artifacts."""
    from dataclasses import replace

    opts = len({a.opt for a in artifacts}) > 1
    threads = len({a.threads for a in artifacts} | {p.threads for p in profiles if p.threads}) > 1
    prof_opts = len({p.opt for p in profiles}) > 1

    def art_label(a: ArtifactFacts) -> str:
        return f"{a.model} · {a.board}" + (f" · --opt {a.opt}" if opts else "") + (f" · {a.threads} threads" if threads else "")

    def prof_label(p: ProfileFacts) -> str:
        return (f"{p.model} · {p.board} @ {p.where or '?'}" + (f" · --opt {p.opt}" if prof_opts and p.opt else "")
                + (f" · {p.threads} threads" if threads and p.threads else "") + (f" · {p.size_text}" if p.sizes else "")
                + (" · emulated" if p.emulated else ""))

    arts = [replace(a, label=lab) for a, lab in zip(artifacts, _distinct_labels(artifacts, art_label))]
    profs = [replace(p, label=lab) for p, lab in zip(profiles, _distinct_labels(profiles, prof_label))]
    return arts, profs


def artifact_for(profile: ProfileFacts, artifacts: list[ArtifactFacts]) -> ArtifactFacts | None:
    """The artifact a profile was taken of: same model and board, then the same directory, --opt, threads and
    arena size, the first when several match."""
    matches = [a for a in artifacts if a.key == profile.key]
    matches.sort(key=lambda a: (str(a.path.resolve()) != profile.artifact_dir, a.opt != (profile.opt or a.opt),
                                a.threads != (profile.threads or a.threads), a.arena_bytes != profile.arena_bytes))
    return matches[0] if matches else None
