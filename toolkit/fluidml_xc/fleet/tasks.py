"""What one host of a fleet does (deploy, profile, verify), shared by `--inventory` and the Ansible modules."""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..errors import RemoteError
from ..remote.artifact import Artifact
from ..remote.deploy import DEFAULT_BASE_DIR, Deployment, DeployOptions, deploy, remote_hashes
from ..remote.profile import ProfileOptions, ProfileReport, profile_remote
from ..remote.ssh import DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, SshOptions, connect
from ..remote.verify import Reference, Tolerance, VerifyReport, run_remote
from .inventory import FleetHost


@dataclass(frozen=True)
class Reach:
    """Connection settings the command line (or the Ansible task) gives every host; host variables win."""

    known_hosts: str | None = None
    accept_new_host_key: bool = False
    ssh_config: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    base_dir: str = DEFAULT_BASE_DIR
    user: str | None = None
    identity: str | None = None


def ssh_options(host: FleetHost, artifact: Artifact, reach: Reach) -> SshOptions:
    board = artifact.board
    return SshOptions(host=host.address, user=host.user or reach.user, port=host.port,
                      identity=host.identity or reach.identity, known_hosts=host.known_hosts or reach.known_hosts,
                      accept_new_host_key=reach.accept_new_host_key, ssh_config=reach.ssh_config,
                      connect_timeout=reach.connect_timeout, command_timeout=DEFAULT_COMMAND_TIMEOUT,
                      default_user=board.ssh_user, default_port=board.ssh_port)


class HostUnreachable(RemoteError):
    """The host could not be reached or refused the login (Ansible's `unreachable`)."""


def _connect(host: FleetHost, artifact: Artifact, reach: Reach):
    try:
        return connect(ssh_options(host, artifact, reach))
    except RemoteError as exc:
        raise HostUnreachable(str(exc)) from None


@dataclass
class HostOutcome:
    """What happened on one host: the deployment facts and, for profile/verify, the report."""

    host: str
    board: str
    where: str = ""
    deployed: dict = field(default_factory=dict)
    profile: ProfileReport | None = None
    verify: VerifyReport | None = None


def _deployed_facts(d: Deployment) -> dict:
    return {"remote_dir": d.remote_dir, "base_dir": d.base_dir, "current": posixpath.join(d.base_dir, "current"),
            "digest": d.digest, "already_present": d.already_present, "uploaded_files": d.uploaded_files,
            "uploaded_bytes": d.uploaded_bytes, "previous": d.previous, "emulator": d.plan.emulator}


def deploy_host(host: FleetHost, artifact: Artifact, reach: Reach, progress=None) -> HostOutcome:
    with _connect(host, artifact, reach) as conn:
        d = deploy(conn, artifact, DeployOptions(host.base_dir or reach.base_dir, True, progress))
        return HostOutcome(host.name, artifact.board.name, conn.label, _deployed_facts(d))


def profile_host(host: FleetHost, artifact: Artifact, reach: Reach, options: ProfileOptions) -> HostOutcome:
    with _connect(host, artifact, reach) as conn:
        d = deploy(conn, artifact, DeployOptions(host.base_dir or reach.base_dir, False, None))
        report = profile_remote(conn, d, artifact, options)
        return HostOutcome(host.name, artifact.board.name, conn.label, _deployed_facts(d), profile=report)


def verify_host(host: FleetHost, artifact: Artifact, reach: Reach, feeds: Mapping[str, np.ndarray],
                reference: Reference, tolerance: Tolerance, timeout: float, threads: int | None = None) -> HostOutcome:
    with _connect(host, artifact, reach) as conn:
        d = deploy(conn, artifact, DeployOptions(host.base_dir or reach.base_dir, False, None))
        outputs = run_remote(conn, d, artifact, feeds, timeout, threads)
        report = VerifyReport.of(conn.label, tolerance, outputs, reference)
        return HostOutcome(host.name, artifact.board.name, conn.label, _deployed_facts(d), verify=report)


def deployed_already(host: FleetHost, artifact: Artifact, reach: Reach) -> bool:
    """Whether this exact artifact is installed and intact on the host (check mode: nothing is changed)."""
    with _connect(host, artifact, reach) as conn:
        base = conn.absolute(host.base_dir or reach.base_dir)
        final = posixpath.join(base, f"{artifact.name}-{artifact.digest[:16]}")
        expected = {f.name: f.sha256 for f in artifact.files}
        return remote_hashes(conn, final, sorted(expected)) == expected
