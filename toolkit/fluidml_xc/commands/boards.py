"""`fluidml-xc boards`: list the boards."""
from __future__ import annotations

from ..target.boards import boards

NAME = "boards"
HELP = "list the boards (`boards detect --host H` probes a board over SSH)"
ORDER = 70


def add_arguments(parser) -> None:
    parser.add_argument("action", nargs="?", choices=["list", "detect"], default="list")
    from .remote_args import add_ssh_arguments
    add_ssh_arguments(parser)


def main(args) -> int:
    if args.action == "detect":
        from ..remote.detect import detect_host
        from .remote_args import ssh_options
        print(detect_host(ssh_options(args), args.base_dir))
        return 0
    rows = [(b.name, b.target.triple, " / ".join(b.cpu_variants) if b.cpu_variants else b.cpu, str(b.cores or "-"),
             b.description) for b in boards().values()]
    header = ("board", "triple", "cpu", "cores", "description")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(4)]
    for row in [header, *rows]:
        print("  ".join(col.ljust(w) for col, w in zip(row, widths)) + "  " + row[4])
    return 0
