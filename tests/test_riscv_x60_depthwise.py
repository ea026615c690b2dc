"""benchmarks/x60_depthwise.py's LMUL-1 depthwise rows for the X60 (docs/RISCV_KERNELS.md): the scheduled and
register-allocated loops compute a channels-last depthwise 3x3 with its Clip (run here by a small interpreter of
their RVV instructions against NumPy, NaN included), and the scheduler's cycles agree with llvm-mca-22's."""
from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _workbench():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("x60_depthwise", BENCH / "x60_depthwise.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["x60_depthwise"] = mod  # its dataclass looks its module up
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))


LANES, BYTES = 8, 4
NAN_BOUND = 0xFF000001
"""a6: x + x (the sign shifted out) below it unsigned is a number (0xFF000000: an infinity), the mask's active lanes."""


def _run(body: list[str], vregs: dict, xregs: dict, mem: np.ndarray, iterations: int):
    """Executes the loop body `iterations` times (the branch closes it) on e32 m1 vectors of 8 lanes; mem is the
    flat float32 memory, addresses in bytes."""
    fregs = {"fa5": np.float32(0.0), "fa4": np.float32(6.0)}
    mask = None

    def at(addr: int, offsets=None):
        base = addr // BYTES
        return base + np.arange(LANES) if offsets is None else (addr + offsets.view(np.uint32).astype(np.int64)) // BYTES

    for _ in range(iterations):
        for line in body:
            mn, rest = line.split(" ", 1)
            ops = [o.strip() for o in re.split(r",(?![^(]*\))", rest)]
            if mn == "vle32.v":
                vregs[ops[0]] = mem[at(xregs[ops[1].strip("()")])].copy()
            elif mn == "vluxei32.v":
                vregs[ops[0]] = mem[at(xregs[ops[1].strip("()")], vregs[ops[2]])].copy()
            elif mn == "vse32.v":
                mem[at(xregs[ops[1].strip("()")])] = vregs[ops[0]]
            elif mn == "vsuxei32.v":
                mem[at(xregs[ops[1].strip("()")], vregs[ops[2]])] = vregs[ops[0]]
            elif mn == "vfmacc.vv":
                vregs[ops[0]] = (vregs[ops[0]] + vregs[ops[1]].astype(np.float64) * vregs[ops[2]]).astype(np.float32)
            elif mn == "vfmadd.vv":
                vregs[ops[0]] = (vregs[ops[0]].astype(np.float64) * vregs[ops[1]] + vregs[ops[2]]).astype(np.float32)
            elif mn == "vadd.vv":
                assert ops[0] == "v0"
                vregs["v0"] = (vregs[ops[1]].view(np.uint32) + vregs[ops[2]].view(np.uint32)).view(np.float32)
            elif mn == "vmsltu.vx":
                assert ops[:2] == ["v0", "v0"] and ops[2] == "a6"
                mask = vregs["v0"].view(np.uint32) < np.uint32(NAN_BOUND)
            elif mn == "vfmul.vv":
                vregs[ops[0]] = vregs[ops[1]] * vregs[ops[2]]
            elif mn == "vfadd.vv":
                vregs[ops[0]] = vregs[ops[1]] + vregs[ops[2]]
            elif mn == "vmax.vx":
                assert ops[2] == "zero"
                vregs[ops[0]] = np.maximum(vregs[ops[1]].view(np.int32), 0).view(np.float32)
            elif mn == "vmin.vx":
                assert ops[3] == "v0.t" and mask is not None
                low = np.minimum(vregs[ops[1]].view(np.int32), np.int32(xregs[ops[2]])).view(np.float32)
                vregs[ops[0]] = np.where(mask, low, vregs[ops[0]])
            elif mn == "vfmax.vf":
                vregs[ops[0]] = np.fmax(vregs[ops[1]], fregs[ops[2]])
            elif mn == "vfmin.vf":
                assert ops[3] == "v0.t" and mask is not None
                vregs[ops[0]] = np.where(mask, np.fmin(vregs[ops[1]], fregs[ops[2]]), vregs[ops[0]])
            elif mn == "addi":
                xregs[ops[0]] = xregs[ops[1]] + int(ops[2])
            elif mn != "bne":
                raise AssertionError(f"no interpreter for {line}")


