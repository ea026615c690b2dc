"""ONNX backend node tests (onnx.backend.test.loader.load_model_tests(kind="node")) against fluidml-xc.

Each case is compiled with fluidml-xc (fluidml_xc.run.backend: in-process JIT on x86_64 hosts, a linked
runner under qemu-user for aarch64/armv7), run on every data set it carries, and compared with the
case's own expected outputs and rtol/atol exactly as onnx.backend.test.runner does. The expected
outputs are the oracle.

Cases run in worker processes (one case at a time each, several workers in parallel): a compiler
exception becomes a classified result, a crash of generated code (signal) or a case that exceeds its
time limit kills only that worker, which is restarted for the next case.

    python -m fluidml_xc.conformance                      # all cases on this host, summary
    python -m fluidml_xc.conformance --board qemu-aarch64 --first-per-op
    python -m fluidml_xc.conformance --write-docs         # also rewrite docs/SUPPORTED_OPS.md
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS_PATH = ROOT / "docs" / "conformance" / "results.json"
DOCS_PATH = ROOT / "docs" / "SUPPORTED_OPS.md"
EXPECTATIONS_PATH = ROOT / "tests" / "conformance_expectations.toml"

CATEGORIES = ("unsupported-dtype", "sequence-optional", "training-only", "known-bug", "unsupported-op", "dynamic-shape",
              "undefined-behaviour")
"""Expectation categories. dynamic-shape: an output shape depends on input data (NonZero, Unique, Range
from runtime inputs, ...), which a static-shape compiler cannot express. undefined-behaviour: the case's
expected outputs are a library's answer to a conversion ONNX leaves undefined, where our rule
(cast_rules.py, docs/INTERNALS.md) gives another."""
KIND_CATEGORY = {"unsupported-op": "unsupported-op", "unsupported-dtype": "unsupported-dtype", "training-only": "training-only",
                 "sequence-optional": "sequence-optional", "dynamic-shape": "dynamic-shape"}
"""Result kind -> expectation category; every other kind (wrong-result, compiler-bug, crash, timeout) is a known-bug."""
DEFAULT_TIMEOUT = 60.0
TRAINING_DOMAINS = ("ai.onnx.preview.training",)
ALL_TARGETS = ("x86_64", "aarch64", "armv7")


# --------------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------------
@cache
def load_cases() -> dict:
    """name -> onnx TestCase, in the loader's order (built in memory by onnx, ~8 s)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    return {case.name: case for case in cases}


