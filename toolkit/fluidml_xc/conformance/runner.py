"""One case: compile it with fluidml-xc, run it on every data set, compare with its expected outputs, and
classify what went wrong; `diagnose` finds the first wrong node."""
from __future__ import annotations

import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..ir import DEFAULT_BOUND
from .cases import TRAINING_DOMAINS, op_of


@dataclass
class CaseResult:
    name: str
    op: str
    status: str
    """pass | mismatch | error (compiler raised) | crash (signal in generated code / worker died) | timeout"""
    kind: str = ""
    """For failures: unsupported-op, unsupported-dtype, sequence-optional, training-only, dynamic-shape, compiler-bug, wrong-result, crash, timeout."""
    message: str = ""
    seconds: float = 0.0
    compile_seconds: float = 0.0
    specialized: list = field(default_factory=list)
    """Graph inputs compiled as constants because output shapes depend on their values."""
    bounded: bool = False
    """Built with `--max-dim '*=RUNTIME_SIZE_BOUND'`: a size came at run time from a graph input (Range, a window)."""
    folded: bool = False
    """Every output was computed at build time from the specialized inputs (no op left to run). Such a
    case counts as passed, as onnx's BackendTest counts it (our figure equals that harness's), and is
    reported apart."""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def _normalize(value):
    from onnx.backend.test.runner import _normalize_tensor
    return _normalize_tensor(value)


def classify_exception(exc: BaseException, case) -> tuple[str, str]:
    """(kind, one-line message) for an exception raised while compiling or running a case."""
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    domains = {n.domain for n in case.model.graph.node}
    if any(d in TRAINING_DOMAINS for d in domains):
        return "training-only", text
    low = str(exc).lower()
    if "unsupported ops" in low:
        return "unsupported-op", text
    if "sequence/map/optional" in low or "not a tensor" in low:
        return "sequence-optional", text
    if "has no llvm lowering" in low or "unsupported dtype" in low or "dtype" in low and "not supported" in low:
        return "unsupported-dtype", text
    if ("cannot infer a static shape" in low or "dynamic input shape" in low or "build-time constant" in low
            or low.startswith("the shape of")):
        return "dynamic-shape", text
    from ..errors import InputError
    if isinstance(exc, InputError) and ("not supported" in low or "unsupported" in low):
        return ("unsupported-dtype" if "dtype" in low else "unsupported-op"), text
    return "compiler-bug", text


def _has_non_tensor_types(case) -> bool:
    graph = case.model.graph
    return any(not vi.type.HasField("tensor_type") for vi in list(graph.input) + list(graph.output))


def _unsupported_dtypes(case) -> list[str]:
    """Names of tensor element types of the case's graph inputs/outputs that the compiler cannot store."""
    from onnx import helper

    from ..kernels.scalar import llvm_type

    bad = set()
    graph = case.model.graph
    for vi in list(graph.input) + list(graph.output):
        if not vi.type.HasField("tensor_type"):
            continue
        elem = vi.type.tensor_type.elem_type
        try:
            llvm_type(helper.tensor_dtype_to_np_dtype(elem))
        except Exception:
            bad.add(helper.tensor_dtype_to_string(elem).replace("TensorProto.", ""))
    return sorted(bad)


RUNTIME_SIZE_BOUND = 4096
"""The --max-dim '*=N' a case gets when its build fails with a data-dependent shape (a Range, a window or a Loop whose
size is a graph input of the case): one fixed bound for every such case, never taken from its expected outputs."""


