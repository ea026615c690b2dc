"""Where a build's time goes (issue #27): `build --timings`, `timings` in build --json and in manifest.json; and
`--version` answered without importing the compiler."""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from fluidml_xc import __version__
from fluidml_xc.artifact import ManifestError, read_manifest
from fluidml_xc.cli import main
from fluidml_xc.emit.link import runtime_cached
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import compile_module, machine_specs
from fluidml_xc.target.objects import compile_objects
from fluidml_xc.timings import STAGES

TOOLKIT = str(Path(__file__).resolve().parent.parent / "toolkit")


def _model(tmp: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp / "relu_add.onnx"))
    return tmp / "relu_add.onnx"


@pytest.fixture(scope="module")
def timed_build(tmp_path_factory):
    """`build --timings --json-out FILE` of a small model: (stdout, the JSON, the artifact)."""
    tmp = tmp_path_factory.mktemp("timings")
    out, result = tmp / "out", tmp / "result.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        stdout = io.StringIO()
        with redirect_stdout(stdout):
            assert main(["build", str(_model(tmp)), "-o", str(out), "--no-profile-runner", "--timings",
                         "--json-out", str(result)]) == 0
    return stdout.getvalue(), json.loads(result.read_text()), out


def _check_timings(timings: dict) -> None:
    stages = timings["stages"]
    assert list(stages) == list(STAGES)
    assert all(seconds >= 0 for seconds in stages.values()) and timings["total"] > 0
    assert sum(stages.values()) == pytest.approx(timings["total"], abs=1e-3)
    variants = timings["llvm_variants"]
    assert variants and all(v["optimize"] >= 0 and v["codegen"] >= 0 for v in variants)
    if timings["llvm_processes"] == 1:  # one process: its units ran one after another inside the units stage
        assert sum(v["emit"] + v["optimize"] + v["codegen"] for v in variants) <= stages["units"] + 1e-3
    kernels = timings["kernels"]
    assert kernels["cached"] >= 0 and kernels["compiled"] >= 0 and kernels["cached"] + kernels["compiled"] > 0
    cpu = timings["cpu"]  # every build runs zig (the link), a child waited for
    assert cpu["build"] > 0 and cpu["children"] > 0
    # the variants' seconds are CPU seconds of the threads that did the work: a part of the build's CPU time
    assert sum(v["emit"] + v["optimize"] + v["codegen"] for v in variants) <= cpu["build"] + cpu["children"] + 1e-3


def test_manifest_records_stages_that_add_up(timed_build):
    _, _, artifact = timed_build
    manifest = read_manifest(artifact)
    data = json.loads((artifact / "manifest.json").read_text())
    _check_timings(data["timings"])
    assert manifest.timings.stages == data["timings"]["stages"]
    assert [v.cpu for v in manifest.timings.variants] == list(manifest.cpu_variants or (manifest.cpu,))
    assert manifest.to_json() == (artifact / "manifest.json").read_text()


def test_timings_flag_prints_the_table_and_json_has_them(timed_build):
    stdout, result, _ = timed_build
    _check_timings(result["timings"])
    assert result["timings"]["total"] == pytest.approx(result["seconds"], abs=1e-3)
    table = [line.strip() for line in stdout[stdout.index("build timings"):].splitlines()[1:]]
    for name in [*STAGES, "total"]:
        row = next(line for line in table if line.startswith(name + " "))
        seconds, share = row[len(name):].split()[:2]
        assert float(seconds) >= 0 and share.endswith("%")
        if name != "total":
            assert float(seconds) == pytest.approx(result["timings"]["stages"][name], abs=1e-3)
    cpu = result["timings"]["cpu"]
    row = next(line for line in table if line.startswith("CPU: "))
    total, build, children = map(float, re.fullmatch(r"CPU: ([\d.]+) s \(user \+ system: the build's process ([\d.]+) s, "
                                                     r"its workers and tools ([\d.]+) s\)", row).groups())
    assert (total, build, children) == pytest.approx((cpu["build"] + cpu["children"], cpu["build"], cpu["children"]), abs=2e-3)
    kernels = result["timings"]["kernels"]
    assert any(line.startswith(f"kernels: {kernels['cached']} cached, {kernels['emitted']} emitted, "
                               f"{kernels['compiled']} compiled") for line in table)


