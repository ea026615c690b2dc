"""Progress bars: drawn on stderr only when stderr and stdout are terminals (a pty here); none when stdout
is a pipe or a file (JSON there stays valid) or stderr is."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import numpy as np
from onnx import helper

from modelrun import graph_model

ROOT = Path(__file__).resolve().parent.parent


def run(args: list[str], cwd: Path, stderr_tty: bool, stdout_tty: bool = False) -> tuple[int, str, str]:
    """Run the CLI with stderr a terminal (pty, 120 columns) or a pipe, and stdout a pipe or the same terminal
    (then the returned stdout is empty and stderr holds what the terminal showed)."""
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'toolkit')!r}); from fluidml_xc.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, *args]
    if not stderr_tty:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            chunks.append(chunk)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = subprocess.run(argv, cwd=cwd, stdout=slave if stdout_tty else subprocess.PIPE, stderr=slave, timeout=300)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, (proc.stdout or b"").decode(), b"".join(chunks).decode(errors="replace")


def test_build_progress_only_on_a_terminal_and_json_stays_clean(tmp_path):
    model = graph_model([helper.make_node("Relu", ["x"], ["y"])], {"x": np.zeros((4, 8), np.float32)}, ["y"])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    # a terminal: the stage bar is drawn, then cleared, before the result lines
    status, _, screen = run(["build", str(path), "-o", str(tmp_path / "a")], tmp_path, stderr_tty=True, stdout_tty=True)
    assert status == 0, screen
    assert "building m.onnx" in screen and "stage" in screen and "optimize, plan, compile" in screen
    assert screen.rindex("built ") > screen.rindex("building m.onnx")
    # stdout to a pipe (or a file): no bar even though stderr is a terminal
    status, out, err = run(["build", str(path), "-o", str(tmp_path / "b")], tmp_path, stderr_tty=True)
    assert status == 0 and err == "" and out.startswith("built ") and "\r" not in out
    # stderr to a pipe: none either
    status, out, err = run(["build", str(path), "-o", str(tmp_path / "c")], tmp_path, stderr_tty=False)
    assert status == 0 and err == "" and "\r" not in out
    # --json: stdout is exactly the JSON
    status, out, err = run(["profile", str(tmp_path / "a"), "--local", "--runs", "3", "--warmup", "0", "--json"],
                           tmp_path, stderr_tty=True)
    assert status == 0, err
    assert json.loads(out)["runs"] == 3 and err == ""
    # build --json into a pipe, stderr a terminal: the JSON alone on stdout, no bar (stdout is not a terminal)
    status, out, err = run(["build", str(path), "-o", str(tmp_path / "d"), "--json"], tmp_path, stderr_tty=True)
    assert status == 0, err
    assert json.loads(out)["artifact"] == str(tmp_path / "d") and err == ""
