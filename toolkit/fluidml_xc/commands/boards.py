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
    from .output import add_json_arguments
    add_json_arguments(parser)


def main(args) -> int:
    from ..results import emit

    if args.action == "detect":
        from dataclasses import asdict
        from ..remote.detect import describe, detect
        from ..remote.ssh import connect
        from .remote_args import ssh_options
        with connect(ssh_options(args)) as conn:
            base = conn.absolute(args.base_dir)
            info, matches = detect(conn, base)
        emit({"host": conn.label, **asdict(info), "boards": [b.name for b in matches]}, args.json, args.json_out,
             lambda: describe(conn.label, info, matches, base))
        return 0
    data = [{"board": b.name, "triple": b.target.triple, "cpu": b.cpu, "cpu_variants": list(b.cpu_variants),
             "cores": b.cores, "memory_mb": b.memory_mb, "emulated": b.emulated, "aliases": list(b.aliases),
             "description": b.description} for b in boards().values()]
    emit(data, args.json, args.json_out, _table)
    return 0


def _table() -> str:
    rows = [(b.name, b.target.triple, " / ".join(b.cpu_variants) if b.cpu_variants else b.cpu, str(b.cores or "-"),
             b.description) for b in boards().values()]
    header = ("board", "triple", "cpu", "cores", "description")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(4)]
    return "\n".join("  ".join(col.ljust(w) for col, w in zip(row, widths)) + "  " + row[4] for row in [header, *rows])
