"""The build pipeline: ONNX -> graph -> optimize -> plan -> LLVM objects -> runtime -> link -> artifact directory."""
from __future__ import annotations

import collections
import hashlib
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from . import __version__
from .artifact import (LAST_BUILD, MANIFEST, Manifest, ManifestError, ModelRecord, TensorEntry, sha256_file,
                       sha256_files)
from .target.boards import Board, get_board
from .target.machine import MachineSpec, llvm_version, machine_specs
from .errors import InputError
from .frontend.importer import load_model
from .frontend.loops import bodies
from .ir import Graph
from .strings import dtype_name, string_stages
from .kernels.epilogue import EPILOGUE_ATTR
from .pipeline import Lowered, LowerOptions, check_precision, import_graph
from .plan_cache import cached_plan, plan_store
from .tempfiles import build_prefix, sweep_build, sweep_system_tmp
from .frontend.validate import Limits, default_max_memory
from .frontend.binding import manifest_entry
from .frontend.input_shapes import declared_shapes, resolve_shapes
from .frontend.ranges import ShapeRanges
from .emit.capi import CApi
from .emit.threads import resolve_threads
from .emit.unit_build import UnitOptions, build_units
from .emit.link import attach_weights, link_artifact, merge_objects, model_object_key, runtime_cached, runtime_objects
from .timings import BuildTimings, KernelCounts, Stopwatch, VariantTiming

@dataclass(frozen=True)
class BuildOptions:
    board: str | None = None
    out_dir: Path | None = None
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    ranges: ShapeRanges = field(default_factory=ShapeRanges)
    """Dims that vary at run time (--dim, ranged --input-shape, --opt-shape, --max-dim); empty: a static build."""
    opt: str = "fluid"
    costs: str = "analytic"
    profile_runner: bool = True
    force: bool = False
    record_last: bool = True
    progress: Callable[[str], None] | None = None
    """Called with each BUILD_STAGES name as the stage starts (commands/build.py: a bar on a terminal)."""
    structures: dict = field(default_factory=dict)
    """Sequence/optional inputs -> ABI descriptor (frontend/sequences.py); element shapes are `NAME.K` input_shapes."""
    max_memory: int | None = None
    """Bytes one tensor, the constants, and arena + weights may take (default: validate.default_max_memory(board))."""
    threads: int | None = None
    """Threads the model runs on by default and at most (FXC_THREADS); None: the board's cores (threads.py)."""
    bind: dict[str, object] = field(default_factory=dict)
    """Graph inputs frozen to constants (--bind): NAME -> a scalar/comma-list text, an .npy path or an array (frontend/binding.py)."""
    name: str | None = None
    """--name: the C API's name (NAME_init, NAME_ARENA_BYTES, NAME.h, libNAME.a + libfxc_runtime.a); None: model.h, fxc_*."""
    cpu: str | None = None
    """--cpu: an LLVM CPU name (or native) instead of the board's; one code variant."""
    features: str | None = None
    """--features: LLVM features (+avx512f,-fma) added to the cpu's; one code variant."""
    timings: bool = False
    """--timings: record the stage timings in manifest.json too (BuildResult always has them). Off by default: a
    manifest with timings differs from build to build, and reproducible artifacts (docs/GUARANTEES.md) and
    deploy's content address need the same bytes."""
    cache: bool = True
    """Read and write the kernel cache (units, the merged model object, the glue's object) and the plan cache
    ($FLUIDML_XC_CACHE/kernels, /plans); --no-cache: neither."""
    workers: int | None = None
    """Processes the units compile on (None: one per core; 1: this one alone)."""
    conv_algo: str = "auto"
    """--conv-algo: auto (3x3 stride-1 convs may run as Winograd where the cost model prices it faster, within the
    weight budget: passes/winograd.py) or direct."""
    precision: str = "fp32"
    """--precision: fp32, or fp16 (float16 arithmetic where it keeps accuracy, passes/precision.py; boards whose CPU
    has float16 vectors only, pipeline.check_precision)."""


@dataclass
class BuildResult:
    artifact: Path
    manifest: Manifest
    seconds: float
    timings: BuildTimings | None = None
    """Seconds per stage of the whole build (the manifest's stop where manifest.json is written)."""


