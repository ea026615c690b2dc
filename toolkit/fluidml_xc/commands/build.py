"""`fluidml-xc build MODEL.onnx --board NAME`."""
from __future__ import annotations

from pathlib import Path

from ..build import BUILD_STAGES, BuildOptions, build_model
from ..errors import InputError
from ..pipeline import OPT_MODES
from ..frontend.binding import HELP as BIND_HELP, parse_binds
from ..frontend.input_shapes import BASE_HELP as SHAPE_HELP
from ..frontend.ranges import DIM_HELP, MAX_DIM_HELP, MAX_STRING_BYTES_HELP, OPT_SHAPE_HELP, RANGE_HELP, parse_ranges, split_input_shapes
from ..progress import Stages
from ..results import emit
from ..strings import DEFAULT_MAX_STRING_BYTES
from .output import add_json_arguments
from .paths import check_model_argument

NAME = "build"
HELP = "compile an ONNX model into a runner, a C library and a manifest for a board"
ORDER = 10


def add_arguments(parser) -> None:
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("--board", "-b", help="board name or alias, or a board file's path (default: x86_64); see `fluidml-xc boards`")
    parser.add_argument("--cpu", metavar="NAME", help="compile for this LLVM CPU (x86-64-v3, haswell, znver3, cortex-a76, "
                        "...; native: this machine) instead of the board's; the artifact refuses CPUs without its features")
    parser.add_argument("--features", metavar="+F,-G", help="LLVM CPU features to add (+avx512f) or remove (-fma), "
                        "comma-separated, on top of the cpu's")
    parser.add_argument("-o", "--output", type=Path, help="artifact directory (default build/<model>-<board>)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x224x224",
                        help=f"{SHAPE_HELP}; {RANGE_HELP}")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=LO..HI[@OPT]", help=DIM_HELP)
    parser.add_argument("--opt-shape", action="append", default=[], metavar="NAME=1x3x48x320", help=OPT_SHAPE_HELP)
    parser.add_argument("--max-dim", action="append", default=[], metavar="NAME=N", help=MAX_DIM_HELP)
    parser.add_argument("--max-string-bytes", type=int, default=DEFAULT_MAX_STRING_BYTES, metavar="N", help=MAX_STRING_BYTES_HELP)
    parser.add_argument("--bind", action="append", default=[], metavar="NAME=VALUE", help=BIND_HELP)
    parser.add_argument("--opt", choices=OPT_MODES, default="fluid", help="plain: row-major, no reuse; greedy: planned memory; fluid: everything")
    parser.add_argument("--costs", choices=("analytic", "measure"), default="analytic", help="kernel cost source for the layout search")
    parser.add_argument("--conv-algo", choices=("auto", "direct"), default="auto",
                        help="auto: 3x3 stride-1 convs may run as Winograd F(2x2)/F(4x4)/F(6x6) where the cost model prices it "
                             "faster, within the weight budget (docs/WINOGRAD.md); direct: never")
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                        help="fp16: weights and activations in float16 where it keeps accuracy (GEMMs sum in float32 "
                             "blocks; Softmax, normalizations, exp/log in float32), inputs and outputs stay float; boards "
                             "with float16 arithmetic only (rpi5, jetson-orin-nano); docs/FP16.md")
    parser.add_argument("--accuracy", nargs="?", const="", metavar="DATA",
                        help="with --precision fp16: also build the fp32 artifact (<output>.fp32), run both on sample inputs "
                             "(DATA: a directory of .npz feeds or one .npz with a leading sample axis, as quantize reads; "
                             "default random inputs) and report each output's error and top-1 agreement")
    parser.add_argument("--accuracy-samples", type=int, default=4, metavar="N", help="random samples for --accuracy (default 4)")
    parser.add_argument("--no-profile-runner", action="store_true", help="skip the per-op profiling runner")
    parser.add_argument("--threads", type=int, metavar="N", help="threads the model runs on (default: the board's cores; "
                        "this machine's for x86_64); 1 starts no thread; the runner's --threads may lower it")
    parser.add_argument("--name", metavar="NAME", help="name the C API for several models in one program: NAME_init, "
                        "NAME_run, NAME_ARENA_BYTES, ... in NAME.h, libNAME.a plus the shared runtime libfxc_runtime.a "
                        "(default: fxc_* in model.h, libmodel.a with the runtime inside)")
    parser.add_argument("--max-memory", metavar="SIZE", help="largest tensor, constants, and arena + weights (e.g. 2G; "
                        "default: half the board's RAM from its board file, or half of this machine's)")
    parser.add_argument("--timings", action="store_true", help="print the seconds each build stage took (load, import, "
                        "passes, optimize, memory plan, kernels, units, objects, runtime, link, artifact) and their "
                        "share, the kernels cached and compiled, and record them in manifest.json (build --json has them "
                        "always)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write the kernel and plan caches "
                        "($FLUIDML_XC_CACHE/kernels, /plans): optimize again and compile every per-node unit")
    parser.add_argument("--build-workers", type=int, metavar="N", help="processes the per-node units compile on "
                        "(default: one per core; 1: this process alone)")
    add_json_arguments(parser)


