"""Known failures as data: tests/conformance_expectations.toml (category and reason per case, optionally
per target), read, checked, and rewritten from a run. Node cases are the table [cases]; a file suite's
cases are the table named after the suite ([pytorch-converted], [pytorch-operator], [simple]) and read as
`<suite>/<case>`."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

from ..errors import FxcError
from .cases import load_cases
from .runner import CaseResult
from .suites import FILE_SUITES, suite_of

EXPECTATIONS_PATH = Path(__file__).resolve().parents[3] / "tests" / "conformance_expectations.toml"

CATEGORIES = ("unsupported-dtype", "sequence-optional", "training-only", "known-bug", "unsupported-op", "dynamic-shape",
              "undefined-behaviour")
"""Expectation categories. dynamic-shape: an output shape depends on input data (NonZero, Unique, Range
from runtime inputs, ...), which a static-shape compiler cannot express. undefined-behaviour: the case's
expected outputs are a library's answer to a conversion ONNX leaves undefined, where our rule
(cast_rules.py, docs/INTERNALS.md) gives another."""
KIND_CATEGORY = {"unsupported-op": "unsupported-op", "unsupported-dtype": "unsupported-dtype", "training-only": "training-only",
                 "sequence-optional": "sequence-optional", "dynamic-shape": "dynamic-shape"}
"""Result kind -> expectation category; every other kind (wrong-result, compiler-bug, crash, timeout) is a known-bug."""


def load_expectations(path: Path = EXPECTATIONS_PATH) -> dict[str, dict]:
    """case name -> {category, reason, targets?}; targets limits the entry to some targets (default: all)."""
    import tomllib

    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    unknown = sorted(set(data) - {"cases", *FILE_SUITES})
    if unknown:
        raise ValueError(f"{path}: unknown tables {unknown}: [cases] (node) or one of {', '.join(FILE_SUITES)}")
    entries = dict(data.get("cases", {}))
    for suite in FILE_SUITES:
        entries.update({f"{suite}/{name}": entry for name, entry in data.get(suite, {}).items()})
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


def _error_names(cls: type = FxcError) -> list[str]:
    return [cls.__name__] + [name for sub in cls.__subclasses__() for name in _error_names(sub)]


ERROR_PREFIX = re.compile(r"^(?:\w+Error|" + "|".join(map(re.escape, sorted(set(_error_names())))) + r"): ")
"""The exception's class name a failure message starts with: Python's *Error and the project's (errors.py)."""


def _reason(result: CaseResult) -> str:
    text = ERROR_PREFIX.sub("", result.message)
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
# Known failures of ONNX's backend node tests and of its public model suites (tests/test_conformance.py): strict
# xfails, so a fix is noticed. One entry per case: category (see fluidml_xc.conformance.expectations.CATEGORIES) and a
# reason; `targets` limits an entry to some targets (default: every target). Node cases are in [cases], the file
# suites' in the table of their suite. Refresh after a change with
#     python -m fluidml_xc.conformance --update-expectations          (x86_64, all node cases)
#     python -m fluidml_xc.conformance --board qemu-aarch64 --first-per-op --update-expectations
#     python -m fluidml_xc.conformance --suite public --board qemu-armv7 --update-expectations
# which drops entries of cases that now pass and adds new failures (hand-written reasons are kept).
"""


def write_expectations(entries: dict[str, dict], path: Path = EXPECTATIONS_PATH) -> None:
    order = {name: i for i, name in enumerate(load_cases())}
    lines = [EXPECTATIONS_HEADER.rstrip("\n")]
    for suite in ("node", *FILE_SUITES):
        names = sorted((n for n in entries if suite_of(n) == suite), key=lambda n: (order.get(n, 1 << 30), n))
        if suite != "node" and not names:
            continue
        lines += ["", "[cases]" if suite == "node" else f"[{suite}]"]
        for name in names:
            e = entries[name]
            fields = [f"category = {_toml_string(e['category'])}", f"reason = {_toml_string(e['reason'])}"]
            if e.get("targets"):
                fields.append("targets = [" + ", ".join(_toml_string(t) for t in e["targets"]) + "]")
            lines.append(f"{name.partition('/')[2] if suite != 'node' else name} = {{ " + ", ".join(fields) + " }")
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
