"""Glue for the commands: load the artifact, connect with the board's SSH defaults, make sure it is deployed."""
from __future__ import annotations

import argparse
import sys

from .artifact import Artifact, load_artifact, resolve_artifact_dir
from .cliargs import ssh_options
from .deploy import Deployment, DeployOptions, deploy
from .progress import ProgressBar, human_bytes
from .ssh import Connection, connect


def artifact_from_args(args: argparse.Namespace) -> Artifact:
    return load_artifact(resolve_artifact_dir(getattr(args, "dir", None)))


def connect_for(args: argparse.Namespace, artifact: Artifact) -> Connection:
    return connect(ssh_options(args, artifact.board))


def ensure_deployed(conn: Connection, artifact: Artifact, args: argparse.Namespace, switch_current: bool,
                    quiet_if_present: bool = True) -> Deployment:
    """Deploy (uploading only what is missing) and say what happened on stderr."""
    if not quiet_if_present:
        print(f"deploying {artifact.path} ({len(artifact.files)} files, {human_bytes(artifact.size)}) to "
              f"{conn.label}", file=sys.stderr)
    deployment = deploy(conn, artifact, DeployOptions(args.base_dir, switch_current, ProgressBar()))
    if deployment.uploaded_files:
        print(f"uploaded  {deployment.uploaded_files} files ({human_bytes(deployment.uploaded_bytes)}) to "
              f"{deployment.remote_dir}, sha256 verified on the board", file=sys.stderr)
    elif not quiet_if_present:
        print(f"already deployed at {deployment.remote_dir} (sha256 verified): nothing uploaded", file=sys.stderr)
    return deployment
