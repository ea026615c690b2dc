"""Boards over SSH: connect (paramiko), deploy artifacts, detect boards, profile and verify runners.

Modules: `shell` (commands and results, local and remote alike), `ssh` (connections, host keys),
`artifact` (the local artifact directory), `fit` (does the board fit the artifact),
`deploy`, `detect`, `telemetry`, `profile`, `verify`, `session` (load, connect, deploy for the commands).
Typed options only (SshOptions, DeployOptions, ...): the command-line mapping is commands/remote_args.py.
"""