def _compile_and_compare(case, result: CaseResult, board: str | None, opt: str, max_dims: dict | None,
                         started: float) -> None:
    from onnx.backend.test.runner import Runner

    from ..run.backend import FxcBackend

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        rep = FxcBackend.prepare(case.model, "CPU", board=board, opt=opt, max_dims=max_dims)
        result.compile_seconds = time.perf_counter() - started
        for inputs, expected in case.data_sets:
            outputs = rep.run([_normalize(x) for x in inputs])
            result.specialized = list(rep.specialized)
            result.folded = result.folded or rep.folded
            try:
                Runner.assert_similar_outputs([_normalize(x) for x in expected], list(outputs), rtol=case.rtol, atol=case.atol)
            except AssertionError as exc:
                lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
                result.status, result.kind = "mismatch", "wrong-result"
                result.message = "; ".join(lines[:4])[:600]
                break


def run_case(case, board: str | None = None, opt: str = "fluid") -> CaseResult:
    """Compile and run one case on `board` (None: this host); never raises for compiler failures. A case whose build
    fails with a data-dependent shape is built again with `--max-dim '*=RUNTIME_SIZE_BOUND'` (`bounded`)."""
    op = op_of(case.name)
    started = time.perf_counter()
    result = CaseResult(case.name, op, "pass")
    try:
        try:
            _compile_and_compare(case, result, board, opt, None, started)
        except Exception as exc:  # noqa: BLE001 - retried with a bound only for a data-dependent shape
            if classify_exception(exc, case)[0] != "dynamic-shape":
                raise
            result.bounded = True
            _compile_and_compare(case, result, board, opt, {DEFAULT_BOUND: RUNTIME_SIZE_BOUND}, started)
    except Exception as exc:  # noqa: BLE001 - every compiler failure becomes a classified result
        result.status = "error"
        result.kind, result.message = classify_exception(exc, case)
        if result.kind == "compiler-bug":
            if _has_non_tensor_types(case):
                result.kind = "sequence-optional"
            elif _unsupported_dtypes(case):
                result.kind = "unsupported-dtype"
                result.message = f"{', '.join(_unsupported_dtypes(case))}: {result.message}"
            else:
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                result.message += f" (at {Path(frame.filename).name}:{frame.lineno})"
    result.seconds = time.perf_counter() - started
    return result


def diagnose(case, board: str | None = None, opt: str = "fluid") -> str:
    """Where a case goes wrong: every intermediate tensor becomes a graph output, the model runs on
    fluidml-xc and on onnx.reference, and the first node whose output differs is reported."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from ..pipeline import import_graph
    from ..run.backend import FxcBackend

    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    known = {o.name for o in model.graph.output}
    try:  # only tensors computed at run time (not constants folded at build time) become outputs
        graph = import_graph(model, {vi.name: tuple(np.shape(_normalize(x))) for vi, x in zip(model.graph.input, case.data_sets[0][0])})
        runtime = {o for n in graph.nodes for o in n.outputs if o and not graph.tensors[o].is_const}
    except Exception:  # noqa: BLE001
        runtime = None
    for node in model.graph.node:
        for out in node.output:
            if out and out not in known and (runtime is None or out in runtime):
                model.graph.output.append(helper.make_value_info(out, onnx.TypeProto()))
                known.add(out)
    inputs = [_normalize(x) for x in case.data_sets[0][0]]
    names = [vi.name for vi in model.graph.input if vi.name not in {i.name for i in model.graph.initializer}]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        expected = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))))
        got = dict(zip([o.name for o in model.graph.output], FxcBackend.prepare(model, board=board, opt=opt).run(inputs)))
    for node in model.graph.node:
        for out in node.output:
            if not out or out not in got:
                continue
            a, b = np.asarray(got[out]), np.asarray(expected[out])
            try:
                np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=case.rtol, atol=case.atol)
            except (AssertionError, TypeError, ValueError) as exc:
                args = ", ".join(f"{n}{tuple(np.shape(expected.get(n, got.get(n, dict(zip(names, inputs)).get(n)))))}" for n in node.input if n)
                return f"first difference: node {node.name or node.op_type!r} ({node.op_type}) output {out!r}, inputs {args}:\n{exc}"
    return "every intermediate tensor matches onnx.reference"
