"""`deploy|profile|verify --inventory FILE [--limit PATTERN]`: the fleet versions of the one-host commands."""
from __future__ import annotations

import posixpath
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import InputError
from ..results import emit
from ..remote.artifact import Artifact
from .run import DEFAULT_WORKERS, HostResult, print_results, raise_for_failures, run_hosts
from .tasks import Reach


@dataclass(frozen=True)
class FleetRequest:
    """Which hosts and builds a fleet command works on. SOURCE: an artifact directory, an ONNX model or None (the
    most recent build); HOST and LOCAL are the one-host options, refused beside an inventory."""

    inventory: str
    limit: str | None = None
    forks: int = DEFAULT_WORKERS
    source: str | None = None
    reach: Reach = Reach()
    host: str | None = None
    local: bool = False
    threads: int | None = None


@dataclass(frozen=True)
class FleetDeploy:
    """`deploy --inventory`: where the results go (--json: stdout, --json-out FILE)."""

    json: bool = False
    json_out: str | None = None


@dataclass(frozen=True)
class FleetProfile:
    """`profile --inventory`: runs, warm-up and time limit per host, and where the results go (--json: stdout,
    --json-out FILE, --html FILE)."""

    runs: int
    warmup: int
    timeout: float
    json: bool = False
    html: str | None = None
    json_out: str | None = None
    top: int | None = None
    """Per-op tables list the TOP slowest ops only (None: every op in execution order)."""


@dataclass(frozen=True)
class FleetVerify:
    """`verify --inventory`: tolerances, time limit per host, the inputs (.npz), the ONNX model, the oracle
    (auto, ort, spec) and the quantization steps a Q/DQ-written output may differ by."""

    rtol: float
    atol: float
    timeout: float
    inputs: Path | None = None
    model: Path | None = None
    oracle: str = "auto"
    quant_steps: float = 1.0
    json: bool = False
    json_out: str | None = None


def _check_reach(reach: Reach) -> Reach:
    if reach.connect_timeout <= 0:
        raise InputError("--connect-timeout must be positive")
    return reach


def _by_host(results: list[HostResult], key: str, facts: Callable) -> dict:
    """The fleet's JSON result: by host, its board, whether it succeeded, the error, and KEY: FACTS(outcome)."""
    return {"hosts": {r.host.name: {"board": r.board, "ok": r.ok, "error": r.error or None,
                                    key: facts(r.outcome) if r.ok else None} for r in results}}


def _report(results: list[HostResult], job, key: str, facts: Callable, body: Callable) -> None:
    """Per-host tables and the summary, or with --json the fleet's JSON; --json-out FILE gets the JSON too."""
    data = _by_host(results, key, facts)
    emit(data, job.json, job.json_out, None)
    if not job.json:
        print_results(results, body)


def _deploy(request: FleetRequest, job: FleetDeploy, hosts, artifacts, default, reach) -> list[HostResult]:
    from .tasks import deploy_host

    results = run_hosts(hosts, artifacts, default, lambda h, a: deploy_host(h, a, reach), request.forks, "deploying")

    def body(o) -> str:
        d = o.deployed
        what = "already deployed (sha256 verified)" if d["already_present"] else \
            f"uploaded {d['uploaded_files']} files ({d['uploaded_bytes']:,} B), sha256 verified on the board"
        return (f"deployed  {posixpath.basename(d['remote_dir'])} to {o.where}\ncurrent   {d['current']} -> "
                f"{posixpath.basename(d['remote_dir'])}\n{'':10}{what}")
    _report(results, job, "deploy", lambda o: o.deployed, body)
    return results


