"""User-facing errors. Each maps to one exit code in one place (cli.main)."""
from __future__ import annotations


class FxcError(Exception):
    """An error the user can fix; printed as one line without a traceback."""

    exit_code = 1


class InputError(FxcError):
    """Bad model, bad arguments, unknown board, unsupported ops."""

    exit_code = 2


class ToolchainError(FxcError):
    """Compiler, linker or emulator missing or failing."""

    exit_code = 3


class RunError(FxcError):
    """A runner crashed, was killed or produced wrong output."""

    exit_code = 4


class RemoteError(FxcError):
    """SSH connection, host key, remote disk or remote command failures."""

    exit_code = 5


class VerifyError(FxcError):
    """Outputs differ from the reference beyond tolerance."""

    exit_code = 6
