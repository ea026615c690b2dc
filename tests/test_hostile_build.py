"""Issue 11 regressions for `build`: users' files are never lost, -o paths that cannot hold an artifact
get one line, nothing of ours is left behind."""
from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from modelrun import cli, one_line_error, save_relu_model


def _build(model: Path, out: Path | str, cwd: Path):
    return cli("build", str(model), "-o", str(out), "--no-profile-runner", cwd=cwd)


@pytest.fixture
def model(tmp_path) -> Path:
    return save_relu_model(tmp_path / "m.onnx")


def test_build_keeps_a_directory_with_files_its_manifest_does_not_list(tmp_path, model):
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "manifest.json").write_text("{}")
    (proj / "index.html").write_text("hi")
    line = one_line_error(_build(model, proj, tmp_path))
    assert "not a fluidml-xc artifact" in line
    assert (proj / "index.html").read_text() == "hi" and (proj / "src").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "proj"]


def test_build_replaces_its_own_artifact_but_not_one_with_a_foreign_or_edited_file(tmp_path, model):
    proj = tmp_path / "proj"
    assert _build(model, proj, tmp_path).returncode == 0
    assert _build(model, proj, tmp_path).returncode == 0, "an unchanged artifact of ours is replaced"
    (proj / "notes.txt").write_text("mine")
    line = one_line_error(_build(model, proj, tmp_path))
    assert "'notes.txt'" in line and "manifest does not list" in line
    assert (proj / "notes.txt").read_text() == "mine"
    (proj / "notes.txt").unlink()
    (proj / "model.h").write_text("/* edited by hand */\n")
    assert "'model.h' was changed" in one_line_error(_build(model, proj, tmp_path))
    assert (proj / "model.h").read_text() == "/* edited by hand */\n"
    (proj / "model.h").unlink()
    (proj / "model.h").mkdir()
    (proj / "model.h" / "x").write_text("mine")
    assert "'model.h'" in one_line_error(_build(model, proj, tmp_path))
    assert (proj / "model.h" / "x").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "m.onnx", "proj"]


def test_build_through_a_symlink_replaces_the_target_and_leaves_nothing_behind(tmp_path, model):
    real = tmp_path / "real"
    link = tmp_path / "link"
    assert _build(model, real, tmp_path).returncode == 0
    link.symlink_to("real")
    for _ in range(2):
        proc = _build(model, link, tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == "real"
    assert (link / "manifest.json").is_file() and (real / "runner").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "link", "m.onnx", "real"]
    dangling = tmp_path / "dangling"
    dangling.symlink_to("nowhere")
    assert "symbolic link to nothing" in one_line_error(_build(model, dangling, tmp_path))
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("out", ["file/sub", "/proc/self/x", "afile"])
def test_build_into_an_impossible_output_is_one_line(tmp_path, model, out):
    (tmp_path / "file").write_text("x")
    (tmp_path / "afile").write_text("x")
    line = one_line_error(_build(model, out, tmp_path))
    assert repr(out) in line and "-o DIR" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "file", "m.onnx"]


def test_build_with_a_file_named_build_in_the_working_directory(tmp_path, model):
    (tmp_path / "build").write_text("not a directory")
    line = one_line_error(cli("build", str(model), "--no-profile-runner", cwd=tmp_path))
    assert "build/m-x86_64" in line
    assert (tmp_path / "build").read_text() == "not a directory"


def _matmul_model(path: Path) -> Path:
    import numpy as np
    from onnx import numpy_helper
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8) / 7, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_two_builds_in_different_directories_are_byte_identical(tmp_path):
    """Same model, board and options: every artifact file is the same bytes, and no directory of this
    machine (build dirs, temporary names, caches, the Python installation) is inside any of them."""
    import sys
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.emit.link import cache_dir

    artifacts = []
    for where in ("first", "second/deeper"):
        work = tmp_path / where
        work.mkdir(parents=True)
        model = _matmul_model(work / "mm.onnx")
        artifacts.append(build_model(model, BuildOptions(out_dir=work / "art", record_last=False)).artifact)
    a, b = artifacts
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert {"model.o", "libmodel.a", "runner", "runner_prof", "manifest.json"} <= set(names)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), f"{name} differs between the two builds"
    forbidden = [str(tmp_path), ".art.tmp-", ".weights-", "fxc-link-", str(cache_dir()), sys.prefix, str(Path.cwd()), str(Path.home())]
    for name in names:
        data = (a / name).read_bytes()
        for text in forbidden:
            assert text.encode() not in data, f"{text!r} is inside {name}"
    assert oct((a).stat().st_mode & 0o777) != "0o700", "the artifact directory gets the umask's mode"


def test_quotes_and_newlines_in_paths_reach_no_generated_source(tmp_path):
    """A newline in the model's file name, quotes and a backslash in -o: the build works and runs."""
    import numpy as np
    from modelrun import run
    from fluidml_xc.build import BuildOptions, build_model

    weird = tmp_path / 'we"ird \\dir\n'
    weird.mkdir()
    model = _matmul_model(weird / 'mo"del\nname.onnx')
    art = build_model(model, BuildOptions(out_dir=weird / 'out "x"', record_last=False, profile_runner=False)).artifact
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 7
    np.testing.assert_allclose(run(art, {"x": x})["y"], x @ w, rtol=1e-5)
    assert sorted(p.name for p in weird.iterdir()) == sorted([model.name, 'out "x"'])


def test_hostile_input_and_dim_names_stay_inside_model_h_comments(tmp_path):
    """An input named 'x*/y' whose dim is named 'len */ int bad; /*', built with a range: model.h's comment shows
    them quoted (before: the dim name ended the comment and declared `int bad;`, the input name failed in zig cc),
    and the artifact runs at a size inside the range."""
    import re

    import numpy as np
    from fluidml_xc.run.execute import run_artifact

    dim = "len */ int bad; /*"
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x*/y"], ["y"])], "m",
        [helper.make_tensor_value_info("x*/y", TensorProto.FLOAT, [2, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, dim])]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "m.onnx")
    proc = cli("build", "m.onnx", "-o", "out", "--no-profile-runner", "--dim", f"{dim}=1..8", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header = (tmp_path / "out" / "model.h").read_text()
    code = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    assert "bad" not in code and "x*/y" not in header
    assert '[0] "x\\u002a/y" float32 [2, "len \\u002a/ int bad; /\\u002a"=1..8]' in header
    x = np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_array_equal(run_artifact(tmp_path / "out", {"x*/y": x}, timeout=60).outputs["y"], np.maximum(x, 0))