def main(args) -> int:
    from ..emit.capi import check_c_name
    from ..sizes import parse_size

    check_model_argument(args.model, NAME)
    if args.name is not None:
        check_c_name(args.name)
    shapes, ranged = split_input_shapes(args.input_shape)
    ranges = parse_ranges(ranged, args.dim, args.opt_shape, args.max_dim, args.max_string_bytes)
    bind = parse_binds(args.bind)
    max_memory = parse_size(args.max_memory) if args.max_memory else None
    if args.build_workers is not None and args.build_workers < 1:
        raise InputError(f"--build-workers {args.build_workers}: give 1 or more processes")
    if args.accuracy is not None and args.precision != "fp16":
        raise InputError("--accuracy compares a --precision fp16 build with the fp32 one: add --precision fp16 "
                         "(int8 models: fluidml-xc quantize)")
    accuracy = None
    if args.accuracy is not None:
        from ..quantize.half import accuracy_inputs

        accuracy = accuracy_inputs(Path(args.model), args.accuracy or None, args.accuracy_samples)
    with Stages(f"building {Path(args.model).name}", BUILD_STAGES) as stages:
        options = BuildOptions(board=args.board, out_dir=args.output, input_shapes=shapes, ranges=ranges, opt=args.opt,
                               costs=args.costs, conv_algo=args.conv_algo, precision=args.precision,
                               profile_runner=not args.no_profile_runner, max_memory=max_memory, threads=args.threads,
                               bind=bind, name=args.name, cpu=args.cpu, features=args.features, timings=args.timings,
                               cache=not args.no_cache, workers=args.build_workers, progress=stages)
        result = build_model(args.model, options)
    report = None
    if accuracy is not None:
        from ..quantize.half import half_accuracy

        report = half_accuracy(Path(args.model), result, options, accuracy)
    data = _result(result) | ({"accuracy": report.as_dict()} if report else {})
    emit(data, args.json, args.json_out, lambda: _table(result, args.timings) + (f"\n{report.table()}" if report else ""))
    return 0


def _result(result) -> dict:
    """The build as data (build --json)."""
    m = result.manifest
    mem = m.memory
    return {"artifact": str(result.artifact), "model": m.model.name, "board": m.board, "triple": m.triple, "cpu": m.cpu,
            "seconds": round(result.seconds, 3), "ops": sum(m.op_counts.values()), "weights_bytes": m.weights_bytes,
            "memory": {k: mem.get(k) for k in ("arena_bytes", "lower_bound_bytes", "naive_bytes", "strategy",
                                               "dynamic_tail_bytes") if k in mem},
            "c_api": dict(m.c_api), "footprint": dict(m.footprint), "timings": result.timings.to_json()}


def _tail_text(mem) -> str:
    """What the arena holds after the plan: the run's dims slots, status word and kernel scratch, and the inputs
    staged there (those no gap of the plan holds)."""
    if not mem.get("dynamic_tail_bytes"):
        return ""
    staged = [name for name, offset in mem.get("staged_inputs", {}).items() if offset >= mem["arena_bytes"]]
    return (f" + {mem['dynamic_tail_bytes']:,} B after it (dims slots, run status, kernel scratch"
            + (f"; staged input{'s' if len(staged) > 1 else ''} {', '.join(map(repr, staged))}" if staged else "") + ")")


def _table(result, timings: bool = False) -> str:
    m = result.manifest
    mem, fp = m.memory, m.footprint
    lines = [f"built {result.artifact}/ for {m.board} ({m.triple}, {m.cpu}) in {result.seconds:.1f} s",
             f"  ops {sum(m.op_counts.values())}, weights {m.weights_bytes:,} B, arena {mem['arena_bytes']:,} B "
             f"(lower bound {mem['lower_bound_bytes']:,}, no reuse {mem['naive_bytes']:,}, {mem['strategy']})"
             + _tail_text(mem)]
    api = m.c_api
    if api["name"]:
        lines.append(f"  C API {api['prefix']}* / {api['macro_prefix']}* in {api['header']}; link {api['library']} and, "
                     f"once per program, {api['runtime_library']}")
    lines.append(f"  runner footprint: text {fp['text']:,} B, rodata {fp['rodata']:,} B, data {fp['data']:,} B, bss {fp['bss']:,} B")
    if timings:
        lines += ["build timings (wall-clock seconds):", result.timings.table()]
    return "\n".join(lines)