def test_build_json_has_timings_and_the_manifest_only_with_the_flag(tmp_path, capsys, monkeypatch):
    """Without --timings the manifest stays the same bytes build after build (reproducible artifacts, deploy's
    content address); build --json has the timings all the same."""
    monkeypatch.chdir(tmp_path)
    assert main(["build", str(_model(tmp_path)), "-o", str(tmp_path / "out"), "--no-profile-runner", "--json"]) == 0
    _check_timings(json.loads(capsys.readouterr().out)["timings"])
    assert "timings" not in json.loads((tmp_path / "out" / "manifest.json").read_text())


def test_manifest_without_timings_loads_and_bad_timings_are_named(timed_build, tmp_path):
    _, _, artifact = timed_build
    data = json.loads((artifact / "manifest.json").read_text())
    del data["timings"]
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    assert read_manifest(tmp_path).timings is None
    assert "timings" not in read_manifest(tmp_path).to_json()
    data["timings"] = {"total": 1.0, "stages": {"load": -0.5}}
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="malformed field 'timings'"):
        read_manifest(tmp_path)


def test_variant_times_name_their_process():
    """compile_objects: the objects compile_module makes, each with its seconds and the process (0: this one)."""
    ir_text = "define float @f(float %a, float %b) {\n  %c = fmul float %a, %b\n  ret float %c\n}\n"
    jobs = [(ir_text.replace("@f", f"@f{k}"), spec) for k, spec in enumerate(machine_specs(get_board("x86_64")))]
    done = compile_objects(jobs, workers=2)
    assert [obj.code for obj in done] == [compile_module(ir, spec) for ir, spec in jobs]
    assert {obj.process for obj in done} == ({0, 1} if len(jobs) > 1 else {0})
    assert all(obj.optimize >= 0 and obj.codegen >= 0 for obj in done)


def test_version_answers_without_importing_the_compiler():
    code = ("import sys; from fluidml_xc.cli import main; code = main(['--version']); "
            "print(code, sorted(m for m in ('fluidml_xc.build', 'llvmlite', 'onnx', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": TOOLKIT},
                          timeout=60)
    assert done.stdout.splitlines() == [f"fluidml-xc {__version__}", "0 []"], done.stderr
    done = subprocess.run([sys.executable, "-m", "fluidml_xc.cli", "--debug", "--vers"], capture_output=True, text=True,
                          env={"PYTHONPATH": TOOLKIT}, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"fluidml-xc {__version__}\n")


def test_a_build_imports_its_command_alone(tmp_path):
    """`build` parses with the build command's module only: deploy's SSH stack (paramiko), the fleet and the
    remote modules stay unimported, and onnx.reference too when no node is folded (issue #27: the CLI's start is
    part of a warm rebuild)."""
    model = _model(tmp_path)
    code = ("import sys; from fluidml_xc.cli import main; code = main(['--debug', 'build', sys.argv[1], '-o', sys.argv[2], "
            "'--no-profile-runner']); print(code, sorted(m for m in sys.modules if m.split('.')[0] == 'paramiko' or "
            "m.startswith(('fluidml_xc.fleet', 'fluidml_xc.remote', 'fluidml_xc.commands.deploy', 'onnx.reference'))))")
    done = subprocess.run([sys.executable, "-c", code, str(model), str(tmp_path / "out")], capture_output=True, text=True,
                          env={"PYTHONPATH": TOOLKIT, "HOME": str(Path.home())}, timeout=300, cwd=tmp_path)
    assert done.stdout.splitlines()[-1] == "0 []", (done.stdout, done.stderr)


@pytest.mark.parametrize("argv", [["--help"], ["-h", "build"], ["biuld"], ["--", "build"], []])
def test_the_whole_parser_without_a_known_command(argv):
    from fluidml_xc.cli import build_parser

    choices = next(a for a in build_parser(argv)._actions if a.dest == "command").choices
    assert {"build", "deploy", "profile", "cache", "boards"} <= set(choices)
    only = next(a for a in build_parser(["--debug", "build", "m.onnx"])._actions if a.dest == "command").choices
    assert list(only) == ["build"]


def test_help_still_lists_version_and_commands(capsys):
    with pytest.raises(SystemExit):
        main(["-h", "--version"])
    out = capsys.readouterr().out
    assert "--version" in out and "build" in out


def test_runtime_stage_knows_a_cached_runtime_from_a_missing_one(timed_build, tmp_path, monkeypatch):
    """After a build the board's runtime is cached (the manifest says runtime_built false or true, and a second
    look finds it); an empty cache root has none (the build would build it and say so)."""
    _, result, _ = timed_build
    target = get_board("x86_64").target
    assert isinstance(result["timings"]["runtime_built"], bool) and runtime_cached(target)
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path))
    assert not runtime_cached(target)
