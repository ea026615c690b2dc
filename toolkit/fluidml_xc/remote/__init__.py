"""Boards over SSH: connect (paramiko), deploy artifacts, detect boards, profile and verify runners.

Modules: `shell` (commands and results, local and remote alike), `ssh` (connections, host keys),
`artifact` (the local artifact directory), `fit` (does the board fit the artifact),
`deploy`, `detect`, `telemetry`, `profile`, `verify`, `cliargs` (shared command-line options).
"""
