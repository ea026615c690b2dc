#!/usr/bin/env python3
"""Where a cold build's LLVM time goes, per kernel family (issue #27): each unit of one build emitted and compiled in
this process alone (no cache, one worker), its IR lines and the thread CPU seconds of its emission, LLVM
optimization and code generation, summed per family (op type and, for a float Conv, its plan's form).

    python benchmarks/unit_costs.py MODEL.onnx|detector|yolov8n [--board x86_64] [--top 12] [--json OUT]

Thread CPU time, so the numbers hold on a loaded machine (a waiting thread is not billed). Units with the same
IR compile once, as in a build; their LLVM seconds go to the first unit of that IR.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))
sys.path.insert(0, str(ROOT / "tests"))

from fluidml_xc.build import BuildOptions, build_model  # noqa: E402
from fluidml_xc.emit import unit_build  # noqa: E402
from fluidml_xc.ops.conv import conv2d  # noqa: E402
from fluidml_xc.target import machine  # noqa: E402

FIELDS = ("units", "lines", "emit", "optimize", "codegen")


def family(record: dict) -> str:
    return record["op"] + (f" [{record['form']}]" if record.get("form") else "")


class Recorder:
    """Wraps the units' emission (unit_build._emit, emit_group), compile_code and Conv's plan_conv to time and label
    every unit."""

    def __init__(self):
        self.units: list[dict] = []
        self.by_code: dict[str, dict] = {}
        self.current: dict | None = None

    def install(self) -> None:
        emit, plan = unit_build._emit, conv2d.plan_conv

        def label(job) -> dict:
            node = job.view.node
            return {"op": node.op_type, "shape": [list(job.view.graph.tensors[t].shape) for t in node.outputs],
                    "variant": job.spec.variant}

        def emit_job(job):
            self.current = label(job)
            started = time.thread_time()
            done, sharing = emit(job)
            self.current.update(emit=time.thread_time() - started, lines=done.unit.ir_text.count("\n"), key=done.key)
            self.units.append(self.current)
            self.by_code.setdefault(done.key, self.current)
            return done, sharing

        def emit_group(jobs):
            """unit_build.emit_group with each unit recorded: the first emitted, the others derived from it
            (units.Sharing, their seconds their own) or emitted."""
            first, sharing = emit_job(jobs[0])
            record, done = self.units[-1], [first]
            for job in jobs[1:]:
                started = time.thread_time()
                unit = sharing.apply(job.view) if sharing is not None else None
                if unit is None:
                    done.append(emit_job(job)[0])
                    continue
                done.append(unit_build.Emitted(unit, first.key, time.thread_time() - started))
                self.units.append({**label(job), "form": record.get("form"), "conv": record.get("conv"),
                                   "emit": done[-1].seconds, "lines": record["lines"], "key": first.key})
            return done

        def plan_conv(*args, **kwargs):
            p = plan(*args, **kwargs)
            if self.current is not None:
                wino = p.winograd
                self.current["form"] = f"winograd m={wino.m}" if wino is not None else p.form
                s = p.shape
                self.current["conv"] = f"{s.Cig * s.G}->{s.OC} k{s.KH}x{s.KW} s{s.sh} {s.OH}x{s.OW} g{s.G}"
            return p

        def compile_code(text, spec):
            started = time.thread_time()
            tm = machine.target_machine(spec)
            module = machine.optimized_module(text, tm)
            optimized = time.thread_time()
            code = tm.emit_object(module)
            key = next((k for k in self.by_code if f"fxc_k_{k[:24]}" in text), None)
            if key is not None:
                self.by_code[key].update(optimize=optimized - started, codegen=time.thread_time() - optimized)
            return unit_build.CodeResult(code, 0.0, 0.0, 1)
        unit_build._emit, unit_build.emit_group, unit_build.compile_code = emit_job, emit_group, compile_code
        conv2d.plan_conv = plan_conv


def model_path(name: str, tmp: Path) -> str:
    if name in ("detector", "yolov8n"):
        import onnx
        from detector_model import detector, yolov8n_like
        path = tmp / f"{name}.onnx"
        onnx.save(detector() if name == "detector" else yolov8n_like(), path)
        return str(path)
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--board", default="x86_64")
    ap.add_argument("--top", type=int, default=12, help="the heaviest units to list")
    ap.add_argument("--json", help="write every unit's record here")
    args = ap.parse_args()
    rec = Recorder()
    rec.install()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.process_time()
        build_model(model_path(args.model, Path(tmp)), BuildOptions(board=args.board, out_dir=Path(tmp) / "out",
                                                                    record_last=False, cache=False, workers=1))
        total = time.process_time() - started
    sums: dict[str, dict] = defaultdict(lambda: dict.fromkeys(FIELDS, 0.0))
    for u in rec.units:
        row = sums[family(u)]
        row["units"] += 1
        for f in FIELDS[1:]:
            row[f] += u.get(f, 0.0) if f != "lines" or u is rec.by_code.get(u["key"]) else 0
    print(f"{args.model} {args.board}: {len(rec.units)} units, {len(rec.by_code)} distinct, process CPU {total:.1f} s")
    print(f"{'family':44} {'units':>5} {'IR lines':>9} {'emit s':>7} {'O3 s':>7} {'codegen s':>9}")
    for name, row in sorted(sums.items(), key=lambda kv: -(kv[1]["optimize"] + kv[1]["codegen"])):
        print(f"{name[:44]:44} {row['units']:5.0f} {row['lines']:9.0f} {row['emit']:7.2f} {row['optimize']:7.2f} "
              f"{row['codegen']:9.2f}")
    heavy = sorted(rec.by_code.values(), key=lambda u: -(u.get("optimize", 0) + u.get("codegen", 0)))[:args.top]
    print("heaviest distinct units:")
    for u in heavy:
        print(f"  {family(u)[:36]:36} {u.get('conv', str(u['shape'])):36} {u['variant']:8} {u['lines']:7} lines "
              f"O3 {u.get('optimize', 0):.2f} s codegen {u.get('codegen', 0):.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"total": total, "units": rec.units}, indent=1))


if __name__ == "__main__":
    main()
