"""`fluidml-xc verify [DIR] [--host HOST]`: compare the runner's outputs with ONNX Runtime (float models) or
onnx.reference (quantized models) on this machine."""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError, VerifyError
from ..fleet.command import FleetVerify, run_fleet
from ..remote.runner import DEFAULT_RUN_TIMEOUT
from ..remote.session import connect_for, ensure_deployed, open_artifact
from ..emit.threads import check_run_threads
from ..remote.verify import ORACLE_LABELS, Tolerance, VerifyReport, make_feeds, model_path, reference_outputs, run_local, \
    run_remote, with_bound
from ..results import emit
from .output import add_json_arguments
from .paths import check_artifact_argument, check_model_argument
from .remote_args import add_artifact_argument, add_fleet_arguments, add_ssh_arguments, finite_positive, fleet_request, \
    ssh_options

NAME = "verify"
HELP = "run an artifact on a board (--host) or here and compare its outputs with ONNX Runtime / the ONNX spec"
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
    add_oracle_arguments(parser)
    parser.add_argument("--timeout", type=float, default=DEFAULT_RUN_TIMEOUT, metavar="S",
                        help=f"seconds the runner may take (default {DEFAULT_RUN_TIMEOUT:g})")
    add_json_arguments(parser)
    add_ssh_arguments(parser)
    add_fleet_arguments(parser)


def add_oracle_arguments(parser) -> None:
    parser.add_argument("--oracle", choices=("auto", *ORACLE_LABELS), default="auto",
                        help="what to compare with: ort (ONNX Runtime), spec (onnx.reference, the ONNX spec's "
                             "arithmetic); auto (default): spec for models with quantized ops, where ONNX Runtime's "
                             "fused int8 kernels round and saturate differently, else ort")
    parser.add_argument("--quant-steps", type=float, default=1.0, metavar="N",
                        help="quantization steps an output written by QuantizeLinear/DequantizeLinear may differ by "
                             "(rounding of the requantization; default 1, 0 for exact)")


def main(args) -> int:
    if args.inventory:
        return run_fleet(fleet_request(args), NAME, FleetVerify(args.rtol, args.atol, args.timeout, args.inputs, args.model,
                                                                args.oracle, args.quant_steps, args.json, args.json_out))
    if not (args.rtol >= 0 and args.atol >= 0 and args.quant_steps >= 0) or not finite_positive(args.timeout):
        raise InputError("--rtol, --atol and --quant-steps must be >= 0 and --timeout a positive number of seconds")
    check_artifact_argument(args.dir, NAME, fleet_hint=True)
    check_model_argument(args.model, f"{NAME} --model")
    artifact = open_artifact(args.dir)
    check_run_threads(artifact.manifest.threads, args.threads)
    feeds = make_feeds(artifact, args.inputs)
    reference = reference_outputs(model_path(artifact, args.model), with_bound(artifact, feeds), args.oracle,
                                  args.quant_steps)
    if args.host:
        with connect_for(ssh_options(args), artifact) as conn:
            deployment = ensure_deployed(conn, artifact, args.base_dir, switch_current=False)
            outputs = run_remote(conn, deployment, artifact, feeds, args.timeout, args.threads)
            where = conn.label
    else:
        outputs, where = run_local(artifact, feeds, args.timeout, args.threads), "localhost"
    tolerance = Tolerance(args.rtol, args.atol)
    report = VerifyReport.of(where, tolerance, outputs, reference)
    emit(report.to_dict(), args.json, args.json_out, report.table)
    if not report.ok:
        raise VerifyError(report.failure())
    return 0
