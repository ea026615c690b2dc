"""The report's plots: matplotlib figures (no pyplot state) rendered to inline SVG text."""
from __future__ import annotations

import io
import re
from collections import defaultdict

from ..extras import require
from ..shortnames import shorten_unique
from .data import ArtifactFacts, ProfileFacts

FUSED = "#d95f02"
PLAIN = "#1b9e77"
ARENA = "#d62728"
BOUND = "#7570b3"
ORDER = "#e7298a"
TOP_OPS = 15


def _mpl():
    matplotlib = require("matplotlib", "report", "`fluidml-xc report`")
    from matplotlib.figure import Figure

    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False, "svg.hashsalt": None})
    return Figure


def _figure(width: float, height: float):
    return _mpl()(figsize=(width, height), layout="constrained")


def to_svg(fig, key: str) -> str:
    """The figure as an <svg> element; `key` salts matplotlib's ids so several plots on one page never share one."""
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": key}):
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return re.sub(r"\s*<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.S)


def _unit(largest: float) -> tuple[float, str]:
    return (1 << 20, "MiB") if largest >= (1 << 20) else (1024, "KiB")


LABEL_WIDTH = 34
"""Op names on a plot's axis are shortened (uniquely) to this many characters."""


def memory_map(art: ArtifactFacts, key: str) -> str:
    """Every planned buffer as a bar over its live steps at its arena offset; arena and bounds as lines."""
    from matplotlib import colormaps

    plan = art.plan
    div, unit = _unit(max(art.arena_bytes, plan.extent()))
    fig = _figure(9.5, 4.2)
    ax = fig.add_subplot()
    colors = colormaps["tab20"]
    names = sorted(plan.intervals, key=lambda n: (plan.intervals[n][0], plan.offsets[n]))
    for k, name in enumerate(names):
        first, last = plan.intervals[name]
        ax.bar(first - 0.45, plan.sizes[name] / div, width=last - first + 0.9, bottom=plan.offsets[name] / div,
               align="edge", color=colors(k % 20), edgecolor="#333333", linewidth=0.3)
    ax.axhline(art.arena_bytes / div, color=ARENA, linewidth=1.2, label=f"arena {art.arena_bytes / div:,.2f} {unit}")
    if art.lower_bound_bytes:
        ax.axhline(art.lower_bound_bytes / div, color=BOUND, linestyle="--", linewidth=1,
                   label=f"lower bound {art.lower_bound_bytes / div:,.2f} {unit}")
    ax.set_xlim(-1, max(plan.steps, 1))
    ax.set_ylim(0, max(art.arena_bytes, plan.extent()) / div * 1.12 or 1)
    ax.set_xlabel("execution step (op index)")
    ax.set_ylabel(f"arena offset ({unit})")
    ax.set_title(f"memory map: {len(names)} buffers in one arena ({art.strategy})", loc="left")
    ax.legend(loc="upper right", fontsize=8, frameon=False, ncols=2)
    return to_svg(fig, key)


def live_bytes(art: ArtifactFacts, key: str) -> str:
    """Live bytes at each op against the arena, the order bound and the order-independent lower bound."""
    live = art.plan.live_bytes()
    peak = max(live, default=0)
    div, unit = _unit(max(art.arena_bytes, peak))
    fig = _figure(9.5, 3.2)
    ax = fig.add_subplot()
    steps = list(range(len(live)))
    ax.fill_between(steps, [v / div for v in live], step="mid", color=PLAIN, alpha=0.35, linewidth=0)
    ax.step(steps, [v / div for v in live], where="mid", color=PLAIN, linewidth=1.2,
            label=f"live bytes (peak {peak / div:,.2f} {unit})")
    ax.axhline(art.arena_bytes / div, color=ARENA, linewidth=1.2, label=f"arena {art.arena_bytes / div:,.2f} {unit}")
    if art.lower_bound_bytes:
        ax.axhline(art.lower_bound_bytes / div, color=BOUND, linestyle="--", linewidth=1,
                   label=f"lower bound {art.lower_bound_bytes / div:,.2f} {unit}")
    if art.order_bound_bytes and art.order_bound_bytes != art.lower_bound_bytes:
        ax.axhline(art.order_bound_bytes / div, color=ORDER, linestyle=":", linewidth=1,
                   label=f"order bound {art.order_bound_bytes / div:,.2f} {unit}")
    ax.set_xlim(-0.5, max(len(live) - 0.5, 0.5))
    ax.set_ylim(0, max(art.arena_bytes, peak) / div * 1.25 or 1)
    ax.set_xlabel("execution step (op index)")
    ax.set_ylabel(unit)
    ax.set_title("live bytes per op", loc="left")
    ax.legend(loc="upper right", fontsize=8, frameon=False, ncols=2)
    return to_svg(fig, key)


def top_ops(profile: ProfileFacts, fused: set[str], key: str) -> str:
    """The slowest ops (horizontal bars), fused kernels in their own colour."""
    ops = sorted(profile.ops, key=lambda op: -op["ms"])[:TOP_OPS][::-1]
    fig = _figure(9.5, 0.6 + 0.24 * max(len(ops), 3))
    ax = fig.add_subplot()
    ax.barh(range(len(ops)), [op["ms"] for op in ops], color=[FUSED if op["name"] in fused else PLAIN for op in ops])
    short = shorten_unique([op["name"] for op in ops], LABEL_WIDTH)
    ax.set_yticks(range(len(ops)), [f"{short[op['name']]} ({op['type']})" for op in ops], fontsize=7)
    ax.set_xlabel("ms per run")
    ax.set_title(f"top {len(ops)} ops by time (orange: fused kernels)", loc="left")
    return to_svg(fig, key)


def time_by_type(profile: ProfileFacts, fused: set[str], key: str) -> str:
    """Time per op type, split into fused kernels and the rest."""
    plain, fusedms = defaultdict(float), defaultdict(float)
    for op in profile.ops:
        (fusedms if op["name"] in fused else plain)[op["type"]] += op["ms"]
    types = sorted(set(plain) | set(fusedms), key=lambda t: -(plain[t] + fusedms[t]))[:TOP_OPS][::-1]
    fig = _figure(9.5, 0.6 + 0.24 * max(len(types), 3))
    ax = fig.add_subplot()
    y = range(len(types))
    ax.barh(y, [plain[t] for t in types], color=PLAIN, label="kernels of one node")
    ax.barh(y, [fusedms[t] for t in types], left=[plain[t] for t in types], color=FUSED, label="fused kernels")
    ax.set_yticks(list(y), types, fontsize=8)
    ax.set_xlabel("ms per run")
    ax.set_title("time by op type", loc="left")
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    return to_svg(fig, key)


def compare_memory(arts: list[ArtifactFacts], key: str) -> str:
    """Arena, lower bound, live peak, weights and ELF text per artifact, grouped bars."""
    series = [("arena", "arena_bytes", ARENA), ("lower bound", "lower_bound_bytes", BOUND),
              ("live peak", "live_peak_bytes", PLAIN), ("weights", "weights_bytes", "#666666")]
    div, unit = _unit(max(max(getattr(a, attr) for _, attr, _ in series) for a in arts))
    fig = _figure(9.5, 0.8 + 0.6 * len(arts))
    ax = fig.add_subplot()
    height = 0.8 / len(series)
    for k, (label, attr, color) in enumerate(series):
        ax.barh([i + k * height for i in range(len(arts))], [getattr(a, attr) / div for a in arts], height=height,
                color=color, label=label)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(arts))], [a.label for a in arts], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title("memory side by side", loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    return to_svg(fig, key)


def compare_latency(profiles: list[ProfileFacts], key: str) -> str:
    """Median with the p90 and min as whiskers, per profile."""
    fig = _figure(9.5, 0.8 + 0.45 * len(profiles))
    ax = fig.add_subplot()
    med = [p.latency_ms.get("median", 0.0) for p in profiles]
    lo = [max(m - p.latency_ms.get("min", m), 0) for m, p in zip(med, profiles)]
    hi = [max(p.latency_ms.get("p90", m) - m, 0) for m, p in zip(med, profiles)]
    ax.barh(range(len(profiles)), med, xerr=[lo, hi], color=PLAIN, capsize=3)
    ax.set_yticks(range(len(profiles)), [p.label for p in profiles], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per run (median; whiskers: min .. p90)")
    ax.set_title("latency side by side", loc="left")
    return to_svg(fig, key)


def op_deltas(base: ProfileFacts, other: ProfileFacts, key: str) -> str:
    """Per-op time of `other` minus `base` for the ops both ran, the largest changes."""
    before = {op["name"]: op["ms"] for op in base.ops}
    deltas = [(op["name"], op["type"], op["ms"] - before[op["name"]]) for op in other.ops if op["name"] in before]
    deltas = sorted(deltas, key=lambda d: -abs(d[2]))[:TOP_OPS][::-1]
    fig = _figure(9.5, 0.7 + 0.24 * max(len(deltas), 3))
    ax = fig.add_subplot()
    ax.barh(range(len(deltas)), [d[2] for d in deltas], color=[ARENA if d[2] > 0 else PLAIN for d in deltas])
    short = shorten_unique([d[0] for d in deltas], LABEL_WIDTH)
    ax.set_yticks(range(len(deltas)), [f"{short[d[0]]} ({d[1]})" for d in deltas], fontsize=7)
    ax.axvline(0, color="#333333", linewidth=0.8)
    ax.set_xlabel(f"ms per run: {other.label} minus {base.label}")
    ax.set_title("per-op deltas (red: slower, green: faster)", loc="left")
    return to_svg(fig, key)


def safe_key(*parts: object) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", "-".join(str(p) for p in parts))
