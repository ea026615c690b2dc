"""`fluidml-xc deploy [DIR] --host HOST`: upload an artifact to a board over SSH."""
from __future__ import annotations

import posixpath

from ..fleet.command import FleetDeploy, run_fleet
from ..remote.session import connect_for, ensure_deployed, open_artifact
from ..remote.shell import quote_argv
from ..results import emit
from .output import add_json_arguments
from .paths import check_artifact_argument
from .remote_args import add_artifact_argument, add_fleet_arguments, add_ssh_arguments, fleet_request, ssh_options

NAME = "deploy"
HELP = "upload an artifact to a board over SSH (content-addressed, sha256-checked, atomic `current` switch)"
ORDER = 30


def add_arguments(parser) -> None:
    add_artifact_argument(parser)
    add_ssh_arguments(parser)
    add_fleet_arguments(parser)
    add_json_arguments(parser)


def main(args) -> int:
    if args.inventory:
        return run_fleet(fleet_request(args), NAME, FleetDeploy(args.json, args.json_out))
    check_artifact_argument(args.dir, NAME, fleet_hint=True)
    artifact = open_artifact(args.dir)
    with connect_for(ssh_options(args), artifact) as conn:
        deployment = ensure_deployed(conn, artifact, args.base_dir, switch_current=True, quiet_if_present=False)
    current = posixpath.join(deployment.base_dir, "current")
    runner = deployment.plan.argv(posixpath.join(current, "runner"), ["--bench", "100"])
    previous = (deployment.previous if deployment.previous != posixpath.basename(deployment.remote_dir) else None) or None
    data = {"model": artifact.model_name, "board": artifact.board.name, "host": conn.label, "current": current,
            "remote_dir": deployment.remote_dir, "previous": previous, "run": runner}
    emit(data, args.json, args.json_out, lambda: "\n".join([
        f"deployed  {artifact.model_name} for {artifact.board.name} on {conn.label}",
        f"current   {current} -> {posixpath.basename(deployment.remote_dir)}" + (f" (was {previous})" if previous else ""),
        f"run       {quote_argv(runner)}"]))
    return 0
