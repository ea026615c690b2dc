"""Compiled kernels on disk, keyed by their content (issue #27): one file per key under
cache_root()/kernels/<key[:2]>/<key>, checked by a sha256 on every read, written atomically, pruned least
recently used first when over a size limit ($FLUIDML_XC_CACHE_LIMIT, default 1 GiB; `_enforce_limit`).

An entry is a header (magic, format version, payload length, sha256 of the payload) and the payload. A writer
fills a temporary file in the entry's directory and renames it over the entry, so readers in other processes
see the old entry, the new one or none, never a part. A read that finds a damaged entry removes it and misses.
A hit sets the entry's modification time to now: that time is its recency for pruning. A full or read-only
disk makes `put` return False (one warning per process): a build goes on without the cache."""
from __future__ import annotations

import hashlib
import os
import re
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..sizes import format_bytes, parse_size
from .cpus import cache_root

LIMIT_ENV = "FLUIDML_XC_CACHE_LIMIT"
DEFAULT_LIMIT = 1 << 30
PLANS_FOLDER = "plans"
"""The folder beside `kernels` where plan_cache.py keeps the optimizer's plans in the same kind of store."""
MAGIC = b"FXCKERN\0"
VERSION = 1
HEADER = struct.Struct("<8sIQ32s")
"""magic, format version, payload bytes, sha256 of the payload."""
TEMP_PREFIX = ".tmp-"
STALE_TEMP_SECONDS = 3600
"""A temporary file this old belongs to a writer that died: prune and clear remove it."""
_KEY = re.compile(r"[0-9a-f]{64}")
_warned = False


@dataclass(frozen=True)
class CacheSettings:
    """Where the kernel cache lives and how many bytes of entries it keeps."""

    root: Path
    limit_bytes: int


@dataclass(frozen=True)
class CacheStats:
    root: Path
    entries: int
    bytes: int
    limit_bytes: int


@dataclass(frozen=True)
class _Entry:
    path: Path
    size: int
    mtime_ns: int


def default_settings(folder: str = "kernels") -> CacheSettings:
    """cache_root()/FOLDER (kernels; plans: plan_cache.py's); the limit from $FLUIDML_XC_CACHE_LIMIT (bytes, 512M,
    2G), else 1 GiB."""
    text = os.environ.get(LIMIT_ENV, "").strip()
    try:
        limit = parse_size(text) if text else DEFAULT_LIMIT
    except InputError as exc:
        raise InputError(f"{LIMIT_ENV}={text!r} is not a size: set it to a byte count or a number with K, M or G "
                         f"(512M, 2G), or unset it for {format_bytes(DEFAULT_LIMIT)}") from exc
    return CacheSettings(cache_root() / folder, limit)


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"a kernel cache key is 64 lowercase hex characters (a sha256), not {key!r}")
    return key


def encode(data: bytes) -> bytes:
    return HEADER.pack(MAGIC, VERSION, len(data), hashlib.sha256(data).digest()) + data


def decode(blob: bytes) -> bytes | None:
    """The payload of an entry's bytes, or None when they are not a whole, intact entry of this version."""
    if len(blob) < HEADER.size:
        return None
    magic, version, length, digest = HEADER.unpack_from(blob)
    payload = blob[HEADER.size:]
    if magic != MAGIC or version != VERSION or length != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def _warn_once(action: str, exc: OSError) -> None:
    global _warned
    if not _warned:
        _warned = True
        reason = exc.strerror or str(exc)
        print(f"fluidml-xc: warning: the kernel cache could not {action} ({reason}); builds go on without storing "
              f"kernels: free space, or point FLUIDML_XC_CACHE at a writable directory", file=sys.stderr)


