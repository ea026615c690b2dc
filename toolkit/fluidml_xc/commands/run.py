"""`fluidml-xc run`: run an artifact here (natively or under qemu-user) on given or random inputs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..remote.artifact import resolve_artifact_dir
from ..errors import InputError
from ..results import emit
from .output import add_json_arguments
from .paths import check_artifact_argument

NAME = "run"
HELP = "run a built artifact here (foreign architectures under qemu-user)"
ORDER = 20


def add_arguments(parser) -> None:
    parser.add_argument("dir", nargs="?", type=Path, help="artifact directory (default: the last build, from build/.last)")
    feeds = parser.add_mutually_exclusive_group()
    feeds.add_argument("--inputs", type=Path, metavar="FEED.npz", help="inputs as an .npz keyed by input name")
    feeds.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="one input (repeatable)")
    parser.add_argument("--outputs", type=Path, metavar="OUT.npz|OUT.json",
                        help="write the outputs, keyed by output name (.json: nested lists, a ZipMap output as a list "
                             "of {label: probability} per row)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --outputs file")
    parser.add_argument("--bench", type=int, metavar="N", help="time N runs and print the runner's JSON")
    parser.add_argument("--warmup", type=int, default=5, metavar="W", help="untimed runs before timing (default 5)")
    parser.add_argument("--profile", action="store_true", help="per-op times from the profiling runner")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="kill the runner after this long")
    parser.add_argument("--threads", type=int, metavar="N", help="threads to run on, 1 to the count built in (default: that count)")
    add_json_arguments(parser)


HEAD = 6
"""Values of each output shown (text and --json)."""


def _summary(name: str, value: np.ndarray) -> str:
    flat = value.reshape(-1)
    head = "[" + ", ".join(f"{v:.6g}" if value.dtype.kind in "fc" else str(v) for v in flat[:HEAD].tolist()) + "]"
    more = f" ... ({flat.size} values)" if flat.size > HEAD else ""
    return f"{name}: shape {list(value.shape)} {value.dtype} {head}{more}"


MAX_RUNS = 10_000_000
"""--bench and --warmup above this are typing mistakes (the runner takes int32 counts)."""


def check_run_arguments(args) -> None:
    """--bench, --warmup, --timeout and --outputs, checked before anything runs (exit 2, one line)."""
    import math

    if args.bench is not None and not 1 <= args.bench <= MAX_RUNS:
        raise InputError(f"--bench {args.bench}: give between 1 and {MAX_RUNS:,} runs")
    if not 0 <= args.warmup <= MAX_RUNS:
        raise InputError(f"--warmup {args.warmup}: give between 0 and {MAX_RUNS:,} runs")
    timeout = getattr(args, "timeout", None)
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise InputError(f"--timeout {timeout}: give a positive number of seconds")
    out = getattr(args, "outputs", None)
    if out:
        if out.is_dir():
            raise InputError(f"--outputs {out} is a directory: give a file name such as {out / 'out.npz'}")
        if not out.parent.is_dir() if str(out.parent) else False:
            raise InputError(f"--outputs {out}: the directory {out.parent} does not exist: create it first")
        if out.exists() and not args.force:
            raise InputError(f"{out} already exists; pass --force to overwrite it")


def main(args) -> int:
    from ..artifact import read_manifest
    from ..results import to_json
    from ..run.execute import load_feeds, outputs_as_json, run_artifact, save_npz
    from ..tempfiles import write_text_atomic

    check_run_arguments(args)
    check_artifact_argument(args.dir, NAME)
    artifact = resolve_artifact_dir(args.dir)
    feeds = None
    if args.inputs:
        feeds = load_feeds(args.inputs)
    elif args.input:
        feeds = load_feeds(args.input)
    result = run_artifact(artifact, feeds, bench=args.bench, warmup=args.warmup, profile=args.profile,
                          timeout=args.timeout, threads=args.threads)
    if args.outputs and args.outputs.suffix.lower() == ".json":
        structures = read_manifest(artifact).structures
        write_text_atomic(args.outputs, to_json(outputs_as_json(result.outputs, structures)), "--outputs")
    elif args.outputs:
        save_npz(args.outputs, result.outputs, force=args.force)
    data = {"artifact": str(artifact), "bench": result.bench,
            "outputs": {name: _facts(value) for name, value in result.outputs.items()},
            "outputs_file": str(args.outputs) if args.outputs else None}
    emit(data, args.json, args.json_out, lambda: _text(result))
    return 0


def _facts(value: np.ndarray) -> dict:
    """One output as data: shape, dtype and its first values (all of them: --outputs FILE.npz)."""
    flat = value.reshape(-1)
    head = flat[:HEAD].tolist()
    if value.dtype.kind in "fc":
        head = [v if isinstance(v, (int, float)) and math.isfinite(v) else str(v) for v in head]
    return {"shape": list(value.shape), "dtype": str(value.dtype), "size": int(flat.size), "first": head}


def _text(result) -> str:
    if result.bench is not None:
        return json.dumps(result.bench)
    return "\n".join(_summary(name, value) for name, value in result.outputs.items())
