"""Build time, cold and warm, per model and board (issue #27), with IREE's and TVM's compile times beside ours
when those are installed.

Each build runs in a fresh Python process through `build_model` (what `build --timings` reports: seconds per
stage). Cold: $FLUIDML_XC_CACHE is an empty directory, except the C runtime for the board, built beforehand
(the issue's definition: a one-time cost, announced); warm: the same model built again with that cache. Models:
the ONNX files given, onnx's light model zoo (`--light`, default all that onnx ships), the PicoDet-like
detector of tests/detector_model.py (`--no-detector` to skip) and with `--yolo` its YOLOv8n-sized one.

`--before REV` compares cold builds instead: the sources of git revision REV (extracted and byte-compiled in a
temporary directory) against this checkout, built in turn (the order swapped every round, so a drift of the
machine's load falls on both) for `--rounds` rounds, each build from an empty cache; it prints every build and
the medians with after/before.

    python benchmarks/build_time.py mobilenetv2.onnx bert_tiny.onnx [--boards x86_64,rpi4] [--light none] [--yolo] [--json]
    python benchmarks/build_time.py mobilenetv2.onnx --light none --no-detector --others none --before main --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))
sys.path.insert(0, str(ROOT / "tests"))
from detector_model import detector, yolov8n_like  # noqa: E402
from fluidml_xc.target.boards import Board, get_board  # noqa: E402
from fluidml_xc.target.cpus import cache_root  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SHOWN_STAGES = ("kernels", "units", "objects", "link")

CHILD = """
import json, sys, time
start = time.perf_counter()
from fluidml_xc.build import BuildOptions, build_model
imported = time.perf_counter() - start
result = build_model(sys.argv[1], BuildOptions(board=sys.argv[2], out_dir=sys.argv[3], record_last=False))
print(json.dumps({"imports": imported, "timings": result.timings.to_json()}))
"""
"""One build in a fresh interpreter: its imports' seconds and the build's BuildTimings JSON on stdout."""

RUNTIME = """
import sys
from fluidml_xc.emit.link import runtime_objects
from fluidml_xc.target.boards import get_board
runtime_objects(get_board(sys.argv[1]).target)
"""


@dataclass
class Build:
    """One build: the child's wall and CPU seconds (imports and its own children included: the CPU time is what
    a loaded machine does not inflate), its imports, and build_model's timings."""

    wall: float
    cpu: float
    imports: float
    total: float
    stages: dict[str, float]
    runtime_built: bool


@dataclass
class Row:
    model: str
    board: str
    ops: int
    convs: int
    cold: Build | None = None
    warm: Build | None = None
    others: dict[str, float | str] = field(default_factory=dict)
    """External compiler -> seconds, or why it has none."""
    error: str = ""


def _env(cache: Path, root: Path = ROOT) -> dict[str, str]:
    return {**os.environ, "FLUIDML_XC_CACHE": str(cache),
            "PYTHONPATH": os.pathsep.join([str(root / "toolkit"), os.environ.get("PYTHONPATH", "")])}


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child(code: str, args: list[str], cache: Path, root: Path = ROOT) -> tuple[float, float, str]:
    """Wall and CPU seconds of one child process (and the processes it waited for), and its stdout."""
    cpu, start = _cpu_of_children(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=_env(cache, root))
    wall, cpu = time.perf_counter() - start, _cpu_of_children() - cpu
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"exit {done.returncode}: {tail}")
    return wall, cpu, done.stdout


def cold_cache(work: Path, tag: str) -> Path:
    """An empty cache whose runtime, CPU-facts and compiled-template folders are the user's (once per
    installation, shared)."""
    cache = work / f"cache-{tag}"
    cache.mkdir()
    for shared in ("runtime", "cpus", "templates"):
        real = cache_root() / shared
        real.mkdir(parents=True, exist_ok=True)
        (cache / shared).symlink_to(real, target_is_directory=True)
    return cache


def build_once(model: Path, board: str, cache: Path, out: Path, root: Path = ROOT) -> Build:
    wall, cpu, stdout = _child(CHILD, [str(model), board, str(out)], cache, root)
    data = json.loads(stdout.strip().splitlines()[-1])
    timings = data["timings"]
    return Build(wall, cpu, data["imports"], timings["total"], timings["stages"], timings["runtime_built"])


def _triple_cpu(board: Board) -> tuple[str, str]:
    return board.target.triple, board.cpu or "generic"


