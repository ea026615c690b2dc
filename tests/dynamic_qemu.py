"""A DynamicCase (tests/dynamic_harness.py) built for a board's CPU and run there: the model module compiled to an
object for the board (its vector width and index width), linked with a small C driver by zig (static musl) and run
under the board's emulator (qemu-user) once per size, against onnx.reference like DynamicRun.check.

The driver reads from stdin: int64 counts (symbols, inputs, outputs, arena bytes), the symbol values, each input's
capacity-sized bytes, each output's byte count; it runs fxc_model_run on a 0xFF-filled arena and writes the outputs'
bytes to stdout."""
from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

from dynamic_harness import DynamicCase, DynamicRun
from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter, check_supported
from fluidml_xc.planning import PlanOptions, plan_memory
from fluidml_xc.symbolic import at
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import compile_module, machine_spec
from modelrun import require_emulator

DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
void fxc_model_run(void **in, void **out, void *arena, int64_t *syms);
static int64_t word(void) { int64_t v; if (fread(&v, 8, 1, stdin) != 1) exit(3); return v; }
int main(void) {
    int64_t ns = word(), ni = word(), no = word(), arena_bytes = word();
    int64_t *syms = calloc(ns + 1, 8);
    void *in[64], *out[64];
    int64_t out_bytes[64];
    for (int64_t i = 0; i < ns; i++) syms[i] = word();
    for (int64_t i = 0; i < ni; i++) {
        int64_t n = word();
        in[i] = aligned_alloc(64, (n + 64) / 64 * 64);
        if (n && fread(in[i], 1, n, stdin) != (size_t)n) return 4;
    }
    for (int64_t i = 0; i < no; i++) { out_bytes[i] = word(); out[i] = aligned_alloc(64, (out_bytes[i] + 64) / 64 * 64); }
    void *arena = aligned_alloc(64, (arena_bytes + 64) / 64 * 64);
    memset(arena, 0xFF, arena_bytes);
    fxc_model_run(in, out, arena, syms);
    for (int64_t i = 0; i < no; i++) fwrite(out[i], 1, out_bytes[i], stdout);
    return 0;
}
"""


class BoardRun(DynamicRun):
    """DynamicRun's check and reference, with the model run on `board` (under its emulator)."""

    def __init__(self, case: DynamicCase, board: str, workdir: Path, parallel: bool = True):
        check_supported(case.graph)
        plan = plan_memory(case.graph, PlanOptions(reuse=False, inplace=False, reorder=False))
        spec = machine_spec(get_board(board))
        emitter = ModuleEmitter(case.graph, plan, spec, EmitOptions(parallel=parallel))
        self.case, self.ir_text, self.arena_bytes = case, emitter.emit(), emitter.arena_bytes
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "model.o").write_bytes(compile_module(self.ir_text, spec))
        (workdir / "driver.c").write_text(DRIVER)
        self.runner = workdir / "runner"
        subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", get_board(board).target.zig_target, "-O1", "-static",
                        str(workdir / "driver.c"), str(workdir / "model.o"), "-lm", "-o", str(self.runner)],
                       check=True, capture_output=True, timeout=600)
        self.prefix = require_emulator(board)

    def __call__(self, env: dict[str, int], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        g = self.case.graph
        data = struct.pack("<4q", len(g.symbols), len(g.inputs), len(g.outputs), self.arena_bytes)
        data += struct.pack(f"<{len(g.symbols)}q", *[int(env[s]) for s in g.symbols])
        for name in g.inputs:
            t = g.tensors[name]
            buf = np.full(t.size, np.nan if t.dtype.kind == "f" else 0x7F, dtype=t.dtype)  # dense at the actual size
            feed = np.asarray(feeds[name], dtype=t.dtype).ravel()
            buf[:feed.size] = feed
            data += struct.pack("<q", buf.nbytes) + buf.tobytes()
        data += b"".join(struct.pack("<q", g.tensors[n].nbytes) for n in g.outputs)
        proc = subprocess.run([*self.prefix, str(self.runner)], input=data, capture_output=True, timeout=120, check=True)
        result, offset = [], 0
        for name in g.outputs:
            t = g.tensors[name]
            full = np.frombuffer(proc.stdout[offset:offset + t.nbytes], dtype=t.dtype)
            offset += t.nbytes
            actual = at(t.dyn or t.shape, env)
            result.append(full[:int(np.prod(actual, dtype=np.int64))].reshape(actual).copy())
        return result
