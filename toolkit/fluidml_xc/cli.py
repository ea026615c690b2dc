"""The `fluidml-xc` command. Subcommands live in fluidml_xc.commands, one module each; errors map to exit codes here."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import __version__, commands
from .errors import FxcError


def _command_modules():
    modules = [importlib.import_module(f"{commands.__name__}.{info.name}") for info in pkgutil.iter_modules(commands.__path__)]
    return sorted((m for m in modules if hasattr(m, "NAME")), key=lambda m: getattr(m, "ORDER", 50))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fluidml-xc", description="Cross-compile ONNX models for edge boards, deploy over SSH, profile.")
    parser.add_argument("--version", action="version", version=f"fluidml-xc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(handler=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except FxcError as exc:
        if args.debug:
            raise
        print(f"fluidml-xc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fluidml-xc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
