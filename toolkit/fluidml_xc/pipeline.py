"""The one compiler pipeline, shared by `build`, the ONNX backend and `inspect`.

    model -> import_graph (frontend, passes, support check) -> plan (optimizer decisions, verified memory plan)
          -> lower (one LLVM module; `build` emits per-node units instead: emit/unit_build.py)

`build` compiles and links its units, the backend JIT-compiles the one module, `inspect` redraws the plan.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from .emit.emitter import EmitOptions, ModuleEmitter, WeightsBlob, check_supported
from .emit.measure import Measurer
from .target.host import host_can_run
from .target.arch import half_arithmetic
from .target.machine import MachineSpec
from .errors import InputError
from .frontend.dynamic import graph_at, import_ranges
from .frontend.importer import FrontendOptions, import_model
from .frontend.loops import bodies
from .frontend.ranges import ShapeRanges, check_max_dims, resolve_ranges
from .frontend.nonfinite import warn_nonfinite
from .ir import Graph
from .fluid.optimize import Decisions, apply_views, optimize
from .fluid.range_choice import RangeChoice, SizePoint, decide_over_range
from .passes import run_passes
from .passes.precision import PRECISIONS
from .passes.winograd import mark_winograd
from .planning import MemoryPlan, PlanOptions, plan_memory, verify_plan
from .frontend.validate import Limits
from .timings import Stopwatch

OPT_MODES = ("plain", "greedy", "fluid")


def bind_inputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose graph inputs in `values` are initializers (build-time constants)."""
    from onnx import numpy_helper

    if not values:
        return model
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    keep = [vi for vi in bound.graph.input if vi.name not in values]
    del bound.graph.input[:]
    bound.graph.input.extend(keep)
    for name, value in values.items():
        bound.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return bound


def import_graph(model: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]] | None = None, name: str = "model",
                 bind: dict[str, np.ndarray] | None = None, structures: dict | None = None,
                 limits: Limits | None = None, on_imported: Callable[[], None] | None = None,
                 ranges: ShapeRanges | None = None, conv_algo: str = "auto", precision: str = "fp32",
                 v_copies: int = 1) -> Graph:
    """The graph the optimizer sees: imported (inputs in `bind` frozen to constants), passes run, every op supported.
    `on_imported` is called between import and passes (build's progress stages). With `ranges` (--dim, ranged
    --input-shape), one graph for every size in them: capacity shapes plus Tensor.dyn (frontend/dynamic.py).
    conv_algo: --conv-algo, the convs that may run as Winograd (passes/winograd.py, under `limits`); precision:
    --precision, fp16 narrows the float32 arithmetic (passes/precision.py; the board's check is check_precision);
    v_copies: the threads a whole-image Winograd V is copied for (1: one V; its budget counts the copies)."""
    graph = import_unchecked(model, input_shapes, name, bind, structures, limits, on_imported, ranges, conv_algo, precision,
                             v_copies)
    check_supported(graph)
    warn_nonfinite(model)  # once the model is known good: a refused one gets its one error line alone
    return graph


def import_unchecked(model: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]] | None = None, name: str = "model",
                     bind: dict[str, np.ndarray] | None = None, structures: dict | None = None,
                     limits: Limits | None = None, on_imported: Callable[[], None] | None = None,
                     ranges: ShapeRanges | None = None, conv_algo: str = "auto", precision: str = "fp32",
                     v_copies: int = 1) -> Graph:
    """import_graph without the final support check (a dynamic graph's ops may not take run-time sizes yet)."""
    shapes = {k: v for k, v in (input_shapes or {}).items() if not bind or k not in bind}
    bound = bind_inputs(model, bind or {})
    if ranges is not None:
        check_max_dims(bound, ranges.max_dims)

    def at(sizes: dict[str, tuple[int, ...]], notify: Callable[[], None] | None = None, whole_image: bool = True) -> Graph:
        options = FrontendOptions(input_shapes=dict(sizes), structures=dict(structures or {}),
                                  max_dims=dict(ranges.max_dims) if ranges is not None else {},
                                  **({"max_string_bytes": ranges.max_string_bytes} if ranges is not None else {}),
                                  **({"limits": limits} if limits else {}))
        graph = import_model(bound, options, name=name)
        if notify:
            notify()
        graph.precision = precision
        run_passes(graph)
        for body in bodies(graph):
            run_passes(body)
        mark_winograd(graph, conv_algo, limits.max_bytes if limits else None, whole_image, v_copies)
        return graph
    if not ranges:
        return at(shapes, on_imported)
    resolved = resolve_ranges(bound, shapes, ranges)
    if not resolved.dynamic:
        return at(resolved.at({}), on_imported)
    calls = iter([on_imported])
    return import_ranges(bound, resolved, lambda sizes: at(sizes, next(calls, None), whole_image=False))


