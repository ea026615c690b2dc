"""Issue 11 regressions: SIGTERM / SIGINT mid-build clean up and print one line; the next build sweeps stale
temporaries of our own naming (a SIGKILLed build's), and puts back an artifact a build died replacing."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from modelrun import save_relu_model

ROOT = Path(__file__).resolve().parent.parent


def _start(cwd: Path, *args: str) -> subprocess.Popen:
    """The CLI as a foreground job of a shell: SIGINT at its default even if this worker inherited it ignored
    (a child keeps an ignored SIGINT, as background jobs should, and then a Ctrl-C test would see a clean exit)."""
    code = (f"import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"sys.path.insert(0, {str(ROOT / 'toolkit')!r}); from fluidml_xc.cli import main; sys.exit(main())")
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _ours(pid: int) -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"fxc-*-{pid}-*"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_build_cleans_up_and_prints_one_line(tmp_path, signum):
    model = save_relu_model(tmp_path / "m.onnx")
    proc = _start(tmp_path, "build", str(model), "-o", "out")
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.tmp-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the build ended before its temporary directory was seen"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    expected = 130 if signum == signal.SIGINT else 128 + signum
    assert proc.returncode == expected, stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fluidml-xc: "), stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"], "nothing half-written, no temporary left"
    assert _ours(proc.pid) == []


@pytest.mark.parametrize("delay", [0.3, 0.7])
def test_sigint_early_is_one_line(tmp_path, delay):
    model = save_relu_model(tmp_path / "m.onnx")
    proc = _start(tmp_path, "build", str(model), "-o", "out")
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr, stderr
    if proc.returncode != 0:  # else it had finished
        assert proc.returncode == 130 and stderr.strip() == "fluidml-xc: interrupted"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_next_build_sweeps_stale_temporaries_and_restores_a_lost_artifact(tmp_path):
    from fluidml_xc.build import BuildOptions, build_model

    model = save_relu_model(tmp_path / "m.onnx")
    dead = _dead_pid()
    art = build_model(model, BuildOptions(out_dir=tmp_path / "out", record_last=False, profile_runner=False)).artifact
    # a build killed between renaming the old artifact away and renaming the new one in
    art.rename(tmp_path / f".out.old-{dead}")
    (tmp_path / f".out.tmp-{dead}-abc123").mkdir()
    (tmp_path / f".out.tmp-{dead}-abc123" / "model.o").write_bytes(b"half")
    live = tmp_path / f".out.tmp-{os.getpid()}-live01"
    live.mkdir()
    stale_tmp = Path(tempfile.gettempdir()) / f"fxc-link-{dead}-zz9"
    stale_tmp.mkdir(exist_ok=True)
    from fluidml_xc.tempfiles import sweep_build
    sweep_build(tmp_path / "out")
    assert (tmp_path / "out" / "manifest.json").is_file(), "the previous artifact is put back"
    assert not (tmp_path / f".out.tmp-{dead}-abc123").exists()
    assert live.is_dir(), "a temporary of a live process is left alone"
    build_model(model, BuildOptions(out_dir=tmp_path / "out", record_last=False, profile_runner=False))
    assert not stale_tmp.exists()
    live.rmdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out"]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_ctrl_c_while_units_compile_on_workers_is_one_line(tmp_path):
    """Ctrl-C reaches the whole process group, the build's forked unit workers too: they ignore it, the build
    drops the units not started and says its one line; nothing is left behind."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    names = ["x", *(f"t{k}" for k in range(7)), "y"]
    weights = [numpy_helper.from_array(np.full((64, 64), k / 64, np.float32), f"w{k}") for k in range(8)]
    graph = helper.make_graph([helper.make_node("MatMul", [a, f"w{k}"], [b]) for k, (a, b) in enumerate(zip(names, names[1:]))],
                              "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    code = (f"import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"sys.path.insert(0, {str(ROOT / 'toolkit')!r}); from fluidml_xc.cli import main; sys.exit(main())")
    proc = subprocess.Popen([sys.executable, "-c", code, "build", "m.onnx", "--board", "x86_64", "-o", "out", "--no-cache",
                             "--build-workers", "2"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(_children(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert proc.poll() is None, "the build ended before its unit workers were seen"
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and stderr.strip() == "fluidml-xc: interrupted", stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    assert _ours(proc.pid) == []
