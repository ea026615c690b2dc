"""The LLVM pipeline per module (target/pipeline.py): explicit vector kernels get the function simplification
pipeline, loops of scalar code keep O3's vectorizers, and the choice is part of the kernel cache's code key."""
from __future__ import annotations

import shutil
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc import resources
from fluidml_xc.emit import units
from fluidml_xc.pipeline import LowerOptions, import_graph, lower
from fluidml_xc.run.backend import compile_model
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec, optimized_module, target_machine
from fluidml_xc.target.pipeline import FULL, SIMPLIFY, pipeline_for, run_pipeline

RNG = np.random.default_rng(27)


def _conv_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(RNG.standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.standard_normal(16).astype(np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _add_model() -> onnx.ModelProto:
    node = helper.make_node("Add", ["x", "z"], ["y"])
    graph = helper.make_graph([node], "add", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3000])
                                              for n in ("x", "z")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3000])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ir(model: onnx.ModelProto, board: str, cpu: str | None = None) -> tuple[str, object]:
    spec = machine_spec(get_board(board), cpu)
    return lower(import_graph(model), spec, LowerOptions()).ir_text, spec


def test_vector_kernels_are_simplified_scalar_loops_and_armv7_keep_o3():
    assert pipeline_for(_ir(_conv_model(), "x86_64", "x86-64-v3")[0]) is SIMPLIFY
    assert pipeline_for(_ir(_conv_model(), "rpi4")[0]) is SIMPLIFY
    assert pipeline_for(_ir(_conv_model(), "rpi3")[0]) is FULL
    assert pipeline_for(_ir(_add_model(), "x86_64", "x86-64-v3")[0]) is FULL


def test_a_scalar_loop_is_still_vectorized():
    text, spec = _ir(_add_model(), "x86_64", "x86-64-v3")
    tm = target_machine(spec)
    assert "%ymm" in tm.emit_assembly(optimized_module(text, tm))
    simplified = llvm.parse_assembly(text, context=llvm.create_context())
    run_pipeline(simplified, tm, SIMPLIFY)
    assert "%ymm" not in tm.emit_assembly(simplified)


def test_a_simplified_conv_matches_onnx_runtime():
    model = _conv_model()
    x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = compile_model(model)({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_pipeline_is_part_of_the_code_key(tmp_path, monkeypatch):
    copy = tmp_path / "fluidml_xc"
    shutil.copytree(Path(resources.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__", "_data"))
    monkeypatch.setattr(resources, "_PACKAGE", copy)
    spec = machine_spec(get_board("rpi4"))
    monkeypatch.setattr(units, "package_digest", resources.package_digest.__wrapped__)
    before = units.code_key("define void @f() {\n  ret void\n}\n", spec)
    source = copy / "target" / "pipeline.py"
    assert 'Pipeline("simplify-o2", 2,' in source.read_text()
    source.write_text(source.read_text().replace('Pipeline("simplify-o2", 2,', 'Pipeline("simplify-o2", 1,'))
    assert units.code_key("define void @f() {\n  ret void\n}\n", spec) != before
