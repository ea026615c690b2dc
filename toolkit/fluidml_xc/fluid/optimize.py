"""Layout and loop-order decisions per --opt mode (plain | greedy | fluid).

plain and greedy keep every tensor row-major and let each kernel pick its default loop order. fluid
runs FluidML (docs/DESIGN.md section 1): longest-sequence segmentation, the layout DP per segment,
dependency-weighted voting on shared tensors, then a loop order per MatMul/Gemm/Conv under the chosen
layouts. See fluid/ for the pieces. Image tensors (touched only by Conv, pools, Concat and elementwise
ops) choose between NCHW and channels-last (NHWC), which ops/conv/ and ops/pool.py vectorize over
channels; graph inputs and outputs stay row-major, so conversions happen inside the first/last kernel.
When the chosen layouts are not predicted at least MIN_GAIN faster than row-major, fluid keeps
row-major (greedy's kernels).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ..target.machine import MachineSpec
from .costs import Costs, KernelTimer, transpose_is_view
from .layouts import LayoutProblem, candidate_layouts, identity, is_identity, permute_layout
from .segmentation import segment_graph
from .voting import vote_layouts
from .winograd_split import split_whole_image
from ..ir import Graph, Node
from .. import opspec
from ..opspec import OpSpec
from ..kernels.winograd import ORDERS as WINOGRAD_ORDERS, WHOLE_ORDERS, growth
from ..passes.winograd import v_bytes

MIN_GAIN = 0.01
"""The DP's layouts are kept only if they are predicted this much (fraction) faster than row-major;
otherwise fluid emits greedy's kernels."""
VIEW_OP = "Identity"
"""A Transpose whose chosen layouts make it a byte copy is rewritten to this view op: the planner aliases
its output to its input (no kernel), or codegen copies the bytes flat where it cannot."""


def channels_last(rank: int) -> tuple[int, ...]:
    """(N, spatial..., C): NHWC for rank 4, NWC for rank 3."""
    return (0, *range(2, rank), 1)


def layout_name(shape, perm) -> str:
    """NCHW / NHWC for images, else "row-major" or the permutation."""
    rank = len(shape)
    if perm is None or is_identity(perm):
        return "NCHW" if rank == 4 else "row-major"
    if rank == 4 and tuple(perm) == channels_last(4):
        return "NHWC"
    return "(" + ",".join(map(str, perm)) + ")"


@dataclass
class Decisions:
    mode: str
    layouts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """tensor -> dimension order (outermost first); absent = row-major."""
    loop_orders: dict[str, str] = field(default_factory=dict)
    kernel_layouts: dict[str, str] = field(default_factory=dict)
    """Loop-ordered node -> the layouts its order was chosen under, e.g. "NHWC -> NCHW" (activations only)."""
    segments: list[dict] = field(default_factory=list)
    gains: dict[str, float] = field(default_factory=dict)
    """Non-row-major tensor -> predicted ns saved by its layout (nodes touching it, others as chosen)."""
    votes: list[dict] = field(default_factory=list)
    predicted_ns: float = 0.0
    row_major_ns: float = 0.0
    seconds: float = 0.0
    views: list[str] = field(default_factory=list)
    """Transposes turned into views (their layouts make them byte copies)."""
    costs: str = "analytic"
    threads: int = 1
    """Threads the cost model split heavy kernels over (the build's --threads)."""
    pinned: int = 0
    variable: int = 0
    range_choice: dict = field(default_factory=dict)
    """A dynamic build's: which size's decisions serve the range and their cost ratios (fluid/range_choice.py)."""
    winograd: dict[str, dict] = field(default_factory=dict)
    """Conv run as Winograd -> {"m": tile size, "weight_bytes": direct's, "transformed_bytes": Winograd's}."""
    v_copies: int = 1
    """Threads a whole-image Winograd conv's V is copied for (fluid/winograd_split.py v_copies; 1: one V)."""

    def summary(self) -> dict:
        return {"mode": self.mode, "costs": self.costs, "threads": self.threads, "non_row_major": {k: list(v) for k, v in self.layouts.items()},
                "gains_ns": {k: round(v, 1) for k, v in self.gains.items()},
                "loop_orders": dict(self.loop_orders), "kernel_layouts": dict(self.kernel_layouts), "views": list(self.views), "segments": list(self.segments), "votes": list(self.votes),
                "predicted_ns": round(self.predicted_ns, 1), "row_major_ns": round(self.row_major_ns, 1),
                "variable_tensors": self.variable, "pinned_tensors": self.pinned, "seconds": round(self.seconds, 4),
                **({"range_choice": self.range_choice} if self.range_choice else {}),
                **({"winograd": dict(self.winograd)} if self.winograd else {}),
                **({"v_copies": self.v_copies} if self.v_copies > 1 else {})}


