"""`fluidml-xc report DIR [DIR ...] [--profile P.json ...] -o report.html`: one offline HTML page with plots."""
from __future__ import annotations

import sys

from ..errors import InputError
from .paths import check_artifact_argument, check_profile_argument

NAME = "report"
HELP = "write one self-contained HTML report (memory map, live bytes, per-op latency, decisions, side by side)"
ORDER = 65


def add_arguments(parser) -> None:
    parser.add_argument("dirs", nargs="*", metavar="DIR", help="artifact directories (several: side by side)")
    parser.add_argument("--profile", action="append", default=[], metavar="P.json",
                        help="a `fluidml-xc profile --json-out FILE` result, also of --inventory runs (repeatable)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the HTML file to write")
    parser.add_argument("--title", default="", help="page title (default: the models' names)")


def main(args) -> int:
    from ..report import load_artifact, load_profile, render_report, write_report

    if not args.dirs and not args.profile:
        raise InputError("`report` needs artifact directories and/or --profile FILE.json")
    for d in args.dirs:
        check_artifact_argument(d, NAME)
    for p in args.profile:
        check_profile_argument(p)
    artifacts = [load_artifact(d) for d in args.dirs]
    profiles = [prof for p in args.profile for prof in load_profile(p)]
    path = write_report(args.output, render_report(artifacts, profiles, args.title))
    print(f"wrote {path} ({len(artifacts)} artifact(s), {len(profiles)} profile(s))", file=sys.stderr)
    return 0