def _op_name(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@cache
def case_ops() -> dict[str, str]:
    """case name -> the op type the case tests.

    A single-node case tests its node's op; an `..._expanded` case tests the function body of the
    op of its base case; other multi-node cases the op producing the first graph output."""
    cases = load_cases()
    ops: dict[str, str] = {}
    for name, case in cases.items():
        nodes = list(case.model.graph.node)
        if len(nodes) == 1:
            ops[name] = _op_name(nodes[0])
    for name, case in cases.items():
        if name in ops:
            continue
        base = _EXPANDED.sub("", name)
        if base != name and base in ops:
            ops[name] = ops[base]
            continue
        nodes = list(case.model.graph.node)
        first_out = case.model.graph.output[0].name if case.model.graph.output else None
        producer = next((n for n in reversed(nodes) if first_out in n.output), nodes[-1] if nodes else None)
        ops[name] = _op_name(producer) if producer is not None else "?"
    return ops


def first_case_per_op(names: Iterable[str] | None = None, prefer: set[str] | None = None) -> list[str]:
    """The first case of every op type (the first one in `prefer`, when the op has one there)."""
    ops = case_ops()
    names = list(names if names is not None else load_cases())
    chosen: dict[str, str] = {}
    for name in names:
        op = ops[name]
        if op not in chosen or (prefer is not None and chosen[op] not in prefer and name in prefer):
            chosen[op] = name
    return sorted(chosen.values(), key=names.index)


# --------------------------------------------------------------------------------------------------
# one case
# --------------------------------------------------------------------------------------------------
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
    from .errors import InputError
    if isinstance(exc, InputError) and ("not supported" in low or "unsupported" in low):
        return ("unsupported-dtype" if "dtype" in low else "unsupported-op"), text
    return "compiler-bug", text


def _has_non_tensor_types(case) -> bool:
    graph = case.model.graph
    return any(not vi.type.HasField("tensor_type") for vi in list(graph.input) + list(graph.output))


def _unsupported_dtypes(case) -> list[str]:
    """Names of tensor element types of the case's graph inputs/outputs that the compiler cannot store."""
    from onnx import helper

    from .codegen.scalar import llvm_type

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


def run_case(case, board: str | None = None, opt: str = "fluid") -> CaseResult:
    """Compile and run one case on `board` (None: this host); never raises for compiler failures."""
    from onnx.backend.test.runner import Runner

    from .run.backend import FxcBackend

    op = case_ops().get(case.name, "?")
    started = time.perf_counter()
    result = CaseResult(case.name, op, "pass")
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rep = FxcBackend.prepare(case.model, "CPU", board=board, opt=opt)
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

    from .run.backend import FxcBackend
    from .pipeline import import_graph

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


# --------------------------------------------------------------------------------------------------
# isolated workers
# --------------------------------------------------------------------------------------------------
def _worker_main(conn, board, opt) -> None:
    import faulthandler

    os.setpgid(0, 0)
    faulthandler.disable()  # a crash of generated code is reported by the parent (signal), without a dump
    cases = load_cases()
    while True:
        try:
            name = conn.recv()
        except EOFError:
            return
        if name is None:
            return
        result = run_case(cases[name], board, opt)
        conn.send(asdict(result))


class CaseWorker:
    """A child process running cases one at a time; killed and restarted on a crash or a timeout."""

    RECYCLE_AFTER = 400

    def __init__(self, board: str | None = None, opt: str = "fluid"):
        self.board, self.opt = board, opt
        self.proc = None
        self.conn = None
        self.done = 0

    def _start(self) -> None:
        load_cases()  # loaded once in the parent, inherited by fork
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, self.board, self.opt), daemon=True)
        self.proc.start()
        child.close()
        self.conn, self.done = parent, 0

    def _kill(self) -> None:
        if self.proc is not None:
            pid = self.proc.pid
            try:
                os.killpg(pid, signal.SIGKILL)  # the worker's own group: it and the linker/qemu it started
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.join(5)
            self.conn.close()
        self.proc = self.conn = None

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
            if self.proc.is_alive():
                self._kill()
            self.proc = self.conn = None

    def run(self, name: str, timeout: float = DEFAULT_TIMEOUT) -> CaseResult:
        if self.proc is None or not self.proc.is_alive() or self.done >= self.RECYCLE_AFTER:
            self.close()
            self._start()
        op = case_ops().get(name, "?")
        started = time.perf_counter()
        try:
            self.conn.send(name)
            if self.conn.poll(timeout):
                data = self.conn.recv()
                self.done += 1
                return CaseResult(**data)
            self._kill()
            return CaseResult(name, op, "timeout", "timeout", f"no result within {timeout:g} s", time.perf_counter() - started)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            try:
                how = f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
            except ValueError:
                how = f"killed by signal {-code}"
            self._kill()
            return CaseResult(name, op, "crash", "crash", f"worker {how}", time.perf_counter() - started)


