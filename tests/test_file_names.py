"""File names never reach a tool unescaped (issue #24): a model file and an output directory named with a newline,
spaces, quotes, '$', a backslash, '%', non-ASCII and a leading '-' build (zig cc, the weights' assembly, ld.lld,
ar), run (natively, under qemu-aarch64) and deploy over SSH, with outputs equal to ONNX Runtime's."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelrun import cli, require_emulator

NASTY = "-a b'c\"d$HOME\\f\ng%s%n ü€;*?[x]"
ROOT = Path(__file__).resolve().parent.parent


def weighted_model() -> onnx.ModelProto:
    """MatMul with a constant weight (so the build assembles a weights blob) and Relu."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


X = np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)


def ort_y(model: onnx.ModelProto) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]


def test_cli_build_run_verify_with_a_nasty_model_name(tmp_path):
    """`build -- NAME.onnx` (default output directory named after the model), `run`, `verify`, `run --profile`, and a
    C application of its library."""
    model = weighted_model()
    onnx.save(model, str(tmp_path / f"{NASTY}.onnx"))
    np.savez(tmp_path / "feeds.npz", x=X)
    proc = cli("build", "--", f"{NASTY}.onnx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    artifact = tmp_path / "build" / f"{NASTY}-x86_64"
    assert (artifact / "runner").is_file() and (artifact / "libmodel.a").is_file()
    for args in (["run", "--inputs", "feeds.npz", "--outputs", "o.npz"], ["verify", "--inputs", "feeds.npz"],
                 ["run", str(artifact), "--profile"]):
        proc = cli(*args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["y"], ort_y(model), rtol=1e-6, atol=1e-6)
    # an application of the library, compiled with the artifact as include directory and written into it
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.target.boards import get_target

    c_dir = ROOT / "tests" / "c"
    app = compile_c_program(get_target("x86_64"), "generic", [c_dir / "app_soak.c"], [artifact, c_dir],
                            [artifact / "libmodel.a", "-lpthread"], artifact / f"app {NASTY}")
    (artifact / "x.bin").write_bytes(X.tobytes())
    proc = subprocess.run([str(app), "2", "1", str(artifact / "x.bin"), str(artifact / "y.bin")], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    y = np.frombuffer((artifact / "y.bin").read_bytes(), np.float32).reshape(2, 4)
    np.testing.assert_allclose(y, ort_y(model), rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def aarch64_artifact(tmp_path_factory) -> Path:
    from fluidml_xc.build import BuildOptions, build_model

    require_emulator("qemu-aarch64")
    work = tmp_path_factory.mktemp("names") / NASTY
    work.mkdir()
    path = work / f"{NASTY}.onnx"
    onnx.save(weighted_model(), str(path))
    return build_model(path, BuildOptions(board="qemu-aarch64", out_dir=work / NASTY, name="nasty",
                                          record_last=False)).artifact


@pytest.mark.qemu
def test_named_aarch64_build_runs_under_qemu(aarch64_artifact, monkeypatch):
    """Also given as a relative path starting with '-', which qemu must not read as an option."""
    from fluidml_xc.run.execute import run_artifact

    assert (aarch64_artifact / "libnasty.a").is_file() and (aarch64_artifact / "libfxc_runtime.a").is_file()
    monkeypatch.chdir(aarch64_artifact.parent)
    y = run_artifact(Path(aarch64_artifact.name), {"x": X}, timeout=120).outputs["y"]
    np.testing.assert_allclose(y, ort_y(weighted_model()), rtol=1e-6, atol=1e-6)


@pytest.mark.qemu
def test_deploy_and_run_over_ssh_into_a_nasty_base_dir(aarch64_artifact, tmp_path, loopback_sshd):
    from fluidml_xc.remote.artifact import load_artifact
    from fluidml_xc.remote.deploy import DeployOptions, deploy
    from fluidml_xc.remote.ssh import connect
    from fluidml_xc.remote.verify import run_remote

    base = tmp_path / NASTY
    artifact = load_artifact(aarch64_artifact)
    with connect(loopback_sshd.options()) as conn:
        deployment = deploy(conn, artifact, DeployOptions(str(base)))
        outputs = run_remote(conn, deployment, artifact, {"x": X})
    assert (base / "current" / "runner").is_file()
    np.testing.assert_allclose(outputs["y"], ort_y(weighted_model()), rtol=1e-6, atol=1e-6)
