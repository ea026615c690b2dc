"""`fluidml-xc deploy [DIR] --host HOST`: upload an artifact to a board over SSH; with --inputs, one smoke run there."""
from __future__ import annotations

import posixpath
from pathlib import Path

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
    parser.add_argument("--inputs", type=Path, metavar="FEED.npz",
                        help="after deploying, run the model once on these inputs there (a smoke run; a dynamic build "
                             "takes any size in its ranges) and print the outputs' shapes")
    add_fleet_arguments(parser)
    add_json_arguments(parser)


def main(args) -> int:
    if args.inventory:
        return run_fleet(fleet_request(args), NAME, FleetDeploy(args.json, args.json_out))
    check_artifact_argument(args.dir, NAME, fleet_hint=True)
    artifact = open_artifact(args.dir)
    feeds = _smoke_feeds(artifact, args.inputs)
    with connect_for(ssh_options(args), artifact) as conn:
        deployment = ensure_deployed(conn, artifact, args.base_dir, switch_current=True, quiet_if_present=False)
        smoke = _smoke_run(conn, deployment, artifact, feeds) if feeds is not None else None
    current = posixpath.join(deployment.base_dir, "current")
    runner = deployment.plan.argv(posixpath.join(current, "runner"), ["--bench", "100"])
    previous = (deployment.previous if deployment.previous != posixpath.basename(deployment.remote_dir) else None) or None
    data = {"model": artifact.model_name, "board": artifact.board.name, "host": conn.label, "current": current,
            "remote_dir": deployment.remote_dir, "previous": previous, "run": runner,
            **({"smoke_run": smoke} if smoke is not None else {})}
    ranges = artifact.manifest.symbols
    emit(data, args.json, args.json_out, lambda: "\n".join([
        f"deployed  {artifact.model_name} for {artifact.board.name} on {conn.label}",
        f"current   {current} -> {posixpath.basename(deployment.remote_dir)}" + (f" (was {previous})" if previous else ""),
        f"run       {quote_argv(runner)}" + (" (inputs at the maximum of " + ", ".join(
            f"{k}={v['min']}..{v['max']}" for k, v in ranges.items()) + "; -i FILE.npy takes any size in them)" if ranges else ""),
        *([_smoke_text(smoke)] if smoke is not None else [])]))
    return 0


def _smoke_feeds(artifact, inputs: Path | None) -> dict | None:
    """--inputs checked against the artifact's inputs (a dynamic build's ranges) before anything is uploaded."""
    if inputs is None:
        return None
    from ..remote.verify import make_feeds

    return make_feeds(artifact, inputs)


def _smoke_run(conn, deployment, artifact, feeds: dict) -> dict:
    """One run on the board: the size fed and each output's shape."""
    import numpy as np

    from ..remote.verify import run_remote

    outputs = run_remote(conn, deployment, artifact, feeds)
    manifest = artifact.manifest
    sizes = manifest.bind_feeds({s.name: np.shape(feeds[s.name]) for s in manifest.inputs}) if manifest.symbols else {}
    return {"sizes": sizes, "outputs": {name: list(np.shape(value)) for name, value in outputs.items()}}


def _smoke_text(smoke: dict) -> str:
    at = " at " + ", ".join(f"{k}={v}" for k, v in smoke["sizes"].items()) if smoke["sizes"] else ""
    shapes = ", ".join(f"{name} {'x'.join(map(str, shape)) or 'scalar'}" for name, shape in smoke["outputs"].items())
    return f"smoke run ok{at}: {shapes}"
