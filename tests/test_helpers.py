"""The shared test helpers keep their promises: one emulator policy (a missing qemu fails in one line naming
the package), the board runner runs a foreign program under its emulator, the node JIT computes what
onnx.reference does, and the loopback sshd answers commands."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from fluidml_xc.emit.link import compile_c_program
from fluidml_xc.pipeline import import_graph
from fluidml_xc.remote.shell import sh
from fluidml_xc.remote.ssh import connect
from fluidml_xc.target.boards import get_board
from modelrun import float_model, jit_node, rand, reference, require_emulator, require_program

HELLO = '#include <stdio.h>\nint main(void) { printf("%d\\n", (int)sizeof(void *)); return 0; }\n'


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_a_missing_emulator_fails_in_one_line_naming_the_package(board, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as info:
        require_emulator(board)
    message = str(info.value)
    assert "\n" not in message and get_board(board).target.emulator in message
    assert "apt-get install qemu-user-static" in message


def test_a_missing_tool_names_the_given_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="sshd-helper missing: apt-get install openssh-server"):
        require_program("sshd-helper", "openssh-server")


def test_native_boards_need_no_emulator():
    assert require_emulator("x86_64") == []


@pytest.mark.qemu
def test_board_runner_runs_a_foreign_program_under_its_emulator(board_runner, tmp_path):
    """aarch64 only: linking a C program for armv7 took about 5 minutes here (zig builds its libc first)."""
    runner = board_runner("qemu-aarch64")
    target = get_board("qemu-aarch64").target
    assert runner.prefix == (require_program(target.emulator),)
    (tmp_path / "hello.c").write_text(HELLO)
    exe = compile_c_program(target, target.cpu, [tmp_path / "hello.c"], [], [], tmp_path / "hello")
    proc = runner.exec([exe])
    assert proc.returncode == 0 and proc.stdout.split() == ["8"], proc.stderr


@pytest.mark.parametrize("layout", [None, (0, 2, 3, 1)])
def test_jit_node_matches_onnx_reference(layout):
    model = float_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"w": rand(6, 3, 3, 3)},
                        {"x": np.zeros((1, 3, 5, 7), np.float32)}, ["y"])
    graph = import_graph(model)
    (node,) = graph.nodes
    logical, got = jit_node(graph, node, {"x": layout, "y": layout} if layout else {})
    np.testing.assert_allclose(got, reference(model, {"x": logical["x"]})["y"], rtol=1e-4, atol=1e-5)


def test_loopback_sshd_answers_with_an_empty_config(loopback_sshd):
    assert loopback_sshd.ssh_config.read_text() == ""
    assert loopback_sshd.args()[-2:] == ["-F", str(loopback_sshd.ssh_config)]
    with connect(loopback_sshd.options()) as conn:
        assert conn.run(sh("echo fluidml"), timeout=30).stdout == b"fluidml\n"
