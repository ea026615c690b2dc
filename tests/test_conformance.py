"""ONNX backend node tests (1,884 cases, onnx.backend.test.loader) and ONNX's public model suites
(pytorch-converted, pytorch-operator, simple: 140 cases shipped in the onnx package) compiled and run by fluidml-xc.

- x86_64: every node case and every public-suite case, in-process JIT (fluidml_xc.run.backend), in an
  isolated worker process per xdist worker (a crash or a hang of one case fails that case only).
- aarch64 and armv7: the first node case of every op type (all with FXC_CONFORMANCE_ALL_TARGETS=1) and the
  public-suite cases of PUBLIC_CROSS_DEFAULT (all with --runslow), built into a runner and run under qemu-user.
- Known failures are data (tests/conformance_expectations.toml), strict xfails: a fix shows up as XPASS.
"""
from __future__ import annotations

import os
import platform

import numpy as np
import pytest

from fluidml_xc.conformance import cases, expectations, pool, runner
from fluidml_xc.conformance.suites import FILE_SUITES, load_suite
from modelrun import require_emulator

CASES = list(cases.load_cases())
PUBLIC = cases.case_names(FILE_SUITES)
PUBLIC_CROSS_DEFAULT = {
    *(n for n in PUBLIC if n.startswith(("pytorch-converted/test_Conv3d", "pytorch-converted/test_ConvTranspose"))),
    "pytorch-converted/test_Conv2d_depthwise_strided", "pytorch-operator/test_operator_conv",
    "pytorch-operator/test_operator_convtranspose", "simple/test_sequence_model1"}
"""Public-suite cases run under qemu in the default run (every PyTorch Conv3d and ConvTranspose export among them);
the others need --runslow."""
EXPECTATIONS = expectations.load_expectations()
TIMEOUT = float(os.environ.get("FXC_CONFORMANCE_TIMEOUT", cases.DEFAULT_TIMEOUT))
CROSS_TIMEOUT = float(os.environ.get("FXC_CONFORMANCE_CROSS_TIMEOUT", 180))
CROSS_BOARDS = {"aarch64": "qemu-aarch64", "armv7": "qemu-armv7"}
RISCV_BOARDS = {"riscv64": "qemu-riscv64", "riscv64+v": "qemu-riscv64-rvv"}
"""Both riscv64 pseudo-boards, without and with RVV, by their conformance keys (cases.target_key)."""
RISCV_DEFAULT_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                     "ConvInteger", "QuantizeLinear", "DequantizeLinear", "Relu", "Sigmoid", "Tanh", "Erf", "Exp",
                     "Softmax", "LayerNormalization", "BatchNormalization", "MaxPool", "AveragePool",
                     "GlobalAveragePool", "ReduceMean", "ReduceMax", "Round", "Cast", "Max", "Min", "Clip", "Resize",
                     "LSTM", "DFT", "TopK"}
"""Ops whose first case runs on the riscv64 boards in the default suite (the kernels the vector width and register
tiles change, and rounding / conversions); every op's first case needs --runslow, all cases FXC_CONFORMANCE_ALL_TARGETS=1
(docs/BOARDS.md: conformance on riscv64)."""


def _params(names, target):
    for name in names:
        entry = expectations.expected_failure(name, target, EXPECTATIONS)
        marks = [pytest.mark.xfail(strict=True, reason=f"{entry['category']}: {entry['reason']}")] if entry else []
        yield pytest.param(name, marks=marks, id=name)


def _check(result: runner.CaseResult) -> None:
    if not result.passed:
        pytest.fail(f"{result.name} ({result.op}) {result.status} [{result.kind}]: {result.message}", pytrace=False)


@pytest.fixture(scope="module")
def host_worker():
    worker = pool.CaseWorker(None)
    yield worker
    worker.close()


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the in-process JIT path runs on x86_64 hosts")
@pytest.mark.parametrize("name", list(_params(CASES, "x86_64")))
def test_node_x86_64(name, host_worker):
    _check(host_worker.run(name, TIMEOUT))


def _cross_cases() -> list[str]:
    if os.environ.get("FXC_CONFORMANCE_ALL_TARGETS") == "1":
        return CASES
    passing_here = {n for n in CASES if expectations.expected_failure(n, "x86_64", EXPECTATIONS) is None}
    return cases.first_case_per_op(CASES, prefer=passing_here)


CROSS = _cross_cases()


@pytest.fixture(scope="module")
def cross_workers():
    workers: dict[str, pool.CaseWorker] = {}
    yield workers
    for worker in workers.values():
        worker.close()


def _cross_params():
    for target in sorted(CROSS_BOARDS):
        for param in _params(CROSS, target):
            yield pytest.param(target, *param.values, marks=param.marks, id=f"{target}-{param.id}")


def _riscv_params():
    for target in sorted(RISCV_BOARDS):
        for param in _params(CROSS, target):
            name = param.values[0]
            slow = [] if cases.op_of(name) in RISCV_DEFAULT_OPS else [pytest.mark.slow]
            yield pytest.param(target, name, marks=[*param.marks, *slow], id=f"{target}-{param.id}")


