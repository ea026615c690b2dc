"""Per-architecture kernel choices come from target/arch.py and the kernel's MachineSpec (issue #25): the int8 GEMM
register block (kernels/qgemm.py config) per board, an architecture no row knows refused instead of given armv7's
block, and armv7's explicit float32 fma (kernels/vectors.py fused_f32) read from Kernel.spec."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from llvmlite import ir
from onnx import helper

from fluidml_xc.errors import InputError
from fluidml_xc.ir import Graph, Node
from fluidml_xc.kernels import qgemm
from fluidml_xc.kernels.kernel import Kernel
from fluidml_xc.kernels.vectors import fused_f32
from fluidml_xc.pipeline import LowerOptions, import_graph, lower
from fluidml_xc.target.arch import ARCHES
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import graph_model

UNKNOWN = "powerpc64le-unknown-linux-gnu"
"""An architecture no row of target/arch.py knows (riscv64 was one until #30)."""


def _kernel(spec) -> Kernel:
    """A Kernel as the module emitter makes one for `spec` (module triple, vector width, machine spec)."""
    module = ir.Module("k")
    module.triple = spec.triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "op0")
    graph = Graph("g", {}, [], [], [], 13)
    kernel = Kernel(module, fn, graph, Node("MatMulInteger", "n", [], []), [], [], spec.pointer_bits, spec.vector_bits)
    kernel.spec = spec
    return kernel


def _qlinear_matmul() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    consts = {"a_s": np.float32(0.02), "a_zp": np.uint8(128), "b": rng.integers(-127, 128, (32, 24)).astype(np.int8),
              "b_s": np.float32(0.01), "b_zp": np.int8(0), "y_s": np.float32(0.05), "y_zp": np.uint8(128)}
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    return graph_model([node], {"a": np.zeros((8, 32), np.uint8)}, ["y"], consts, 13)


@pytest.mark.parametrize("board, expected", [
    ("x86_64-v2", (True, 4, 4, 2, False, False, False)),     # SSE: pmaddwd on xmm
    ("x86_64-v3", (True, 8, 4, 2, True, False, True)),       # AVX2: 4 x 2 ymm, vpmaddubsw pair sums (7-bit weights)
    ("x86_64-v4", (True, 16, 6, 2, False, False, False)),    # AVX-512BW: 6 x 2 zmm (x86-64-v4 has no VNNI)
    ("qemu-aarch64", (False, 4, 4, 2, False, False, False)),  # NEON widening k-pairs
    ("rpi5", (False, 4, 4, 4, True, True, False)),           # +dotprod: sdot k-quads
    ("qemu-armv7", (False, 4, 2, 2, False, False, False)),   # 16 q registers
    ("qemu-riscv64", (False, 4, 2, 2, False, False, False)),  # RV64GC: scalarized 4-lane vectors, 16 int32 accumulators
    ("qemu-riscv64-rvv", (False, 8, 4, 2, False, False, False)),  # RVV at VLEN 256: 8 int32 lanes, 4 x 2 vectors
])
def test_int8_register_block_per_board(board, expected):
    cfg = qgemm.config(_kernel(machine_spec(get_board(board))))
    assert (cfg.x86, cfg.lanes, cfg.mr, cfg.nv, cfg.quad, cfg.sdot, cfg.pairs) == expected


def test_every_architecture_has_an_int8_register_block():
    assert {arch.family for arch in ARCHES.values()} <= set(qgemm.CONFIGS)


def test_unknown_architecture_is_refused_not_given_armv7s_block():
    spec = dataclasses.replace(machine_spec(get_board("qemu-armv7")), triple=UNKNOWN)
    with pytest.raises(InputError, match="powerpc64le.*target/arch.py"):
        qgemm.config(_kernel(spec))
    graph = import_graph(_qlinear_matmul())
    with pytest.raises(InputError, match="powerpc64le"):
        lower(graph, spec, LowerOptions(threads=1, parallel=False))


@pytest.mark.parametrize("board, fused", [("qemu-armv7", True), ("rpi5", False), ("x86_64-v3", False)])
def test_explicit_fma_from_the_kernels_spec(board, fused):
    spec = machine_spec(get_board(board))
    assert fused_f32(_kernel(spec)) is fused
    assert fused_f32(_kernel(dataclasses.replace(spec, features=""))) is False  # no VFPv4: LLVM's own fmla / vmla
    kernel = _kernel(spec)
    kernel.spec = None
    assert fused_f32(kernel) is False
