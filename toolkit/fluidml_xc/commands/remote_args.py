"""Command-line options shared by deploy, profile, verify and `boards detect`, mapped to remote/'s and fleet/'s
typed options (SshOptions, FleetRequest): argparse stops here."""
from __future__ import annotations

import argparse
import math

from ..errors import InputError
from ..fleet.command import FleetRequest
from ..fleet.run import DEFAULT_WORKERS
from ..fleet.tasks import Reach
from ..remote.deploy import DEFAULT_BASE_DIR
from ..remote.ssh import DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, SshOptions


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


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fleet (Ansible inventory; needs fluidml-xc[fleet])")
    group.add_argument("--inventory", metavar="FILE",
                       help="an Ansible inventory (INI or YAML): every host, built once per fluidml_board, in parallel")
    group.add_argument("--limit", metavar="PATTERN", help="only the inventory hosts matching this Ansible pattern")
    group.add_argument("--forks", type=int, default=DEFAULT_WORKERS, metavar="N",
                       help=f"hosts worked on at once (default {DEFAULT_WORKERS})")


MAX_RUNS = 10_000_000


def finite_positive(value: float | None) -> bool:
    """A timeout is a finite number of seconds above 0 (nan and inf are not)."""
    return value is not None and math.isfinite(value) and value > 0


def runs_in_range(runs: int, warmup: int) -> bool:
    return 1 <= runs <= MAX_RUNS and 0 <= warmup <= MAX_RUNS


def ssh_options(args: argparse.Namespace) -> SshOptions:
    """SshOptions from parsed arguments, without the board's defaults (remote.session.connect_for adds them)."""
    host = args.host
    if not host:
        raise InputError(f"`{args.command}` needs --host HOST (a name, an address or an alias from ~/.ssh/config)")
    if args.port is not None and not 0 < args.port < 65536:
        raise InputError(f"--port {args.port} is not a valid TCP port")
    timeout = args.connect_timeout or DEFAULT_CONNECT_TIMEOUT
    if not finite_positive(timeout):
        raise InputError(f"--connect-timeout {timeout}: give a positive number of seconds")
    return SshOptions(host=host, user=args.user, port=args.port, identity=args.identity, known_hosts=args.known_hosts,
                      accept_new_host_key=bool(args.accept_new_host_key), ssh_config=args.ssh_config,
                      connect_timeout=timeout, command_timeout=DEFAULT_COMMAND_TIMEOUT)


def fleet_request(args: argparse.Namespace) -> FleetRequest:
    """What `--inventory` runs with, from the parsed arguments (checked by fleet.command.run_fleet)."""
    reach = Reach(known_hosts=args.known_hosts, accept_new_host_key=bool(args.accept_new_host_key),
                  ssh_config=args.ssh_config, connect_timeout=args.connect_timeout or DEFAULT_CONNECT_TIMEOUT,
                  base_dir=args.base_dir or DEFAULT_BASE_DIR, user=args.user, identity=args.identity)
    return FleetRequest(inventory=args.inventory, limit=args.limit, forks=args.forks, source=args.dir, reach=reach,
                        host=args.host, local=bool(getattr(args, "local", False)), threads=getattr(args, "threads", None))
