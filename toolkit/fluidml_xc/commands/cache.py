"""`fluidml-xc cache [show|clear]`: the compiled-kernel cache, the measured kernel costs and the runtimes."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..fluid.cost_cache import cache_dir as costs_dir
from ..results import emit
from ..sizes import format_bytes
from ..target.cpus import cache_root
from ..target.kernel_cache import LIMIT_ENV, PLANS_FOLDER, KernelCache, default_settings
from .output import add_json_arguments

NAME = "cache"
HELP = "show or clear the caches: compiled kernels and optimizer plans (and with --all the measured costs and the built runtimes)"
ORDER = 75


def add_arguments(parser) -> None:
    parser.add_argument("action", nargs="?", choices=["show", "clear"], default="show",
                        help="show (default): location, entries, size and limit; clear: remove the compiled kernels and plans")
    parser.add_argument("--all", action="store_true", help="clear also the measured kernel costs (--costs measure, "
                        "board measurements) and the C runtimes built per architecture (rebuilt by the next build)")
    add_json_arguments(parser)


@dataclass(frozen=True)
class Folder:
    """A cache other than the kernels': its directory, its items (target files, runtime builds), the entries in
    them (measured costs, objects) and their bytes."""

    root: Path
    items: int
    entries: int
    bytes: int
    item_name: str
    entry_name: str

    def to_json(self) -> dict:
        return {"root": str(self.root), self.item_name: self.items, self.entry_name: self.entries, "bytes": self.bytes}


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _cost_files() -> list[Path]:
    root = costs_dir()
    return sorted(root.glob("*.json")) if root.is_dir() else []


def _cost_entries(path: Path) -> int:
    try:
        return len(json.loads(path.read_text()).get("entries", {}))
    except (OSError, ValueError, AttributeError):
        return 0


def costs_folder() -> Folder:
    files = _cost_files()
    return Folder(costs_dir(), len(files), sum(map(_cost_entries, files)), sum(p.stat().st_size for p in files),
                  "targets", "entries")


def _runtime_root() -> Path:
    """Where emit/link.runtime_objects keeps one directory per architecture and runtime sources."""
    return cache_root() / "runtime"


def _runtime_builds() -> list[Path]:
    root = _runtime_root()
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []


def runtime_folder() -> Folder:
    builds = _runtime_builds()
    return Folder(_runtime_root(), len(builds), sum(len(list(b.glob("*.o"))) for b in builds),
                  sum(map(_tree_bytes, builds)), "builds", "objects")


def plans_cache() -> KernelCache:
    """The optimizer's plans (plan_cache.py), beside the kernels."""
    return KernelCache(default_settings(PLANS_FOLDER))


def _show(cache) -> dict:
    stats, plans = cache.stats(), plans_cache().stats()
    return {"kernels": {"root": str(stats.root), "entries": stats.entries, "bytes": stats.bytes,
                        "limit_bytes": stats.limit_bytes},
            "plans": {"root": str(plans.root), "entries": plans.entries, "bytes": plans.bytes},
            "costs": costs_folder().to_json(), "runtimes": runtime_folder().to_json()}


def _show_text(data: dict) -> str:
    k, p, c, r = data["kernels"], data["plans"], data["costs"], data["runtimes"]
    return "\n".join([
        f"compiled kernels  {k['root']}",
        f"                  {k['entries']} entries, {format_bytes(k['bytes'])} of {format_bytes(k['limit_bytes'])} "
        f"(limit: {LIMIT_ENV}, default 1 GiB; least recently used removed first)",
        f"optimizer plans   {p['root']}",
        f"                  {p['entries']} entries, {format_bytes(p['bytes'])}",
        f"measured costs    {c['root']}",
        f"                  {c['entries']} entries for {c['targets']} target(s), {format_bytes(c['bytes'])}",
        f"runtimes          {r['root']}",
        f"                  {r['builds']} build(s), {r['objects']} objects, {format_bytes(r['bytes'])}",
    ])


def _clear(cache, everything: bool) -> dict:
    removed = {"kernels": cache.clear(), "plans": plans_cache().clear()}
    if everything:
        costs = _cost_files()
        for path in costs:
            path.unlink(missing_ok=True)
        builds = _runtime_builds()
        for build in builds:
            shutil.rmtree(build, ignore_errors=True)
        removed.update(costs=len(costs), runtimes=len(builds))
    return {"removed": removed, "kernels_left": cache.stats().entries}


def _clear_text(data: dict) -> str:
    r = data["removed"]
    lines = [f"removed {r['kernels']} compiled kernel(s) and {r['plans']} optimizer plan(s)"]
    if "costs" in r:
        lines.append(f"removed {r['costs']} measured-cost file(s) and {r['runtimes']} runtime build(s)")
    if data["kernels_left"]:
        lines.append(f"{data['kernels_left']} kernel(s) could not be removed (a read-only cache directory?)")
    return "\n".join(lines)


def main(args) -> int:
    if args.all and args.action != "clear":
        raise InputError("--all goes with `cache clear` (`fluidml-xc cache clear --all`); `cache show` shows every cache")
    cache = KernelCache()
    if args.action == "clear":
        data = _clear(cache, args.all)
        emit(data, args.json, args.json_out, lambda: _clear_text(data))
        return 0
    data = _show(cache)
    emit(data, args.json, args.json_out, lambda: _show_text(data))
    return 0
