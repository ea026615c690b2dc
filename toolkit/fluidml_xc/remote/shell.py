"""Run commands here or on a board with one interface; every argument is quoted with shlex.quote."""
from __future__ import annotations

import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

from ..errors import RemoteError

# A POSIX sh wrapper that runs "$@" in directory $1 and reports a signal death as 128+N
# (the shell waits for the child instead of exec'ing it, since SSH loses the signal otherwise).
_IN_DIR = 'cd -- "$1" || exit 125; shift; "$@"; exit $?'


MAX_STDOUT = 16 << 20
MAX_STDERR = 1 << 20
"""What a command may print before the rest is dropped (a broken or hostile board printing without end)."""


def shown(text: str | bytes, limit: int = 200) -> str:
    """Remote text made safe for one line on the user's terminal: control characters, escape sequences and
    anything outside printable ASCII escaped, at most `limit` characters."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out = []
    for ch in text[:limit]:
        code = ord(ch)
        out.append(ch if 0x20 <= code < 0x7F else (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"))
    rest = len(text) - limit
    return "".join(out) + (f"... ({rest:,} more characters)" if rest > 0 else "")


def ascii_int(text: str | None) -> int | None:
    """An unsigned decimal of ASCII digits only (str.isdigit also takes other scripts' digits), else None."""
    text = (text or "").strip()
    return int(text) if text and len(text) < 40 and text.isascii() and text.isdigit() else None


def sh(script: str, *args: str) -> list[str]:
    """argv running a constant sh script with positional arguments (never interpolated into the script)."""
    return ["sh", "-c", script, "sh", *args]


def in_dir(directory: str, argv: Sequence[str], timeout: float | None = None, has_timeout_tool: bool = False) -> list[str]:
    """argv running `argv` inside `directory`; with a remote `timeout` tool, kill it after `timeout` seconds."""
    if timeout and has_timeout_tool:
        argv = ["timeout", "-s", "KILL", str(int(timeout + 0.999)), *argv]
    return sh(_IN_DIR, directory, *argv)


def quote_argv(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class CommandResult:
    """What a finished command returned. A death by signal N is reported as status 128+N."""

    argv: tuple[str, ...]
    status: int
    stdout: bytes
    stderr: bytes
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == 0

    @property
    def signal(self) -> int | None:
        return self.status - 128 if 128 < self.status < 128 + 65 else None

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def failure(self) -> str:
        """'was killed by signal 11 (SIGSEGV)' or 'exited with status 2', plus the last stderr line."""
        sig = self.signal
        what = (f"was killed by signal {sig} ({signal_name(sig)}, exit status {self.status})" if sig
                else f"exited with status {self.status}")
        lines = [line.strip() for line in self.err.splitlines() if line.strip()]
        return what + (f": {shown(lines[-1])}" if lines else "")


class Shell(Protocol):
    """Somewhere to run commands: this machine or a board."""

    label: str

    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None) -> CommandResult: ...


class LocalShell:
    """This machine, through subprocess (no shell)."""

    label = "localhost"

    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout

    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None) -> CommandResult:
        limit = timeout or self.timeout
        start = time.monotonic()
        try:
            proc = subprocess.run(list(argv), input=stdin or b"", capture_output=True, timeout=limit)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"command `{quote_argv(argv)[:80]}` timed out after {limit:g}s here") from None
        status = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return CommandResult(tuple(argv), status, proc.stdout, proc.stderr, time.monotonic() - start)


def check(result: CommandResult, where: str, what: str) -> CommandResult:
    """Raise RemoteError naming `what` unless the command succeeded."""
    if not result.ok:
        raise RemoteError(f"{what} failed on {where}: the command {result.failure()}")
    return result