@pytest.mark.qemu
@pytest.mark.parametrize(("target", "name"), [*_cross_params(), *_riscv_params()])
def test_node_cross(target, name, cross_workers):
    board = {**CROSS_BOARDS, **RISCV_BOARDS}[target]
    require_emulator(board)
    worker = cross_workers.setdefault(target, pool.CaseWorker(board))
    _check(worker.run(name, CROSS_TIMEOUT))


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the in-process JIT path runs on x86_64 hosts")
@pytest.mark.parametrize("name", list(_params(PUBLIC, "x86_64")))
def test_public_x86_64(name, host_worker):
    _check(host_worker.run(name, TIMEOUT))


def _public_cross_params():
    for target in sorted(CROSS_BOARDS):
        for param in _params(PUBLIC, target):
            name = param.values[0]
            slow = [] if name in PUBLIC_CROSS_DEFAULT else [pytest.mark.slow]
            yield pytest.param(target, name, marks=[*param.marks, *slow], id=f"{target}-{param.id}")


@pytest.mark.qemu
@pytest.mark.parametrize(("target", "name"), list(_public_cross_params()))
def test_public_cross(target, name, cross_workers):
    test_node_cross(target, name, cross_workers)


def test_public_suites_load():
    """Every case of the three suites with its model and data sets, an expected output per graph output."""
    assert {s: len(load_suite(s)) for s in FILE_SUITES} == {"pytorch-converted": 82, "pytorch-operator": 35, "simple": 23}
    assert PUBLIC_CROSS_DEFAULT <= set(PUBLIC)
    for name in PUBLIC:
        case = cases.get_case(name)
        assert case.model.graph.node and case.data_sets, name
        assert all(len(outputs) == len(case.model.graph.output) for _, outputs in case.data_sets), name
    assert cases.op_of("pytorch-converted/test_Conv3d") == "Conv"
    assert "SequenceInsert" in {n.op_type for n in cases.get_case("simple/test_sequence_model1").model.graph.node}


def test_suite_values_read_as_declared(tmp_path):
    """A data file is read as the graph declares the value: a sequence as a list of arrays, as onnx's runner does."""
    from onnx import TensorProto, helper, numpy_helper

    from fluidml_xc.conformance.suites import _read_value

    items = [np.arange(3, dtype=np.float32), np.ones((2, 2), np.float32)]
    (tmp_path / "seq.pb").write_bytes(numpy_helper.from_list(items).SerializeToString())
    (tmp_path / "t.pb").write_bytes(numpy_helper.from_array(items[1]).SerializeToString())
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    got = _read_value(tmp_path / "seq.pb", seq)
    assert isinstance(got, list) and len(got) == len(items) and all(np.array_equal(a, b) for a, b in zip(got, items))
    assert np.array_equal(_read_value(tmp_path / "t.pb", helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 2])), items[1])


def test_expectations_name_real_cases():
    unknown = sorted(set(EXPECTATIONS) - set(CASES) - set(PUBLIC))
    assert not unknown, f"tests/conformance_expectations.toml lists cases that do not exist: {unknown[:20]}"


def test_expectations_are_well_formed():
    for name, entry in EXPECTATIONS.items():
        assert entry["category"] in expectations.CATEGORIES, name
        assert entry["reason"].strip(), name
        assert set(entry) <= {"category", "reason", "targets"}, name
        for target in entry.get("targets", []):
            assert target in cases.ALL_TARGETS, (name, target)


def test_case_ops_cover_every_case():
    ops = cases.case_ops()
    assert set(ops) == set(CASES)
    assert "?" not in ops.values()
    assert len(cases.first_case_per_op(CASES)) == len(set(ops.values()))


def test_compile_errors_are_classified_not_raised():
    """A compiler exception inside a case is a classified result, never an exception of the runner."""
    import onnx
    from onnx import TensorProto, helper

    case = cases.load_cases()["test_abs"]
    broken = type(case)(**{**case.__dict__, "name": "broken", "model": helper.make_model(
        helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))})
    result = runner.run_case(broken)
    assert result.status == "error" and result.kind == "unsupported-op", result
    assert isinstance(onnx.ModelProto(), onnx.ModelProto)


def test_worker_survives_timeout_and_crash(monkeypatch):
    """A hanging or crashing case fails alone; the next case runs on a fresh worker."""
    worker = pool.CaseWorker(None)
    try:
        import time

        def slow(case, board, opt):
            if case.name == "test_abs":
                time.sleep(30)
            if case.name == "test_acos":
                os.kill(os.getpid(), 11)
            return real(case, board, opt)
        real = runner.run_case
        monkeypatch.setattr(runner, "run_case", slow)
        assert worker.run("test_abs", timeout=1.0).status == "timeout"
        crashed = worker.run("test_acos", timeout=30)
        assert crashed.status == "crash" and "SIGSEGV" in crashed.message
        assert worker.run("test_add", timeout=30).passed
    finally:
        worker.close()