class KernelCache:
    """The store: get/put payloads by key, stats, prune, clear. Safe across threads and processes."""

    def __init__(self, settings: CacheSettings | None = None):
        self.settings = settings or default_settings()
        self._counted: int | None = None
        """Entry bytes at the last count (None: not counted yet)."""
        self._unchecked = 0
        """Bytes this object stored since that count (or more: an overestimate only brings the next count sooner)."""
        self._lock = threading.Lock()
        """Guards the two counts: a build's threads share one KernelCache."""

    @property
    def root(self) -> Path:
        return self.settings.root

    def path(self, key: str) -> Path:
        check_key(key)
        return self.root / key[:2] / key

    def get(self, key: str) -> bytes | None:
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                blob = f.read()
                inode = os.fstat(f.fileno()).st_ino
        except OSError:
            return None
        payload = decode(blob)
        if payload is None:
            self._remove_damaged(path, inode)
            return None
        try:
            now = time.time_ns()
            os.utime(path, ns=(now, now))
        except OSError:
            pass
        return payload

    @staticmethod
    def _remove_damaged(path: Path, inode: int) -> None:
        """Remove the damaged file read, not an intact entry another process renamed into its place since."""
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass

    def put(self, key: str, data: bytes) -> bool:
        """Store DATA under KEY; False when it cannot be written (full or read-only disk) or exceeds the limit."""
        path = self.path(key)
        blob = encode(bytes(data))
        if len(blob) > self.settings.limit_bytes:
            return False
        try:
            self._write(path, blob)
        except OSError as exc:
            _warn_once("store a kernel in " + str(self.root), exc)
            return False
        self._enforce_limit(len(blob))
        return True

    def _enforce_limit(self, stored: int) -> None:
        """Count the entries on the first put, after every tenth of the limit stored, and when the count plus what
        was stored since passes the limit; over it, prune to 90 %. So N processes storing at once overshoot the
        limit by at most N tenths of it."""
        limit = self.settings.limit_bytes
        with self._lock:
            self._unchecked += stored
            if self._counted is not None and self._unchecked <= limit // 10 and self._counted + self._unchecked <= limit:
                return
            self._counted, self._unchecked = self._count(), 0
            over = self._counted > limit
        if over:
            self.prune(limit - limit // 10)

    @staticmethod
    def _write(path: Path, blob: bytes) -> None:
        for attempt in (0, 1):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
                break
            except FileNotFoundError:  # a concurrent clear() removed the directory: make it again, once
                if attempt:
                    raise
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            now = time.time_ns()
            os.utime(tmp, ns=(now, now))
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def _scan(self) -> tuple[list[_Entry], list[Path]]:
        """The entries (oldest first) and the stale temporary files under the root."""
        entries, stale = [], []
        horizon = time.time() - STALE_TEMP_SECONDS
        try:
            shards = [d for d in os.scandir(self.root) if len(d.name) == 2 and d.is_dir(follow_symlinks=False)]
        except OSError:
            return [], []
        for shard in shards:
            try:
                files = list(os.scandir(shard.path))
            except OSError:
                continue
            for f in files:
                try:
                    st = f.stat(follow_symlinks=False)
                except OSError:
                    continue
                if _KEY.fullmatch(f.name):
                    entries.append(_Entry(Path(f.path), st.st_size, st.st_mtime_ns))
                elif f.name.startswith(TEMP_PREFIX) and st.st_mtime < horizon:
                    stale.append(Path(f.path))
        entries.sort(key=lambda e: (e.mtime_ns, e.path.name))
        return entries, stale

    def _count(self) -> int:
        return sum(e.size for e in self._scan()[0])

    def stats(self) -> CacheStats:
        entries = self._scan()[0]
        return CacheStats(self.root, len(entries), sum(e.size for e in entries), self.settings.limit_bytes)

    def prune(self, limit: int | None = None) -> int:
        """Remove least recently used entries until at most LIMIT bytes (default: the settings') remain; bytes freed."""
        limit = self.settings.limit_bytes if limit is None else limit
        entries, stale = self._scan()
        total = sum(e.size for e in entries)
        freed = 0
        for path in stale:
            _unlink(path)
        for entry in entries:
            if total - freed <= limit:
                break
            if _unlink(entry.path):
                freed += entry.size
        with self._lock:
            self._counted = total - freed
        return freed

    def clear(self) -> int:
        """Remove every entry (and stale temporary files, and the emptied directories); entries removed."""
        entries, stale = self._scan()
        removed = sum(_unlink(e.path) for e in entries)
        for path in stale:
            _unlink(path)
        for shard in {e.path.parent for e in entries}:
            try:
                shard.rmdir()
            except OSError:
                pass
        with self._lock:
            self._counted = 0
        return removed


def _unlink(path: Path) -> bool:
    """Whether PATH was removed by this call (False: gone already, or a read-only disk)."""
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
