"""User-facing errors. Each maps to one exit code in one place (cli.main)."""
from __future__ import annotations


class FxcError(Exception):
    """An error the user can fix; printed as one line without a traceback."""

    exit_code = 1


class InputError(FxcError):
    """Bad model, bad arguments, unknown board, unsupported ops."""

    exit_code = 2


class UnresolvedShape(InputError):
    """A tensor's shape stays unknown at build time (it depends on input values, or comes from an op without a
    lowering). `tensor`: its name in the imported graph (`NODE/...` inside an inlined or expanded node)."""

    def __init__(self, message: str, tensor: str | None = None):
        super().__init__(message)
        self.tensor = tensor


class NeedsBound(UnresolvedShape):
    """A data-dependent dim has no bound: its size comes at run time and no --max-dim names it (nor '*'). The
    frontend rewrites the message to name the input that decides and the --max-dim to give (`node`: the node's
    label)."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


class NeedsConstant(InputError):
    """A node needs the value of an input at build time (a sequence position, split sizes). `node`: its label
    in the imported graph (frontend/names.unique_names for the model's own nodes)."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


class RunCheckFailed(InputError):
    """A run's data failed a check its kernels make at run time (a TopK's K outside its axis): the outputs are
    not valid (the C API's FXC_ERR_RUN, the runner's exit status 3)."""


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


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived: unwinds like KeyboardInterrupt so every `finally` removes its temporaries."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


INTERNAL_EXIT = 70
"""An exception that is none of the above: a bug; one line, and --debug shows the traceback."""


def describe_unexpected(exc: BaseException) -> tuple[str, int]:
    """The one line and exit code for an exception that is not an FxcError."""
    if isinstance(exc, MemoryError):
        return ("ran out of memory on this machine: lower --max-memory so the build refuses early, "
                "or build on a machine with more memory"), 1
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}", 1
    text = " ".join(str(exc).split())[:300]
    return (f"internal error ({type(exc).__name__}{': ' + text if text else ''}); rerun with --debug for the "
            "traceback and report it"), INTERNAL_EXIT