def _iree(model: Path, board: Board, work: Path) -> list[list[str]]:
    triple, cpu = _triple_cpu(board)
    mlir = work / f"{model.stem}.mlir"
    return [["iree-import-onnx", str(model), "-o", str(mlir)],
            ["iree-compile", "--iree-hal-target-backends=llvm-cpu", f"--iree-llvmcpu-target-triple={triple}",
             f"--iree-llvmcpu-target-cpu={cpu}", str(mlir), "-o", str(work / f"{model.stem}.vmfb")]]


def _tvm(model: Path, board: Board, work: Path) -> list[list[str]]:
    triple, cpu = _triple_cpu(board)
    return [["tvmc", "compile", "--target", f"llvm -mtriple={triple} -mcpu={cpu}", "--output-format", "mlf",
             str(model), "-o", str(work / f"{model.stem}-tvm.tar")]]


EXTERNAL: dict[str, tuple[tuple[str, ...], Callable[[Path, Board, Path], list[list[str]]]]] = {
    "iree": (("iree-import-onnx", "iree-compile"), _iree),
    "tvm": (("tvmc",), _tvm),
}
"""Compiler -> (the programs it needs on PATH, the commands that compile MODEL for BOARD), timed together."""


def external_time(name: str, model: Path, board: Board, work: Path) -> float | str:
    programs, commands = EXTERNAL[name]
    missing = [p for p in programs if not shutil.which(p)]
    if missing:
        return f"not installed ({', '.join(missing)})"
    start = time.perf_counter()
    for command in commands(model, board, work):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            return f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:120]}"
    return time.perf_counter() - start


def models(args: argparse.Namespace, work: Path) -> list[Path]:
    paths = [Path(p) for p in args.models]
    if args.light != "none" and LIGHT.is_dir():
        wanted = None if args.light == "all" else set(args.light.split(","))
        paths += [p for p in sorted(LIGHT.glob("light_*.onnx")) if wanted is None or p.stem[6:] in wanted]
    made = {"detector": not args.no_detector, "yolov8n": args.yolo}
    for name, make in (("detector", detector), ("yolov8n", yolov8n_like)):
        if made[name]:
            paths.append(work / f"{name}.onnx")
            onnx.save(make(), str(paths[-1]))
    return paths


def measure(model: Path, board: str, work: Path, others: list[str]) -> Row:
    graph = onnx.load(str(model), load_external_data=False).graph
    ops = Counter(n.op_type for n in graph.node)
    row = Row(model.stem, board, sum(ops.values()), ops["Conv"])
    tag = f"{model.stem}-{board}"
    cache = cold_cache(work, tag)
    try:
        _child(RUNTIME, [board], cache)
        row.cold = build_once(model, board, cache, work / f"{tag}-cold")
        row.warm = build_once(model, board, cache, work / f"{tag}-warm")
    except RuntimeError as exc:
        row.error = str(exc)
    for name in others:
        row.others[name] = external_time(name, model, get_board(board), work)
    return row


def checkout(rev: str, work: Path) -> Path:
    """The sources of git revision `rev` of this repository, byte-compiled, in work/before."""
    root = work / "before"
    root.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "toolkit")], check=True)
    return root


def compare(model: Path, board: str, work: Path, before: Path, rounds: int) -> list[str]:
    """Cold builds of `before` and this checkout in turn: a line per build, then the medians."""
    for root in (before, ROOT):
        _child(RUNTIME, [board], cold_cache(work, f"{model.stem}-{board}-runtime-{root.name}"), root)
    sides, lines = {"before": (before, []), "after": (ROOT, [])}, []
    for r in range(rounds):
        for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
            root, builds = sides[side]
            tag = f"{model.stem}-{board}-{side}-{r}"
            load = os.getloadavg()[0]
            builds.append(build_once(model, board, cold_cache(work, tag), work / f"{tag}-out", root))
            b = builds[-1]
            lines.append(f"{model.stem} {board} round {r + 1} {side:6}: wall {b.wall:6.2f} cpu {b.cpu:6.2f} build "
                         f"{b.total:6.2f} units {b.stages.get('units', 0.0):6.2f} (load {load:.1f})")

    def median(side: str, value: Callable[[Build], float]) -> float:
        return statistics.median(value(b) for b in sides[side][1])
    for name, value in (("wall", lambda b: b.wall), ("cpu", lambda b: b.cpu), ("build", lambda b: b.total),
                        *((stage, lambda b, s=stage: b.stages.get(s, 0.0)) for stage in ("units", "objects", "link",
                                                                                        "artifact"))):
        old, new = median("before", value), median("after", value)
        lines.append(f"  median {name:8} before {old:7.2f} after {new:7.2f}  after/before {new / old if old else 0:.3f}")
    return lines


