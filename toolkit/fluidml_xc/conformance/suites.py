"""ONNX's public model suites shipped in the onnx package besides the node tests: `pytorch-converted` (PyTorch
nn modules exported at opset 6), `pytorch-operator` (PyTorch operators) and `simple` (small hand-made
models). Each case is a directory onnx/backend/test/data/<suite>/test_*/ with model.onnx and
test_data_set_*/{input,output}_*.pb; loaded as onnx TestCases named `<suite>/<case>` (node cases keep their
bare names), with the loader's rtol/atol (1e-3/1e-7 unless the case's data.json says otherwise)."""
from __future__ import annotations

import warnings
from functools import cache
from pathlib import Path

import numpy as np

FILE_SUITES = ("pytorch-converted", "pytorch-operator", "simple")
SUITES = ("node",) + FILE_SUITES


def suite_of(name: str) -> str:
    """The suite of a case name: `<suite>/<case>` for the file suites, a bare name for a node case."""
    suite, sep, _ = name.partition("/")
    return suite if sep else "node"


def _read_value(path: Path, type_proto):
    """One input_*.pb / output_*.pb as the model's declared type reads it (tensor, sequence or optional)."""
    import onnx
    from onnx import numpy_helper

    data = path.read_bytes()
    if type_proto.HasField("sequence_type"):
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if type_proto.HasField("optional_type"):
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def _data_sets(case_dir: Path, model) -> list[tuple[list, list]]:
    sets = []
    for set_dir in sorted(case_dir.glob("test_data_set_*")):
        count = len(list(set_dir.glob("input_*.pb")))
        inputs = [_read_value(set_dir / f"input_{i}.pb", model.graph.input[i].type) for i in range(count)]
        count = len(list(set_dir.glob("output_*.pb")))
        outputs = [_read_value(set_dir / f"output_{i}.pb", model.graph.output[i].type) for i in range(count)]
        sets.append((inputs, outputs))
    return sets


@cache
def load_suite(suite: str) -> dict:
    """`<suite>/<case>` -> onnx TestCase with its model and data sets loaded, sorted by name."""
    import onnx
    from onnx.backend.test.loader import load_model_tests

    if suite not in FILE_SUITES:
        raise ValueError(f"unknown suite {suite!r}: one of {', '.join(FILE_SUITES)}")
    found = {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in load_model_tests(kind=suite):
            case_dir = Path(case.model_dir)
            model = onnx.load(str(case_dir / "model.onnx"))
            name = f"{suite}/{case.name}"
            found[name] = type(case)(**{**case.__dict__, "name": name, "model": model,
                                        "data_sets": _data_sets(case_dir, model)})
    return dict(sorted(found.items()))
