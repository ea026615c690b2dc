"""The --json / --json-out options every command that prints a result takes (the convention: results.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError
from ..results import JSON_HELP, JSON_OUT_HELP, check_json_out


def add_json_arguments(parser: argparse.ArgumentParser, legacy_file: bool = False) -> None:
    """--json (a flag) and --json-out FILE. LEGACY_FILE: the command once took `--json FILE`; that spelling is
    parsed so that `settle_json` can name the new one (`--json -` still means stdout)."""
    if legacy_file:
        parser.add_argument("--json", nargs="?", const=True, default=False, metavar="-", help=JSON_HELP)
    else:
        parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.add_argument("--json-out", metavar="FILE", help=JSON_OUT_HELP)


def settle_json(args: argparse.Namespace) -> None:
    """args.json as a bool and --json-out checked, before any work. A `--json VALUE` of old: `-` is stdout; an
    artifact directory that argparse took for the value is the DIR argument; a file gets the new spelling."""
    value = getattr(args, "json", False)
    if isinstance(value, str):
        if value == "-":
            args.json = True
        elif getattr(args, "dir", "") is None and Path(value).is_dir():
            args.dir, args.json = value, True
        else:
            raise InputError(f"--json {value}: --json takes no file any more: write the JSON to a file with "
                             f"--json-out {value} (--json alone prints it on stdout)")
    check_json_out(getattr(args, "json_out", None))
