"""The manifest (artifact.Manifest): written by build, read back field for field, bad fields named in one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from fluidml_xc.artifact import Manifest, ManifestError, TensorEntry, read_manifest
from fluidml_xc.build import BuildOptions, build_model
from fluidml_xc.errors import InputError

TOOLKIT = str(Path(__file__).resolve().parent.parent / "toolkit")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("manifest")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp / "relu.onnx"))
    return build_model(tmp / "relu.onnx", BuildOptions(board="x86_64", out_dir=tmp / "out", profile_runner=False,
                                                       record_last=False)).artifact


def test_manifest_round_trips_byte_for_byte(artifact):
    text = (artifact / "manifest.json").read_text()
    manifest = read_manifest(artifact)
    assert manifest.to_json() == text
    assert manifest.inputs == (TensorEntry("x", (2, 3), "float32"),) and manifest.outputs[0].name == "y"
    assert manifest.model.name == "relu" and manifest.model_path(artifact) == (artifact.parent / "relu.onnx").resolve()
    assert manifest.board == "x86_64" and manifest.threads >= 1 and set(manifest.files) >= {"runner", "model.o"}


def test_older_manifest_gets_defaults(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"target": "x86_64", "inputs": [], "outputs": []}))
    manifest = read_manifest(tmp_path)
    assert manifest.threads == 1 and manifest.opt == "fluid" and manifest.emulator == "" and manifest.files is None


@pytest.mark.parametrize("edit, field", [(lambda m: m.pop("outputs"), "outputs"),
                                         (lambda m: m.update(threads="four"), "threads"),
                                         (lambda m: m["inputs"][0].update(shape="2x3"), "inputs")])
def test_bad_field_is_named(artifact, tmp_path, edit, field):
    data = json.loads((artifact / "manifest.json").read_text())
    edit(data)
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=rf"manifest.json has (no|a malformed) field '{field}'") as info:
        read_manifest(tmp_path)
    assert isinstance(info.value, InputError) and "\n" not in str(info.value)


def test_cli_reports_a_bad_manifest_in_one_line(artifact, tmp_path):
    data = json.loads((artifact / "manifest.json").read_text())
    data["memory"] = [1, 2]
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {TOOLKIT!r}); "
                           "from fluidml_xc.cli import main; sys.exit(main())", "inspect", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == InputError.exit_code and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "malformed field 'memory'" in proc.stderr
    assert str(tmp_path / "manifest.json") in proc.stderr


def test_missing_manifest_says_not_an_artifact(tmp_path):
    with pytest.raises(ManifestError, match="is not a fluidml-xc artifact"):
        Manifest.from_file(tmp_path / "manifest.json")