def build_limits(board: Board, options: BuildOptions) -> Limits:
    return Limits(max_bytes=options.max_memory or default_max_memory(board), pointer_bits=board.target.pointer_bits)


def default_out_dir(model_path: Path, board: Board) -> Path:
    return Path("build") / f"{model_path.stem}-{board.name}"


def _tensor_entries(graph: Graph, names: list[str], dynamic_dims: list[tuple[int, ...]] | None = None) -> tuple[TensorEntry, ...]:
    dims = list(dynamic_dims or []) + [()] * len(names)
    return tuple(TensorEntry(n, tuple(graph.tensors[n].shape), dtype_name(graph.tensors[n].dtype), tuple(d or ()),
                             _symbolic_dims(graph.tensors[n].dyn)) for n, d in zip(names, dims))


def _symbolic_dims(dyn: tuple | None) -> tuple[int | str, ...]:
    """The manifest's `dims` of a varying tensor: sizes and expressions (an input's: its symbols' names)."""
    from .symbolic import is_static

    return tuple(int(d) if is_static(d) else str(d) for d in dyn) if dyn is not None else ()


def _dims_label(dyn: tuple | None) -> str:
    return "[" + ", ".join(map(str, _symbolic_dims(dyn))) + "]" if dyn is not None else ""


def _symbols_entry(graph: Graph) -> dict:
    return {r.name: {"min": r.lo, "max": r.hi, "opt": r.opt} for r in graph.symbols.values()}


def _tool_versions() -> dict[str, str]:
    import jinja2
    import llvmlite

    versions = {"fluidml-xc": __version__, "onnx": onnx.__version__, "llvmlite": llvmlite.__version__, "llvm": llvm_version(),
                "numpy": np.__version__, "jinja2": jinja2.__version__, "python": sys.version.split()[0]}
    try:
        from importlib.metadata import version
        versions["ziglang"] = version("ziglang")
    except Exception:
        pass
    return versions


_FUSION_ATTRS = (EPILOGUE_ATTR, "_fused_nodes")
"""Node attributes that mark a fused kernel: an Epilogue (passes/epilogues.py), or the names of the nodes it absorbed."""


def _fused_facts(node) -> dict:
    """{"fused": True} for a kernel that does the work of several ONNX nodes (epilogues, elementwise fusion)."""
    return {"fused": True} if node.op_type == "FusedElementwise" or any(a in node.attrs for a in _FUSION_ATTRS) else {}


