"""SSH connections with paramiko: ~/.ssh/config, agent, known_hosts, strict host keys, timeouts."""
from __future__ import annotations

import base64
import errno
import getpass
import hashlib
import logging
import os
import select
import shlex
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import paramiko

from ..errors import InputError, RemoteError
from .shell import MAX_STDERR, MAX_STDOUT, CommandResult, quote_argv, sh, shown

# paramiko's transport thread logs handshake failures with tracebacks; the CLI reports them as one line.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_COMMAND_TIMEOUT = 60.0


@dataclass(frozen=True)
class SshOptions:
    """How to reach a board. None means: ~/.ssh/config, then the board file's defaults, then ssh's."""

    host: str
    user: str | None = None
    port: int | None = None
    identity: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    ssh_config: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    default_user: str = ""
    default_port: int = 22


@dataclass(frozen=True)
class Endpoint:
    """The resolved address, user and keys after ~/.ssh/config."""

    alias: str
    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...]
    known_hosts: Path
    proxy_command: str | None = None
    extra_known_hosts: tuple[Path, ...] = field(default=())

    @property
    def label(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


def resolve(options: SshOptions) -> Endpoint:
    """Apply ~/.ssh/config (HostName, Port, User, IdentityFile, UserKnownHostsFile, ProxyCommand)."""
    config_path = Path(os.path.expanduser(options.ssh_config or "~/.ssh/config"))
    entry: dict = {}
    if config_path.is_file():
        try:
            entry = paramiko.SSHConfig.from_path(str(config_path)).lookup(options.host)
        except Exception as exc:  # paramiko raises several types for malformed files
            raise InputError(f"cannot read SSH config {config_path}: {exc}") from None
    elif options.ssh_config:
        raise InputError(f"SSH config file {config_path} does not exist")
    if options.identity:
        identity = os.path.expanduser(options.identity)
        if not os.path.isfile(identity):
            raise InputError(f"identity file {identity} does not exist (check -i/--identity)")
        keys: tuple[str, ...] = (identity,)
    else:
        keys = tuple(p for p in (os.path.expanduser(k) for k in entry.get("identityfile", [])) if os.path.isfile(p))
    known_hosts = options.known_hosts or (entry.get("userknownhostsfile") or "~/.ssh/known_hosts").split()[0]
    port_text = str(options.port or entry.get("port") or options.default_port or 22)
    if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        raise InputError(f"bad SSH port {shown(port_text, 40)!r} for {options.host} (from --port or ~/.ssh/config): "
                         "give a number from 1 to 65535")
    return Endpoint(
        alias=options.host,
        hostname=entry.get("hostname", options.host),
        port=int(port_text),
        user=options.user or entry.get("user") or options.default_user or getpass.getuser(),
        key_files=keys,
        known_hosts=Path(os.path.expanduser(known_hosts)),
        proxy_command=entry.get("proxycommand"),
        extra_known_hosts=(Path("/etc/ssh/ssh_known_hosts"),) if not options.known_hosts else (),
    )


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown host keys with their fingerprint; with opt-in, trust and append to known_hosts."""

    def __init__(self, endpoint: Endpoint, accept_new: bool):
        self.endpoint = endpoint
        self.accept_new = accept_new

    def missing_host_key(self, client, hostname, key):
        if not self.accept_new:
            raise RemoteError(
                f"unknown host key for {hostname} ({fingerprint(key)}), not in {self.endpoint.known_hosts}; "
                f"check the fingerprint on the board (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) and re-run with "
                f"--accept-new-host-key to trust it")
        client.get_host_keys().add(hostname, key.get_name(), key)
        path = self.endpoint.known_hosts
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def connect(options: SshOptions) -> "Connection":
    """Open an SSH connection or raise RemoteError with one line that says what went wrong."""
    ep = resolve(options)
    client = paramiko.SSHClient()
    for path in [*ep.extra_known_hosts, ep.known_hosts]:
        if not path.is_file():
            continue
        try:
            if path == ep.known_hosts:
                client.get_host_keys().load(str(path))
            else:
                client.load_system_host_keys(str(path))
        except (OSError, paramiko.SSHException, UnicodeDecodeError, ValueError, TypeError, IndexError) as exc:
            raise InputError(f"cannot read known_hosts file {path} ({type(exc).__name__}: {shown(str(exc), 120)}): "
                             "fix or move the file (ssh-keygen -R HOST rewrites it)") from None
    client.set_missing_host_key_policy(_HostKeyPolicy(ep, options.accept_new_host_key))
    timeout = options.connect_timeout
    try:
        sock = paramiko.ProxyCommand(ep.proxy_command) if ep.proxy_command else None
        client.connect(ep.hostname, ep.port, ep.user, key_filename=list(ep.key_files) or None, timeout=timeout,
                       banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout, allow_agent=True,
                       look_for_keys=not ep.key_files, sock=sock)
    except RemoteError:
        client.close()
        raise
    except (paramiko.SSHException, OSError, EOFError) as exc:
        client.close()
        raise _explain(exc, ep, options.connect_timeout) from None
    _track_exit_signals(client.get_transport())
    return Connection(client, ep, options.command_timeout)


def _explain(exc: BaseException, ep: Endpoint, timeout: float) -> RemoteError:
    """One line saying why connecting failed and what to do about it."""
    where = f"{ep.hostname}:{ep.port}" + (f" ({ep.alias})" if ep.alias != ep.hostname else "")
    if isinstance(exc, paramiko.BadHostKeyException):
        return RemoteError(
            f"HOST KEY CHANGED for {ep.known_hosts_name}: known_hosts ({ep.known_hosts}) has "
            f"{fingerprint(exc.expected_key)} but the server sent {fingerprint(exc.key)}; this could be a "
            f"man-in-the-middle attack, so nothing was sent. If the board was re-installed, remove the old key with "
            f"`ssh-keygen -R {shlex.quote(ep.known_hosts_name)} -f {shlex.quote(str(ep.known_hosts))}` and "
            f"re-run with --accept-new-host-key")
    if isinstance(exc, paramiko.PasswordRequiredException):
        return RemoteError(f"the private key for {ep.user}@{where} is encrypted: add it to ssh-agent (ssh-add KEY) "
                           f"so fluidml-xc can use it")
    if isinstance(exc, paramiko.AuthenticationException):
        return RemoteError(f"authentication failed for {ep.user}@{where}: pass -i KEY, set IdentityFile in "
                           f"~/.ssh/config or add the key to ssh-agent (and check --user)")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        if {getattr(e, "errno", None) for e in exc.errors.values()} <= {errno.ECONNREFUSED}:
            return RemoteError(f"connection refused by {where}: is sshd running there and is the port right?")
        return RemoteError(f"cannot connect to {where}: {exc.strerror or exc}")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return RemoteError(f"timed out connecting to {where} after {timeout:g}s: is the board on the network? "
                           f"(--connect-timeout raises the limit)")
    if isinstance(exc, socket.gaierror):
        return RemoteError(f"cannot resolve host name {ep.hostname!r}: {exc.strerror}")
    if isinstance(exc, paramiko.SSHException):
        text = str(exc).lower()
        if "no authentication methods" in text:
            return RemoteError(f"no SSH key to log in to {ep.user}@{where} with: pass -i KEY, set IdentityFile in "
                               f"~/.ssh/config or add the key to ssh-agent")
        if "banner" in text or "no existing session" in text or "negotiation" in text:
            return RemoteError(f"timed out after {timeout:g}s waiting for the SSH handshake with {where}: the port "
                               f"is open but does not answer like an SSH server (--connect-timeout raises the limit)")
        return RemoteError(f"SSH handshake with {where} failed: {exc}")
    reason = getattr(exc, "strerror", None) or str(exc) or "connection closed"
    return RemoteError(f"cannot connect to {where}: {reason}")


def _track_exit_signals(transport: paramiko.Transport) -> None:
    """Record 'exit-signal' requests (which paramiko ignores) as exit status 128+N, like a shell does."""
    table = dict(transport._channel_handler_table)
    original = table[paramiko.common.MSG_CHANNEL_REQUEST]

    def handle(chan: paramiko.Channel, m: paramiko.Message) -> None:
        position = m.packet.tell()
        if m.get_text() == "exit-signal":
            m.get_boolean()
            name = m.get_text()
            chan.exit_status = 128 + int(getattr(signal.Signals, f"SIG{name}", signal.SIGKILL))
            chan.status_event.set()
            return
        m.packet.seek(position)
        original(chan, m)

    table[paramiko.common.MSG_CHANNEL_REQUEST] = handle
    transport._channel_handler_table = table


_PID_MARK = "\\036fxc-pid "
_PID_MARK_BYTES = b"\x1efxc-pid "


def _remote_pid(err: bytes | bytearray) -> int | None:
    """The pid the remote shell printed first on stderr (None if it did not: a shell without printf)."""
    at = err.find(_PID_MARK_BYTES)
    end = err.find(b"\n", at) if at >= 0 else -1
    if end < 0:
        return None
    digits = bytes(err[at + len(_PID_MARK_BYTES):end])
    return int(digits) if digits.isdigit() and len(digits) < 12 else None


class Connection:
    """An open SSH connection: run commands (with timeouts) and transfer files (SFTP)."""

    def __init__(self, client: paramiko.SSHClient, endpoint: Endpoint, command_timeout: float):
        self.client = client
        self.endpoint = endpoint
        self.command_timeout = command_timeout
        self.label = endpoint.label
        self._sftp: paramiko.SFTPClient | None = None
        self._home: str | None = None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        transport = self.client.get_transport()
        return bool(transport and transport.is_active())

    def lost(self, doing: str) -> RemoteError:
        return RemoteError(f"connection to {self.label} lost while {doing}")

    def _kill_remote(self, pid: int | None) -> None:
        """After a timeout: kill the command's process group on the board (sshd made the command's shell a
        session leader, so its pid is the group of everything it started)."""
        if not pid:
            return
        try:
            chan = self.client.get_transport().open_session(timeout=5)
            chan.exec_command(f"kill -KILL -- -{pid} {pid} 2>/dev/null; exit 0")
            deadline = time.monotonic() + 5
            while not chan.exit_status_ready() and time.monotonic() < deadline:
                select.select([chan], [], [], 0.1)
            chan.close()
        except (paramiko.SSHException, EOFError, OSError, AttributeError):
            pass

    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None) -> CommandResult:
        """Run argv (each argument quoted) and wait for it, at most `timeout` seconds; on timeout the command and
        every process it started are killed on the board. Output past MAX_STDOUT/MAX_STDERR is dropped."""
        limit = timeout or self.command_timeout
        # the remote shell writes its pid (then execs the command, keeping it): what to kill on a timeout
        command = f"printf '{_PID_MARK}%s\\n' $$ >&2; exec {quote_argv(argv)}"
        short = quote_argv((list(argv[4:]) or ["sh"]) if list(argv[:2]) == ["sh", "-c"] else argv)[:80]
        start = time.monotonic()
        try:
            chan = self.client.get_transport().open_session(timeout=limit)
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            while True:
                while chan.recv_ready():
                    chunk = chan.recv(65536)
                    out += chunk[:max(0, MAX_STDOUT - len(out))]
                while chan.recv_stderr_ready():
                    chunk = chan.recv_stderr(65536)
                    err += chunk[:max(0, MAX_STDERR - len(err))]
                if (chan.exit_status_ready() and (chan.eof_received or chan.closed or time.monotonic() - start > limit)
                        and not chan.recv_ready() and not chan.recv_stderr_ready()):
                    break  # the exit status may come before the last data: wait for the board's EOF
                if chan.closed or not self.alive:
                    if chan.closed and chan.exit_status_ready():
                        continue  # the exit status, EOF and close came in since the check above: drain, then done
                    raise self.lost(f"running `{short}`")
                if time.monotonic() - start > limit:
                    running = not chan.exit_status_ready()
                    chan.close()
                    if running:  # once the command has exited its pid may belong to another process
                        self._kill_remote(_remote_pid(err))
                    raise RemoteError(f"command `{short}` timed out after {limit:g}s on {self.label}; it was killed "
                                      f"there (--timeout raises the limit)")
                select.select([chan], [], [], 0.1)
            status = chan.recv_exit_status()
            chan.close()
        except (paramiko.SSHException, EOFError, OSError, AttributeError):
            raise self.lost(f"running `{short}`") from None
        if status < 0:
            raise self.lost(f"running `{short}`")
        if _remote_pid(err) is not None:  # drop the pid line (a login shell may have printed before it)
            at = err.index(_PID_MARK_BYTES)
            err = err[:at] + err[err.index(b"\n", at) + 1:]
        return CommandResult(tuple(argv), status, bytes(out), bytes(err), time.monotonic() - start)

    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = self.client.open_sftp()
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise RemoteError(f"cannot open SFTP on {self.label} ({exc}): is the sftp subsystem enabled in "
                                  f"the board's sshd_config?") from None
            self._sftp.get_channel().settimeout(self.command_timeout)
        return self._sftp

    def home(self) -> str:
        if self._home is None:
            result = self.run(sh('printf %s "$HOME"'))
            self._home = result.out.strip() or "/"
        return self._home

    def absolute(self, path: str) -> str:
        """Expand ~ and make `path` absolute (relative to the remote home)."""
        if path == "~" or path.startswith("~/"):
            path = self.home().rstrip("/") + path[1:]
        elif not path.startswith("/"):
            path = self.home().rstrip("/") + "/" + path
        return path.rstrip("/") or "/"

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:
                pass
            self._sftp = None
        self.client.close()
