"""Bad input: one clear line, a non-zero exit code, no traceback, nothing written."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from modelrun import cli, one_line_error

ROOT = Path(__file__).resolve().parent.parent


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def test_unsupported_ops_listed_with_node_names_and_nothing_written(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("NonMaxSuppressionX", ["a"], ["b"], name="weird1", domain="com.example"),
        helper.make_node("FancyOp", ["b"], ["c"], name="weird2", domain="com.example"),
        helper.make_node("FancyOp", ["c"], ["y"], name="weird3", domain="com.example"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    path = _save(model, tmp_path / "m.onnx")
    proc = cli("build", str(path), cwd=tmp_path)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "unsupported ops" in line and "NonMaxSuppressionX" in line and "FancyOp" in line
    assert "weird1" in line and "weird2" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_dynamic_dimension_asks_for_input_shape(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["images"], ["y"])], "g",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 8, 8])])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "dyn.onnx")
    line = one_line_error(cli("build", str(path), cwd=tmp_path))
    assert "images" in line and "--input-shape images=1x3x8x8" in line
    assert not (tmp_path / "build").exists()
    ok = cli("build", str(path), "--input-shape", "images=2x3x8x8", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    from modelrun import run
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(tmp_path / "out", {"images": x})["y"], np.maximum(x, 0))


def test_corrupt_and_missing_files(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not protobuf \xff\xff\xff")
    assert "not a readable ONNX model" in one_line_error(cli("build", str(bad), cwd=tmp_path))
    assert "not found" in one_line_error(cli("build", str(tmp_path / "nope.onnx"), cwd=tmp_path))


def test_unknown_board_lists_valid_ones(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    line = one_line_error(cli("build", str(path), "--board", "rpi9", cwd=tmp_path))
    assert "rpi9" in line and "rpi4" in line and "jetson-orin-nano" in line and "qemu-armv7" in line


def test_existing_foreign_output_directory_is_not_overwritten(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    line = one_line_error(cli("build", str(path), "-o", str(mine), cwd=tmp_path))
    assert "not a fluidml-xc artifact" in line
    assert (mine / "notes.txt").read_text() == "precious"


def test_boards_lists_every_board(tmp_path):
    proc = cli("boards", cwd=tmp_path)
    assert proc.returncode == 0
    for name, triple, cpu in [("x86_64", "x86_64", ""), ("rpi3", "armv7-unknown-linux-gnueabihf", "cortex-a53"),
                              ("rpi4", "aarch64", "cortex-a72"), ("rpi5", "aarch64", "cortex-a76"),
                              ("jetson-nano", "aarch64", "cortex-a57"), ("jetson-orin-nano", "aarch64", "cortex-a78ae"),
                              ("qemu-aarch64", "aarch64", ""), ("qemu-armv7", "armv7", "")]:
        line = next(l for l in proc.stdout.splitlines() if l.startswith(name + " "))
        assert triple in line and cpu in line
