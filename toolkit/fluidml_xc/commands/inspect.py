"""`fluidml-xc inspect DIR`: the optimizer's and the memory planner's decisions for a built artifact."""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from ..artifact import Manifest, read_manifest
from ..results import emit
from ..shortnames import shorten_unique
from .output import add_json_arguments
from .paths import check_artifact_argument

NAME = "inspect"
HELP = "show an artifact's plan: segments, layouts, loop orders, memory plan and map"
ORDER = 60

MAP_WIDTH = 64
MAP_ROWS = 24
LEGEND_WIDTH = 24


def add_arguments(parser) -> None:
    parser.add_argument("dir", nargs="?", type=Path, help="artifact directory (default: the last build)")
    add_json_arguments(parser)
    parser.add_argument("--segments", type=int, default=12, metavar="N", help="segments to list (default 12)")


def _kb(n: int) -> str:
    return f"{n:,} B ({n / 1024:.1f} KiB)"


def memory_map(intervals: dict, offsets: dict, sizes: dict, arena: int, steps: int, width: int = MAP_WIDTH,
               rows: int = MAP_ROWS) -> list[str]:
    """Rows = execution steps (bucketed), columns = arena bytes; a letter per buffer live there."""
    if arena <= 0 or steps <= 0:
        return ["(empty arena)"]
    names = sorted(intervals, key=lambda n: (intervals[n][0], offsets.get(n, 0)))
    letters = {n: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"[k % 62] for k, n in enumerate(names)}
    per_row = max(1, -(-steps // rows))
    lines = []
    for r in range(0, steps, per_row):
        cells = ["."] * width
        for n in names:
            start, end = intervals[n]
            if end < r or start >= r + per_row:
                continue
            off, size = offsets.get(n, 0), sizes.get(n, 0)
            a = off * width // arena
            b = max(a + 1, -(-(off + size) * width // arena))
            for c in range(a, min(b, width)):
                cells[c] = letters[n]
        lines.append(f"  step {r:>4}-{min(r + per_row, steps) - 1:<4} |{''.join(cells)}|")
    shown = shorten_unique(names[:12], LEGEND_WIDTH)
    legend = ", ".join(f"{letters[n]}={shown[n]}" for n in names[:12])
    lines.append(f"  legend: {legend}{', ...' if len(names) > 12 else ''}")
    return lines


def main(args) -> int:
    from ..remote.artifact import resolve_artifact_dir

    check_artifact_argument(args.dir, NAME)
    directory = resolve_artifact_dir(str(args.dir) if args.dir else None)
    manifest = read_manifest(directory)
    opt = manifest.optimizer
    mem = manifest.memory or {}
    api = manifest.c_api or {"name": None, "prefix": "fxc_", "macro_prefix": "FXC_", "header": "model.h",
                                    "library": "libmodel.a", "runtime_library": None}
    emit({"c_api": api, "optimizer": opt, "memory": mem} | ({"precision": dict(manifest.precision)} if manifest.precision else {}),
         args.json, args.json_out)
    if args.json:
        return 0
    print(f"{manifest.model.name} for {manifest.board} ({manifest.triple}), --opt {manifest.opt}, "
          f"costs {opt.get('costs', 'analytic')}" + (f", optimizer {opt['seconds'] * 1e3:.0f} ms" if 'seconds' in opt else ""))
    print(f"C API: name {api['name'] or '(none)'}, {api['prefix']}* / {api['macro_prefix']}* in {api['header']}, "
          f"{api['library']}" + (f" + the shared runtime {api['runtime_library']}" if api["runtime_library"] else " (runtime inside)"))
    _print_precision(manifest)
    _print_inputs(manifest)
    segments = opt.get("segments", [])
    print(f"\nsegments: {len(segments)} (longest cost-weighted sequence first)")
    for k, seg in enumerate(segments[: args.segments]):
        print(f"  #{k:<3} length {seg['length']:>4}  cost {seg['cost_ns'] / 1e3:>10.1f} us   {seg['first']} .. {seg['last']}")
    if len(segments) > args.segments:
        print(f"  ... {len(segments) - args.segments} more")
    layouts = opt.get("non_row_major", {})
    gains = opt.get("gains_ns", {})
    print(f"\nlayouts: {len(layouts)} tensors not row-major "
          f"({opt.get('variable_tensors', 0)} free, {opt.get('pinned_tensors', 0)} pinned row-major); "
          f"predicted {opt.get('predicted_ns', 0) / 1e3:.1f} us vs {opt.get('row_major_ns', 0) / 1e3:.1f} us row-major")
    for name, perm in sorted(layouts.items(), key=lambda kv: -(gains.get(kv[0]) or 0)):
        print(f"  {name}  order {perm}  predicted gain {gains.get(name, 0) / 1e3:.2f} us")
    views = opt.get("views", [])
    if views:
        print(f"  {len(views)} Transposes are byte copies under these layouts and became views (no kernel):")
        for name in views:
            print(f"    {name}")
    for vote in opt.get("votes", [])[:8]:
        print(f"  vote on {vote['tensor']}: {vote['penalties']} -> {vote['winner']}")
    orders = opt.get("loop_orders", {})
    print(f"\nloop orders: {len(orders)} heavy kernels" + ("" if orders else " (kernel defaults)"))
    kinds = {"ikj": "register-blocked outer products", "ijk": "register-blocked dot products",
             "jki": "register-blocked outer products on C^T", "kij": "scalar",
             "co>px": "Conv: output-channel blocks outermost", "px>co": "Conv: pixel rows outermost",
             **{f"wino{m}": f"Conv: Winograd F({m}x{m}, 3x3)" for m in (2, 4, 6)},
             **{f"wimg{m}": f"Conv: Winograd F({m}x{m}, 3x3), whole image" for m in (2, 4, 6)}}
    under = opt.get("kernel_layouts", {})
    for name, order in orders.items():
        print(f"  {name}: {order} ({kinds.get(order, '')})" + (f"  under {under[name]}" if name in under else ""))
    _winograd(opt.get("winograd", {}))
    split = manifest.parallel_ops
    print(f"\nthreads: {manifest.threads}; {len(split)} ops split into tiles (tiles per split dimension; "
          "the rest run on the calling thread)")
    for name, dims in split.items():
        print(f"  {name}: {' x '.join(str(d) for d in dims)} = {math.prod(dims)} tiles")
    print("\nmemory plan:")
    if mem:
        print(f"  arena       {_kb(mem['arena_bytes'])}  strategy {mem['strategy']} (winner)")
        lb, peak = mem.get("lower_bound_bytes", 0), mem.get("live_peak_bytes", 0)
        print(f"  lower bound {_kb(lb)}  (order-independent: max bytes one op reads+writes)"
              + (f"  arena/lb {mem['arena_bytes'] / lb:.3f}" if lb else ""))
        print(f"  live peak   {_kb(peak)}  (chosen execution order)" + (f"  arena/peak {mem['arena_bytes'] / peak:.3f}" if peak else ""))
        best = mem.get("order_bound_bytes", 0)
        if best:
            tight = max(best, lb)
            print(f"  order bound {_kb(best)}  (least live peak over all execution orders, proven by exact search)"
                  f"  arena/max(lb, order bound) {mem['arena_bytes'] / tight:.3f}")
        elif "order_bound_bytes" in mem:
            print("  order bound not proven (--opt plain keeps the model's order, or the exact order search ran out of budget)")
        print(f"  naive       {_kb(mem.get('naive_bytes', 0))}  (no reuse)")
        for name, size in sorted(mem.get("strategies", {}).items(), key=lambda kv: kv[1]):
            mark = "  <- winner" if name == mem["strategy"] else ""
            print(f"    {name:<20} {size:>12,} B{mark}")
        plan = mem.get("plan") or _replan(manifest, Path(directory))
        print("\nmemory map (rows: execution steps, columns: arena bytes):")
        if plan:
            steps = max((e for _, e in plan["intervals"].values()), default=-1) + 1
            for line in memory_map({k: tuple(v) for k, v in plan["intervals"].items()}, plan["offsets"], plan["sizes"],
                                   mem["arena_bytes"], steps):
                print(line)
        else:
            print("  " + _fallback_map(mem))
        if manifest.symbols and plan and "sizes_at_min" in plan:
            _print_at_min(manifest, mem, plan)
    return 0


def _live_peak(intervals: Mapping, sizes: Mapping) -> int:
    steps = max((e for _, e in intervals.values()), default=-1) + 1
    return max((sum(sizes[r] for r, (s, e) in intervals.items() if s <= t <= e) for t in range(steps)), default=0)


def _print_at_min(manifest: Manifest, mem: Mapping, plan: Mapping) -> None:
    """A dynamic build's plan at the minimum of every range: the same offsets, each buffer's bytes there."""
    at_min = ", ".join(f"{k}={v['min']}" for k, v in manifest.symbols.items())
    at_max = ", ".join(f"{k}={v['max']}" for k, v in manifest.symbols.items())
    intervals = {k: tuple(v) for k, v in plan["intervals"].items()}
    peak_max, peak_min = _live_peak(intervals, plan["sizes"]), _live_peak(intervals, plan["sizes_at_min"])
    tail = mem.get("dynamic_tail_bytes", 0)
    print(f"\ndynamic shapes: the arena is planned at the maximum ({at_max}) and serves every size down to the "
          f"minimum ({at_min})")
    print(f"  at max: live peak {_kb(peak_max)} of the arena {_kb(mem['arena_bytes'])}"
          + (f" (+ {_kb(tail)} tail: dims slots, staged inputs)" if tail else ""))
    print(f"  at min: live peak {_kb(peak_min)} (bytes in use at the same offsets)")
    for name, offset in mem.get("staged_inputs", {}).items():
        where = "in a gap of the plan" if offset < mem["arena_bytes"] else "after the tail"
        print(f"  input {name} staged with the maximum's strides at offset {offset:,} ({where})")
    print("memory map at min (rows: execution steps, columns: arena bytes):")
    steps = max((e for _, e in intervals.values()), default=-1) + 1
    for line in memory_map(intervals, plan["offsets"], plan["sizes_at_min"], mem["arena_bytes"], steps):
        print(line)


def _print_inputs(manifest: Manifest) -> None:
    """Each input's declared shape (with the model's dimension names) beside the shape it was built for."""
    if not manifest.inputs and not manifest.bound:
        print("\ninputs: none (the model computes its outputs from constants)")
        return
    print("\ninputs: declared by the model -> built")
    width = max([len(e.name) for e in manifest.inputs] + [len(n) for n in manifest.bound])
    for entry in manifest.inputs:
        dims = manifest.declared_shapes.get(entry.name)
        declared = "(not recorded)" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
        built = "x".join(map(str, entry.dims or entry.shape)) or "scalar"
        ranges = [f"{d}={manifest.symbols[d]['min']}..{manifest.symbols[d]['max']}" for d in entry.dims if isinstance(d, str)]
        print(f"  {entry.name:<{width}}  {declared} -> {built} {entry.dtype}" + (f" ({', '.join(ranges)})" if ranges else ""))
    for name, bound in manifest.bound.items():
        value = bound.get("value")
        shown = f"the file {bound.get('file')}" if value is None else value[0] if bound.get("shape") == [] else value
        print(f"  {name:<{width}}  bound at build time (--bind) to {shown}")


def _winograd(convs: Mapping) -> None:
    """The convs run as Winograd and their weight growth (docs/WINOGRAD.md)."""
    if not convs:
        return
    before = sum(c["weight_bytes"] for c in convs.values())
    after = sum(c["transformed_bytes"] for c in convs.values())
    print(f"\nwinograd: {len(convs)} convs, weights {_kb(before)} -> {_kb(after)} ({after / max(before, 1):.2f}x)")
    for name, c in convs.items():
        whole = f"  whole image: V {_kb(c['v_bytes'])} in the arena ({name}.winograd_v)" if "v_bytes" in c else ""
        print(f"  {name}: F({c['m']}x{c['m']}, 3x3)  weights {_kb(c['weight_bytes'])} -> {_kb(c['transformed_bytes'])} "
              f"({c['transformed_bytes'] / max(c['weight_bytes'], 1):.2f}x){whole}")


def _print_precision(manifest: Manifest) -> None:
    """build --precision fp16: the weights and activations by float dtype (docs/FP16.md)."""
    p = manifest.precision
    if not p:
        return

    def split(kind: str) -> str:
        return " + ".join(f"{_kb(n)} {dt}" for dt, n in p.get(kind, {}).items()) or "none"
    print(f"precision {p.get('mode')}: weights {split('weights')}; activations {split('activations')} (before the "
          f"arena reuses them; {_kb(manifest.weights_bytes)} weights, {_kb((manifest.memory or {}).get('arena_bytes', 0))} arena)")


def _replan(manifest: Manifest, directory: Path) -> dict | None:
    """Per-buffer offsets and intervals of a manifest without them (older builds), re-planned from the model
    through the build's own pipeline (optimizer included; deterministic)."""
    try:
        from ..target.boards import get_board
        from ..target.machine import machine_spec
        from ..frontend.importer import load_model
        from ..pipeline import LowerOptions, import_graph, plan
        path = manifest.model_path(directory)
        if path is None:
            raise KeyError("model.path")
        graph = import_graph(load_model(path), dict(manifest.input_shapes), name=path.stem,
                             structures=dict(manifest.structures) or None,
                             precision=manifest.precision.get("mode", "fp32"))
        spec = machine_spec(get_board(manifest.board))
        options = LowerOptions(opt=manifest.opt, costs=manifest.optimizer.get("costs", "analytic"), threads=manifest.threads)
        memory_plan = plan(graph, spec, options).plan
        if memory_plan.arena_bytes != manifest.memory["arena_bytes"]:
            return None
        align = memory_plan.alignment
        sizes = {r: -(-graph.tensors[r].nbytes // align) * align for r in memory_plan.intervals}
        return {"intervals": memory_plan.intervals, "offsets": {r: memory_plan.offsets[r] for r in memory_plan.intervals},
                "sizes": sizes}
    except Exception:
        return None


def _fallback_map(mem: Mapping) -> str:
    """Without per-buffer facts in the manifest: a bar of the arena against the bounds."""
    arena = max(mem.get("arena_bytes", 0), 1)
    scale = max(arena, mem.get("naive_bytes", 0), 1)

    def bar(n: int) -> str:
        return "#" * max(1, n * MAP_WIDTH // scale)
    return (f"arena  |{bar(arena)}\n  peak   |{bar(mem.get('live_peak_bytes', 0))}\n  lb     |{bar(mem.get('lower_bound_bytes', 0))}\n"
            f"  naive  |{bar(mem.get('naive_bytes', 0))}")
