"""The X60's GEMV routine (kernels/matmul_gemv.py, #30): its words are llvm-mc's, every weight is multiplied once,
its loop beats LLVM's schedule by llvm-mca-22 (the load unit's bound: 50% of the FMA peak), and under qemu-riscv64
(VLEN 256) Gemm / MatMul of one row with constant weights give ONNX Runtime's values: K with and without the loop
and every remainder of its 7 steps, N under, at and past a panel of 64 (the last panel's 16-column groups), Gemm
with transA / transB, bias / alpha / beta, a fused Relu, NaN, infinities and -0.0 in x; 1, 4 and 8
threads give the same bytes; the board builds the routine in its section, other RISC-V CPUs do not. Also the
4-step GEMM loop of A rows far apart (kernels/matmul_geometry.py gemm_steps)."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
from onnx import helper

from fluidml_xc.kernels import matmul_gemv as gv
from modelrun import build, graph_model, run
from test_riscv import match_onnx


def _tool(*names: str) -> str:
    for name in names:
        if shutil.which(name):
            return name
    pytest.skip(f"none of {', '.join(names)} installed")


@pytest.mark.parametrize("kk, a_step", [(1, 1), (3, 1), (6, 1), (7, 1), (8, 1), (13, 3), (14, 1), (1280, 1), (29, 73)])
def test_routine_encodes_as_llvm_mc_assembles_it(kk, a_step, tmp_path):
    """Every word is llvm-mc's (vsetvli, vmv.v.i, vle32.v, vfmacc.vf, vse32.v, flw, addi, fmv.w.x, bne, ret), and
    each of the kk x 4 loads meets its one multiply-add (the loop's counted once per iteration)."""
    mc, objcopy = _tool("llvm-mc-22", "llvm-mc"), _tool("llvm-objcopy-22", "llvm-objcopy")
    code = gv.program(kk, a_step)
    subprocess.run([mc, "-triple=riscv64", "-mattr=+v,+d", "-filetype=obj", "-o", str(tmp_path / "a.o")],
                   input=gv.text(code), text=True, check=True)
    subprocess.run([objcopy, "-O", "binary", "--only-section=.text", str(tmp_path / "a.o"), str(tmp_path / "a.bin")],
                   check=True)
    data = (tmp_path / "a.bin").read_bytes()
    assert list(struct.unpack(f"<{len(data) // 4}I", data)) == gv.encode(code)
    loops = [insn for insn in code if insn[0] == "bne"]
    iterations = kk // gv.STEPS
    assert len(loops) == (iterations > 0)
    top, end = (loops[0][3], code.index(loops[0])) if loops else (0, 0)
    for op in ("vle32.v", "vfmacc.vf"):
        marks = [insn[0] == op for insn in code]
        in_loop = sum(marks[top:end])
        assert sum(marks) + (iterations - 1) * in_loop * (iterations > 0) == 4 * kk + (op == "vfmacc.vf") * 2 * (iterations > 0), op


def test_loop_runs_at_the_load_units_rate_in_llvm_mca_22():
    """The loop's 28 loads take 4 cycles each of the X60's one vector load/store unit (llvm-mca-22): within 2% of
    that bound (49% of the FMA peak; LLVM's schedule of the same GEMV: 62 cycles per 12 loads, 39%)."""
    mca = _tool("llvm-mca-22")
    lines = gv.text(gv.program(1280, 1)).splitlines()
    top = next(i for i, line in enumerate(lines) if line.endswith(":"))
    end = next(i for i, line in enumerate(lines) if line.startswith("bne"))
    body = ["# LLVM-MCA-RISCV-LMUL M2", "# LLVM-MCA-RISCV-SEW E32", *lines[top:end + 1]]
    out = subprocess.run([mca, "-mtriple=riscv64", "-mcpu=spacemit-x60", "-iterations=200"], input="\n".join(body) + "\n",
                         capture_output=True, text=True, check=True).stdout
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200
    loads = sum(line.startswith("vle32.v") for line in lines[top:end])
    assert loads == 4 * gv.STEPS and cycles <= 4 * loads * 1.02, cycles


def test_routine_is_for_the_x60_at_vlen_256_or_more():
    assert gv.for_cpu("riscv64-unknown-linux-gnu", "spacemit-x60", "+m,+a,+f,+d,+c,+v,+zvl256b")
    assert not gv.for_cpu("riscv64-unknown-linux-gnu", "spacemit-x60", "+m,+a,+f,+d,+c,+v")  # VLEN 128
    assert not gv.for_cpu("riscv64-unknown-linux-gnu", "generic-rv64", "+m,+a,+f,+d,+c,+v,+zvl256b")
    assert not gv.for_cpu("riscv64-unknown-linux-gnu", "sifive-u74", "+m,+a,+f,+d,+c")
    assert not gv.for_cpu("x86_64-unknown-linux-gnu", "spacemit-x60", "")


def _gemv_model():
    """One-row Gemm / MatMul nodes with constant weights: K 1..15 around the loop's 7 steps, 64 and 1280; N 16..200."""
    rng = np.random.default_rng(30)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    nodes, consts, feeds, outs = [], {}, {}, []
    for q, (kk, n) in enumerate([(1, 64), (3, 70), (6, 100), (7, 64), (8, 65), (13, 128), (14, 200), (15, 97), (64, 80),
                                 (1280, 100)]):
        x = f(1, kk)
        if q == 2:
            x[0, [0, 3]] = [np.nan, -0.0]
        if q == 6:
            x[0, 5] = np.inf
        feeds[f"x{q}"], consts[f"w{q}"] = x, f(kk, n)
        nodes.append(helper.make_node("MatMul", [f"x{q}", f"w{q}"], [f"m{q}"]))
        outs.append(f"m{q}")
    feeds["g"], consts["gw"], consts["gb"] = f(1, 31), f(75, 31), f(75)
    nodes += [helper.make_node("Gemm", ["g", "gw", "gb"], ["gc"], alpha=0.5, beta=2.0, transB=1),
              helper.make_node("Relu", ["gc"], ["gy"])]
    feeds["t"], consts["tw"] = f(9, 1), f(9, 66)  # transA: the row is t's column
    nodes.append(helper.make_node("Gemm", ["t", "tw"], ["ty"], transA=1))
    feeds["v"], consts["vw"] = f(3, 1, 21), f(21, 64)  # three one-row products (batch points)
    nodes.append(helper.make_node("MatMul", ["v", "vw"], ["vy"]))
    # rows of A more than 1024 bytes apart: 4 K steps per iteration (matmul_geometry.RVV_FAR_ROWS_STEPS), K % 4 = 3
    feeds["far"], consts["farw"] = f(7, 259), f(259, 40)
    nodes.append(helper.make_node("MatMul", ["far", "farw"], ["fy"]))
    outs += ["gy", "ty", "vy", "fy"]
    return graph_model(nodes, feeds, outs, consts), feeds


@pytest.fixture(scope="module")
def gemv_artifact(tmp_path_factory):
    model, feeds = _gemv_model()
    return model, feeds, build(model, tmp_path_factory.mktemp("gemv"), "bpi-f3", profile_runner=False)


def test_gemv_matches_onnxruntime_under_qemu(gemv_artifact):
    """Built for the bpi-f3, model.o carries the routine (allocated, executable, read-only) and the outputs are ONNX
    Runtime's (NaN exactly where the reference has it)."""
    from elftools.elf.constants import SH_FLAGS
    from elftools.elf.elffile import ELFFile

    model, feeds, artifact = gemv_artifact
    with open(artifact / "model.o", "rb") as fh:
        flags = [sec["sh_flags"] for sec in ELFFile(fh).iter_sections() if sec.name == gv.SECTION]
    assert flags and all(f & SH_FLAGS.SHF_ALLOC and f & SH_FLAGS.SHF_EXECINSTR and not f & SH_FLAGS.SHF_WRITE
                         for f in flags)
    match_onnx(model, feeds, run(artifact, feeds))


def test_gemv_threads_give_the_same_bytes(gemv_artifact):
    model, feeds, artifact = gemv_artifact
    outs = [run(artifact, feeds, threads=t) for t in (1, 4, 8)]
    for name in outs[0]:
        assert outs[0][name].tobytes() == outs[1][name].tobytes() == outs[2][name].tobytes(), name


def test_far_rows_take_four_k_steps_on_rvv_only():
    """gemm_steps: A rows more than 1024 bytes apart on RVV take 4 K steps per iteration, nothing else changes."""
    from types import SimpleNamespace

    from fluidml_xc.kernels.matmul_geometry import gemm_steps
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    for board, want in (("bpi-f3", 4), ("visionfive2", 0), ("x86_64", 0), ("rpi4", 0)):
        assert gemm_steps(SimpleNamespace(spec=machine_spec(get_board(board))), 512, np.float32) == want, board
    x60 = SimpleNamespace(spec=machine_spec(get_board("bpi-f3")))
    assert (gemm_steps(x60, 256, np.float32), gemm_steps(x60, 257, np.float32)) == (0, 4)
    assert gemm_steps(SimpleNamespace(spec=None), 4096, np.float32) == 0


@pytest.mark.skipif(shutil.which("llvm-mca-22") is None or shutil.which("llvm-objdump-22") is None,
                    reason="llvm-mca-22 / llvm-objdump-22 (the SpacemitX60 model) not installed")
def test_bert_tiny_output_matmul_loop_reaches_70_percent():
    """BERT-tiny's output MatMul shape (128 x 512 by 512 x 128, A's rows 2 KB apart) built for the bpi-f3: its hot loop
    has 4 K steps of the 6 x 2 tile (48 `vfmacc`) and llvm-mca-22 prices it >= 70% of the FMA peak (64.9% at 3)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import mca
    from fluidml_xc.target.boards import get_board

    board = get_board("bpi-f3")
    case = next(c for c in mca.cases() if c.name.startswith("fp32 MatMul 128x512x128"))
    obj, spec = mca.model_object(case.model, board)
    loop = mca.hot_loop(mca.disassemble(obj, "llvm-objdump-22", spec.features), "riscv64", mca.register_bits(spec))
    cycles, _, _ = mca.run_mca(mca.mca_input(loop.body, "riscv64", loop.vtype), "llvm-mca-22", mca.MCA_TRIPLE["riscv64"],
                               spec.cpu, spec.features)
    assert loop.macs == 48 and 2 * loop.lanes / cycles / 16 >= 0.70, (loop.macs, cycles)


@pytest.mark.parametrize("op, gates", [("LSTM", 4), ("GRU", 3)])
def test_recurrent_gates_run_the_routine_under_qemu(op, gates, tmp_path):
    """A batch-1 LSTM / GRU's gate products are one-row GEMMs with constant weights (ops/recurrent.py): built for the
    bpi-f3 they call the routine and give ONNX Runtime's values."""
    from elftools.elf.elffile import ELFFile

    rng, hidden = np.random.default_rng(5), 20
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    feeds = {"x": f(3, 1, 10)}
    consts = {"w": f(1, gates * hidden, 10) * 0.3, "r": f(1, gates * hidden, hidden) * 0.3, "b": f(1, 2 * gates * hidden) * 0.1}
    model = graph_model([helper.make_node(op, ["x", "w", "r", "b"], ["y"], hidden_size=hidden)], feeds, ["y"], consts)
    artifact = build(model, tmp_path, "bpi-f3", profile_runner=False)
    with open(artifact / "model.o", "rb") as fh:
        assert any(sec.name == gv.SECTION for sec in ELFFile(fh).iter_sections())
    match_onnx(model, feeds, run(artifact, feeds))
