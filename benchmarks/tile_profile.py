#!/usr/bin/env python3
"""How well a model's split fills N threads, from per-tile CPU times (docs/THREADS.md, "Tile profile").

    python benchmarks/tile_profile.py [MODEL.onnx | EXAMPLE] [--threads 2] [--runs 8] [--rounds 3] [--top 15] [--artifact DIR]

Builds the model for this machine with --threads N (or takes a built artifact), links benchmarks/c/tileprof.c
against its libmodel.a and runs it in interleaved rounds on 1 and on N threads: every tile of every split op
timed in thread CPU time (a loaded machine preempts a thread but does not bill it for the time it waits, so
the structure shows even when wall times are noise), minimum over runs and rounds. Printed: the serial part
(CPU time of the calling thread between split ops), the split ops' tile times, and the N-thread bounds from
them: tiles dealt out in order to whichever thread is free (as runtime_c/pool.c does) and a perfect split;
per op its tile count, balance (perfect / in-order time), largest tile over the mean, and the tiles' CPU
time when N threads run them over their time on one (memory and cache contention; on a loaded machine also
the other processes' doing).
"""
from __future__ import annotations

import argparse
import heapq
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))

from example_models import model_file  # noqa: E402


@dataclass
class Profile:
    """Minimum CPU times over runs: per split-op call the serial time before it and its tiles' times."""
    serial_ms: list[float]
    tiles_ms: list[list[float]]
    tail_ms: float

    @classmethod
    def parse(cls, text: str) -> "Profile":
        data = json.loads(text)
        if data["overflow"]:
            raise SystemExit("tileprof: more split ops or tiles than it records (MAX_CALLS / MAX_TILES in benchmarks/c/tileprof.c)")
        return cls([c["serial_ms"] for c in data["calls"]], [c["tiles_ms"] for c in data["calls"]], data["tail_ms"])

    def merge(self, other: "Profile") -> "Profile":
        return Profile([min(a, b) for a, b in zip(self.serial_ms, other.serial_ms)],
                       [[min(a, b) for a, b in zip(x, y)] for x, y in zip(self.tiles_ms, other.tiles_ms)],
                       min(self.tail_ms, other.tail_ms))

    @property
    def serial(self) -> float:
        return sum(self.serial_ms) + self.tail_ms


def in_order(tiles: list[float], threads: int) -> float:
    """Finish time of tiles claimed in order, each by whichever thread is free first."""
    free = [0.0] * threads
    for t in tiles:
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


def tileprof(artifact: Path) -> Path:
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.target.boards import get_board

    manifest = json.loads((artifact / "manifest.json").read_text())
    return compile_c_program(get_board(manifest["board"]).target, manifest["cpu"], [ROOT / "benchmarks" / "c" / "tileprof.c"],
                             [artifact], [artifact / "libmodel.a", "-lpthread"], artifact / "tileprof")


def main() -> int:
    from fluidml_xc.build import BuildOptions, build_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="light_squeezenet", type=model_file,
                    help="an ONNX file, an example model's name (fluidml_xc/examples.py) or a light model's "
                         "(onnx's light model zoo; default light_squeezenet)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=8, help="runs per round (minimum taken)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of 1 and N threads")
    ap.add_argument("--top", type=int, default=15, help="split ops listed, the largest first")
    ap.add_argument("--artifact", type=Path, help="an x86_64 artifact built with --threads N (skips the build)")
    args = ap.parse_args()
    if args.threads < 2:
        ap.error("--threads must be at least 2")
    artifact = args.artifact
    if artifact is None:
        work = Path(tempfile.mkdtemp(prefix="fxc-tiles-"))
        artifact = build_model(args.model, BuildOptions(out_dir=work / "build", threads=args.threads, profile_runner=False,
                                                        record_last=False)).artifact
    manifest = json.loads((artifact / "manifest.json").read_text())
    if manifest["emulator"]:
        raise SystemExit(f"{artifact} is built for {manifest['board']}: the tile profile runs natively only")
    split = manifest["parallel_ops"]
    names = [(op["name"], op["type"]) for op in manifest["ops"] if op["name"] in split]
    exe = tileprof(artifact)
    profiles: dict[int, Profile] = {}
    for _ in range(args.rounds):
        for t in (1, args.threads):
            out = subprocess.run([str(exe), str(t), str(args.runs)], capture_output=True, text=True, check=True, timeout=3600)
            p = Profile.parse(out.stdout)
            profiles[t] = profiles[t].merge(p) if t in profiles else p
    one, many, n = profiles[1], profiles[args.threads], args.threads
    if len(one.tiles_ms) != len(names):
        raise SystemExit(f"{len(one.tiles_ms)} parallel-for calls but {len(names)} split ops in the manifest")
    tiled = sum(map(sum, one.tiles_ms))
    total = one.serial + tiled
    ordered = one.serial + sum(in_order(t, n) for t in one.tiles_ms)
    perfect = one.serial + tiled / n
    contention = sum(map(sum, many.tiles_ms)) / tiled if tiled else 1.0  # no op split (mlp before #28): all serial
    print(f"{args.model.stem} ({artifact}): CPU time at 1 thread {total:.3f} ms = serial {one.serial:.3f} ms "
          f"({100 * one.serial / total:.1f}%) + {len(names)} split ops {tiled:.3f} ms")
    print(f"  {n} threads, tiles timed on 1: in-order claims {ordered:.3f} ms ({total / ordered:.3f}x), "
          f"perfect split {perfect:.3f} ms ({total / perfect:.3f}x); tiles run by {n} threads take {contention:.3f}x "
          f"their 1-thread CPU time")
    rows = []
    for (name, op_type), ts, ts_n in zip(names, one.tiles_ms, many.tiles_ms):
        s = sum(ts)
        rows.append((s, f"  {name:8} {op_type:14} {'x'.join(map(str, split[name])):>12} {len(ts):5} {s:9.3f} "
                        f"{s / n / in_order(ts, n):7.3f} {max(ts) * len(ts) / s:8.2f} {sum(ts_n) / s:7.3f}"))
    print(f"  {'op':8} {'type':14} {'split':>12} {'tiles':>5} {'CPU ms':>9} {'balance':>7} {'max/mean':>8} {'N/1 CPU':>7}")
    for _, line in sorted(rows, reverse=True)[: args.top]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
