"""The report page: one self-contained HTML file (inline CSS and SVG, no script, no network)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import jinja2

from .. import __version__
from . import plots
from .data import ArtifactFacts, ProfileFacts, artifact_for

TABLE_ROWS = 20

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1020px; padding: 16px; color: #222; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border-bottom: 1px solid #eee; padding: 3px 10px 3px 0; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure.plot { margin: 8px 0 16px; } figure.plot svg { width: 100%; height: auto; display: block; }
figcaption, .muted { color: #666; font-size: 12px; }
code { font-size: 12px; } nav a { margin-right: 12px; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="muted">fluidml-xc {{ version }} · {{ artifacts|length }} artifact(s), {{ profiles|length }} profile(s)</p>
<nav>{% for a in artifacts %}<a href="#artifact-{{ loop.index0 }}">{{ a.label }}</a>{% endfor %}{% if compare or latency_rows %}<a href="#compare">side by side</a>{% endif %}</nav>

{% if artifacts %}
<h2 id="summary">Summary</h2>
<table class="summary">
<tr><th></th>{% for a in artifacts %}<th>{{ a.label }}</th>{% endfor %}</tr>
{% for name, cells in summary %}<tr><th>{{ name }}</th>{% for c in cells %}<td class="{{ 'n' if c.num else '' }}">{{ c.text }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% endif %}

{% if compare or latency_rows %}
<h2 id="compare">Side by side</h2>
{% if speed_note %}<p class="muted emulated-note">{{ speed_note }}</p>{% endif %}
{% for fig in compare %}<figure class="plot {{ fig.kind }}" id="{{ fig.id }}">{{ fig.svg|safe }}<figcaption>{{ fig.caption }}</figcaption></figure>
{% endfor %}
{% if latency_rows %}
<table><tr><th>profile</th><th>where</th><th>median</th><th>p90</th><th>p99</th><th>min</th><th>peak RSS</th><th>vs first native</th></tr>
{% for r in latency_rows %}<tr><td>{{ r.label }}</td><td>{{ r.where }}</td><td class="n">{{ r.median }}</td><td class="n">{{ r.p90 }}</td><td class="n">{{ r.p99 }}</td><td class="n">{{ r.min }}</td><td class="n">{{ r.rss }}</td><td class="n">{{ r.ratio }}</td></tr>
{% endfor %}</table>
{% endif %}
{% endif %}

{% for s in sections %}
<h2 id="{{ s.id }}">{{ s.title }}</h2>
{% if s.note %}<p class="muted">{{ s.note }}</p>{% endif %}
{% for fig in s.figures %}<figure class="plot {{ fig.kind }}" id="{{ fig.id }}">{{ fig.svg|safe }}<figcaption>{{ fig.caption }}</figcaption></figure>
{% endfor %}
{% for t in s.tables %}<h3>{{ t.title }}</h3>
{% if t.note %}<p class="muted">{{ t.note }}</p>{% endif %}
<table class="{{ t.kind }}"><tr>{% for h in t.header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for c in row %}<td class="{{ 'n' if c.num else '' }}">{{ c.text }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% endfor %}
{% endfor %}
</body>
</html>
"""


@dataclass(frozen=True)
class Cell:
    text: str
    num: bool = False


@dataclass
class Figure:
    id: str
    kind: str
    svg: str
    caption: str


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[Cell]]
    kind: str = ""
    note: str = ""


@dataclass
class Section:
    id: str
    title: str
    note: str = ""
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


def kib(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:,.1f} KiB" if n < (1 << 20) else f"{n / (1 << 20):,.2f} MiB"


def ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.1f} µs" if v < 1 else f"{v:.3f} ms"


def _summary(arts: list[ArtifactFacts]) -> list[tuple[str, list[Cell]]]:
    def row(name: str, fn, num: bool = False) -> tuple[str, list[Cell]]:
        return name, [Cell(fn(a), num) for a in arts]

    return [
        row("model", lambda a: a.model), row("board", lambda a: a.board), row("triple", lambda a: a.triple),
        row("cpu", lambda a: a.cpu), row("threads", lambda a: str(a.threads), True), row("--opt", lambda a: a.opt),
        row("ops", lambda a: str(len(a.ops)), True),
        *(_range_rows(arts) if any(a.ranges for a in arts) else []),
        row("weights", lambda a: kib(a.weights_bytes), True),
        row("arena", lambda a: kib(a.arena_bytes) + (f" (planned at max {a.ranges.at('max')})" if a.ranges else ""), True),
        row("lower bound", lambda a: kib(a.lower_bound_bytes), True),
        row("arena / lower bound", lambda a: f"{a.arena_bytes / a.lower_bound_bytes:.3f}" if a.lower_bound_bytes else "-", True),
        row("live peak", lambda a: kib(a.live_peak_bytes), True),
        row("order bound", lambda a: kib(a.order_bound_bytes) if a.order_bound_bytes else "not proven", True),
        row("no reuse", lambda a: kib(a.naive_bytes), True), row("placement", lambda a: a.strategy),
        *[row(f"ELF {sec}", lambda a, s=sec: kib(a.footprint.get(s)), True) for sec in ("text", "rodata", "data", "bss")],
        row("build tools", lambda a: ", ".join(f"{k} {v}" for k, v in a.tools.items())),
        row("directory", lambda a: str(a.path)),
    ]