@pytest.mark.parametrize("rows,columns,copies,indexed,int_clip,restarts", [
    (3, 3, 3, False, False, 0), (4, 3, 2, False, False, 0), (5, 3, 2, False, False, 0), (4, 3, 3, True, False, 0),
    (3, 3, 3, False, True, 0), (5, 3, 2, False, True, 0), (5, 3, 2, False, False, 6)])
def test_rows_compute_the_depthwise_conv_and_clip(rows, columns, copies, indexed, int_clip, restarts):
    """Input rows 0..R+1, padded columns 0..W+1 (loop column j loads padded column j + 2 and completes output
    column j, whose taps are padded columns j..j+2); the accumulators carried into the first iteration hold output
    columns 0 and 1 after their first kernel columns (with the bias, but for int_clip, which adds it last)."""
    wb = _workbench()
    loop = wb.multirow(rows, columns, copies, indexed, int_clip=int_clip, restarts=restarts, search=restarts > 0)
    rng = np.random.default_rng(rows * 10 + columns)
    iterations = 3
    width = iterations * columns
    x = rng.standard_normal((rows + 2, width + 2, LANES)).astype(np.float32) * 4
    x[1, 5, 3] = np.nan
    x[2, 7, 1], x[0, 9, 6], x[3, 2, 4] = np.inf, -np.inf, 1e-40  # Clip 6 and 0 from infinities, a denormal
    w = rng.standard_normal((3, 3, LANES)).astype(np.float32)
    bias = rng.standard_normal(LANES).astype(np.float32)
    ref = np.clip(bias + sum(w[kh, kw] * x[kh:kh + rows, kw:kw + width] for kh in range(3) for kw in range(3)),
                  np.float32(0), np.float32(6))

    col, row = LANES * BYTES, (width + 2) * LANES * BYTES
    out_base = x.nbytes
    mem = np.concatenate([x.ravel(), np.full(rows * (width + 2) * LANES, -7.0, np.float32)])
    vregs = {f"v{1 + 3 * kh + kw}": w[kh, kw] for kh in range(3) for kw in range(3)} | {"v10": bias}
    xregs = {"a6": NAN_BOUND, "a7": int(np.float32(6.0).view(np.int32))}
    for name, reg in loop.registers.items():
        kind, index = name.split("_")
        if kind in ("in2", "in1"):
            o, done = int(index), 2 if kind == "in2" else 1
            first = 0 if kind == "in2" else 1
            vregs[reg] = (0 if int_clip else bias) + sum(w[kh, kw] * x[o + kh, first + kw] for kh in range(3) for kw in range(done))
        elif indexed:
            base = 0 if kind == "pi" else out_base
            xregs[reg] = base + (int(index) + 2 * (kind == "pi")) * col
        else:
            r = int(kind[2:])
            xregs[reg] = (r * row + (int(index) + 2) * col) if kind.startswith("pi") else out_base + r * row + int(index) * col
    if indexed:
        for r in range(rows + 2):
            vregs[f"v{11 + r}"] = (r * row + np.arange(LANES, dtype=np.uint32) * BYTES).astype(np.uint32).view(np.float32)

    _run(loop.body, vregs, xregs, mem, iterations)
    out = mem[x.size:].reshape(rows, width + 2, LANES)[:, :width]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.isnan(out).sum() == np.isnan(ref).sum() > 0


@pytest.mark.skipif(shutil.which("llvm-mca-22") is None, reason="llvm-mca-22 (the SpacemitX60 model) not installed")
@pytest.mark.parametrize("rows,columns,copies,indexed", [(3, 3, 3, False), (5, 3, 2, False), (4, 3, 3, True)])
def test_scheduler_cycles_match_llvm_mca(rows, columns, copies, indexed):
    """The scheduler's model of the X60's in-order issue prices its loops as llvm-mca-22 does, within a cycle."""
    wb = _workbench()
    loop = wb.multirow(rows, columns, copies, indexed)
    cycles, _ = wb.mca(loop.body)
    assert abs(cycles - loop.cycles) <= 1.5