def check_precision(precision: str, specs, board_name: str, cpu: str | None = None, features: str | None = None) -> None:
    """--precision fp16 only for CPUs with float16 vector arithmetic (every code variant): else one InputError line
    naming the board and the --cpu / --features that took the arithmetic away."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown --precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return
    for spec in specs:
        if not half_arithmetic(spec.triple, spec.features):
            flags = [f for f in (f"--cpu {cpu}" if cpu else "", f"--features={features}" if features else "") if f]
            given = f" with {' '.join(flags)}" if flags else ""
            fix = (f"drop {' / '.join(f.split('=')[0].split()[0] for f in flags)} or keep +fullfp16 (e.g. --cpu cortex-a76)"
                   if flags else "build for rpi5 or jetson-orin-nano (ARMv8.2 +fullfp16)")
            raise InputError(f"--precision fp16 needs float16 vector arithmetic, which board {board_name!r}{given} "
                             f"({spec.cpu}, {spec.triple.split('-')[0]}) lacks: {fix}, or drop --precision fp16")


def plan_options(opt: str, alignment: int) -> PlanOptions:
    """The memory planner's options for an --opt mode: plain keeps every buffer apart in the model's order."""
    if opt not in OPT_MODES:
        raise InputError(f"unknown --opt {opt!r}; choose one of {', '.join(OPT_MODES)}")
    planned = opt != "plain"
    return PlanOptions(alignment=alignment, reuse=planned, inplace=planned, reorder=planned)


@dataclass(frozen=True)
class LowerOptions:
    opt: str = "fluid"
    costs: str = "analytic"
    threads: int = 1
    """Threads the optimizer costs kernels on (the build's thread count)."""
    parallel: bool = True
    """Emit heavy ops as tiles for the runtime's thread pool (EmitOptions.parallel)."""
    weights_symbol: str | None = None
    symbol_prefix: str = "fxc_"


@dataclass(frozen=True)
class Planned:
    """The graph as the optimizer leaves it (Transposes that became views), its decisions and verified memory plan."""

    graph: Graph
    decisions: Decisions
    plan: MemoryPlan
    range_choice: RangeChoice | None = None
    """A dynamic graph's: which size's decisions were chosen and their predicted cost ratios over the range."""


@dataclass(frozen=True)
class Lowered:
    """A graph optimized, planned (plan verified) and emitted as one LLVM module."""

    graph: Graph
    spec: MachineSpec
    decisions: Decisions
    plan: MemoryPlan
    emitter: ModuleEmitter
    ir_text: str

    @property
    def tail(self):
        """dynamic.TailLayout: the whole arena's size and where dynamic outputs' actual dims are."""
        return self.emitter.tail


def plan(graph: Graph, spec: MachineSpec, options: LowerOptions = LowerOptions(), watch: Stopwatch | None = None) -> Planned:
    """Layouts and loop orders for `graph` (--opt), then its verified memory plan under those layouts (`watch`:
    the build's stages "optimize" and "memory plan" marked). A dynamic graph's decisions are searched at its
    minimum, optimization size and maximum (graph_at: the capacity graph's shapes at those sizes) and the one
    with the smallest worst cost ratio over them wins (fluid/range_choice.py); keyed by tensor and node names,
    they are applied to the capacity graph, on which the memory is planned and verified."""
    watch = watch or Stopwatch()
    memory = plan_options(options.opt, spec.alignment)
    check_supported(graph)
    choice = None
    if graph.symbols:
        choice = decide_over_range(_size_points(graph), spec, options.opt, options.costs, options.threads, None)
        decisions = choice.decisions
        decisions.range_choice = choice.summary()
    else:
        timer = Measurer(graph, spec) if options.costs == "measure" and host_can_run(spec.triple, spec.cpu) else None
        decisions = optimize(graph, spec, options.opt, options.costs, options.threads, timer)
    graph = apply_views(graph, decisions.layouts, decisions.loop_orders, decisions.v_copies)
    watch.mark("optimize")
    memory_plan = plan_memory(graph, memory, layouts=decisions.layouts)
    verify_plan(graph, memory_plan)
    watch.mark("memory plan")
    return Planned(graph, decisions, memory_plan, choice)


def _size_points(graph: Graph) -> list[SizePoint]:
    """The dynamic `graph` at the minimum, the optimization size and the maximum of its ranges (distinct sizes)."""
    points: list[SizePoint] = []
    for label, pick in (("opt", lambda r: r.opt), ("min", lambda r: r.lo), ("max", lambda r: r.hi)):
        env = {s: pick(r) for s, r in graph.symbols.items()}
        if all(p.env != env for p in points):
            points.append(SizePoint(label, env, graph_at(graph, env)))
    return points


def _ir_text(emitter: ModuleEmitter, watch: Stopwatch) -> str:
    """emitter.emit() with the stage "units" (the one module's emission and text) marked."""
    emitter.emit_module()
    text = str(emitter.module)
    watch.mark("units")
    return text


def lower(graph: Graph, spec: MachineSpec, options: LowerOptions = LowerOptions(), watch: Stopwatch | None = None) -> Lowered:
    """The compiler middle and back end up to LLVM IR (Lowered.graph: `graph` with the optimizer's views)."""
    watch = watch or Stopwatch()
    planned = plan(graph, spec, options, watch)
    graph, decisions = planned.graph, planned.decisions
    emitter = ModuleEmitter(graph, planned.plan, spec,
                            EmitOptions(layouts=decisions.layouts, loop_orders=decisions.loop_orders,
                                        weights_symbol=options.weights_symbol, parallel=options.parallel,
                                        symbol_prefix=options.symbol_prefix))
    return Lowered(graph, spec, decisions, planned.plan, emitter, _ir_text(emitter, watch))


def lower_variants(graph: Graph, specs: list[MachineSpec], options: LowerOptions = LowerOptions(),
                   watch: Stopwatch | None = None) -> list[Lowered]:
    """One Lowered per code variant (specs widest first, as target.machine.machine_specs gives them): the layouts,
    loop orders and memory plan are decided once for the widest, each variant's kernels are emitted for its own
    spec (vector width, tiles) with suffixed entries, and the weights go into one blob they share."""
    watch = watch or Stopwatch()
    if len(specs) == 1:
        return [lower(graph, specs[0], options, watch)]
    planned = plan(graph, specs[0], options, watch)
    blob = WeightsBlob()
    lowered = []
    for spec in specs:
        emitter = ModuleEmitter(planned.graph, planned.plan, spec,
                                EmitOptions(layouts=planned.decisions.layouts, loop_orders=planned.decisions.loop_orders,
                                            weights_symbol=options.weights_symbol, parallel=options.parallel,
                                            symbol_prefix=options.symbol_prefix, variant=spec.variant, blob=blob))
        lowered.append(Lowered(planned.graph, spec, planned.decisions, planned.plan, emitter, _ir_text(emitter, watch)))
    return lowered