def _range_rows(arts: list[ArtifactFacts]) -> list[tuple[str, list[Cell]]]:
    """A dynamic build's ranges, its inputs' dims and its memory at the minimum (static builds: "static")."""
    def row(name: str, fn, num: bool = False) -> tuple[str, list[Cell]]:
        return name, [Cell(fn(a.ranges) if a.ranges else "static", num) for a in arts]

    def at_min(r, fn) -> str:
        return f"{kib(fn(r.plan_at_min))} at min {r.at('min')}" if r.plan_at_min else "-"
    return [row("ranges", lambda r: r.text()),
            row("inputs", lambda r: "; ".join(f"{n} {d}" for n, d in r.inputs.items())),
            row("arena in use at min", lambda r: at_min(r, lambda p: p.extent()), True),
            row("live peak at min", lambda r: at_min(r, lambda p: max(p.live_bytes(), default=0)), True)]


def _decisions(art: ArtifactFacts) -> list[Table]:
    opt = art.optimizer
    segs = opt.get("segments") or []
    seg_rows = [[Cell(str(k), True), Cell(str(s.get("length")), True), Cell(ms(s.get("cost_ns", 0) / 1e6), True),
                 Cell(s.get("first", "")), Cell(s.get("last", ""))] for k, s in enumerate(segs[:TABLE_ROWS])]
    gains = opt.get("gains_ns") or {}
    layouts = sorted((opt.get("non_row_major") or {}).items(), key=lambda kv: -(gains.get(kv[0]) or 0))
    lay_rows = [[Cell(name), Cell(str(perm)), Cell(ms((gains.get(name) or 0) / 1e6), True)]
                for name, perm in layouts[:TABLE_ROWS]]
    under = opt.get("kernel_layouts") or {}
    orders = list((opt.get("loop_orders") or {}).items())
    ord_rows = [[Cell(name), Cell(order), Cell(under.get(name, ""))] for name, order in orders[:TABLE_ROWS]]
    more = lambda n: f"first {TABLE_ROWS} of {n}" if n > TABLE_ROWS else ""  # noqa: E731
    predicted = (f"predicted {ms(opt.get('predicted_ns', 0) / 1e6)} vs {ms(opt.get('row_major_ns', 0) / 1e6)} "
                 f"all row-major; {opt.get('variable_tensors', 0)} tensors free, {opt.get('pinned_tensors', 0)} pinned")
    return [
        Table(f"FluidML segments ({len(segs)})", ["#", "ops", "cost", "first", "last"], seg_rows, "segments", more(len(segs))),
        Table(f"layouts that are not row-major ({len(layouts)})", ["tensor", "order", "predicted gain"], lay_rows, "layouts",
              "; ".join(x for x in (predicted, more(len(layouts))) if x)),
        Table(f"loop orders ({len(orders)} heavy kernels)", ["kernel", "order", "layouts in -> out"], ord_rows, "loop-orders",
              more(len(orders))),
    ]


def _profile_tables(prof: ProfileFacts, fused: set[str]) -> Table:
    total = prof.ops_ms() or 1.0
    fused_ms = sum(op["ms"] for op in prof.ops if op["name"] in fused)
    lat = prof.latency_ms
    via = f" through {prof.emulator} (emulated timing is not the board's)" if prof.emulator else ""
    rows = [[Cell(k), Cell(v, True)] for k, v in (
        ("median", ms(lat.get("median"))), ("p90", ms(lat.get("p90"))), ("p99", ms(lat.get("p99"))),
        ("min", ms(lat.get("min"))), ("runs", str(prof.runs)), ("peak RSS", kib(prof.peak_rss_bytes)),
        ("arena", kib(prof.arena_bytes)), ("threads", str(prof.threads or "-")),
        ("fused kernels' share of op time", f"{100 * fused_ms / total:.1f}%" if prof.ops else "-"))]
    if prof.sizes:
        rows.insert(0, [Cell("size profiled"), Cell(prof.size_text)])
    at = f" at size {prof.size_text}" if prof.sizes else ""
    return Table(f"profile at {prof.where}{at}{via}", ["", ""], rows, "latency", f"from {prof.source}")


