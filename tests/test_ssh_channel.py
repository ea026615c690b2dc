"""Connection.run against a scripted channel: message orderings a loaded machine produces, made deterministic.

paramiko's transport thread handles the board's messages while `run` polls the channel, so a quick command's
exit status, EOF and close can all land between two of the loop's checks. That is a finished command, not a
lost connection; a channel closed without an exit status is one.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from fluidml_xc.errors import RemoteError
from fluidml_xc.remote.ssh import Connection, Endpoint


_READABLE, _ = os.pipe()  # select() on it returns at once: the loop polls as fast as it can
os.write(_, b"x")


class ScriptedChannel:
    """A channel whose board finishes (exit status, EOF, close, all at once) on the n-th exit_status_ready()."""

    def __init__(self, finish_on_call: int, stdout: bytes, status: int | None):
        self.finish_on_call = finish_on_call
        self.calls = 0
        self.pending = b""
        self.stdout = stdout
        self.status = status
        self.closed = False
        self.eof_received = False

    def exit_status_ready(self) -> bool:
        self.calls += 1
        if self.calls == self.finish_on_call:  # the transport thread ran right after this check
            self.pending, self.closed, self.eof_received = self.stdout, True, True
            return False
        return self.closed and self.status is not None

    def exec_command(self, command: str) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def recv_ready(self) -> bool:
        return bool(self.pending)

    def recv(self, n: int) -> bytes:
        chunk, self.pending = self.pending[:n], self.pending[n:]
        return chunk

    def recv_stderr_ready(self) -> bool:
        return False

    def recv_exit_status(self) -> int:
        return -1 if self.status is None else self.status

    def close(self) -> None:
        self.closed = True

    def fileno(self) -> int:
        return _READABLE


class ScriptedTransport:
    def __init__(self, channel: ScriptedChannel):
        self.channel = channel

    def open_session(self, timeout: float | None = None) -> ScriptedChannel:
        return self.channel

    def is_active(self) -> bool:
        return True


class ScriptedClient:
    def __init__(self, channel: ScriptedChannel):
        self.transport = ScriptedTransport(channel)

    def get_transport(self) -> ScriptedTransport:
        return self.transport

    def close(self) -> None:
        pass


def connection(channel: ScriptedChannel) -> Connection:
    endpoint = Endpoint("board", "127.0.0.1", 2222, "pi", (), Path("/nonexistent/known_hosts"))
    return Connection(ScriptedClient(channel), endpoint, command_timeout=5)


@pytest.mark.parametrize("finish_on_call", [1, 2])
def test_command_finishing_between_checks_is_not_a_lost_connection(finish_on_call):
    channel = ScriptedChannel(finish_on_call, b"a" * 70000 + b"done\n", status=0)
    result = connection(channel).run(["echo", "done"])
    assert result.status == 0 and result.stdout.endswith(b"done\n") and len(result.stdout) == 70005


def test_channel_closed_without_exit_status_is_a_lost_connection():
    channel = ScriptedChannel(1, b"partial", status=None)
    with pytest.raises(RemoteError, match=r"connection to pi@127.0.0.1:2222 lost while running `echo hi`"):
        connection(channel).run(["echo", "hi"])