def _plan_facts(graph: Graph, plan) -> dict:
    """Per arena buffer: live steps [first, last] in the execution order, arena offset and aligned size
    (what `inspect` and `report` draw as the memory map)."""
    align = plan.alignment
    facts = {"intervals": {r: list(iv) for r, iv in plan.intervals.items()},
             "offsets": {r: plan.offsets[r] for r in plan.intervals},
             "sizes": {r: -(-graph.tensors[r].nbytes // align) * align for r in plan.intervals}}
    if graph.symbols:
        facts["sizes_at_min"] = _sizes_at(graph, plan, {r.name: r.lo for r in graph.symbols.values()})
    return facts


def _sizes_at(graph: Graph, plan, env: dict[str, int]) -> dict[str, int]:
    """Per arena buffer: its aligned bytes with the symbols at `env` (what is live of its capacity there)."""
    from .symbolic import at

    align, sizes = plan.alignment, {}
    for r in plan.intervals:
        t = graph.tensors[r]
        n = int(np.prod(at(t.dyn, env), dtype=np.int64)) * t.dtype.itemsize if t.dyn is not None else t.nbytes
        sizes[r] = -(-n // align) * align
    return sizes


@dataclass(frozen=True)
class Compiled:
    """What compile_graph leaves for linking and the manifest besides NAME.o in the workdir."""

    lowered: Lowered
    ops: list[dict]
    """Per kernel in execution order: name, type and `fused` (the manifest's `ops`)."""
    memory: dict
    """The manifest's `memory`: the plan's facts, alignment, per-buffer map, dynamic tail bytes."""
    threads: int
    api: CApi
    parallel_ops: dict[str, list[int]]
    specs: tuple[MachineSpec, ...] = ()
    """The code variants in model.o, widest first (one unless the board has cpu_variants)."""
    code_variants: tuple = ()
    """capi.CodeVariant per spec: entry suffix and the CPU extensions the glue checks."""
    llvm: tuple[VariantTiming, ...] = ()
    """Per spec: its units' emission, LLVM optimization and code generation seconds (summed over processes)."""
    kernels: KernelCounts = KernelCounts()
    """Units found in the kernel cache, units compiled, and the processes that compiled them."""
    plan_cached: bool = False
    """The optimizer's decisions and the memory plan came from the plan cache (plan_cache.py)."""
    merged: Future | None = None
    """NAME.o's merge when it runs beside the link (compile_graph's `merge`); None: NAME.o is written."""

    @property
    def spec(self) -> MachineSpec:
        """The lowest variant's: what every CPU the artifact runs on must have (the manifest's cpu)."""
        return self.specs[-1] if self.specs else self.lowered.spec

    @property
    def tail(self):
        return self.lowered.tail


def _constant_bytes(graph: Graph) -> int:
    """Bytes of the constants `graph`'s nodes read or its outputs are (a run-time Loop's body: its own)."""
    used = {n for node in graph.nodes for n in node.inputs if n} | set(graph.outputs)
    return sum(t.nbytes for name, t in graph.tensors.items() if t.is_const and name in used)


def _precision_entry(graph: Graph, precision: str) -> dict:
    """--precision fp16's manifest entry: bytes of the used constants and of the activations (before the arena
    reuses them) per float dtype, what `inspect` shows; {} for fp32 (the key is not written)."""
    if precision == "fp32":
        return {}
    used = {n for node in graph.nodes for n in node.inputs if n} | set(graph.outputs)
    made = {o for node in graph.nodes for o in node.outputs if o}
    split = {"weights": collections.Counter(), "activations": collections.Counter()}
    for name, t in graph.tensors.items():
        if np.dtype(t.dtype).kind == "f" and (name in used if t.is_const else name in made):
            split["weights" if t.is_const else "activations"][np.dtype(t.dtype).name] += t.nbytes
    return {"mode": precision, **{k: dict(sorted(v.items())) for k, v in split.items()}}


def kernel_cache():
    """The kernel cache builds read and write (target/kernel_cache.py), or None before that store exists."""
    try:
        from .target.kernel_cache import KernelCache
    except ImportError:
        return None
    return KernelCache()


def compile_graph(graph: Graph, board: Board, options: BuildOptions, workdir: Path, watch: Stopwatch | None = None,
                  merge: Executor | None = None) -> Compiled:
    """Plan `graph`, compile its per-node units (emit/unit_build.py; cached unless options.cache is off) and link
    them with the entry modules and the weights into model.o (NAME.o) in workdir (`watch`: its stages marked, from
    "optimize" to "objects"); with `merge`, that link runs there and Compiled.merged waits for it."""
    watch = watch or Stopwatch()
    api = CApi(options.name)
    specs = machine_specs(board, options.cpu, options.features)
    spec = specs[0]
    symbol = f"{api.prefix}weights_{hashlib.sha256(graph.name.encode() + spec.triple.encode()).hexdigest()[:12]}"
    threads = resolve_threads(board, options.threads)
    lookup = cached_plan(graph, spec, LowerOptions(opt=options.opt, costs=options.costs, threads=threads),
                         plan_store() if options.cache else None, watch)
    planned = lookup.planned
    plan_, graph = planned.plan, planned.graph
    units = build_units(graph, plan_, specs, UnitOptions(planned.decisions.layouts, planned.decisions.loop_orders, threads > 1,
                                                         api.prefix, options.workers),
                        kernel_cache() if options.cache else None, lambda: watch.mark("kernels"))
    watch.mark("units")
    emitter = units.entries[0]
    build_limits(board, options).check(f"the arena ({emitter.tail.arena_bytes:,} B) plus the weights ({len(units.blob):,} B)",
                                       emitter.tail.arena_bytes + len(units.blob))
    link = (board, units, symbol, workdir / api.object, spec.alignment, kernel_cache() if options.cache else None)
    merged = merge.submit(_link_units, *link) if merge is not None else _link_units(*link)
    ops = [{"name": graph.nodes[i].name, "type": graph.nodes[i].op_type, **_fused_facts(graph.nodes[i])} for i in plan_.order]
    memory = {**plan_.manifest_facts(), "alignment": spec.alignment, "plan": _plan_facts(graph, plan_),
              **({"dynamic_tail_bytes": emitter.tail.tail_bytes} if emitter.tail.tail_bytes else {}),
              **({"staged_inputs": dict(emitter.boundary.staged)} if emitter.boundary and emitter.boundary.staged else {})}
    watch.mark("objects")
    lowered = Lowered(graph, spec, planned.decisions, plan_, emitter, units.entry_texts[0])
    return Compiled(lowered, ops, memory, threads, api, {name: list(split) for name, split in units.splits.items()},
                    tuple(specs), tuple(_code_variant(board, s, options.cpu == "native") for s in specs),
                    tuple(VariantTiming(v.cpu, v.optimize, v.codegen, 0, v.emit) for v in units.seconds),
                    KernelCounts(units.cached, units.compiled, units.processes, units.emitted), lookup.hit, merged)


def _link_units(board: Board, units, symbol: str, out: Path, alignment: int, cache=None) -> None:
    """The units' and entries' objects (in their order) and the weights, merged into `out` by one ld.lld -r, or
    found in the kernel cache `cache` under model_object_key."""
    key = model_object_key(board.target, units.objects, units.blob, symbol, alignment, units.labels) if cache else None
    code = cache.get(key) if key else None
    if code is not None:
        out.write_bytes(code)
        return
    _merge_units(board, units, symbol, out, alignment)
    if key:
        cache.put(key, out.read_bytes())


def _merge_units(board: Board, units, symbol: str, out: Path, alignment: int) -> None:
    parts = Path(tempfile.mkdtemp(prefix=".units-", dir=out.parent))
    try:
        paths = [parts / f"u{k:05d}.o" for k in range(len(units.objects))]
        for path, code in zip(paths, units.objects):
            path.write_bytes(code)
        if units.blob:
            attach_weights(board.target, paths, units.blob, symbol, out, alignment, units.labels)
        else:
            merge_objects(paths, out)
    finally:
        shutil.rmtree(parts, ignore_errors=True)


def _code_variant(board: Board, spec: MachineSpec, native: bool):
    """The glue's view of one variant: its cpu, entry suffix and the extensions it uses (target/cpus.py)."""
    from .emit.capi import CodeVariant
    from .target.cpus import required_features

    target = board.target
    needs = required_features(target.name, target.zig_target, "native" if native else spec.cpu, "" if native else spec.features)
    return CodeVariant(spec.cpu, spec.variant, needs)


def _link(board: Board, graph: Graph, compiled: Compiled, workdir: Path, profile: bool, watch: Stopwatch,
          cache: bool = True) -> bool:
    """Render the glue and link the artifact's programs and libraries (stages "runtime" and "link" marked);
    True when the runtime was built now rather than found in the cache."""
    from .emit.boundary import input_dims
    from .emit.capi import DEFAULT_CPU_HINT, ModelSpec, SymbolSpec, TensorSpec, render_sources
    from .emit.image_runtime import model_parts
    from .frontend.zipmap import output_labels
    from .target.cpus import REFUSAL_HINTS

    built = not runtime_cached(board.target)
    runtime_objects(board.target)
    watch.mark("runtime")
    tail, api, spec = compiled.tail, compiled.api, compiled.spec
    symbols = tuple(SymbolSpec(r.name, r.lo, r.hi, r.opt) for r in graph.symbols.values())
    index = {s.name: i for i, s in enumerate(symbols)}
    stages = string_stages(graph, tail.arena_bytes, spec.alignment)
    model_spec = ModelSpec(
        name=graph.name, symbols=symbols,
        inputs=[TensorSpec(n, tuple(graph.tensors[n].shape), dtype_name(graph.tensors[n].dtype),
                           dim_symbols=tuple(index[d] if isinstance(d, str) else -1 for d in dims) if symbols else (),
                           **stages.get(("in", i), {}))
                for i, (n, dims) in enumerate(input_dims(graph))],
        outputs=[TensorSpec(n, tuple(graph.tensors[n].shape), dtype_name(graph.tensors[n].dtype), slot,
                            label=_dims_label(graph.tensors[n].dyn), **stages.get(("out", i), {}))
                 for i, (n, slot) in enumerate(zip(graph.outputs, tail.output_slots))],
        arena_bytes=stages.get("arena_bytes", tail.arena_bytes), arena_align=spec.alignment,
        ops=[(op["name"], op["type"]) for op in compiled.ops], threads=compiled.threads, api=api,
        variants=compiled.code_variants, cpu_hint=REFUSAL_HINTS.get(board.target.name, DEFAULT_CPU_HINT),
        status_offset=tail.status_offset, run_errors=tuple(check.message for check in tail.checks),
        output_labels=output_labels(graph))
    render_sources(model_spec, workdir)
    link_artifact(board.target, workdir / api.object, workdir / api.object if profile else None,
                  workdir / api.glue, workdir, workdir, api, kernel_cache() if cache else None,
                  model_parts(graph, board.target), compiled.merged.result if compiled.merged else lambda: None)
    watch.mark("link")
    return built


def elf_footprint(path: Path) -> dict[str, int]:
    from elftools.elf.elffile import ELFFile

    sizes = {"text": 0, "rodata": 0, "data": 0, "bss": 0}
    with open(path, "rb") as fh:
        for section in ELFFile(fh).iter_sections():
            name, size = section.name, section["sh_size"]
            flags = section["sh_flags"]
            if not flags & 0x2:  # SHF_ALLOC
                continue
            if name.startswith(".text") or name in (".init", ".fini", ".plt"):
                sizes["text"] += size
            elif name.startswith(".rodata") or name in (".eh_frame", ".eh_frame_hdr", ".ARM.exidx", ".ARM.extab"):
                sizes["rodata"] += size
            elif name.startswith(".bss") or name.startswith(".tbss"):
                sizes["bss"] += size
            elif name.startswith((".data", ".tdata", ".init_array", ".fini_array", ".got", ".dynamic")) or name.startswith(".data.rel.ro"):
                sizes["data"] += size
    return sizes


_VERIFIED: dict[Path, tuple] = {}
"""Directory -> the fingerprint of its entries when _foreign_entry last found it an artifact of ours."""


def _fingerprint(directory: Path) -> tuple | None:
    """Each entry's name, inode, size, modification and change times (a write or a utime changes the ctime)."""
    try:
        with os.scandir(directory) as entries:
            stats = [(e.name, e.stat(follow_symlinks=False)) for e in entries]
    except OSError:
        return None
    return tuple(sorted((n, st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for n, st in stats))


def _foreign_entry(directory: Path) -> str | None:
    """Why `directory` is not provably an artifact of ours, or None: its entries must be exactly manifest.json
    and the regular files its `files` lists, each with the sha256 recorded there. The digests are read once per
    process while the entries' fingerprint stays the same (a build checks its output directory three times)."""
    key = directory.resolve()
    before = _fingerprint(directory)
    if before is not None and _VERIFIED.get(key) == before:
        return None
    reason = _hashed_foreign_entry(directory)
    if reason is None and before is not None and _fingerprint(directory) == before:
        _VERIFIED[key] = before
    return reason


def _hashed_foreign_entry(directory: Path) -> str | None:
    if not (directory / MANIFEST).exists():
        return "it has no manifest.json"
    try:
        files = Manifest.from_file(directory / MANIFEST).files
        entries = sorted(os.listdir(directory))
    except ManifestError as exc:
        return f"its manifest.json {exc.reason}"
    except OSError as exc:
        return f"its manifest.json cannot be read ({type(exc).__name__})"
    if files is None:
        return "its manifest.json has no field 'files'"
    listed = []
    for name in entries:
        path = directory / name
        if name == "manifest.json" and path.is_file() and not path.is_symlink():
            continue
        if name not in files or path.is_symlink() or not path.is_file():
            return f"it holds {name!r}, which its manifest does not list"
        listed.append(path)
    changed = [name for name, digest in sha256_files(listed).items() if digest != files[name]]
    if changed:
        return f"{changed[0]!r} was changed after the build"
    missing = sorted(set(files) - set(entries))
    if missing:
        return f"{missing[0]!r}, listed in its manifest, is missing"
    return None


def replaceable_target(out_dir: Path) -> Path:
    """The path the artifact will be renamed to (a symlink's target), refusing anything a build must not replace."""
    out_dir = Path(out_dir)
    target = out_dir
    if out_dir.is_symlink():
        if not out_dir.exists():
            raise InputError(f"output {str(out_dir)!r} is a symbolic link to nothing: remove it or choose another -o DIR")
        target = out_dir.resolve()
    if target.exists() or target.is_symlink():
        if not target.is_dir():
            raise InputError(f"output {str(out_dir)!r} exists and is not a directory: choose another -o DIR")
        reason = _foreign_entry(target)
        if reason:
            raise InputError(f"output directory {str(out_dir)!r} exists and is not a fluidml-xc artifact ({reason}): "
                             "move your files away or choose another -o DIR")
    return target


def _replace_artifact(workdir: Path, out_dir: Path) -> None:
    """Rename the finished workdir to out_dir (through a symlink: to its target), replacing only an artifact of ours."""
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(workdir, 0o777 & ~umask)  # it was made 0700
    target = replaceable_target(out_dir)
    if not target.exists():
        workdir.rename(target)
        return
    backup = target.with_name(f".{target.name}.old-{os.getpid()}")
    target.rename(backup)
    try:
        workdir.rename(target)
    except BaseException:
        backup.rename(target)
        raise
    shutil.rmtree(backup, ignore_errors=True)


def _bind(model: onnx.ModelProto, options: BuildOptions) -> tuple[dict[str, np.ndarray], dict[str, tuple[int, ...]]]:
    """--bind values typed by the model's inputs, and the --input-shape entries of the inputs left."""
    from .frontend.binding import resolve

    bound = resolve(model, options.bind) if options.bind else {}
    for name, value in bound.items():
        shape = options.input_shapes.get(name)
        if shape is not None and tuple(shape) != value.shape:
            raise InputError(f"--input-shape {name}={'x'.join(map(str, shape))} disagrees with the shape of its --bind value "
                             f"({'x'.join(map(str, value.shape)) or 'scalar'}): drop the --input-shape")
    shapes = {**options.input_shapes, **resolve_shapes(model, {**options.input_shapes, **{k: v.shape for k, v in bound.items()}},
                                                        flags={k: f"--bind {k}" for k in bound})}
    return bound, {k: v for k, v in shapes.items() if k not in bound}


BUILD_STAGES = ("import", "passes", "optimize, plan, compile", "link", "manifest")
"""What BuildOptions.progress is called with, in order."""


def build_model(model_path: str | Path, options: BuildOptions = BuildOptions()) -> BuildResult:
    """Compile one ONNX model into an artifact directory, written under a temporary name and renamed when complete."""
    watch = Stopwatch()
    stage = options.progress or (lambda name: None)
    CApi(options.name)  # a bad --name is refused before anything is read
    model_path = Path(model_path)
    board = get_board(options.board)
    check_precision(options.precision, machine_specs(board, options.cpu, options.features), board.name, options.cpu,
                    options.features)
    stage(BUILD_STAGES[0])
    model = load_model(model_path)
    bound, input_shapes = _bind(model, options)
    watch.mark("load")

    def imported() -> None:
        watch.mark("import")
        stage(BUILD_STAGES[1])
    graph = import_graph(model, input_shapes, model_path.stem, bound, options.structures, build_limits(board, options),
                         on_imported=imported, ranges=options.ranges, conv_algo=options.conv_algo,
                         precision=options.precision,
                         v_copies=resolve_threads(board, options.threads) if board.target.private_caches else 1)
    watch.mark("passes")
    out_dir = Path(options.out_dir) if options.out_dir else default_out_dir(model_path, board)

    def record(target: Path) -> dict:
        return dict(model=ModelRecord(os.path.relpath(model_path.resolve(), target.resolve()), model_path.stem,
                                      sha256_file(model_path)),
                    declared_shapes=declared_shapes(model, graph.inputs),
                    bound=manifest_entry(bound, options.bind, target) if bound else {})
    return _assemble(graph, board, options, out_dir, record, watch)


def build_graph(graph: Graph, options: BuildOptions, model_path: Path | None = None) -> BuildResult:
    """An artifact from a graph made without an ONNX file (tests of the later stages: dynamic graphs built by hand);
    `model_path`: an ONNX file to record as its model (what `verify` compares with)."""
    board = get_board(options.board)
    out_dir = Path(options.out_dir) if options.out_dir else Path("build") / f"{graph.name}-{board.name}"

    def record(target: Path) -> dict:
        if model_path is None:
            return {}
        path = Path(model_path)
        return dict(model=ModelRecord(os.path.relpath(path.resolve(), target.resolve()), path.stem, sha256_file(path)))
    return _assemble(graph, board, options, out_dir, record, Stopwatch())


def _assemble(graph: Graph, board: Board, options: BuildOptions, out_dir: Path, record: Callable[[Path], dict],
              watch: Stopwatch) -> BuildResult:
    """Compile, link and write the artifact directory of an imported graph; `record(target)`: the manifest's
    fields about the model it came from."""
    stage = options.progress or (lambda name: None)
    api = CApi(options.name)
    target = replaceable_target(out_dir)
    sweep_build(target)
    sweep_system_tmp()
    target = replaceable_target(out_dir)  # a swept backup may have come back
    # named before it exists, so a signal arriving while it is made still finds it to remove
    workdir = target.parent / f"{build_prefix(target.name)}{secrets.token_hex(6)}"
    try:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            workdir.mkdir(mode=0o700)
        except OSError as exc:
            raise InputError(f"cannot create the output directory {str(out_dir)!r} ({exc.strerror or exc}): choose another -o DIR") from None
        watch.mark("artifact")
        stage(BUILD_STAGES[2])
        with ThreadPoolExecutor(1, thread_name_prefix="fxc-merge") as merge:  # model.o merged while the glue compiles
            compiled = compile_graph(graph, board, options, workdir, watch, merge)
            spec = compiled.spec
            stage(BUILD_STAGES[3])
            runtime_built = _link(board, compiled.lowered.graph, compiled, workdir, options.profile_runner, watch,
                                  options.cache)
        stage(BUILD_STAGES[4])
        weights = sum(_constant_bytes(g) for g in [graph, *bodies(graph)])
        manifest = Manifest(
            **record(target),
            board=board.ref or board.name, target=board.target.name, triple=spec.triple, cpu=spec.cpu, features=spec.features,
            cpu_variants=tuple(s.cpu for s in compiled.specs) if len(compiled.specs) > 1 else (),
            cpu_needs=tuple(f.name for f in compiled.code_variants[-1].needs),
            emulator=board.target.emulator, opt=options.opt, precision=_precision_entry(graph, options.precision),
            tools=_tool_versions(),
            inputs=_tensor_entries(graph, graph.inputs), outputs=_tensor_entries(graph, graph.outputs, compiled.tail.output_dims),
            input_shapes={k: tuple(v) for k, v in options.input_shapes.items()},
            structures=graph.structures or {}, symbols=_symbols_entry(graph),
            op_counts=dict(collections.Counter(op["type"] for op in compiled.ops)), ops=tuple(compiled.ops),
            memory=compiled.memory, weights_bytes=int(weights), threads=compiled.threads,
            parallel_ops=compiled.parallel_ops, c_api=api.manifest(),
            optimizer={k: v for k, v in compiled.lowered.decisions.summary().items() if k != "seconds"},
            footprint=elf_footprint(workdir / "runner"))
        manifest = dataclasses.replace(manifest, files=sha256_files([p for p in sorted(workdir.iterdir()) if p.is_file()]))
        watch.mark("artifact")
        if options.timings:
            manifest = dataclasses.replace(manifest, timings=BuildTimings.of(watch, compiled.llvm, runtime_built, compiled.kernels, compiled.plan_cached))
        (workdir / MANIFEST).write_text(manifest.to_json())
        _replace_artifact(workdir, out_dir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    if options.record_last:
        try:
            LAST_BUILD.parent.mkdir(parents=True, exist_ok=True)
            LAST_BUILD.write_text(str(out_dir.resolve()) + "\n")
        except OSError as exc:
            print(f"fluidml-xc: warning: could not record the build in {LAST_BUILD} ({exc.strerror or exc})", file=sys.stderr)
    watch.mark("artifact")
    return BuildResult(out_dir, manifest, watch.total(), BuildTimings.of(watch, compiled.llvm, runtime_built, compiled.kernels, compiled.plan_cached))