def _latency_rows(profiles: list[ProfileFacts]) -> list[dict]:
    """One row per profile; the ratio to the first profile timed natively, none for emulated ones."""
    native = [p for p in profiles if not p.emulated]
    first = (native[0].latency_ms.get("median") or 0) if native else 0

    def ratio(p: ProfileFacts) -> str:
        if p.emulated:
            return "emulated: not compared"
        return f"{p.latency_ms.get('median', 0) / first:.2f}x" if first else "-"
    return [{"label": p.label, "where": p.where + (f" via {p.emulator} (emulated)" if p.emulated else "")
             + (f", size {p.size_text}" if p.sizes else ""),
             "median": ms(p.latency_ms.get("median")), "p90": ms(p.latency_ms.get("p90")),
             "p99": ms(p.latency_ms.get("p99")), "min": ms(p.latency_ms.get("min")), "rss": kib(p.peak_rss_bytes),
             "ratio": ratio(p)} for p in profiles]


def _speed_figures(profiles: list[ProfileFacts]) -> tuple[list[Figure], str]:
    """Latency side by side and per-op deltas against the first profile, over the profiles timed natively only
    (an emulator's times say nothing about a board's speed), and a note naming the emulated ones left out."""
    native = [p for p in profiles if not p.emulated]
    emulated = [p for p in profiles if p.emulated]
    note = ("not compared for speed (timed under an emulator, whose times are not the board's): "
            + ", ".join(p.label for p in emulated)) if emulated else ""
    figures: list[Figure] = []
    if len(native) > 1:
        figures.append(Figure("compare-latency", "compare-latency", plots.compare_latency(native, "cl"),
                              "median latency per profile timed natively"))
        base = native[0]
        for j, other in enumerate(native[1:], 1):
            if other.model == base.model and other.ops and base.ops:
                figures.append(Figure(f"op-deltas-{j}", "op-deltas", plots.op_deltas(base, other, f"od{j}"),
                                      f"per-op time of {other.label} minus {base.label}"))
    return figures, note


def render(artifacts: list[ArtifactFacts], profiles: list[ProfileFacts], title: str = "") -> str:
    """The whole page. Artifacts and profiles must carry labels (data.label_all)."""
    sections: list[Section] = []
    used: set[int] = set()
    for i, art in enumerate(artifacts):
        sec = Section(f"artifact-{i}", art.label, f"{art.path} · {art.triple} · cpu {art.cpu}")
        if art.plan:
            at_max = f", at the maximum {art.ranges.at('max')}" if art.ranges else ""
            sec.figures.append(Figure(f"memory-map-{i}", "memory-map", plots.memory_map(art, f"mm{i}"),
                                      f"each bar is one tensor: its live steps (x) at its arena offset (y){at_max}"))
            sec.figures.append(Figure(f"live-bytes-{i}", "live-bytes", plots.live_bytes(art, f"lb{i}"),
                                      f"bytes live while each op runs, against the arena and the bounds{at_max}"))
            if art.ranges and art.ranges.plan_at_min:
                small = replace(art, plan=art.ranges.plan_at_min)
                sec.figures.append(Figure(f"memory-map-min-{i}", "memory-map", plots.memory_map(small, f"mn{i}"),
                                          f"the same offsets at the minimum {art.ranges.at('min')}: each buffer's bytes there"))
        else:
            sec.note = "this manifest has no per-buffer memory plan (built by an older fluidml-xc): rebuild for the memory map"
        if art.ranges:
            sec.note += (f" · one build for {art.ranges.text()}: the arena is planned at the maximum and serves every "
                         "size in the ranges")
        for j, prof in enumerate(profiles):
            if artifact_for(prof, artifacts) is art:
                used.add(j)
                _add_profile(sec, prof, art.fused_ops(), f"{i}-{j}")
        sec.tables += _decisions(art)
        sections.append(sec)
    for j, prof in enumerate(profiles):
        if j not in used:
            sec = Section(f"profile-{j}", prof.label, "no artifact directory given for this profile (fused kernels unknown)")
            _add_profile(sec, prof, set(), f"p{j}")
            sections.append(sec)
    compare: list[Figure] = []
    if len(artifacts) > 1:
        compare.append(Figure("compare-memory", "compare-memory", plots.compare_memory(artifacts, "cm"),
                              "arena, lower bound, live peak and weights per artifact"))
    speed_note = ""
    if len(profiles) > 1:
        speed, speed_note = _speed_figures(profiles)
        compare += speed
    title = title or "fluidml-xc report: " + ", ".join(dict.fromkeys(a.model for a in artifacts) or
                                                        dict.fromkeys(p.model for p in profiles))
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(TEMPLATE).render(
        title=title, version=__version__, artifacts=artifacts, profiles=profiles, summary=_summary(artifacts),
        compare=compare, speed_note=speed_note, latency_rows=_latency_rows(profiles) if len(profiles) > 1 else [], sections=sections)


def _add_profile(sec: Section, prof: ProfileFacts, fused: set[str], key: str) -> None:
    sec.tables.insert(0, _profile_tables(prof, fused))
    if prof.ops:
        sec.figures.append(Figure(f"top-ops-{key}", "top-ops", plots.top_ops(prof, fused, f"to{key}"),
                                  f"per-op times from {prof.source}"))
        sec.figures.append(Figure(f"by-type-{key}", "by-type", plots.time_by_type(prof, fused, f"bt{key}"),
                                  "time by op type"))
