"""Command-line options shared by deploy, profile, verify and `boards detect`."""
from __future__ import annotations

import argparse
import math

from ..boards import Board
from ..errors import InputError
from .deploy import DEFAULT_BASE_DIR
from .ssh import DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, SshOptions


def add_artifact_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", metavar="DIR",
                        help="artifact directory (default: the most recent build, from build/.last)")


def add_ssh_arguments(parser: argparse.ArgumentParser, base_dir: bool = True) -> None:
    group = parser.add_argument_group("board connection (SSH)")
    group.add_argument("--host", help="board host name, address or ~/.ssh/config alias")
    group.add_argument("--user", help="login user (default: ~/.ssh/config, then the board file, then yours)")
    group.add_argument("--port", type=int, help="SSH port (default: ~/.ssh/config, then 22)")
    group.add_argument("-i", "--identity", metavar="KEY", help="private key file (default: agent, IdentityFile)")
    group.add_argument("--known-hosts", metavar="FILE", help="known_hosts file (default: ~/.ssh/known_hosts)")
    group.add_argument("--accept-new-host-key", action="store_true",
                       help="trust and remember an unknown host key (a changed key is always refused)")
    group.add_argument("-F", "--ssh-config", metavar="FILE", help="SSH config file (default: ~/.ssh/config)")
    group.add_argument("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT, metavar="S",
                       help=f"seconds to wait for the connection (default {DEFAULT_CONNECT_TIMEOUT:g})")
    if base_dir:
        group.add_argument("--base-dir", default=DEFAULT_BASE_DIR, metavar="PATH",
                           help=f"install directory on the board (default {DEFAULT_BASE_DIR})")


MAX_RUNS = 10_000_000


def finite_positive(value: float | None) -> bool:
    """A timeout is a finite number of seconds above 0 (nan and inf are not)."""
    return value is not None and math.isfinite(value) and value > 0


def runs_in_range(runs: int, warmup: int) -> bool:
    return 1 <= runs <= MAX_RUNS and 0 <= warmup <= MAX_RUNS


def ssh_options(args: argparse.Namespace, board: Board | None = None) -> SshOptions:
    """SshOptions from parsed arguments (tolerates parsers that define only some of the options)."""
    host = getattr(args, "host", None)
    if not host:
        raise InputError(f"`{getattr(args, 'command', 'this command')}` needs --host HOST (a name, an address or an "
                         f"alias from ~/.ssh/config)")
    if getattr(args, "port", None) is not None and not 0 < args.port < 65536:
        raise InputError(f"--port {args.port} is not a valid TCP port")
    timeout = getattr(args, "connect_timeout", None) or DEFAULT_CONNECT_TIMEOUT
    if not finite_positive(timeout):
        raise InputError(f"--connect-timeout {timeout}: give a positive number of seconds")
    return SshOptions(
        host=host, user=getattr(args, "user", None), port=getattr(args, "port", None),
        identity=getattr(args, "identity", None), known_hosts=getattr(args, "known_hosts", None),
        accept_new_host_key=bool(getattr(args, "accept_new_host_key", False)),
        ssh_config=getattr(args, "ssh_config", None), connect_timeout=timeout,
        command_timeout=DEFAULT_COMMAND_TIMEOUT,
        default_user=board.ssh_user if board else "", default_port=board.ssh_port if board else 22)
