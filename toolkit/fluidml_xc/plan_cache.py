"""The optimizer's result on disk (issue #27): a warm rebuild reuses the layouts, loop orders, views and the memory
plan of an unchanged graph instead of searching again.

An entry lives in the kernel cache's store (target/kernel_cache.py: checked by a sha256, written atomically,
pruned least recently used first) under cache_root()/plans, keyed by `plan_key`: the graph the optimizer sees whole
(nodes, attributes, shapes, dtypes, symbols, constants by their sha256: emit/units.describe), every MachineSpec
field, --opt, --costs, the thread count, with --costs measure whether this machine times kernels and the
measured-cost file's bytes, the tools' versions and this package's sources. A hit checks the graph's support as
pipeline.plan does, re-applies the views and verifies the memory plan again (planning.verify_plan), so a plan that
does not fit the graph fails loudly.
The payload is a pickle of the decisions, the memory plan and the range choice; like the kernel cache's objects,
which builds link and run, it is trusted as the user's own.
"""
from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import dataclass


from .emit.emitter import check_supported
from .emit.units import describe, package_digest, tool_versions
from .fluid.cost_cache import cache_dir as costs_dir, target_key
from .fluid.optimize import apply_views
from .ir import Graph
from .pipeline import LowerOptions, Planned, plan
from .planning import verify_plan
from .target.host import host_can_run
from .target.kernel_cache import PLANS_FOLDER, KernelCache, default_settings
from .target.machine import MachineSpec
from .timings import Stopwatch

PLAN_FORMAT = 1
"""Bumped when the key's description or the payload changes shape."""


def plan_store() -> KernelCache:
    """The store of plans: the kernel cache's root and limit, its own subfolder `plans`."""
    return KernelCache(default_settings(PLANS_FOLDER))


def _measured_costs(spec: MachineSpec, options: LowerOptions) -> list | None:
    """With --costs measure: whether kernels are timed here, and the sha256 of the measured-cost file."""
    if options.costs != "measure":
        return None
    try:
        content = hashlib.sha256((costs_dir() / f"{target_key(spec.triple, spec.cpu)}.json").read_bytes()).hexdigest()
    except OSError:
        content = None
    return [host_can_run(spec.triple, spec.cpu), content]


def plan_key(graph: Graph, spec: MachineSpec, options: LowerOptions) -> str:
    """The plan's cache key (64 hex) over everything the optimizer and the memory planner read."""
    text = json.dumps([PLAN_FORMAT, describe(graph), describe(spec), options.opt, options.costs, options.threads,
                       _measured_costs(spec, options), tool_versions(), package_digest()])
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class CachedPlan:
    """A plan and whether it came from the cache."""

    planned: Planned
    hit: bool


def _restore(graph: Graph, payload: bytes, watch: Stopwatch) -> Planned | None:
    try:
        decisions, memory_plan, choice = pickle.loads(payload)
    except Exception:  # another format under a colliding key: plan again
        return None
    check_supported(graph)
    viewed = apply_views(graph, decisions.layouts, decisions.loop_orders, decisions.v_copies)
    watch.mark("optimize")
    verify_plan(viewed, memory_plan)
    watch.mark("memory plan")
    return Planned(viewed, decisions, memory_plan, choice)


def cached_plan(graph: Graph, spec: MachineSpec, options: LowerOptions, store: KernelCache | None,
                watch: Stopwatch) -> CachedPlan:
    """pipeline.plan, read from `store` when an entry has this key, else planned and stored (None: no cache)."""
    if store is None:
        return CachedPlan(plan(graph, spec, options, watch), False)
    key = plan_key(graph, spec, options)
    payload = store.get(key)
    planned = _restore(graph, payload, watch) if payload is not None else None
    if planned is not None:
        return CachedPlan(planned, True)
    planned = plan(graph, spec, options, watch)
    store.put(key, pickle.dumps((planned.decisions, planned.plan, planned.range_choice), protocol=pickle.HIGHEST_PROTOCOL))
    return CachedPlan(planned, False)
