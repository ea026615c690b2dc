"""Start a deployed runner on the board (directly or through its emulator) and report crashes clearly."""
from __future__ import annotations

import io
import posixpath
from typing import Mapping, Sequence

import numpy as np

from ..errors import RemoteError, RunError
from ..run.execute import run_check_failed
from .artifact import Artifact
from .deploy import Deployment
from .shell import CommandResult, in_dir
from .ssh import Connection

DEFAULT_RUN_TIMEOUT = 900.0


def run_runner(conn: Connection, deployment: Deployment, artifact: Artifact, args: Sequence[str],
               profiling: bool = False, timeout: float = DEFAULT_RUN_TIMEOUT) -> CommandResult:
    """Run runner (or runner_prof) with args in its deployed directory; RunError if it fails or dies."""
    name = artifact.runner(profiling)
    plan = deployment.plan
    argv = plan.argv(deployment.path(name), args)
    result = conn.run(in_dir(deployment.remote_dir, argv, timeout, plan.has_timeout), timeout=timeout + 30)
    how = f" (through {plan.emulator})" if plan.emulator else ""
    if result.status == 125:
        raise RemoteError(f"the deployed directory {deployment.remote_dir} vanished on {conn.label}: deploy again")
    if plan.has_timeout and result.status == 137 and result.seconds >= timeout:
        raise RunError(f"{name} on {conn.label}{how} timed out after {timeout:g}s and was killed "
                       f"(--timeout raises the limit)")
    run_check_failed(result.status, result.err)
    if not result.ok:
        raise RunError(f"{name} on {conn.label}{how} {result.failure()}")
    return result


def upload_feeds(conn: Connection, scratch: str, inputs: Sequence, feeds: Mapping[str, np.ndarray]) -> list[str]:
    """Write each input's feed as SCRATCH/in<i>.npy on the board (the directory made here); the runner's -i args."""
    conn.run(["mkdir", "-p", "--", scratch])
    sftp = conn.sftp()
    args: list[str] = []
    for i, spec in enumerate(inputs):
        path = posixpath.join(scratch, f"in{i}.npy")
        buffer = io.BytesIO()
        np.save(buffer, feeds[spec.name], allow_pickle=False)
        sftp.putfo(io.BytesIO(buffer.getvalue()), path)
        args += ["-i", path]
    return args
