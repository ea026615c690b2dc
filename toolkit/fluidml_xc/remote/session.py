"""Glue for the commands: load the artifact, connect with the board's SSH defaults, make sure it is deployed."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from .artifact import Artifact, load_artifact, resolve_artifact_dir
from .deploy import Deployment, DeployOptions, deploy
from .progress import ProgressBar, human_bytes
from .ssh import Connection, SshOptions, connect


def open_artifact(directory: str | Path | None) -> Artifact:
    """The artifact in DIRECTORY (None: the most recent build, from build/.last)."""
    return load_artifact(resolve_artifact_dir(directory))


def connect_for(options: SshOptions, artifact: Artifact) -> Connection:
    """Connect with OPTIONS, the artifact's board file giving the default user and port."""
    return connect(dataclasses.replace(options, default_user=artifact.board.ssh_user,
                                       default_port=artifact.board.ssh_port))


def ensure_deployed(conn: Connection, artifact: Artifact, base_dir: str, switch_current: bool,
                    quiet_if_present: bool = True) -> Deployment:
    """Deploy into BASE_DIR (uploading only what is missing) and say what happened on stderr."""
    if not quiet_if_present:
        print(f"deploying {artifact.path} ({len(artifact.files)} files, {human_bytes(artifact.size)}) to "
              f"{conn.label}", file=sys.stderr)
    deployment = deploy(conn, artifact, DeployOptions(base_dir, switch_current, ProgressBar()))
    if deployment.uploaded_files:
        print(f"uploaded  {deployment.uploaded_files} files ({human_bytes(deployment.uploaded_bytes)}) to "
              f"{deployment.remote_dir}, sha256 verified on the board", file=sys.stderr)
    elif not quiet_if_present:
        print(f"already deployed at {deployment.remote_dir} (sha256 verified): nothing uploaded", file=sys.stderr)
    return deployment