def _layout_safe(spec: OpSpec | None, node=None, graph: Graph | None = None) -> bool:
    """The op's activations may take any layout (OpSpec traits; BatchNormalization: its inference form only)."""
    if spec is None or spec.view:
        return False
    if node is not None and node.op_type == "BatchNormalization":  # inference form: a strided per-channel affine
        return (not int(node.attrs.get("training_mode", 0)) and len([o for o in node.outputs if o]) == 1
                and all(n and graph.tensors[n].is_const for n in node.inputs[1:5]) and len(node.inputs) >= 5)
    return spec.layout_safe


def winograd_entry(graph: Graph, node, m: int, whole: bool = False) -> dict:
    """Decisions.winograd's entry of a conv run as F(m x m, 3 x 3)."""
    w = graph.tensors[node.inputs[1]]
    return {"m": m, "weight_bytes": int(w.nbytes), "transformed_bytes": int(round(w.nbytes * growth(m))),
            **({"form": "whole image", "v_bytes": v_bytes(graph, node, m)} if whole else {})}


def build_problem(graph: Graph, costs: Costs):
    """The layout problem of a graph: candidates per activation tensor, pins, per-node cost."""
    specs = [opspec.lookup(n.op_type, graph.opset, n.domain) for n in graph.nodes]
    boundary = set(graph.inputs) | set(graph.outputs)
    pinned: set[str] = set(boundary)
    touched: dict[str, list[int]] = {}
    for i, (node, spec) in enumerate(zip(graph.nodes, specs)):
        safe = _layout_safe(spec, node, graph)
        for name in list(node.inputs) + list(node.outputs):
            if not name or graph.tensors[name].is_const:
                continue
            touched.setdefault(name, []).append(i)
            if not safe:
                pinned.add(name)
    hints: dict[str, list] = {}
    for node in graph.nodes:
        if node.op_type == "Transpose" and node.inputs and node.outputs and node.outputs[0] in touched:
            rank = len(graph.tensors[node.outputs[0]].shape)
            perm = node.attrs.get("perm") or list(range(rank))[::-1]
            hints.setdefault(node.outputs[0], []).append(permute_layout(identity(rank), perm))
            if node.inputs[0] in touched:  # the input stored in the output's row-major order
                hints.setdefault(node.inputs[0], []).append(tuple(perm))
    image_only = {name for name, users in touched.items()
                  if any(specs[i] is not None and specs[i].image for i in users)
                  and all(specs[i] is not None and (specs[i].image or specs[i].elementwise) for i in users)}
    candidates: dict[str, list] = {}
    for name in touched:
        shape = graph.tensors[name].shape
        if name in pinned or len(shape) < 2:
            continue
        if name in image_only and len(shape) in (3, 4):  # NCHW or channels-last (NHWC / NWC)
            cands = [c for c in candidate_layouts(shape) if c in (identity(len(shape)), channels_last(len(shape)))]
        else:
            cands = candidate_layouts(shape, hints=hints.get(name, ()))
        if len(cands) > 1:
            candidates[name] = cands
    node_tensors = [[t for t in dict.fromkeys(list(n.inputs) + list(n.outputs)) if t in candidates] for n in graph.nodes]
    # A connected group of variable tensors whose nodes are all elementwise is bounded by row-major (pinned)
    # tensors: moving its inside only adds relayouts. Only groups with a MatMul/Gemm/Transpose keep candidates.
    parent = {t: t for t in candidates}

    def find(t: str) -> str:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t
    for ts in node_tensors:
        for t in ts[1:]:
            parent[find(t)] = find(ts[0])
    useful = {find(ts[0]) for s, ts in zip(specs, node_tensors) if ts and s is not None and s.layout_anchor}
    candidates = {t: c for t, c in candidates.items() if find(t) in useful}
    node_tensors = [[t for t in ts if t in candidates] for ts in node_tensors]
    # in-place elementwise ops may change layout: the planner aliases input and output only when their
    # layouts (and shapes) agree, so a layout change costs the reuse, never correctness.
    def cost_fn(i: int, layouts) -> float:
        return costs.cost_and_order(graph.nodes[i], layouts, varies=bool(node_tensors[i]))[0]

    problem = LayoutProblem(node_tensors, candidates, cost_fn)
    return problem, pinned, touched


def view_transposes(graph: Graph, layouts) -> list[int]:
    """Indices of the Transposes that `layouts` make byte copies (node names need not be unique: function
    expansions repeat them)."""
    return [i for i, n in enumerate(graph.nodes) if n.op_type == "Transpose" and transpose_is_view(graph, n, layouts)]


