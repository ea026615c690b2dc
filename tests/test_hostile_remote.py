"""Issue 11 regressions for boards that are broken or hostile: remote output is capped and escaped before it
reaches a message, numbers must be ASCII digits, a garbage known_hosts file is one line, and a command that
times out is killed on the board with everything it started (real sshd on 127.0.0.1)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fluidml_xc.artifact import Manifest
from fluidml_xc.errors import InputError, RemoteError
from fluidml_xc.remote.shell import MAX_STDOUT, LocalShell, sh


def _fake_tools(tmp_path: Path, monkeypatch, uname: str, getconf: str, df_avail: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("uname", uname), ("getconf", getconf),
                       ("df", f"echo 'Filesystem 1K-blocks Used Available'; echo 'fs 100 10 {df_avail} x'")):
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_board_printing_megabytes_and_escapes_gives_a_short_clean_line(tmp_path, monkeypatch):
    from fluidml_xc.remote.fit import plan_run, probe
    from fluidml_xc.remote.artifact import Artifact

    _fake_tools(tmp_path, monkeypatch, uname="printf '\\033[2J\\033]0;pwned\\007'; head -c 20000000 /dev/zero | tr '\\0' A",
                getconf="printf '\\331\\244\\331\\245'", df_avail="\u0663\u0664")
    facts = probe(LocalShell(), str(tmp_path / "base"))
    assert facts.long_bit is None and facts.free_bytes is None, "Arabic-Indic digits are not numbers here"
    artifact = Artifact(tmp_path, Manifest(board="rpi4", target="aarch64", inputs=(), outputs=()), ())
    with pytest.raises(RemoteError) as info:
        plan_run(artifact, facts, "board")
    line = str(info.value)
    assert len(line) < 1000 and "\033" not in line and "\007" not in line and "\\x1b" in line


def test_timeout_kills_the_remote_command_and_its_children(loopback_sshd):
    from fluidml_xc.remote.ssh import connect

    with connect(loopback_sshd.options()) as conn:
        with pytest.raises(RemoteError) as info:
            conn.run(sh("sleep 7919 & sleep 7920 & wait"), timeout=1.5)
        assert "killed there" in str(info.value)
        deadline = time.monotonic() + 10
        while _processes("sleep 79") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes("sleep 79") == []
        big = conn.run(sh("head -c 20000000 /dev/zero; echo oops >&2"), timeout=60)
        assert len(big.stdout) == MAX_STDOUT and big.err.strip() == "oops", "pid line stripped, output capped"


def _processes(needle: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if cmdline.startswith(needle):
                found.append(int(entry.name))
    return found


def test_garbage_known_hosts_and_bad_port_are_one_line(tmp_path):
    from fluidml_xc.remote.ssh import SshOptions, connect, resolve

    known = tmp_path / "known_hosts"
    known.write_bytes(b"\xff\xfe\x00garbage\n127.0.0.1 ssh-ed25519 \xc3\x28notbase64\n")
    config = tmp_path / "config"
    config.write_text("")
    with pytest.raises(InputError) as info:
        connect(SshOptions(host="127.0.0.1", port=2, known_hosts=str(known), ssh_config=str(config), connect_timeout=2))
    assert "known_hosts" in str(info.value)
    config.write_text("Host b\n  Port \u0663\u0664\n")
    with pytest.raises(InputError) as info:
        resolve(SshOptions(host="b", ssh_config=str(config)))
    assert "bad SSH port" in str(info.value)