def _cell(build: Build | None) -> str:
    return f"{build.wall:6.1f} {build.cpu:6.1f} {build.total:6.1f}" if build else f"{'-':>6} {'-':>6} {'-':>6}"


def table(rows: list[Row], others: list[str]) -> str:
    head = (f"{'model':<22} {'board':<8} {'ops':>4} {'convs':>5} | {'cold: wall    cpu  build':>24} | "
            f"{'warm: wall    cpu  build':>24} | " + " ".join(f"{s:>7}" for s in SHOWN_STAGES) + " (cold) | "
            + " ".join(f"{n:>8}" for n in others))
    lines = [head, "-" * len(head)]
    for r in rows:
        stages = " ".join(f"{r.cold.stages.get(s, 0.0):7.1f}" if r.cold else f"{'-':>7}" for s in SHOWN_STAGES)
        ext = " ".join(f"{v:8.1f}" if isinstance(v, float) else f"{'n/a':>8}" for v in r.others.values())
        lines.append(f"{r.model:<22} {r.board:<8} {r.ops:>4} {r.convs:>5} | {'':>4}{_cell(r.cold)} | "
                     f"{'':>4}{_cell(r.warm)} | {stages}        | {ext}" + (f"  ERROR {r.error}" if r.error else ""))
    notes = sorted({f"{n}: {v}" for r in rows for n, v in r.others.items() if isinstance(v, str)})
    lines += ["", "seconds; wall and cpu: the build's process and its children, imports included; build: "
              "build_model's own total (BuildTimings); stages: build --timings' stages of the cold build"] + notes
    return "\n".join(lines)


def _machine_line(machine: dict) -> str:
    return (f"machine: {machine['cpus']} cpus, load average {machine['load_before']} before, {machine['load_after']} "
            "after (1, 5, 15 min; above the cpu count: other work shared the machine)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="ONNX files (the shared models)")
    ap.add_argument("--boards", default="x86_64,rpi4", help="comma-separated (default x86_64,rpi4)")
    ap.add_argument("--light", default="all", help="onnx's light models: all (default), none, or names (resnet50,...)")
    ap.add_argument("--no-detector", action="store_true", help="skip the PicoDet-like detector")
    ap.add_argument("--yolo", action="store_true", help="add the YOLOv8n-sized detector of tests/detector_model.py")
    ap.add_argument("--others", default="iree,tvm", help="external compilers to time beside ours: iree,tvm or none")
    ap.add_argument("--json", action="store_true", help="the rows as JSON on stdout instead of the table")
    ap.add_argument("--show", metavar="FILE", help="print the table of a saved --json output and exit")
    ap.add_argument("--before", metavar="REV", help="compare cold builds of git revision REV and this checkout")
    ap.add_argument("--rounds", type=int, default=5, help="--before: builds of each side (default 5)")
    args = ap.parse_args(argv)
    if args.show:
        data = json.loads(Path(args.show).read_text())
        rows = [Row(**{**r, **{k: Build(**r[k]) if r[k] else None for k in ("cold", "warm")}}) for r in data["rows"]]
        print(table(rows, list(rows[0].others) if rows else []))
        print(_machine_line(data["machine"]))
        return 0
    others = [] if args.others == "none" else args.others.split(",")
    unknown = [o for o in others if o not in EXTERNAL]
    if unknown:
        ap.error(f"--others: unknown {unknown}; known: {', '.join(EXTERNAL)}")
    if args.before:
        with tempfile.TemporaryDirectory(prefix="fxc-build-ab-") as tmp:
            work = Path(tmp)
            before = checkout(args.before, work)
            for model in models(args, work):
                for board in args.boards.split(","):
                    print("\n".join(compare(model, board, work, before, args.rounds)), flush=True)
        return 0
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fxc-build-time-") as tmp:
        work = Path(tmp)
        for model in models(args, work):
            for board in args.boards.split(","):
                rows.append(measure(model, board, work, others))
                print(f"{model.stem} {board}: done", file=sys.stderr)
    machine = {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
               "load_after": [round(x, 2) for x in os.getloadavg()]}
    if args.json:
        print(json.dumps({"machine": machine, "rows": [asdict(r) for r in rows]}, indent=1))
    else:
        print(table(rows, others))
        print(_machine_line(machine))
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