def _profile(request: FleetRequest, job: FleetProfile, hosts, artifacts, default, reach) -> list[HostResult]:
    from ..remote.profile import ProfileOptions
    from .tasks import profile_host

    if job.runs < 1 or job.warmup < 0 or job.timeout <= 0:
        raise InputError("--runs must be >= 1, --warmup >= 0 and --timeout positive")
    if job.html:
        from ..extras import require

        require("matplotlib", "report", "--html")
    options = ProfileOptions(job.runs, job.warmup, job.timeout, request.threads)
    results = run_hosts(hosts, artifacts, default, lambda h, a: profile_host(h, a, reach, options), request.forks,
                        "profiling")
    if job.html:
        from ..report.adapters import write_fleet_html

        ok = [r for r in results if r.ok]
        write_fleet_html([artifacts[r.board].path for r in ok] or [a.path for a in artifacts.values()],
                         [(r.host.name, r.outcome.profile.to_dict()) for r in ok], job.html)
    _report(results, job, "profile", lambda o: o.profile.to_dict(), lambda o: o.profile.table(job.top))
    return results


def _verify(request: FleetRequest, job: FleetVerify, hosts, artifacts, default, reach) -> list[HostResult]:
    from ..errors import VerifyError
    from ..remote.verify import Tolerance, make_feeds, model_path, reference_outputs, with_bound
    from .tasks import verify_host

    if job.rtol < 0 or job.atol < 0 or job.quant_steps < 0 or job.timeout <= 0:
        raise InputError("--rtol, --atol and --quant-steps must be >= 0 and --timeout positive")
    tolerance = Tolerance(job.rtol, job.atol)
    checks = {}
    for board, artifact in artifacts.items():  # one reference per build, computed here once
        feeds = make_feeds(artifact, job.inputs)
        checks[board] = feeds, reference_outputs(model_path(artifact, job.model), with_bound(artifact, feeds),
                                                 job.oracle, job.quant_steps)

    def work(host, artifact):
        feeds, reference = checks[artifact.board.name]
        outcome = verify_host(host, artifact, reach, feeds, reference, tolerance, job.timeout, request.threads)
        if not outcome.verify.ok:
            bad = [o.name for o in outcome.verify.outputs if not o.ok]
            raise VerifyError(f"outputs {', '.join(bad)} differ from {reference.label} beyond tolerance")
        return outcome
    results = run_hosts(hosts, artifacts, default, work, request.forks, "verifying")
    _report(results, job, "verify", lambda o: o.verify.to_dict(), lambda o: o.verify.table())
    return results


def check_fleet_threads(threads: int | None, artifacts: dict[str, Artifact]) -> None:
    """A --threads every build of the fleet accepts (1..its built count), before any host is touched."""
    if threads is None:
        return
    for board, artifact in artifacts.items():
        built = artifact.manifest.threads
        if not 1 <= threads <= built:
            most = min(a.manifest.threads for a in artifacts.values())
            raise InputError(f"--threads {threads}: the {board} build ({artifact.path}) runs 1 to {built} threads; "
                             f"give 1..{most} for this fleet, or rebuild with `fluidml-xc build --threads N`")


ACTIONS: dict[str, Callable] = {"deploy": _deploy, "profile": _profile, "verify": _verify}


def run_fleet(request: FleetRequest, action: str, options: FleetDeploy | FleetProfile | FleetVerify | None = None) -> int:
    """ACTION (deploy with FleetDeploy, profile with FleetProfile, verify with FleetVerify) on every host of the
    inventory."""
    from .builds import artifacts_for
    from .inventory import load_inventory

    if request.host:
        raise InputError("pass either --host HOST or --inventory FILE, not both")
    if request.local:
        raise InputError("--local profiles this machine; --inventory profiles the inventory's hosts: pass one")
    if request.forks < 1:
        raise InputError("--forks must be >= 1")
    hosts = load_inventory(request.inventory, request.limit)
    artifacts, default = artifacts_for(hosts, request.source)
    print(f"{action}: {len(hosts)} hosts, {len(artifacts)} build(s): "
          + ", ".join(f"{b} ({a.path})" for b, a in artifacts.items()), file=sys.stderr)
    check_fleet_threads(request.threads, artifacts)
    results = ACTIONS[action](request, options, hosts, artifacts, default, _check_reach(request.reach))
    raise_for_failures(results, action)
    return 0
