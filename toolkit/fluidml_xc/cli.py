"""The `fluidml-xc` command. Subcommands live in fluidml_xc.commands, one module each; errors map to exit codes here."""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
import threading

from . import __version__, commands
from .commands.output import settle_json
from .errors import FxcError, Terminated, describe_unexpected
from .results import json_stdout


def _command_modules(argv: list[str] | None = None):
    """The command modules, in their ORDER; when `argv` names a command whose module is commands/NAME.py, that one
    alone (a build does not import deploy's SSH stack)."""
    names = [info.name for info in pkgutil.iter_modules(commands.__path__)]
    chosen = named_command(argv or [], names)
    if chosen:
        module = importlib.import_module(f"{commands.__name__}.{chosen}")
        if getattr(module, "NAME", None) == chosen:
            return [module]
    modules = [importlib.import_module(f"{commands.__name__}.{name}") for name in names]
    return sorted((m for m in modules if hasattr(m, "NAME")), key=lambda m: getattr(m, "ORDER", 50))


def named_command(argv: list[str], names: list[str]) -> str | None:
    """The command `argv` gives (its first argument that is not an option) when it is one of `names`; None when
    it gives none, asks for help first, or names an unknown one (argparse then lists every command)."""
    for arg in argv:
        if arg in ("--", "-h") or (len(arg) > 2 and "--help".startswith(arg)):
            return None
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def asks_version(argv: list[str]) -> bool:
    """Whether argparse would answer `--version` (or an abbreviation) given before any command: then main
    answers it without importing the command modules (and with them the whole compiler)."""
    for arg in argv:
        if arg == "-h" or (len(arg) > 2 and "--help".startswith(arg)):
            return False
        if len(arg) > 2 and "--version".startswith(arg):
            return True
        if arg == "--" or not arg.startswith("-"):
            return False
    return False


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv` (every command's when None or naming none; see _command_modules)."""
    parser = argparse.ArgumentParser(prog="fluidml-xc", description="Cross-compile ONNX models for edge boards, deploy over SSH, profile.")
    parser.add_argument("--version", action="version", version=f"fluidml-xc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules(argv):
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(handler=module.main)
    return parser


def _one_line(text: str) -> str:
    """A message as one line of printable text: newlines, escape sequences and other control characters escaped."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def _on_terminate(signum, frame) -> None:
    raise Terminated(signum)


def _quiet_stdout() -> None:
    """The reader of stdout went away (`fluidml-xc inspect | head`): send the rest nowhere, as Unix tools do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _end_interrupted(code: int, argv: list[str] | None) -> int:
    """After a signal our own cleanup has run (the build's handlers removed its temporaries). The signal may
    have landed inside llvmlite while it made native objects; their finalizers at interpreter exit can then
    crash or print tracebacks, so a program run (argv from the command line) ends here, skipping them."""
    if argv is None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


def _done(code: int, argv: list[str] | None) -> int:
    """A program run (argv from the command line) whose command has ended ignores SIGINT from here on: a Ctrl-C
    while the interpreter exits would kill it with the signal instead of its exit code."""
    if argv is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


def main(argv: list[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), _on_terminate)
    args_given = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args_given
    if asks_version(args_given):
        print(f"fluidml-xc {__version__}")
        return 0
    try:
        parser = build_parser(list(args_given))
        args = parser.parse_args(argv)
        if not getattr(args, "handler", None):
            parser.print_help()
            return 2
        if hasattr(args, "json_out"):
            settle_json(args)
        with json_stdout(bool(getattr(args, "json", False))):
            code = int(args.handler(args) or 0)
        sys.stdout.flush()
        return _done(code, argv)
    except FxcError as exc:
        if debug:
            raise
        print(f"fluidml-xc: error: {_one_line(exc)}", file=sys.stderr)
        return _done(exc.exit_code, argv)
    except KeyboardInterrupt:
        print("fluidml-xc: interrupted", file=sys.stderr)
        return _end_interrupted(130, argv)
    except Terminated as exc:
        print(f"fluidml-xc: terminated by signal {signal.Signals(exc.signum).name}", file=sys.stderr)
        return _end_interrupted(128 + exc.signum, argv)
    except BrokenPipeError:
        _quiet_stdout()
        return 128 + signal.SIGPIPE
    except SystemExit:
        raise
    except Exception as exc:
        if debug:
            raise
        line, code = describe_unexpected(exc)
        print(f"fluidml-xc: error: {_one_line(line)}", file=sys.stderr)
        return _done(code, argv)


if __name__ == "__main__":
    sys.exit(main())
