"""`fluidml-xc profile [DIR] --host HOST | --local`: latency, per-op times, memory and board telemetry."""
from __future__ import annotations

from pathlib import Path


from ..errors import InputError
from ..fleet.command import FleetProfile, run_fleet
from ..remote.profile import ProfileOptions, profile_local, profile_remote
from ..remote.runner import DEFAULT_RUN_TIMEOUT
from ..remote.session import connect_for, ensure_deployed, open_artifact
from ..remote.verify import make_feeds
from ..emit.threads import check_run_threads
from ..results import emit
from .output import add_json_arguments
from .paths import check_artifact_argument
from .remote_args import MAX_RUNS, add_artifact_argument, add_fleet_arguments, add_ssh_arguments, fleet_request, \
    finite_positive, runs_in_range, ssh_options

NAME = "profile"
HELP = "profile an artifact on a board over SSH (or --local): latency percentiles, per-op times, peak memory"
ORDER = 40


def add_arguments(parser) -> None:
    add_artifact_argument(parser)
    parser.add_argument("--local", action="store_true", help="profile on this machine (qemu-user for foreign targets)")
    parser.add_argument("--threads", type=int, metavar="N", help="threads the runner uses (default: the count built in)")
    parser.add_argument("--inputs", type=Path, metavar="FEED.npz",
                        help="inputs by name (a dynamic build: at the size to profile; default: the runner's own, "
                             "at the maximum)")
    parser.add_argument("--runs", type=int, default=100, metavar="N", help="timed runs (default 100)")
    parser.add_argument("--warmup", type=int, default=10, metavar="W", help="warm-up runs (default 10)")
    parser.add_argument("--top", type=int, metavar="N", help="list the N slowest ops, slowest first, instead of every op "
                                                             "in execution order")
    add_json_arguments(parser, legacy_file=True)
    parser.add_argument("--html", metavar="FILE", help="also write an HTML report of the artifact and this profile "
                                                      "(needs fluidml-xc[report])")
    parser.add_argument("--timeout", type=float, default=DEFAULT_RUN_TIMEOUT, metavar="S",
                        help=f"seconds the runner may take (default {DEFAULT_RUN_TIMEOUT:g})")
    add_ssh_arguments(parser)
    add_fleet_arguments(parser)


def main(args) -> int:
    if args.top is not None and args.top < 1:
        raise InputError(f"--top {args.top}: give a number of ops, 1 or more")
    if args.inventory:
        return run_fleet(fleet_request(args), NAME, FleetProfile(args.runs, args.warmup, args.timeout, args.json, args.html,
                                                                 args.json_out, args.top))
    if args.local == bool(args.host):
        raise InputError("pass --host HOST to profile on a board, or --local to profile on this machine")
    if not runs_in_range(args.runs, args.warmup) or not finite_positive(args.timeout):
        raise InputError(f"--runs must be 1 to {MAX_RUNS:,}, --warmup 0 to {MAX_RUNS:,} and --timeout a positive number of seconds")
    if args.html:
        from ..extras import require

        require("matplotlib", "report", "--html")
    check_artifact_argument(args.dir, NAME, fleet_hint=True)
    artifact = open_artifact(args.dir)
    check_run_threads(artifact.manifest.threads, args.threads)
    options = ProfileOptions(args.runs, args.warmup, args.timeout, args.threads, _feeds(artifact, args.inputs))
    if args.local:
        report = profile_local(artifact, options)
    else:
        with connect_for(ssh_options(args), artifact) as conn:
            deployment = ensure_deployed(conn, artifact, args.base_dir, switch_current=False)
            report = profile_remote(conn, deployment, artifact, options)
    if args.html:
        from ..report.adapters import write_profile_html

        write_profile_html(artifact.path, report.to_dict(), args.html)
    emit(report.to_dict(), args.json, args.json_out, lambda: report.table(args.top))
    return 0


def _feeds(artifact, inputs: Path | None) -> dict | None:
    """--inputs checked against the artifact's inputs (a dynamic build's ranges), or None."""
    return None if inputs is None else make_feeds(artifact, inputs)
