"""Issue #23, what a user trips on: a model where an artifact is wanted (and the reverse), one --json convention
on every command that prints a result, verify's criterion as applied, names shortened without collisions
(inspect, profile --top, report), emulated profiles never compared for speed, the missing-extra message."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from fluidml_xc import cli
from fluidml_xc.examples import EXAMPLES
from modelrun import require_emulator

MODEL = "mlp.onnx"
BUILD = "build/mlp-x86_64"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A directory holding mlp.onnx (tiny_mlp), its build for this machine, and fresh.onnx (never built)."""
    d = tmp_path_factory.mktemp("ux")
    onnx.save(EXAMPLES["tiny_mlp"](), str(d / MODEL))
    onnx.save(EXAMPLES["tiny_cnn"](), str(d / "fresh.onnx"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(d)
        assert cli.main(["build", MODEL, "--threads", "1"]) == 0
    return d


def run(capsys, monkeypatch, work, *argv: str) -> tuple[int, str, str]:
    monkeypatch.chdir(work)
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def error(capsys, monkeypatch, work, *argv: str) -> str:
    code, out, err = run(capsys, monkeypatch, work, *argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("fluidml-xc: error: "), (code, out, err)
    return lines[0]


# -- a model where an artifact is wanted, and the reverse --------------------------------------------------------

@pytest.mark.parametrize("argv", [["run"], ["inspect"], ["profile", "--local"], ["verify"], ["deploy", "--host", "h"],
                                  ["report", "-o", "r.html"]])
def test_model_given_to_an_artifact_command(work, capsys, monkeypatch, argv):
    line = error(capsys, monkeypatch, work, argv[0], MODEL, *argv[1:])
    assert f"{MODEL} is a model, not an artifact" in line
    assert f"fluidml-xc {argv[0]} {BUILD}" in line, "the build of this model is named"
    line = error(capsys, monkeypatch, work, argv[0], "fresh.onnx", *argv[1:])
    assert "build it first with `fluidml-xc build fresh.onnx" in line and f"fluidml-xc {argv[0]} build/fresh-BOARD" in line
    line = error(capsys, monkeypatch, work, argv[0], "build", *argv[1:])
    assert "build is a directory of builds, not an artifact" in line and BUILD in line


def test_report_profile_argument_that_is_not_a_profile(work, capsys, monkeypatch):
    line = error(capsys, monkeypatch, work, "report", "--profile", BUILD, "-o", "r.html")
    assert f"--profile {BUILD} is an artifact, not a profile" in line and f"fluidml-xc profile {BUILD} --local --json-out" in line
    line = error(capsys, monkeypatch, work, "report", "--profile", MODEL, "-o", "r.html")
    assert f"--profile {MODEL} is a model, not a profile" in line


@pytest.mark.parametrize("argv", [["build", BUILD], ["quantize", BUILD, "-c", "x.npz", "-o", "q.onnx"],
                                  ["verify", BUILD, "--model", BUILD]])
def test_artifact_given_to_a_model_command(work, capsys, monkeypatch, argv):
    line = error(capsys, monkeypatch, work, *argv)
    assert f"{BUILD} is an artifact, not a model" in line and f"built from {MODEL}" in line
    if argv[0] != "verify":
        line = error(capsys, monkeypatch, work, argv[0], "build", *argv[2:])
        assert "build is a directory of builds" in line and "not a model" in line


def test_verify_gives_onnx_runtimes_whole_reason(work, capsys, monkeypatch):
    """ORT puts the indices of a wrong dimension on the lines after its first: verify prints them, on one line."""
    model = onnx.load(str(work / MODEL))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 3
    onnx.save(model, str(work / "three.onnx"))
    line = error(capsys, monkeypatch, work, "verify", BUILD, "--model", "three.onnx")
    assert line.startswith("fluidml-xc: error: ONNX Runtime cannot run three.onnx: Got invalid dimensions for input: "
                           "input for the following indices index: 0 Got: 1 Expected: 3"), line
    assert "[ONNXRuntimeError]" not in line and "Traceback" not in line


# -- --json: the result alone on stdout; --json-out FILE ----------------------------------------------------------

def _json_only(capsys, monkeypatch, work, *argv: str):
    code, out, err = run(capsys, monkeypatch, work, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_json_on_every_command(work, capsys, monkeypatch):
    built = _json_only(capsys, monkeypatch, work, "build", MODEL, "-o", "b2", "--no-profile-runner", "--threads", "1")
    assert built["artifact"] == "b2" and built["memory"]["arena_bytes"] > 0 and built["board"] == "x86_64"
    ran = _json_only(capsys, monkeypatch, work, "run", BUILD)
    out = onnx.load(str(work / MODEL)).graph.output[0].name
    assert ran["outputs"][out]["shape"] == [1, 10] and len(ran["outputs"][out]["first"]) == 6 and ran["bench"] is None
    bench = _json_only(capsys, monkeypatch, work, "run", BUILD, "--bench", "3", "--warmup", "0")
    assert bench["bench"]["median_ms"] > 0
    verified = _json_only(capsys, monkeypatch, work, "verify", BUILD)
    assert verified["ok"] and verified["outputs"][0]["allowed"] == "1e-05 + 0.0001*|ref|"
    assert 0 <= verified["outputs"][0]["worst_over_allowed"] <= 1
    assert set(_json_only(capsys, monkeypatch, work, "inspect", BUILD)) == {"c_api", "optimizer", "memory"}
    profile = _json_only(capsys, monkeypatch, work, "profile", BUILD, "--local", "--runs", "3", "--warmup", "0")
    assert profile["runs"] == 3 and profile["emulated"] is False
    boards = _json_only(capsys, monkeypatch, work, "boards")
    assert {"x86_64", "rpi4", "qemu-aarch64"} <= {b["board"] for b in boards}


def test_json_out_writes_the_file_and_keeps_the_table(work, capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, work, "verify", BUILD, "--json-out", "v.json")
    assert code == 0, err
    assert out.startswith("verify    against ONNX Runtime") and json.loads((work / "v.json").read_text())["ok"]
    code, out, err = run(capsys, monkeypatch, work, "profile", BUILD, "--local", "--runs", "3", "--warmup", "0",
                         "--json", "--json-out", "p.json")
    assert code == 0 and json.loads(out) == json.loads((work / "p.json").read_text())
    line = error(capsys, monkeypatch, work, "inspect", BUILD, "--json-out", "nowhere/i.json")
    assert "the directory nowhere does not exist" in line and not (work / "nowhere").exists()
    for name in ("", "-"):
        assert "--json-out needs a file name (for stdout, pass --json)" in error(capsys, monkeypatch, work, "inspect", BUILD,
                                                                                 "--json-out", name)


def test_profile_json_file_of_old_gives_the_new_spelling(work, capsys, monkeypatch):
    line = error(capsys, monkeypatch, work, "profile", BUILD, "--local", "--json", "old.json")
    assert "--json-out old.json" in line and not (work / "old.json").exists()
    for argv in (["profile", BUILD, "--local", "--json", "-"], ["profile", "--json", BUILD, "--local"]):
        code, out, err = run(capsys, monkeypatch, work, *argv, "--runs", "2", "--warmup", "0")
        assert code == 0, err
        assert json.loads(out)["runs"] == 2


def test_deploy_json_over_ssh(work, tmp_path, capsys, monkeypatch, loopback_sshd):
    common = loopback_sshd.args() + ["--base-dir", str(tmp_path / "board")]
    code, out, err = run(capsys, monkeypatch, work, "deploy", BUILD, *common, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["board"] == "x86_64" and data["current"] == str(tmp_path / "board" / "current")
    assert data["run"][-2:] == ["--bench", "100"] and "uploaded" in err
    code, out, err = run(capsys, monkeypatch, work, "boards", "detect", *loopback_sshd.args(), "--json")
    assert code == 0, err
    assert json.loads(out)["machine"] == "x86_64" and "x86_64" in json.loads(out)["boards"]


# -- verify prints the criterion compare() applies ----------------------------------------------------------------

def test_verify_shows_the_criterion_it_applied():
    from fluidml_xc.remote.verify import Reference, Tolerance, VerifyReport

    ref = {"y": np.array([1e-4, 1.0, -2.0], np.float64), "q": np.array([3, 4], np.int8)}
    near = {"y": ref["y"] + np.array([1.3e-7, 5e-5, 0]), "q": ref["q"]}
    report = VerifyReport.of("here", Tolerance(), near, Reference(ref))
    table = report.table()
    y = report.outputs[0]
    assert report.ok and y.max_rel > Tolerance().rtol, "a relative error above rtol passes where atol allows it"
    assert "|out - ref| <= allowed" in table and "1e-05 + 0.0001*|ref|" in table and "0 (exact)" in table
    assert y.worst == pytest.approx(5e-5 / (1e-5 + 1e-4), rel=1e-3)
    far = {"y": ref["y"] + np.array([0, 2e-4, 0]), "q": ref["q"] + 1}
    report = VerifyReport.of("here", Tolerance(rtol=1e-4, atol=0), far, Reference(ref, steps={"q": 1.0}, quant_steps=1.0))
    y, q = report.outputs
    assert not y.ok and y.worst > 1 and y.allowed == "0 + 0.0001*|ref|"
    assert q.ok and q.allowed == "1" and "1 quantization step(s)" in report.table()


def test_verify_cli_tolerances_reach_the_criterion(work, capsys, monkeypatch):
    data = _json_only(capsys, monkeypatch, work, "verify", BUILD, "--rtol", "0.01", "--atol", "0")
    assert data["outputs"][0]["allowed"] == "0 + 0.01*|ref|" and data["rtol"] == 0.01


# -- names shortened without collisions ---------------------------------------------------------------------------

def test_shorten_unique_keeps_names_apart():
    from fluidml_xc.shortnames import shorten_unique

    tails = [f"/model/encoder/layer.{i}/attention/output/dense/MatMul" for i in range(12)]
    middles = [f"/model/decoder/block_{i}/mlp/fc/Add_output_0" for i in range(3)] + ["short"]
    for names, width in ((tails, 24), (middles, 24), (tails + middles, 30)):
        short = shorten_unique(names, width)
        assert len(set(short.values())) == len(names)
        assert all(len(short[n]) <= width for n in names)
        assert short.get("short", "short") == "short", "a name that fits is left alone"
    assert len({n[-24:] for n in tails}) == 1, "cutting from the left alone makes them all print the same"
    same_ends = ["a" * 30 + "X" + "b" * 30, "a" * 30 + "Y" + "b" * 30]
    short = shorten_unique(same_ends, 16)
    assert len(set(short.values())) == 2 and all("…" in v for v in short.values())


def test_inspect_legend_names_differ():
    from fluidml_xc.commands.inspect import memory_map

    names = [f"/model/encoder/layer.{i}/attention/output/dense/MatMul_output_0" for i in range(5)]
    lines = memory_map({n: (i, i + 1) for i, n in enumerate(names)}, {n: 64 * i for i, n in enumerate(names)},
                       {n: 64 for n in names}, 64 * len(names), len(names) + 1)
    labels = [item.split("=", 1)[1] for item in lines[-1].removeprefix("  legend: ").split(", ")]
    assert len(labels) == 5 and len(set(labels)) == 5


def test_profile_top_lists_the_slowest_ops(work, capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, work, "profile", BUILD, "--local", "--runs", "3", "--warmup", "0")
    assert code == 0, err
    every = out[out.index("ops in execution order"):].splitlines()[2:]
    code, out, err = run(capsys, monkeypatch, work, "profile", BUILD, "--local", "--runs", "3", "--warmup", "0",
                         "--top", "1", "--json-out", "top.json")
    assert code == 0, err
    rows = out[out.index("top 1 of"):].splitlines()[2:]
    ops = json.loads((work / "top.json").read_text())["ops"]
    slowest = max(ops, key=lambda op: op["ms"])
    assert len(every) == len(ops) == 2 and len(rows) == 2
    assert rows[0].split()[0] == slowest["name"] and rows[1].startswith("... 1 more ops")
    assert "give a number of ops" in error(capsys, monkeypatch, work, "profile", BUILD, "--local", "--top", "0")


# -- an emulated profile is marked and never compared for speed ---------------------------------------------------

def test_report_does_not_compare_emulated_profiles(work, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    require_emulator("qemu-aarch64")
    code, _, err = run(capsys, monkeypatch, work, "build", MODEL, "--board", "qemu-aarch64", "--threads", "1")
    assert code == 0, err
    for name, artifact in (("a", BUILD), ("b", BUILD), ("q", "build/mlp-qemu-aarch64")):
        code, _, err = run(capsys, monkeypatch, work, "profile", artifact, "--local", "--runs", "3", "--warmup", "0",
                           "--json-out", f"{name}.json")
        assert code == 0, err
    emulated = json.loads((work / "q.json").read_text())
    assert emulated["emulated"] is True and "qemu-aarch64" in emulated["emulator"]
    code, _, err = run(capsys, monkeypatch, work, "report", BUILD, "build/mlp-qemu-aarch64", "--profile", "a.json",
                       "--profile", "q.json", "--profile", "b.json", "-o", "r.html")
    assert code == 0, err
    page = (work / "r.html").read_text()
    assert "emulated: not compared" in page and "not compared for speed" in page
    assert 'id="compare-latency"' in page and 'id="op-deltas-1"' in page and 'id="op-deltas-2"' not in page
    rows = page[page.index("vs first native"):].split("</table>")[0].split("<tr>")[1:]
    assert [r.count("emulated: not compared") for r in rows] == [0, 1, 0] and "1.00x" in rows[0]


def test_missing_extra_names_both_install_commands():
    from fluidml_xc.errors import InputError
    from fluidml_xc.extras import require

    with pytest.raises(InputError) as info:
        require("fxc_no_such_module", "report", "--html")
    text = str(info.value)
    assert "pip install 'fluidml-xc[report]'" in text and "pip install -c constraints.txt '.[report]'" in text


# -- docs/MODELS.md's worked example stays true --------------------------------------------------------------------

def _documented_errors() -> list[tuple[list[str], str]]:
    """docs/MODELS.md's `fluidml-xc build` commands that print an error, each with the line pasted after it."""
    import shlex
    from pathlib import Path

    lines = (Path(__file__).resolve().parent.parent / "docs" / "MODELS.md").read_text().splitlines()
    return [(shlex.split(cmd[len("$ fluidml-xc "):]), after) for cmd, after in zip(lines, lines[1:])
            if cmd.startswith("$ fluidml-xc build ") and after.startswith("fluidml-xc: error: ")]


def test_models_doc_worked_example(tmp_path, capsys, monkeypatch):
    """Every error MODELS.md pastes is the line the build prints now (exit 2, nothing written); the good build
    verifies."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "make_vad.py"
    spec = importlib.util.spec_from_file_location("make_vad", script)
    make_vad = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_vad)
    onnx.save(make_vad.vad(), str(tmp_path / "vad.onnx"))
    onnx.save(make_vad.vad(fastgelu=True), str(tmp_path / "vad_ort.onnx"))
    shapes = ["--input-shape", "input=1x1024", "--input-shape", "state=2x1x16"]
    documented = _documented_errors()
    pasted = [line for _, line in documented]
    assert len(documented) == 6, pasted
    assert any("gives dimension 0 of input 'state' size 3, but the model declares it 2" in p for p in pasted)
    assert any("dimensions that share a name take one size" in p for p in pasted)
    assert any("unsupported ops: com.microsoft.FastGelu" in p and "If" not in p for p in pasted)
    for argv, expected in documented:
        assert error(capsys, monkeypatch, tmp_path, *argv) == expected, argv
        assert sorted(p.name for p in tmp_path.iterdir()) == ["vad.onnx", "vad_ort.onnx"], argv
    code, _, err = run(capsys, monkeypatch, tmp_path, "build", "vad.onnx", *shapes, "--bind", "sr=16000")
    assert code == 0, err
    api = json.loads((tmp_path / "build" / "vad-x86_64" / "manifest.json").read_text())["inputs"]
    assert [i["name"] for i in api] == ["input", "state"], "the bound sample rate leaves the C API"
    verified = _json_only(capsys, monkeypatch, tmp_path, "verify", "build/vad-x86_64")
    assert verified["ok"] and [o["name"] for o in verified["outputs"]] == ["output", "stateN"]
