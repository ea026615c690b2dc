"""What `build` leaves behind and later commands find: the artifact directory's file digests and build/.last."""
from __future__ import annotations

import hashlib
from pathlib import Path

LAST_BUILD = Path("build") / ".last"
"""The most recent build's artifact directory (one line), read when a command is given no DIR."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
