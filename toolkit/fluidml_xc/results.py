"""How every command hands back its result (README, "Scripting"): a table on stdout; with `--json` the result as
one JSON document on stdout and nothing else there (tables, progress, warnings and notes go to stderr);
`--json-out FILE` also writes that JSON to FILE, atomically, whatever stdout shows."""
from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from .errors import InputError
from .tempfiles import write_text_atomic

JSON_HELP = "print the result as JSON on stdout and nothing else there (tables, progress and warnings: stderr)"
JSON_OUT_HELP = "also write the result as JSON to FILE"

_result_stream: TextIO | None = None
"""Where --json puts the JSON while the command's own prints are sent to stderr (None: sys.stdout)."""


class _Aside(io.TextIOBase):
    """What a --json command prints: written to stderr, while isatty() still answers for the real stdout (so
    progress bars follow the README's rule: drawn only when stdout and stderr are both terminals)."""

    def __init__(self, stdout: TextIO, stderr: TextIO):
        self._stdout, self._stderr = stdout, stderr

    def write(self, text: str) -> int:
        return self._stderr.write(text)

    def flush(self) -> None:
        self._stderr.flush()

    def isatty(self) -> bool:
        try:
            return self._stdout.isatty()
        except (AttributeError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stderr.fileno()

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def json_stdout(enabled: bool) -> Iterator[None]:
    """While a --json command runs, print() goes to stderr; `emit` still writes the result to the real stdout."""
    global _result_stream
    if not enabled:
        yield
        return
    previous, _result_stream = _result_stream, sys.stdout
    try:
        with contextlib.redirect_stdout(_Aside(sys.stdout, sys.stderr)):
            yield
    finally:
        _result_stream = previous


def check_json_out(path: str | Path | None) -> None:
    """Refuse a --json-out FILE that cannot be written, before any work is done."""
    if path is None:
        return
    if str(path) in ("", "-"):  # before Path(), which reads "" as "."
        raise InputError("--json-out needs a file name (for stdout, pass --json)")
    path = Path(path)
    if path.is_dir():
        raise InputError(f"--json-out {path} is a directory: give a file name such as {path / 'result.json'}")
    if not path.parent.is_dir():
        raise InputError(f"--json-out {path}: the directory {path.parent} does not exist: create it first")


def to_json(data: object) -> str:
    """DATA as indented JSON: sets as sorted lists, paths as strings."""
    def plain(value):
        if isinstance(value, (set, frozenset)):
            return sorted(value)
        if isinstance(value, Path):
            return str(value)
        raise TypeError(f"{type(value).__name__} is not JSON data")
    return json.dumps(data, indent=2, default=plain) + "\n"


def write_json(path: str | Path, data: object) -> Path:
    """DATA as indented JSON in PATH, written to a temporary file renamed over PATH (never half-written)."""
    path = Path(path)
    check_json_out(path)
    return write_text_atomic(path, to_json(data), "--json-out")


def emit(data: object, as_json: bool, json_out: str | Path | None, text: Callable[[], str] | None = None) -> None:
    """The command's result: JSON to --json-out FILE if given; then JSON on stdout (--json) or TEXT()'s table."""
    if json_out:
        write_json(json_out, data)
    stream = _result_stream or sys.stdout
    if as_json:
        stream.write(to_json(data))
        stream.flush()
    elif text is not None:
        print(text(), file=stream)
