#!/usr/bin/env python3
"""Every float Conv / Gemm / MatMul hot loop a model really runs on a board, through llvm-mca as benchmarks/mca.py
prices its cases: the model is lowered as `fluidml-xc build` does (the board's threads, fluid's layouts and loop
orders), compiled, and each node function's innermost multiply-add loop goes to the board's mca model.

    python benchmarks/riscv_forms.py MODEL.onnx [MODEL.onnx ...] --board bpi-f3 [--threads N] [--all]

One line per node (with --all) or per distinct form (the op, the plan's kind, R x P or R x U, layout, stride, kernel,
Cog; the worst node of each and how many share it): cycles, % of the core's peak, the plan's decisions; the total:
every priced node's FLOP at its hot loop's rate (a rough whole-model figure: loops only, no edges, no memory). A
function that makes an indirect call on a board with machine-code routines (kernels/scalar_tile.py, depthwise_tile.py,
rvv_depthwise.py) is given the routine's loop when that has more multiply-adds than its own ("[routine?]": the call may
be another one, e.g. a Gemm of one row runs the generic tile: check with --all and benchmarks/mca.py). --nhwc forces
every activation channels-last (benchmarks/mca_cases.py forced_channels_last) to price a form on a small model.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from mca_cases import forced_channels_last  # noqa: E402
from mca import (DEPTHWISE_SECTION, GEMV_SECTION, MCA_TRIPLE, RVV_DEPTHWISE_SECTION, TILE_SECTION, hot_loop, mca_input, register_bits,  # noqa: E402
                 riscv_peak, run_mca, words_as_code)

_FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")


def functions(obj: bytes, objdump: str, attrs: str) -> dict[str, list[tuple[int, str]]]:
    """Each function's instructions (name -> (address, text)); the machine-code routines' sections as one pseudo
    function each, named after the section."""
    with tempfile.NamedTemporaryFile(suffix=".o") as fh:
        fh.write(obj)
        fh.flush()
        present = [s for s in (TILE_SECTION, DEPTHWISE_SECTION, RVV_DEPTHWISE_SECTION, GEMV_SECTION) if s in obj.decode("latin-1")]
        sections = ["-D", "-j", ".text", *(a for s in present for a in ("-j", s))] if present else ["-d"]
        text = subprocess.run([objdump, *sections, "--no-show-raw-insn", f"--mattr={attrs}", fh.name],
                              capture_output=True, text=True, check=True).stdout
    out: dict[str, list[tuple[int, str]]] = {}
    name, section = "?", ".text"
    for line in text.splitlines():
        if line.startswith("Disassembly of section "):
            section = line.split()[-1].rstrip(":")
            name = section
        elif (m := _FUNC.match(line)) and section == ".text" and not m.group(1).startswith(".L"):
            name = m.group(1)
        elif (m := re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)) and m.group(2).strip():
            body = m.group(2)
            out.setdefault(name, []).append((int(m.group(1), 16), body.split("\t", 1)[0] + (" " + body.split("\t", 1)[1] if "\t" in body else "")))
    return {k: words_as_code(v, objdump.replace("objdump", "mc"), attrs) if k != ".text" and k.startswith(".text.") else v
            for k, v in out.items()}


def describe(graph, node, decisions, forms, spec) -> tuple[str, str]:
    """(form key, details) of a float Conv / Gemm / MatMul node as the plan runs it."""
    from fluidml_xc.fluid.geometry import conv_geometry
    from fluidml_xc.kernels.kernel import layout_strides

    def strides(name):
        return layout_strides(graph.tensors[name].shape, decisions.layouts.get(name))
    order = decisions.loop_orders.get(node.name, "")
    if node.op_type == "Conv":
        geo = conv_geometry(graph, node, strides, spec.vector_bits, forms)
        if geo is None:
            return "", ""
        p, s = geo.plan, geo.plan.shape
        layout = "NHWC" if s.xs[1] == 1 and s.C > 1 else "NCHW"
        out_layout = "NHWC" if s.os[1] == 1 and s.OC > 1 else "NCHW"
        b = p.blocking
        tile = f"R{b.R}xP{b.P}" if b.P else f"R{b.R}xU{b.U}"
        wino = " winograd" if node.name in decisions.winograd else ""
        key = (f"Conv {s.KH}x{s.KW}/s{s.sh} g{'dw' if s.G > 1 and s.Cig == 1 else s.G} {b.kind}{wino} {tile} "
               f"{layout}->{out_layout} Cog%V={s.Cog % p.V} {order}")
        detail = (f"{s.C}->{s.OC} {s.H}x{s.W}->{s.OH}x{s.OW} k{s.KH}x{s.KW} s{s.sh} g{s.G} flat={s.flat} "
                  f"form={p.form} packs={b.packs_input}")
        return key, detail
    if node.op_type in ("Gemm", "MatMul"):
        from fluidml_xc.kernels.matmul_geometry import matmul_geometry
        g = matmul_geometry(graph, node, strides)
        key = f"{node.op_type} n={g.n} {order} bconst={g.b_const}"
        return key, f"m={g.m} n={g.n} k={g.k} a={g.a} b={g.b} c={g.c}"
    return "", ""


def audit(path: Path, board_name: str, threads: int | None, show_all: bool, asm_dir: Path | None,
          nhwc: bool = False) -> None:
    from fluidml_xc import pipeline
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import compile_module, machine_spec
    from fluidml_xc.fluid.costs import Costs

    board = get_board(board_name)
    spec = machine_spec(board)
    threads = threads or board.cores
    if nhwc:
        pipeline.optimize = forced_channels_last(pipeline.optimize)
    lowered = lower(import_graph(onnx.load(path)), spec, LowerOptions(opt="fluid", threads=threads, parallel=threads > 1))
    obj = compile_module(lowered.ir_text, spec)
    funcs = functions(obj, "llvm-objdump-22", spec.features)
    forms = Costs(lowered.graph, spec).model.forms
    peak = riscv_peak("llvm-mca-22", spec.cpu, "fp", register_bits(spec), spec.features)
    routine_loops = {k: hot_loop(v, "riscv64", register_bits(spec)) for k, v in funcs.items() if k.startswith(".text.")}
    seen: dict[str, list] = {}
    total = [0.0, 0.0]
    for step, index in enumerate(lowered.plan.order):
        node = lowered.graph.nodes[index]
        if node.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        out = lowered.graph.tensors[node.outputs[0]]
        if np.dtype(out.dtype) != np.float32:
            continue
        key, detail = describe(lowered.graph, node, lowered.decisions, forms, spec)
        body = funcs.get(f"op{step}") or []
        tiled = [k for k in funcs if k.startswith(f"op{step}.") or k.startswith(f"op{step}_")]
        for k in tiled:
            body = body + funcs[k]
        loop = hot_loop(body, "riscv64", register_bits(spec)) if body else None
        section = (RVV_DEPTHWISE_SECTION if " depthwise_c " in key and RVV_DEPTHWISE_SECTION in routine_loops
                   else DEPTHWISE_SECTION if " gdw " in key else GEMV_SECTION if detail.startswith("m=1 ")
                   else TILE_SECTION)  # the X60's routine: channels-last only
        routine = routine_loops.get(section) if any(s.startswith("jalr") for _, s in body) else None
        if routine and (loop is None or routine.macs > loop.macs):  # an indirect call: the section's routine
            loop, key = routine, key + " [routine?]"
        flop = node_flop(lowered.graph, node)
        if loop is None or not loop.macs:
            row = (node.name, key, detail, None, None, None)
        else:
            asm = mca_input(loop.body, "riscv64", loop.vtype)
            cycles, rthr, _ = run_mca(asm, "llvm-mca-22", MCA_TRIPLE["riscv64"], spec.cpu, spec.features)
            pct = 100 * (2 * loop.lanes + loop.mul_lanes) / cycles / peak
            row = (node.name, key, detail, cycles, pct, loop)
            total[0] += flop
            total[1] += flop / (peak * pct / 100)
            if asm_dir:
                asm_dir.mkdir(parents=True, exist_ok=True)
                (asm_dir / f"{board_name}-{path.stem}-{re.sub(r'[^A-Za-z0-9]+', '_', node.name)}.s").write_text(asm)
        seen.setdefault(key, []).append(row)
        if show_all:
            _print(row, 1)
    if not show_all:
        for key, rows in seen.items():
            _print(min(rows, key=lambda r: r[4] if r[4] is not None else 1e9), len(rows))
    print(f"total: {total[0] / 1e6:.1f} MFLOP in the priced loops, {total[1] / 1e6:.2f} M cycles at their hot loops' "
          f"rates ({100 * total[0] / total[1] / peak:.1f}% of peak)")


def node_flop(graph, node) -> float:
    """2 x the multiply-adds of a Conv (its output x input channels per group x taps) or a Gemm / MatMul."""
    out = graph.tensors[node.outputs[0]]
    if node.op_type == "Conv":
        w = graph.tensors[node.inputs[1]].shape
        return 2.0 * float(np.prod(out.shape)) * float(np.prod(w[1:]))
    a = graph.tensors[node.inputs[0]].shape
    k = a[0] if node.op_type == "Gemm" and node.attrs.get("transA", 0) else a[-1]
    return 2.0 * float(np.prod(out.shape)) * k


def _print(row, count: int) -> None:
    name, key, detail, cycles, pct, loop = row
    if cycles is None:
        print(f"{key:70} x{count:<3} {'no MAC loop':>22}  {name}: {detail}")
        return
    print(f"{key:70} x{count:<3} {cycles:7.2f} cyc {loop.macs:3} mac {loop.stack:2} stk {pct:5.1f}%  {name}: {detail}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--board", default="bpi-f3")
    ap.add_argument("--threads", type=int, default=0, help="the build's threads (default the board's cores)")
    ap.add_argument("--all", action="store_true", help="one line per node, not per form (the worst of each form)")
    ap.add_argument("--asm-dir", type=Path)
    ap.add_argument("--nhwc", action="store_true", help="every activation channels-last (the graph's inputs and outputs "
                    "as given), the kernels' own loop orders: to price a form on a small model")
    args = ap.parse_args()
    for path in args.models:
        print(f"## {path.name} on {args.board}")
        audit(path, args.board, args.threads or None, args.all, args.asm_dir, args.nhwc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
