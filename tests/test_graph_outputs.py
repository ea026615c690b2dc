"""Graph outputs that are not simply "one node's output, listed once" (issue #24): an output listed twice, a graph
input or an initializer listed as an output, an output another node also reads. Each against ONNX Runtime, through
the runner's .npy files, `run_artifact`, the C API of the generated library, `verify` and the JIT."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelrun import build, cli

C_DIR = Path(__file__).parent / "c"
X = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
C = np.array([0.5, -0.25, 8.0, 1.0], np.float32)


def _model(nodes, outputs: list[str], initializers: dict | None = None) -> onnx.ModelProto:
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in outputs]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], vi,
                              [numpy_helper.from_array(v, n) for n, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


RELU = helper.make_node("Relu", ["x"], ["y"])
CASES = {
    "output_twice": _model([RELU], ["y", "y"]),
    "input_as_output": _model([RELU], ["x", "y", "x"]),
    "initializer_as_output": _model([RELU], ["c", "y", "c"], {"c": C}),
    "output_also_consumed": _model([RELU, helper.make_node("Neg", ["y"], ["z"]), helper.make_node("Mul", ["y", "z"], ["w"])],
                                   ["z", "y", "w", "y"]),
}


def ort_outputs(model: onnx.ModelProto) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == [o.name for o in model.graph.output]
    return session.run(None, {"x": X})


def runner_slots(artifact: Path, tmp: Path) -> list[np.ndarray]:
    np.save(tmp / "x.npy", X)
    n = len(json.loads((artifact / "manifest.json").read_text())["outputs"])
    outs = [tmp / f"out{k}.npy" for k in range(n)]
    subprocess.run([str(artifact / "runner"), "-i", str(tmp / "x.npy"), *[a for o in outs for a in ("-o", str(o))]],
                   check=True, capture_output=True, timeout=60)
    return [np.load(o) for o in outs]


def c_api_slots(artifact: Path, tmp: Path, n: int) -> list[np.ndarray]:
    """app_soak.c: three fxc_run calls, outputs poisoned before each, thread 0's last outputs written raw."""
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.target.boards import get_board

    target = get_board("x86_64").target
    cpu = json.loads((artifact / "manifest.json").read_text())["cpu"]
    exe = compile_c_program(target, cpu, [C_DIR / "app_soak.c"], [artifact, C_DIR], [artifact / "libmodel.a", "-lpthread"],
                            tmp / "app_soak")
    (tmp / "x.bin").write_bytes(X.tobytes())
    outs = [tmp / f"c{k}.bin" for k in range(n)]
    proc = subprocess.run([str(exe), "3", "1", str(tmp / "x.bin"), *map(str, outs)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["mismatches"] == 0
    return [np.frombuffer(o.read_bytes(), np.float32) for o in outs]


@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_equal_ort(case, tmp_path):
    from fluidml_xc.run.execute import run_artifact

    model = CASES[case]
    expected = ort_outputs(model)
    artifact = build(model, tmp_path)
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert [o["name"] for o in manifest["outputs"]] == [o.name for o in model.graph.output]
    for got in (runner_slots(artifact, tmp_path), c_api_slots(artifact, tmp_path, len(expected)),
                list(run_artifact(artifact, {"x": X}).slots)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)
    header = (artifact / "model.h").read_text()
    assert f"#define FXC_NUM_OUTPUTS {len(expected)}" in header


def test_jit_output_twice():
    from fluidml_xc.run.backend import compile_model

    got = compile_model(CASES["output_twice"])({"x": X})
    for g, e in zip(got, ort_outputs(CASES["output_twice"])):
        np.testing.assert_array_equal(g, e)


def test_run_and_verify_output_twice(tmp_path):
    """`fluidml-xc run --outputs` writes the output once with ORT's values; `verify` passes."""
    model_path = tmp_path / "dup.onnx"
    onnx.save(CASES["output_twice"], str(model_path))
    np.savez(tmp_path / "feeds.npz", x=X)
    out = tmp_path / "art"
    for args in (["build", str(model_path), "-o", str(out)],
                 ["run", str(out), "--inputs", str(tmp_path / "feeds.npz"), "--outputs", str(tmp_path / "o.npz")],
                 ["verify", str(out), "--inputs", str(tmp_path / "feeds.npz")]):
        proc = cli(*args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout and "FAIL" not in proc.stdout
    saved = np.load(tmp_path / "o.npz")
    assert list(saved.keys()) == ["y"]
    np.testing.assert_array_equal(saved["y"], ort_outputs(CASES["output_twice"])[0])
