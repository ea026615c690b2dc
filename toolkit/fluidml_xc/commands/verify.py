"""`fluidml-xc verify [DIR] [--host HOST]`: compare the runner's outputs with ONNX Runtime on this machine."""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError, VerifyError
from ..fleet.command import add_fleet_arguments, run_command
from ..remote.cliargs import add_artifact_argument, add_ssh_arguments
from ..remote.runner import DEFAULT_RUN_TIMEOUT
from ..remote.session import artifact_from_args, connect_for, ensure_deployed
from ..threads import check_run_threads
from ..remote.verify import Tolerance, VerifyReport, compare, make_feeds, model_path, reference_outputs, run_local, with_bound, \
    run_remote

NAME = "verify"
HELP = "run an artifact on a board (--host) or here and compare its outputs with ONNX Runtime"
ORDER = 45


def add_arguments(parser) -> None:
    add_artifact_argument(parser)
    parser.add_argument("--inputs", type=Path, metavar="FEED.npz",
                        help="inputs by name (default: the runner's deterministic pseudo-random inputs)")
    parser.add_argument("--model", type=Path, metavar="MODEL.onnx",
                        help="the ONNX model (default: the path recorded in manifest.json, sha256-checked)")
    parser.add_argument("--threads", type=int, metavar="N", help="threads the runner uses (default: the count built in)")
    parser.add_argument("--rtol", type=float, default=Tolerance.rtol, help=f"relative tolerance (default {Tolerance.rtol:g})")
    parser.add_argument("--atol", type=float, default=Tolerance.atol, help=f"absolute tolerance (default {Tolerance.atol:g})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_RUN_TIMEOUT, metavar="S",
                        help=f"seconds the runner may take (default {DEFAULT_RUN_TIMEOUT:g})")
    add_ssh_arguments(parser)
    add_fleet_arguments(parser)


def main(args) -> int:
    if args.inventory:
        return run_command(args, NAME)
    from ..remote.cliargs import finite_positive

    if not (args.rtol >= 0 and args.atol >= 0) or not finite_positive(args.timeout):  # nan fails every comparison
        raise InputError("--rtol and --atol must be >= 0 and --timeout a positive number of seconds")
    artifact = artifact_from_args(args)
    check_run_threads(artifact.manifest, args.threads)
    feeds = make_feeds(artifact, args.inputs)
    reference = reference_outputs(model_path(artifact, args.model), with_bound(artifact, feeds))
    if args.host:
        with connect_for(args, artifact) as conn:
            deployment = ensure_deployed(conn, artifact, args, switch_current=False)
            outputs = run_remote(conn, deployment, artifact, feeds, args.timeout, args.threads)
            where = conn.label
    else:
        outputs, where = run_local(artifact, feeds, args.timeout, args.threads), "localhost"
    tolerance = Tolerance(args.rtol, args.atol)
    report = VerifyReport(where, tolerance, tuple(compare(outputs, reference, tolerance)))
    print(report.table())
    if not report.ok:
        failed = [o for o in report.outputs if not o.ok]
        worst = max(failed, key=lambda o: o.max_abs)
        raise VerifyError(f"{len(failed)} of {len(report.outputs)} outputs differ from ONNX Runtime beyond tolerance "
                          f"(worst: {worst.name!r}, max abs err {worst.max_abs:.3e}, max rel err {worst.max_rel:.3e})")
    return 0
