"""Test helpers: a real OpenSSH server on 127.0.0.1 with generated host and client keys.

`SshServer.start(workdir)` writes the keys and an sshd_config, runs `/usr/sbin/sshd -D -e -f CONFIG` on a
free port and waits until it greets; `stop()` ends it by its PID. Only loopback addresses are used.
`start_server` is the same after `require_sshd` (CI installs openssh-server, so a missing sshd fails the test in
one line); `ssh_options`/`ssh_args` are what a client (API or CLI) passes to reach it.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluidml_xc.remote.ssh import SshOptions

SSHD = "/usr/sbin/sshd"


def sshd_available() -> bool:
    return os.path.exists(SSHD) and shutil.which("ssh-keygen") is not None


def require_sshd() -> None:
    if not sshd_available():
        pytest.fail(f"{SSHD} or ssh-keygen missing: apt-get install openssh-server (.ci/run installs it)", pytrace=False)


def start_server(workdir: Path) -> "SshServer":
    require_sshd()
    return SshServer.start(workdir)


def ssh_options(server: "SshServer", config: Path, **overrides) -> SshOptions:
    values = dict(host="127.0.0.1", port=server.port, identity=str(server.client_key),
                  known_hosts=str(server.known_hosts), ssh_config=str(config), connect_timeout=5)
    values.update(overrides)
    return SshOptions(**values)


def ssh_args(server: "SshServer", config: Path | None) -> list[str]:
    """The CLI's connection flags for `server` (config None: no -F)."""
    return ["--host", "127.0.0.1", "--port", str(server.port), "-i", str(server.client_key),
            "--known-hosts", str(server.known_hosts), *(["-F", str(config)] if config is not None else [])]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, kind: str = "ed25519") -> Path:
    """Write a passphrase-less key pair (path, path.pub)."""
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "fluidml-xc-test", "-f", str(path)], check=True)
    return path


def known_hosts_line(port: int, host_key_pub: Path) -> str:
    kind, b64 = host_key_pub.read_text().split()[:2]
    return f"[127.0.0.1]:{port} {kind} {b64}\n"


@dataclass
class SshServer:
    """A running sshd plus what a client needs: port, client key, a known_hosts file that trusts it."""

    workdir: Path
    port: int
    host_key: Path
    client_key: Path
    known_hosts: Path
    process: subprocess.Popen | None = None

    @classmethod
    def start(cls, workdir: Path, host_key: Path | None = None, client_key: Path | None = None) -> "SshServer":
        workdir.mkdir(parents=True, exist_ok=True)
        host_key = host_key or keygen(workdir / "host_ed25519")
        client_key = client_key or keygen(workdir / "client_ed25519")
        port = free_port()
        server = cls(workdir, port, host_key, client_key, workdir / "known_hosts")
        server.known_hosts.write_text(known_hosts_line(port, host_key.with_suffix(".pub")))
        server._launch()
        return server

    @property
    def config(self) -> Path:
        return self.workdir / "sshd_config"

    def _launch(self) -> None:
        self.config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"PidFile {self.workdir / 'sshd.pid'}", f"AuthorizedKeysFile {self.client_key}.pub",
            "PermitRootLogin yes", "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "Subsystem sftp internal-sftp", "LogLevel ERROR", "MaxStartups 50", "", ""]))
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory sshd insists on
        log = open(self.workdir / "sshd.log", "ab")
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.workdir / 'sshd.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start within 10s")

    def session_pids(self) -> list[int]:
        """PIDs of the per-connection sshd processes (children of the listener)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == self.process.pid:
                    pids.append(int(entry.name))
        return pids

    def kill_sessions(self) -> int:
        """Cut every open connection by killing its sshd session process; returns how many."""
        pids = self.session_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def restart_with_new_host_key(self) -> None:
        """Same port and client key, a freshly generated host key (a 're-installed board')."""
        self.stop()
        for p in (self.host_key, self.host_key.with_suffix(".pub")):
            p.unlink()
        keygen(self.host_key)
        self._launch()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@dataclass(frozen=True)
class Loopback:
    """The `loopback_sshd` fixture's server and the empty ssh_config its clients use."""

    server: SshServer
    ssh_config: Path

    def options(self, **overrides) -> SshOptions:
        return ssh_options(self.server, self.ssh_config, **overrides)

    def args(self) -> list[str]:
        return ssh_args(self.server, self.ssh_config)


class SilentListener:
    """A TCP socket on 127.0.0.1 that accepts connections (via the kernel backlog) and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()
