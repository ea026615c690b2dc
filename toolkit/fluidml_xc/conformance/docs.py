"""The results files (docs/conformance/results.json for the node cases, suites.json for the public model
suites), the run's summary, docs/SUPPORTED_OPS.md generated from the op registry and the last node run of
every target, and docs/conformance/PUBLIC_SUITES.md from the last run of every suite and target."""
from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Sequence

from ..errors import InputError
from .cases import ALL_TARGETS, case_ops
from .runner import CaseResult

ROOT = Path(__file__).resolve().parents[3]
RESULTS_PATH = ROOT / "docs" / "conformance" / "results.json"
DOCS_PATH = ROOT / "docs" / "SUPPORTED_OPS.md"
SUITES_PATH = ROOT / "docs" / "conformance" / "suites.json"
SUITES_DOCS_PATH = ROOT / "docs" / "conformance" / "PUBLIC_SUITES.md"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _outcome(r: CaseResult) -> list[str]:
    if not r.passed:
        return [r.status, r.kind, r.message[:300]]
    return ([r.status] + (["specialized: " + ", ".join(r.specialized)] if r.specialized else [])
            + (["computed at build time"] if r.folded else []) + (["bounded: --max-dim '*=N'"] if r.bounded else []))


def _counts(outcomes: dict[str, list[str]]) -> dict:
    passes = [o for o in outcomes.values() if o[0] == "pass"]
    return {"cases": len(outcomes), "passed": len(passes),
            "specialized_passes": sum(any(x.startswith("specialized: ") for x in o) for o in passes),
            "folded_passes": sum("computed at build time" in o for o in passes)}


def _run_record(results: Sequence[CaseResult], seconds: float, scope: str) -> dict:
    outcomes = {r.name: _outcome(r) for r in results}
    return {"scope": scope, **_counts(outcomes), "seconds": round(seconds, 1), "date": time.strftime("%Y-%m-%d"),
            "results": outcomes}


