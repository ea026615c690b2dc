"""The conformance records of ONNX's public model suites (#24): a run saved per suite and target in suites.json,
PUBLIC_SUITES.md generated from it, and the suites' known failures written to and read back from the TOML
tables of their suites. Files only: no case is compiled here."""
from __future__ import annotations

import json

from fluidml_xc.conformance import docs, expectations
from fluidml_xc.conformance.runner import CaseResult


def _results() -> list[CaseResult]:
    return [CaseResult("simple/test_sign_model", "Sign", "pass", seconds=1.0),
            CaseResult("simple/test_strnorm_model", "StringNormalizer", "error", "unsupported-dtype",
                       "input 'x' is a string tensor", seconds=3.0)]


def test_suite_run_is_saved_under_its_suite_and_shown_in_the_page(tmp_path):
    runs, page = tmp_path / "suites.json", tmp_path / "PUBLIC_SUITES.md"
    docs.save_suite_results("simple", "armv7", _results(), 12.5, path=runs)
    record = json.loads(runs.read_text())["simple"]["armv7"]
    assert (record["cases"], record["passed"], record["seconds"]) == (2, 1, 12.5)
    assert set(record["results"]) == {"test_sign_model", "test_strnorm_model"}, "names without the suite"
    assert record["results"]["test_strnorm_model"][:2] == ["error", "unsupported-dtype"]
    text = docs.write_suite_docs(path=runs, out=page)
    assert page.read_text() == text
    row = next(line for line in text.splitlines() if line.startswith("| simple |"))
    assert "| - | - | 1/2 |" in row and "armv7" in row and "12.5 s" in row
    assert str(runs) in text, "a record file outside the repository is named as given"


def test_suite_expectations_round_trip(tmp_path):
    path = tmp_path / "expectations.toml"
    entries = {"test_abs": {"category": "known-bug", "reason": "a node case"},
               "simple/test_strnorm_model": {"category": "unsupported-dtype", "reason": "string tensors",
                                             "targets": ["armv7"]},
               "pytorch-converted/test_Conv3d": {"category": "unsupported-op", "reason": "an op we lack"}}
    expectations.write_expectations(entries, path)
    text = path.read_text()
    assert "[cases]\ntest_abs = " in text and "[simple]\ntest_strnorm_model = " in text
    assert "[pytorch-operator]" not in text, "a suite without entries gets no table"
    assert expectations.load_expectations(path) == entries
    assert expectations.expected_failure("simple/test_strnorm_model", "x86_64", entries) is None


def test_a_new_expectation_drops_the_error_class_whatever_it_is(tmp_path):
    """Typed errors print their own class name (errors.py: UnresolvedShape, NeedsConstant): the reason drops it as it
    drops Python's *Error."""
    path = tmp_path / "expectations.toml"
    messages = {"test_a": "NeedsConstant: node 'k' (TopK): K must be a build-time constant",
                "test_b": "UnresolvedShape: the shape of 'y' depends on the run-time value of 's'",
                "test_c": "ValueError: bad", "test_d": "InputError: refused"}
    results = [CaseResult(name, "Op", "error", "compiler-bug", message) for name, message in messages.items()]
    assert expectations.update_expectations("x86_64", results, path) == (4, 0)
    reasons = {name: entry["reason"] for name, entry in expectations.load_expectations(path).items()}
    assert reasons == {"test_a": "node 'k' (TopK): K must be a build-time constant",
                       "test_b": "the shape of 'y' depends on the run-time value of 's'", "test_c": "bad", "test_d": "refused"}


def test_each_board_records_under_its_target_and_riscv_vector_apart():
    """riscv64 with and without RVV get their own record (#30); every other board its target's."""
    from fluidml_xc.conformance.cases import ALL_TARGETS, target_key
    from fluidml_xc.target.boards import get_board

    keys = {b: target_key(get_board(b)) for b in ("x86_64", "qemu-aarch64", "rpi5", "qemu-armv7", "qemu-riscv64",
                                                  "qemu-riscv64-rvv", "bpi-f3", "visionfive2")}
    assert keys == {"x86_64": "x86_64", "qemu-aarch64": "aarch64", "rpi5": "aarch64", "qemu-armv7": "armv7",
                    "qemu-riscv64": "riscv64", "qemu-riscv64-rvv": "riscv64+v", "bpi-f3": "riscv64+v",
                    "visionfive2": "riscv64"}
    assert set(keys.values()) == set(ALL_TARGETS)


def test_a_rerun_of_fixed_cases_merges_into_the_recorded_run(tmp_path):
    """--merge: the re-run cases' outcomes replace theirs, the counts follow, the page says how many were re-run;
    a case the recorded run does not have, or a target without a run, is refused."""
    import pytest

    from fluidml_xc.errors import InputError

    runs, page = tmp_path / "results.json", tmp_path / "SUPPORTED_OPS.md"
    first = [CaseResult("test_abs", "Abs", "pass", seconds=1.0),
             CaseResult("test_acos", "Acos", "mismatch", "wrong-result", "1 of 3 differ", seconds=1.0),
             CaseResult("test_add", "Add", "error", "crash", "worker killed by signal SIGILL", seconds=1.0)]
    docs.save_results("riscv64+v", first, 30.0, path=runs, board="qemu-riscv64-rvv")
    docs.save_results("x86_64", first[:1], 3.0, path=runs, board="x86_64")
    run = docs.merge_results("riscv64+v", [CaseResult("test_acos", "Acos", "pass", specialized=["x"], seconds=2.0)],
                             path=runs)
    assert (run["cases"], run["passed"], run["specialized_passes"], run["seconds"]) == (3, 2, 1, 30.0)
    record = json.loads(runs.read_text())["riscv64+v"]
    assert record["results"]["test_acos"] == ["pass", "specialized: x"] and list(record["rerun"]) == ["test_acos"]
    assert record["results"]["test_add"][:2] == ["error", "crash"] and record["board"] == "qemu-riscv64-rvv"
    text = docs.write_docs(results_path=runs, out=page)
    rows = [line for line in text.splitlines() if line.startswith(("| x86_64 |", "| riscv64+v |"))]
    assert rows[0].startswith("| x86_64 | x86_64 | all | 1 | 1 |"), "x86_64 first, then the boards in ALL_TARGETS order"
    assert rows[1].startswith("| riscv64+v | qemu-riscv64-rvv | all | 2 | 3 |") and "(1 cases re-run" in rows[1]
    assert "| Acos |" in text and "| x86_64 | riscv64+v |" in text
    with pytest.raises(InputError, match="no case test_sub"):
        docs.merge_results("riscv64+v", [CaseResult("test_sub", "Sub", "pass")], path=runs)
    with pytest.raises(InputError, match="no recorded run of armv7"):
        docs.merge_results("armv7", first[:1], path=runs)
