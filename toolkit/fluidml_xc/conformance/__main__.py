"""`python -m fluidml_xc.conformance`: run the node cases (or ONNX's public model suites), summarize, record,
rewrite expectations and docs."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from ..errors import FxcError
from . import __doc__ as PACKAGE_DOC
from .cases import DEFAULT_TIMEOUT, case_names, first_case_per_op, target_key
from .docs import (DOCS_PATH, RESULTS_PATH, SUITES_DOCS_PATH, merge_results, save_results, save_suite_results, summarize,
                   write_docs, write_suite_docs)
from .expectations import EXPECTATIONS_PATH, expected_failure, load_expectations, update_expectations
from .pool import run_cases
from .runner import CaseResult, diagnose
from .suites import FILE_SUITES, SUITES, suite_of

SUITE_CHOICES = {**{s: (s,) for s in SUITES}, "public": FILE_SUITES, "all": SUITES}
"""--suite NAME -> the suites it runs: one suite, `public` (the three file suites) or `all`."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fluidml_xc.conformance", description=PACKAGE_DOC.split("\n\n")[0])
    parser.add_argument("--suite", default="node", choices=sorted(SUITE_CHOICES),
                        help="node: ONNX's node tests (default); pytorch-converted, pytorch-operator, simple: its model "
                             "suites in the onnx package; public: those three; all: every suite")
    parser.add_argument("--board", default=None, help="board to run on (default: this host, in-process JIT)")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case")
    parser.add_argument("-k", dest="pattern", default=None, help="only cases whose name matches this regex")
    parser.add_argument("--first-per-op", action="store_true", help="only the first case of every op type (node cases)")
    parser.add_argument("--opt", default="fluid")
    parser.add_argument("--save", action="store_true", help="record the run in docs/conformance/results.json (node) "
                        "or docs/conformance/suites.json (the file suites)")
    parser.add_argument("--merge", action="store_true", help="record this run's node results into the target's "
                        "run in docs/conformance/results.json, replacing only the cases run (a re-run after a fix: -k)")
    parser.add_argument("--write-docs", action="store_true", help="regenerate docs/SUPPORTED_OPS.md and "
                        "docs/conformance/PUBLIC_SUITES.md (after the run, if any)")
    parser.add_argument("--docs-only", action="store_true", help="only regenerate those docs from the last runs")
    parser.add_argument("--json", type=Path, help="write every result to this JSON file")
    parser.add_argument("--from-json", type=Path, help="do not run: take the results of an earlier --json run")
    parser.add_argument("--wall-seconds", type=float, help="with --from-json: that run's wall time as it printed it "
                        "(default: the cases' times over --jobs)")
    parser.add_argument("--update-expectations", action="store_true",
                        help="rewrite tests/conformance_expectations.toml from this run (drop fixed cases, add new failures)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case")
    parser.add_argument("--diagnose", metavar="CASE", help="find the first node of CASE whose output is wrong")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except FxcError as exc:
        print(f"fluidml-xc: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _run(args: argparse.Namespace) -> int:
    if args.diagnose:
        from .cases import get_case
        print(diagnose(get_case(args.diagnose), args.board, args.opt))
        return 0
    if args.docs_only:
        for path in _write_docs():
            print(f"wrote {path}")
        return 0
    from ..target.boards import get_board

    board = get_board(args.board)
    names = case_names(SUITE_CHOICES[args.suite])
    if args.pattern:
        names = [n for n in names if re.search(args.pattern, n)]
    if args.first_per_op:
        names = [n for n in names if suite_of(n) == "node"]
        expectations = load_expectations() if EXPECTATIONS_PATH.is_file() else {}
        names = first_case_per_op(names, prefer={n for n in names if expected_failure(n, "x86_64", expectations) is None})

    from ..progress import progress_bar

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
        seconds = args.wall_seconds or sum(r.seconds for r in results) / max(args.jobs, 1)
    else:
        with bar:
            results = run_cases(names, args.board, args.jobs, args.timeout, args.opt, progress)
        seconds = time.perf_counter() - started
    print(summarize(results))
    key = target_key(board)
    print(f"{key}: {sum(r.passed for r in results)}/{len(results)} passed in {seconds:.1f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    if args.merge:
        merged = merge_results(key, [r for r in results if suite_of(r.name) == "node"])
        print(f"{key}: the recorded run now passes {merged['passed']}/{merged['cases']} ({RESULTS_PATH})")
    elif (args.save or args.write_docs) and not (args.pattern and not args.first_per_op):
        _save(key, board.name, results, seconds, "first case per op" if args.first_per_op else "all")
    if args.update_expectations:
        added, removed = update_expectations(key, results)
        print(f"expectations: {added} added, {removed} removed ({EXPECTATIONS_PATH})")
    if args.write_docs:
        for path in _write_docs():
            print(f"wrote {path}")
    return 0


def _save(target: str, board: str, results: list[CaseResult], seconds: float, scope: str) -> None:
    """Node results to results.json; each file suite's to suites.json (the run's seconds shared by case time)."""
    node = [r for r in results if suite_of(r.name) == "node"]
    if node:
        save_results(target, node, seconds, scope=scope, board=board)
    total = sum(r.seconds for r in results) or 1.0
    for suite in FILE_SUITES:
        part = [r for r in results if suite_of(r.name) == suite]
        if part:
            save_suite_results(suite, target, part, seconds * sum(r.seconds for r in part) / total)


def _write_docs() -> list[str]:
    write_docs()
    write_suite_docs()
    return [str(DOCS_PATH), str(SUITES_DOCS_PATH)]


if __name__ == "__main__":
    sys.exit(main())
