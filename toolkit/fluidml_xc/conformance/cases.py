"""The ONNX backend node cases, built in memory by onnx, the public file suites' cases (suites.py), and the op
type each one tests."""
from __future__ import annotations

import re
import warnings
from functools import cache
from typing import Iterable

import numpy as np

from ..ir import is_onnx_domain
from .suites import SUITES, load_suite, suite_of

DEFAULT_TIMEOUT = 60.0
TRAINING_DOMAINS = ("ai.onnx.preview.training",)
ALL_TARGETS = ("x86_64", "aarch64", "armv7", "riscv64", "riscv64+v")
"""The keys runs are recorded under (results.json) and expectations name (`targets`): see `target_key`."""


def target_key(board) -> str:
    """A board's conformance key: its target's name, plus `+v` when the board enables the target's optional vector
    unit (riscv64's V), so that runs with and without it are recorded apart."""
    optional_vector = board.target.vector_accumulators > 0 and "+v" in board.features.split(",")
    return board.target.name + ("+v" if optional_vector else "")


@cache
def load_cases() -> dict:
    """name -> onnx TestCase, in the loader's order (built in memory by onnx, ~8 s)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    return {case.name: case for case in cases}


def _op_name(node) -> str:
    return node.op_type if is_onnx_domain(node.domain) else f"{node.domain}.{node.op_type}"


def _output_op(model) -> str:
    """The op producing the model's first graph output (its only node's op for a single-node model)."""
    nodes = list(model.graph.node)
    first_out = model.graph.output[0].name if model.graph.output else None
    producer = next((n for n in reversed(nodes) if first_out in n.output), nodes[-1] if nodes else None)
    return _op_name(producer) if producer is not None else "?"


def get_case(name: str):
    """The TestCase of a node case or of a file suite's `<suite>/<case>`."""
    suite = suite_of(name)
    return load_cases()[name] if suite == "node" else load_suite(suite)[name]


def case_names(suites: Iterable[str] = ("node",)) -> list[str]:
    """Every case of the given suites (SUITES), suite by suite in the loaders' order."""
    names: list[str] = []
    for suite in suites:
        if suite not in SUITES:
            raise ValueError(f"unknown suite {suite!r}: one of {', '.join(SUITES)}")
        names += list(load_cases() if suite == "node" else load_suite(suite))
    return names


def op_of(name: str) -> str:
    """The op a case tests: case_ops() for a node case, its first output's producer for a file suite's."""
    return case_ops().get(name, "?") if suite_of(name) == "node" else _output_op(get_case(name).model)


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
        ops[name] = _output_op(case.model)
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
