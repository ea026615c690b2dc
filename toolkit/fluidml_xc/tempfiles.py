"""Our temporary files and directories carry the creating process id, so a later run can sweep the ones whose
process is gone (killed by SIGKILL, the OOM killer, a power cut): `.NAME.tmp-PID-XXXX` build directories
beside an artifact, `.NAME.old-PID` backups (put back when the artifact itself is missing), and
`fxc-link-PID-XXXX` / `fxc-run-PID-XXXX` under the system's temporary directory."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

LEGACY_AGE = 3600.0
"""Temporaries of older versions (no pid in the name) are swept once they are this old (seconds)."""


def prefix(kind: str) -> str:
    """`fxc-KIND-PID-` for tempfile's prefix= under the system temporary directory."""
    return f"fxc-{kind}-{os.getpid()}-"


def build_prefix(name: str) -> str:
    return f".{name}.tmp-{os.getpid()}-"


def alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _remove(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        return True
    except OSError:
        return False


def _stale(path: Path, pid: int | None) -> bool:
    if pid is not None:
        return pid != os.getpid() and not alive(pid)
    try:
        return time.time() - path.lstat().st_mtime > LEGACY_AGE
    except OSError:
        return False


def sweep_build(target: Path) -> list[Path]:
    """Stale `.NAME.tmp-*` and `.NAME.old-PID` entries beside the artifact directory `target`."""
    parent, name = target.parent, target.name
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    tmp = re.compile(re.escape(f".{name}.tmp-") + r"(?:(\d+)-)?[A-Za-z0-9_]+")
    old = re.compile(re.escape(f".{name}.old-") + r"(\d+)")
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = tmp.fullmatch(entry.name)
        if m and _stale(entry, int(m.group(1)) if m.group(1) else None) and _remove(entry):
            removed.append(entry)
            continue
        m = old.fullmatch(entry.name)
        if m and _stale(entry, int(m.group(1))):
            if not target.exists() and not target.is_symlink():
                try:
                    entry.rename(target)  # the build died between its two renames: the previous artifact comes back
                    continue
                except OSError:
                    pass
            if _remove(entry):
                removed.append(entry)
    return removed


def sweep_system_tmp(kinds: tuple[str, ...] = ("link", "run")) -> list[Path]:
    """Stale `fxc-KIND-PID-*` entries in the system temporary directory."""
    root = Path(tempfile.gettempdir())
    pattern = re.compile(r"fxc-(" + "|".join(map(re.escape, kinds)) + r")-(?:(\d+)-)?[A-Za-z0-9_]+")
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m:
            continue
        try:
            if entry.is_symlink() or entry.lstat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if _stale(entry, int(m.group(2)) if m.group(2) else None) and _remove(entry):
            removed.append(entry)
    return removed


def write_text_atomic(path: Path, text: str, flag: str) -> Path:
    """TEXT in PATH through a temporary file beside it renamed over PATH (a failure leaves PATH as it was);
    InputError naming FLAG (the option that chose PATH) when no file can be created there."""
    from .errors import InputError

    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent) or ".")
    except OSError as exc:
        raise InputError(f"cannot write {str(path)!r} ({exc.strerror or exc}): choose another {flag} FILE") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