def run_cases(names: Sequence[str], board: str | None = None, jobs: int = 2, timeout: float = DEFAULT_TIMEOUT,
              opt: str = "fluid", progress=None) -> list[CaseResult]:
    """Run cases on `jobs` isolated workers; results in the order of `names`."""
    load_cases()
    results: dict[str, CaseResult] = {}
    queue = list(names)
    lock = threading.Lock()

    def drain() -> None:
        worker = CaseWorker(board, opt)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    name = queue.pop(0)
                result = worker.run(name, timeout)
                with lock:
                    results[name] = result
                    if progress:
                        progress(result, len(results), len(names))
        finally:
            worker.close()

    threads = [threading.Thread(target=drain) for _ in range(max(1, min(jobs, len(queue))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[n] for n in names]


# --------------------------------------------------------------------------------------------------
# expectations, results file, docs
# --------------------------------------------------------------------------------------------------
def load_expectations(path: Path = EXPECTATIONS_PATH) -> dict[str, dict]:
    """case name -> {category, reason, targets?}; targets limits the entry to some targets (default: all)."""
    import tomllib

    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    entries = data.get("cases", {})
    for name, entry in entries.items():
        if entry.get("category") not in CATEGORIES:
            raise ValueError(f"{path}: {name}: category must be one of {', '.join(CATEGORIES)}")
        if not entry.get("reason"):
            raise ValueError(f"{path}: {name}: every expectation needs a reason")
    return entries


def expected_failure(name: str, target: str, expectations: dict[str, dict]) -> dict | None:
    entry = expectations.get(name)
    if entry is None:
        return None
    targets = entry.get("targets")
    return entry if targets is None or target in targets else None


def _reason(result: CaseResult) -> str:
    text = re.sub(r"^\w+Error: ", "", result.message)
    text = re.sub(r"; see docs/SUPPORTED_OPS.md.*$", "", text)
    text = re.sub(r": pass static input shapes with --input-shape.*$", "", text)
    if result.kind == "wrong-result":
        text = "wrong result: " + text
    elif result.kind in ("crash", "timeout"):
        text = f"{result.kind}: {text}"
    return " ".join(text.split())[:240]


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


EXPECTATIONS_HEADER = """\
# Known failures of ONNX's backend node tests (tests/test_conformance.py): strict xfails, so a fix is noticed.
# One entry per case: category (see fluidml_xc.conformance.CATEGORIES) and a reason; `targets` limits an
# entry to some targets (default: every target). Refresh after a change with
#     python -m fluidml_xc.conformance --update-expectations          (x86_64, all cases)
#     python -m fluidml_xc.conformance --board qemu-aarch64 --first-per-op --update-expectations
# which drops entries of cases that now pass and adds new failures (hand-written reasons are kept).

[cases]
"""


def write_expectations(entries: dict[str, dict], path: Path = EXPECTATIONS_PATH) -> None:
    order = {name: i for i, name in enumerate(load_cases())}
    lines = [EXPECTATIONS_HEADER.rstrip("\n")]
    for name in sorted(entries, key=lambda n: (order.get(n, 1 << 30), n)):
        e = entries[name]
        fields = [f"category = {_toml_string(e['category'])}", f"reason = {_toml_string(e['reason'])}"]
        if e.get("targets"):
            fields.append("targets = [" + ", ".join(_toml_string(t) for t in e["targets"]) + "]")
        lines.append(f"{name} = {{ " + ", ".join(fields) + " }")
    path.write_text("\n".join(lines) + "\n")


def update_expectations(target: str, results: Sequence[CaseResult], path: Path = EXPECTATIONS_PATH) -> tuple[int, int]:
    """Drop entries of cases that passed on `target`, add failing cases; returns (added, removed)."""
    entries = load_expectations(path) if path.is_file() else {}
    added = removed = 0
    for r in results:
        entry = entries.get(r.name)
        applies = entry is not None and (not entry.get("targets") or target in entry["targets"])
        if r.passed and applies:
            remaining = [t for t in (entry.get("targets") or []) if t != target]
            if remaining:
                entry["targets"] = remaining
            else:
                del entries[r.name]
            removed += 1
        elif not r.passed and not applies:
            if entry is not None:  # listed for other targets only
                entry["targets"] = sorted(set(entry["targets"]) | {target})
            else:
                entries[r.name] = {"category": KIND_CATEGORY.get(r.kind, "known-bug"), "reason": _reason(r)}
                if target != "x86_64":
                    entries[r.name]["targets"] = [target]
            added += 1
    write_expectations(entries, path)
    return added, removed


def save_results(target: str, results: Sequence[CaseResult], seconds: float, path: Path = RESULTS_PATH,
                 scope: str = "all") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[target] = {
        "scope": scope, "cases": len(results), "passed": sum(r.passed for r in results), "seconds": round(seconds, 1),
        "specialized_passes": sum(r.passed and bool(r.specialized) for r in results),
        "folded_passes": sum(r.passed and r.folded for r in results),
        "date": time.strftime("%Y-%m-%d"),
        "results": {r.name: ([r.status] + (["specialized: " + ", ".join(r.specialized)] if r.specialized else [])
                             + (["computed at build time"] if r.folded else []) if r.passed
                             else [r.status, r.kind, r.message[:300]]) for r in results},
    }
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def summarize(results: Sequence[CaseResult]) -> str:
    total, passed = len(results), sum(r.passed for r in results)
    by_kind = collections.Counter(r.kind for r in results if not r.passed)
    failing_ops: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        if not r.passed:
            failing_ops[r.kind][r.op] += 1
    specialized = sum(r.passed and bool(r.specialized) for r in results)
    folded = sum(r.passed and r.folded for r in results)
    lines = [f"passed {passed} of {total} (of the passes, {specialized} specialized on input values, "
             f"{folded} of them computed entirely at build time)"]
    for kind, count in by_kind.most_common():
        ops = ", ".join(f"{op} {n}" for op, n in sorted(failing_ops[kind].items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"  {kind}: {count}  [{ops}]")
    return "\n".join(lines)


def _registry_table() -> dict[str, dict]:
    from .ops.registry import all_specs

    table = {}
    for (domain, op), specs in all_specs().items():
        name = op if not domain else f"{domain}.{op}"
        dtypes = set()
        any_dtype = False
        for s in specs:
            if s.dtypes is None:
                any_dtype = True
            else:
                dtypes |= set(s.dtypes)
        table[name] = {"since": sorted({s.since for s in specs}), "dtypes": "any" if any_dtype else ", ".join(sorted(dtypes)),
                       "notes": "; ".join(sorted({s.notes for s in specs if s.notes}))}
    return table


def _is_function_op(op: str) -> bool:
    import onnx

    domain, _, name = op.rpartition(".")
    try:
        schema = onnx.defs.get_schema(name, domain=domain)
    except onnx.defs.SchemaError:
        return False
    return bool(schema.function_opset_versions or schema.context_dependent_function_opset_versions)


def write_docs(results_path: Path = RESULTS_PATH, out: Path = DOCS_PATH) -> str:
    """docs/SUPPORTED_OPS.md from the op registry and the last conformance run of every target."""
    try:
        runs = json.loads(results_path.read_text())
    except (OSError, ValueError):
        runs = {}
    ops_of = case_ops()
    registry = _registry_table()
    targets = sorted(runs)
    per_op: dict[str, dict[str, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    case_count: collections.Counter = collections.Counter(ops_of.values())
    for target in targets:
        for name, outcome in runs[target]["results"].items():
            cell = per_op[ops_of.get(name, "?")][target]
            cell[1] += 1
            cell[0] += outcome[0] == "pass"
    lines = [
        "# Supported ops",
        "",
        "Generated by `python -m fluidml_xc.conformance --write-docs` from the op registry",
        "(`toolkit/fluidml_xc/ops/`) and the last conformance run of each target",
        f"(`{results_path.relative_to(ROOT)}`); do not edit by hand.",
        "",
        "Conformance: ONNX's backend node tests (`onnx.backend.test.loader.load_model_tests(kind=\"node\")`),",
        "each case compiled with fluidml-xc, run, and compared with the case's own expected outputs and",
        "tolerances. Known failures, with reasons: `tests/conformance_expectations.toml`.",
        "",
        "## Runs",
        "",
        "| target | scope | passed | cases | of the passes, specialized | seconds | date |",
        "|---|---|---|---|---|---|---|",
    ]
    for target in targets:
        run = runs[target]
        lines.append(f"| {target} | {run['scope']} | {run['passed']} | {run['cases']} | {run.get('specialized_passes', '?')} "
                     f"({run.get('folded_passes', '?')} at build time) | "
                     f"{run['seconds']} | {run['date']} |")
    lines += [
        "",
        "*Specialized*: an output shape depends on the value of an input (Reshape's shape, a Reduce's axes,",
        "Resize's sizes, TopK's K, ...); fluidml-xc compiles for static shapes, so the backend compiles such",
        "inputs as build-time constants with the case's values (`fluidml_xc.run.backend`, reused only for equal",
        "values). A case whose every output is then computed at build time (Range, ConstantOfShape, the window",
        "functions) counts as passed, as ONNX's own BackendTest harness counts it (`benchmarks/onnx_backend_test.py`",
        "gives the same figure); the table shows how many. Ops without a lowering that ONNX defines as functions (Attention,",
        "RMSNormalization, SoftmaxCrossEntropyLoss, ...) are compiled through their inlined function body.",
        "`seconds` is the wall time of the run (x86_64: in-process JIT; others: a linked runner per case under qemu-user).",
    ]
    lines += [
        "",
        "## Ops",
        "",
        "`opsets`: the opset versions from which a lowering is registered (the newest one not above the",
        "model's opset is used). `dtypes`: input dtypes the lowering accepts (`any`: every dtype the code",
        "generator stores: float16/32/64, int8-64, uint8-64, bool). Pass counts are passed/run per target;",
        "`-` means not run there. Ops without a lowering are listed with their case counts.",
        "",
        "| op | opsets | dtypes | cases | " + " | ".join(targets) + " | notes |",
        "|---|---|---|---|" + "---|" * len(targets) + "---|",
    ]
    all_ops = sorted(set(registry) | set(case_count), key=str.lower)
    for op in all_ops:
        reg = registry.get(op)
        opsets = ", ".join(f"{v}+" for v in reg["since"]) if reg else ("inlined ONNX function" if _is_function_op(op) else "not supported")
        dtypes = reg["dtypes"] if reg else ""
        cells = []
        for target in targets:
            cell = per_op.get(op, {}).get(target)
            cells.append(f"{cell[0]}/{cell[1]}" if cell else "-")
        notes = reg["notes"] if reg else ""
        lines.append(f"| {op} | {opsets} | {dtypes} | {case_count.get(op, 0)} | " + " | ".join(cells) + f" | {notes} |")
    text = "\n".join(lines) + "\n"
    out.write_text(text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fluidml_xc.conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--board", default=None, help="board to run on (default: this host, in-process JIT)")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case")
    parser.add_argument("-k", dest="pattern", default=None, help="only cases whose name matches this regex")
    parser.add_argument("--first-per-op", action="store_true", help="only the first case of every op type")
    parser.add_argument("--opt", default="fluid")
    parser.add_argument("--save", action="store_true", help="record the run in docs/conformance/results.json")
    parser.add_argument("--write-docs", action="store_true", help="regenerate docs/SUPPORTED_OPS.md (after the run, if any)")
    parser.add_argument("--docs-only", action="store_true", help="only regenerate docs/SUPPORTED_OPS.md from the last runs")
    parser.add_argument("--json", type=Path, help="write every result to this JSON file")
    parser.add_argument("--from-json", type=Path, help="do not run: take the results of an earlier --json run")
    parser.add_argument("--update-expectations", action="store_true",
                        help="rewrite tests/conformance_expectations.toml from this run (drop fixed cases, add new failures)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case")
    parser.add_argument("--diagnose", metavar="CASE", help="find the first node of CASE whose output is wrong")
    args = parser.parse_args(argv)

    if args.diagnose:
        print(diagnose(load_cases()[args.diagnose], args.board, args.opt))
        return 0
    if args.docs_only:
        write_docs()
        print(f"wrote {DOCS_PATH}")
        return 0
    from .boards import get_board

    board = get_board(args.board)
    names = list(load_cases())
    if args.pattern:
        names = [n for n in names if re.search(args.pattern, n)]
    if args.first_per_op:
        expectations = load_expectations() if EXPECTATIONS_PATH.is_file() else {}
        names = first_case_per_op(names, prefer={n for n in names if expected_failure(n, "x86_64", expectations) is None})

    from .progress import progress_bar

    bar = progress_bar(total=len(names), desc=f"conformance {board.name}", unit="case")

    def progress(result: CaseResult, done: int, total: int) -> None:
        bar.update(1)
        if args.verbose or not result.passed:
            detail = "" if result.passed else f" [{result.kind}] {result.message[:200]}"
            bar.write(f"{done:5d}/{total} {result.status:8s} {result.name} ({result.seconds:.2f}s){detail}", file=sys.stdout)
            sys.stdout.flush()

    started = time.perf_counter()
    if args.from_json:
        bar.close()
        results = [CaseResult(**r) for r in json.loads(args.from_json.read_text())]
        results = [r for r in results if r.name in set(names)]
        seconds = sum(r.seconds for r in results) / max(args.jobs, 1)
    else:
        with bar:
            results = run_cases(names, args.board, args.jobs, args.timeout, args.opt, progress)
        seconds = time.perf_counter() - started
    print(summarize(results))
    print(f"{board.target.name}: {sum(r.passed for r in results)}/{len(results)} passed in {seconds:.1f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    if args.save or args.write_docs:
        scope = "first case per op" if args.first_per_op else ("subset" if args.pattern else "all")
        if not (args.pattern and not args.first_per_op):
            save_results(board.target.name, results, seconds, scope=scope)
    if args.update_expectations:
        added, removed = update_expectations(board.target.name, results)
        print(f"expectations: {added} added, {removed} removed ({EXPECTATIONS_PATH})")
    if args.write_docs:
        write_docs()
        print(f"wrote {DOCS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