def apply_views(graph: Graph, layouts, loop_orders=None, copies: int = 1) -> Graph:
    """`graph` with the Transposes that `layouts` make byte copies replaced by VIEW_OP nodes, the others shared; with
    `loop_orders`, every whole-image Winograd conv split in two (fluid/winograd_split.py), its V copied for `copies`
    threads."""
    if loop_orders:
        graph = split_whole_image(graph, loop_orders, copies)
    views = set(view_transposes(graph, layouts))
    if not views:
        return graph

    def viewed(node: Node) -> Node:
        perm = node.attrs.get("perm") or list(range(len(graph.tensors[node.outputs[0]].shape)))[::-1]
        return replace(node, op_type=VIEW_OP, attrs={"_transpose_perm": list(perm)})
    return replace(graph, nodes=[viewed(n) if i in views else n for i, n in enumerate(graph.nodes)])


def optimize(graph: Graph, spec: MachineSpec, mode: str, costs: str = "analytic", threads: int = 1,
             timer: KernelTimer | None = None) -> Decisions:
    """Row-major for plain/greedy; the FluidML search for fluid, costing each kernel on `threads` threads (with
    costs="measure", kernels not in the cache are timed by `timer` when given). The graph is not changed: the
    Transposes the layouts make byte copies are listed in `views` (see apply_views)."""
    started = time.perf_counter()
    decisions = Decisions(mode, costs=costs, threads=threads, v_copies=threads if getattr(spec, "private_caches", False) else 1)
    if mode != "fluid" or not graph.nodes:
        return decisions
    model = Costs(graph, spec, costs, threads=threads, timer=timer)
    problem, pinned, touched = build_problem(graph, model)
    producer = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs if o}
    edges = []
    for c, node in enumerate(graph.nodes):
        for name in dict.fromkeys(node.inputs):
            if name in producer and producer[name] != c and not graph.tensors[name].is_const:
                edges.append((producer[name], c, name))
    weights = [model.model.cost(n, {}) for n in graph.nodes]
    segments = segment_graph(len(graph.nodes), edges, weights)
    priority = {t: float(graph.tensors[t].nbytes) for t in problem.candidates}
    result = vote_layouts(problem, segments, priority=priority)
    final = {t: p for t, p in result.layouts.items() if t in problem.candidates}
    row_major = {t: identity(len(p)) for t, p in final.items()}
    nodes = range(len(graph.nodes))
    if problem.total(final, nodes) > problem.total(row_major, nodes) * (1 - MIN_GAIN):
        final = row_major  # no predicted gain: greedy's kernels
    decisions.layouts = {t: tuple(p) for t, p in final.items() if not is_identity(p)}
    # predicted gain per non-row-major tensor
    users: dict[str, list[int]] = {}
    for i, ts in enumerate(problem.node_tensors):
        for t in ts:
            users.setdefault(t, []).append(i)
    for t, p in decisions.layouts.items():
        trial = dict(final)
        trial[t] = identity(len(p))
        before = sum(problem.cost(i, trial) for i in users.get(t, ()))
        after = sum(problem.cost(i, final) for i in users.get(t, ()))
        decisions.gains[t] = before - after if before != float("inf") else float("nan")
    decisions.views = [graph.nodes[i].name for i in view_transposes(graph, decisions.layouts)]
    graph = apply_views(graph, decisions.layouts)
    for node in graph.nodes:
        spec = opspec.lookup(node.op_type, graph.opset, node.domain)
        if spec is not None and spec.loop_orders:
            order = model.cost_and_order(node, decisions.layouts, varies=True)[1]
            if order:
                decisions.loop_orders[node.name] = order
                if order in WINOGRAD_ORDERS:
                    decisions.winograd[node.name] = winograd_entry(graph, node, WINOGRAD_ORDERS[order], order in WHOLE_ORDERS)
                activations = 1 if spec.loop_orders == "conv" else 2
                names = [t for t in (*node.inputs[:activations], node.outputs[0]) if t]
                decisions.kernel_layouts[node.name] = " -> ".join(
                    [", ".join(layout_name(graph.tensors[t].shape, decisions.layouts.get(t)) for t in names[:-1]),
                     layout_name(graph.tensors[names[-1]].shape, decisions.layouts.get(names[-1]))])
    decisions.predicted_ns = sum(problem.cost(i, final) for i in range(len(graph.nodes)))
    decisions.row_major_ns = sum(model.cost_and_order(n, {}, varies=bool(problem.node_tensors[i]))[0] for i, n in enumerate(graph.nodes))
    names = [n.name for n in graph.nodes]
    for seg in segments:
        decisions.segments.append({"length": len(seg.nodes), "cost_ns": round(seg.cost, 1), "first": names[seg.nodes[0]],
                                   "last": names[seg.nodes[-1]]})
    decisions.votes = [{"tensor": v.tensor, "winner": list(v.winner),
                        "penalties": {".".join(map(str, k)): round(x, 1) for k, x in v.penalties.items()}} for v in result.votes]
    decisions.variable = len(problem.candidates)
    decisions.pinned = len(touched) - len(problem.candidates)
    model.save()
    decisions.seconds = time.perf_counter() - started
    return decisions