def save_results(target: str, results: Sequence[CaseResult], seconds: float, path: Path = RESULTS_PATH,
                 scope: str = "all", board: str | None = None) -> None:
    """A node run recorded under `target` (a conformance key, cases.target_key), replacing its last run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _read_json(path)
    data[target] = _run_record(results, seconds, scope) | ({"board": board} if board else {})
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def merge_results(target: str, results: Sequence[CaseResult], path: Path = RESULTS_PATH) -> dict:
    """Cases re-run on `target` (after a fix) put into its recorded run: their outcomes replace the recorded ones, the
    counts are recomputed and the re-run cases listed with the date (`rerun`); returns the updated run."""
    data = _read_json(path)
    if target not in data:
        raise InputError(f"{path}: no recorded run of {target} to merge into; record a whole run first (--save)")
    run = data[target]
    outcomes = {r.name: _outcome(r) for r in results}
    unknown = sorted(set(outcomes) - set(run["results"]))
    if unknown:
        raise InputError(f"{path}: the recorded {run['scope']} run of {target} has no case {unknown[0]}")
    run["results"].update(outcomes)
    run.update(_counts(run["results"]))
    rerun = run.setdefault("rerun", {})
    for name in outcomes:
        rerun[name] = time.strftime("%Y-%m-%d")
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return run


def save_suite_results(suite: str, target: str, results: Sequence[CaseResult], seconds: float,
                       path: Path = SUITES_PATH) -> None:
    """One file suite's run on `target` into suites.json (suite -> target -> run), names without the suite."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _read_json(path)
    record = _run_record(results, seconds, "all")
    record["results"] = {name.partition("/")[2]: outcome for name, outcome in record["results"].items()}
    data.setdefault(suite, {})[target] = record
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
    bounded = sum(r.passed and r.bounded for r in results)
    lines = [f"passed {passed} of {total} (of the passes, {specialized} specialized on input values, "
             f"{folded} of them computed entirely at build time; {bounded} built with --max-dim '*=N')"]
    for kind, count in by_kind.most_common():
        ops = ", ".join(f"{op} {n}" for op, n in sorted(failing_ops[kind].items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"  {kind}: {count}  [{ops}]")
    return "\n".join(lines)


def _registry_table() -> dict[str, dict]:
    from ..opspec import all_specs

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


def _import_time_ops() -> dict[str, str]:
    """Ops with no lowering that the frontend replaces (frontend/expanders.py's registry) or folds: name -> how."""
    from ..frontend import importer  # noqa: F401 - imports every module that registers an expansion
    from ..frontend.expanders import FOLDABLE_ONLY, REGISTRY
    from ..frontend.sequences import SEQ_DOMAIN

    ops = {(f"{domain}.{op}" if domain else op): "expanded at import" for domain, op in REGISTRY if domain != SEQ_DOMAIN}
    ops.update({op: "folded at build time" for op in FOLDABLE_ONLY})
    return ops


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
    targets = sorted(runs, key=lambda t: (ALL_TARGETS.index(t) if t in ALL_TARGETS else len(ALL_TARGETS), t))
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
        f"(`{results_path.relative_to(ROOT) if results_path.is_relative_to(ROOT) else results_path}`); do not edit by hand.",
        "",
        "Conformance: ONNX's backend node tests (`onnx.backend.test.loader.load_model_tests(kind=\"node\")`),",
        "each case compiled with fluidml-xc, run, and compared with the case's own expected outputs and",
        "tolerances. Known failures, with reasons: `tests/conformance_expectations.toml`. ONNX's public model",
        "suites (pytorch-converted, pytorch-operator, simple): `docs/conformance/PUBLIC_SUITES.md`.",
        "",
        "## Runs",
        "",
        "| target | board | scope | passed | cases | of the passes, specialized | seconds | date |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for target in targets:
        run = runs[target]
        rerun = run.get("rerun", {})
        date = run["date"] + (f" ({len(rerun)} cases re-run {max(rerun.values())})" if rerun else "")
        lines.append(f"| {target} | {run.get('board', '')} | {run['scope']} | {run['passed']} | {run['cases']} | "
                     f"{run.get('specialized_passes', '?')} ({run.get('folded_passes', '?')} at build time) | "
                     f"{run['seconds']} | {date} |")
    lines += [
        "",
        "*Specialized*: an output shape depends on the value of an input (Reshape's shape, a Reduce's axes,",
        "Resize's sizes, Tile's repeats, ...); fluidml-xc compiles for static shapes, so the backend compiles such",
        "inputs as build-time constants with the case's values (`fluidml_xc.run.backend`, reused only for equal",
        "values). A case whose every output is then computed at build time (Range, ConstantOfShape, the window",
        "functions) counts as passed, as ONNX's own BackendTest harness counts it (`benchmarks/onnx_backend_test.py`",
        "gives the same figure); the table shows how many. Ops without a lowering that ONNX defines as functions (Attention,",
        "RMSNormalization, SoftmaxCrossEntropyLoss, ...) are compiled through their inlined function body.",
        "`seconds` is the wall time of the run (x86_64: in-process JIT; others: a linked runner per case under qemu-user).",
        "A target is the board's target, `+v` when the board enables its optional vector unit (`riscv64+v`: RVV 1.0,",
        "VLEN 256). Cases re-run after a fix (`--merge -k CASES`) replace their outcome in the recorded run.",
    ]
    lines += [
        "",
        "## Ops",
        "",
        "`opsets`: the opset versions from which a lowering is registered (the newest one not above the",
        "model's opset is used). `dtypes`: input dtypes the lowering accepts (`any`: every dtype the code",
        "generator stores: float16/32/64, int8-64, uint8-64, bool). Pass counts are passed/run per target;",
        "`-` means not run there. Ops without a lowering are listed with their case counts: `expanded at import`",
        "(the frontend replaces them by other ops: control flow, sequences, the ai.onnx.ml linear models, SVMs,",
        "encoders and ZipMap of docs/CLASSIC_ML.md), `folded at build time`, `inlined ONNX function` or `not supported`.",
        "",
        "| op | opsets | dtypes | cases | " + " | ".join(targets) + " | notes |",
        "|---|---|---|---|" + "---|" * len(targets) + "---|",
    ]
    replaced = _import_time_ops()
    all_ops = sorted(set(registry) | set(case_count) | set(replaced), key=str.lower)
    for op in all_ops:
        reg = registry.get(op)
        opsets = ", ".join(f"{v}+" for v in reg["since"]) if reg else replaced.get(op) or (
            "inlined ONNX function" if _is_function_op(op) else "not supported")
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


SUITE_COMMANDS = """\
python -m fluidml_xc.conformance --suite public --save                              # x86_64, in-process JIT
python -m fluidml_xc.conformance --suite public --board qemu-aarch64 --save         # a linked runner under qemu
python -m fluidml_xc.conformance --suite public --board qemu-armv7 --save --write-docs
python -m pytest tests/test_conformance.py -k public --runslow -n 2                 # the same as strict xfail tests"""


def write_suite_docs(path: Path = SUITES_PATH, out: Path = SUITES_DOCS_PATH) -> str:
    """docs/conformance/PUBLIC_SUITES.md: per suite and target, passed/run of the last saved run, and every
    known failure of the file suites with its reason."""
    from .expectations import load_expectations
    from .suites import FILE_SUITES, load_suite

    runs = _read_json(path)
    targets = ("x86_64", "aarch64", "armv7")
    lines = ["# ONNX's public model suites", "",
             "Generated by `python -m fluidml_xc.conformance --write-docs` from the last saved run of each suite and",
             f"target (`{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`); do not edit by hand.", "",
             "Besides its node tests, the onnx package ships model suites with their inputs and expected outputs",
             "(`onnx/backend/test/data/<suite>/test_*/`): `pytorch-converted` (PyTorch nn modules exported at opset 6),",
             "`pytorch-operator` (PyTorch operators) and `simple` (small hand-made models: sequences, strings,",
             "a training graph). Each case is compiled, run on each of its data sets and compared with the expected",
             "outputs at the loader's tolerances (rtol 1e-3, atol 1e-7), as onnx's own backend test runner does.",
             "Known failures are strict xfails in `tests/conformance_expectations.toml`. Commands:", "", "```sh",
             SUITE_COMMANDS, "```", "",
             "| suite | cases | " + " | ".join(targets) + " | runs (date, seconds) |", "|---|---|" + "---|" * len(targets) + "---|"]
    for suite in FILE_SUITES:
        by_target = runs.get(suite, {})
        cells = [f"{by_target[t]['passed']}/{by_target[t]['cases']}" if t in by_target else "-" for t in targets]
        dates = "; ".join(f"{t} {by_target[t]['date']}, {by_target[t]['seconds']} s" for t in targets if t in by_target)
        lines.append(f"| {suite} | {len(load_suite(suite))} | " + " | ".join(cells) + f" | {dates} |")
    lines += ["", "`seconds`: the wall time of the run (`-j 2`), shared among the suites it ran in proportion to their",
              "cases' own times. The default test run (no `--runslow`) runs every case on x86_64 and the cases of",
              "`PUBLIC_CROSS_DEFAULT` in `tests/test_conformance.py` under qemu-aarch64 and qemu-armv7."]
    expected = {n: e for n, e in load_expectations().items() if "/" in n}
    lines += ["", "## Known failures", "", "| case | category | targets | reason |", "|---|---|---|---|"]
    for name in sorted(expected):
        e = expected[name]
        lines.append(f"| {name} | {e['category']} | {', '.join(e.get('targets') or ['all'])} | {e['reason']} |")
    text = "\n".join(lines) + "\n"
    out.write_text(text)
    return text
