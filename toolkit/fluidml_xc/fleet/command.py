"""`deploy|profile|verify --inventory FILE [--limit PATTERN]`: the fleet versions of the one-host commands."""
from __future__ import annotations

import argparse
import json
import posixpath
import sys
from pathlib import Path
from typing import Callable

from ..errors import InputError
from ..remote.artifact import Artifact
from .run import DEFAULT_WORKERS, HostResult, print_results, raise_for_failures, run_hosts
from .tasks import Reach


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fleet (Ansible inventory; needs fluidml-xc[fleet])")
    group.add_argument("--inventory", metavar="FILE",
                       help="an Ansible inventory (INI or YAML): every host, built once per fluidml_board, in parallel")
    group.add_argument("--limit", metavar="PATTERN", help="only the inventory hosts matching this Ansible pattern")
    group.add_argument("--forks", type=int, default=DEFAULT_WORKERS, metavar="N",
                       help=f"hosts worked on at once (default {DEFAULT_WORKERS})")


def _reach(args: argparse.Namespace) -> Reach:
    from ..remote.deploy import DEFAULT_BASE_DIR
    from ..remote.ssh import DEFAULT_CONNECT_TIMEOUT

    timeout = getattr(args, "connect_timeout", None) or DEFAULT_CONNECT_TIMEOUT
    if timeout <= 0:
        raise InputError("--connect-timeout must be positive")
    return Reach(known_hosts=getattr(args, "known_hosts", None),
                 accept_new_host_key=bool(getattr(args, "accept_new_host_key", False)),
                 ssh_config=getattr(args, "ssh_config", None), connect_timeout=timeout,
                 base_dir=getattr(args, "base_dir", None) or DEFAULT_BASE_DIR, user=getattr(args, "user", None),
                 identity=getattr(args, "identity", None))


def _deploy(args, hosts, artifacts, default, reach) -> list[HostResult]:
    from .tasks import deploy_host

    results = run_hosts(hosts, artifacts, default, lambda h, a: deploy_host(h, a, reach), args.forks, "deploying")

    def body(o) -> str:
        d = o.deployed
        what = "already deployed (sha256 verified)" if d["already_present"] else \
            f"uploaded {d['uploaded_files']} files ({d['uploaded_bytes']:,} B), sha256 verified on the board"
        return (f"deployed  {posixpath.basename(d['remote_dir'])} to {o.where}\ncurrent   {d['current']} -> "
                f"{posixpath.basename(d['remote_dir'])}\n{'':10}{what}")
    print_results(results, body)
    return results


def _profile(args, hosts, artifacts, default, reach) -> list[HostResult]:
    from ..remote.profile import ProfileOptions
    from .tasks import profile_host

    if args.runs < 1 or args.warmup < 0 or args.timeout <= 0:
        raise InputError("--runs must be >= 1, --warmup >= 0 and --timeout positive")
    if args.html:
        from ..extras import require

        require("matplotlib", "report", "--html")
    options = ProfileOptions(args.runs, args.warmup, args.timeout, args.threads)
    results = run_hosts(hosts, artifacts, default, lambda h, a: profile_host(h, a, reach, options), args.forks, "profiling")
    data = {"hosts": {r.host.name: {"board": r.board, "ok": r.ok, "error": r.error or None,
                                    "profile": r.outcome.profile.to_dict() if r.ok else None} for r in results}}
    if args.html:
        from ..report.adapters import write_fleet_html

        ok = [r for r in results if r.ok]
        write_fleet_html([artifacts[r.board].path for r in ok] or [a.path for a in artifacts.values()],
                         [(r.host.name, r.outcome.profile.to_dict()) for r in ok], args.html)
    if args.json == "-":
        print(json.dumps(data, indent=2))
        return results
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print_results(results, lambda o: o.profile.table())
    return results


def _verify(args, hosts, artifacts, default, reach) -> list[HostResult]:
    from ..errors import VerifyError
    from ..remote.verify import Tolerance, make_feeds, model_path, reference_outputs, with_bound
    from .tasks import verify_host

    if args.rtol < 0 or args.atol < 0 or args.quant_steps < 0 or args.timeout <= 0:
        raise InputError("--rtol, --atol and --quant-steps must be >= 0 and --timeout positive")
    tolerance = Tolerance(args.rtol, args.atol)
    checks = {}
    for board, artifact in artifacts.items():  # one reference per build, computed here once
        feeds = make_feeds(artifact, args.inputs)
        checks[board] = feeds, reference_outputs(model_path(artifact, args.model), with_bound(artifact, feeds),
                                                 args.oracle, args.quant_steps)

    def work(host, artifact):
        feeds, reference = checks[artifact.board.name]
        outcome = verify_host(host, artifact, reach, feeds, reference, tolerance, args.timeout, args.threads,
                              args.quant_steps)
        if not outcome.verify.ok:
            bad = [o.name for o in outcome.verify.outputs if not o.ok]
            raise VerifyError(f"outputs {', '.join(bad)} differ from {reference.label} beyond tolerance")
        return outcome
    results = run_hosts(hosts, artifacts, default, work, args.forks, "verifying")
    print_results(results, lambda o: o.verify.table())
    return results


def check_fleet_threads(threads: int | None, artifacts: dict[str, Artifact]) -> None:
    """A --threads every build of the fleet accepts (1..its built count), before any host is touched."""
    if threads is None:
        return
    for board, artifact in artifacts.items():
        built = int(artifact.manifest.get("threads", 1))
        if not 1 <= threads <= built:
            most = min(int(a.manifest.get("threads", 1)) for a in artifacts.values())
            raise InputError(f"--threads {threads}: the {board} build ({artifact.path}) runs 1 to {built} threads; "
                             f"give 1..{most} for this fleet, or rebuild with `fluidml-xc build --threads N`")


ACTIONS: dict[str, Callable] = {"deploy": _deploy, "profile": _profile, "verify": _verify}


def run_command(args: argparse.Namespace, action: str) -> int:
    """Entry point from commands/{deploy,profile,verify}.py when --inventory is given."""
    from .builds import artifacts_for
    from .inventory import load_inventory

    if getattr(args, "host", None):
        raise InputError("pass either --host HOST or --inventory FILE, not both")
    if getattr(args, "local", False):
        raise InputError("--local profiles this machine; --inventory profiles the inventory's hosts: pass one")
    if args.forks < 1:
        raise InputError("--forks must be >= 1")
    hosts = load_inventory(args.inventory, args.limit)
    artifacts, default = artifacts_for(hosts, getattr(args, "dir", None))
    print(f"{action}: {len(hosts)} hosts, {len(artifacts)} build(s): "
          + ", ".join(f"{b} ({a.path})" for b, a in artifacts.items()), file=sys.stderr)
    check_fleet_threads(getattr(args, "threads", None), artifacts)
    results = ACTIONS[action](args, hosts, artifacts, default, _reach(args))
    raise_for_failures(results, action)
    return 0
