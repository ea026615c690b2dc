"""The kernel cache store (target/kernel_cache.py, issue #27): round trip, damaged entries, parallel writers and
readers in several processes, LRU pruning, a full and a read-only disk, its settings; and `fluidml-xc cache`."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import multiprocessing
import os
import random
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fluidml_xc.cli import main
from fluidml_xc.errors import InputError
from fluidml_xc.target import kernel_cache
from fluidml_xc.target.kernel_cache import HEADER, CacheSettings, KernelCache, default_settings


def key_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def payload_of(key: str, size: int | None = None) -> bytes:
    """Bytes that only KEY gives (so a read can tell a right payload from any other), of varying length."""
    size = size if size is not None else 500 + int(key[:4], 16) % 3500
    return (hashlib.sha512(key.encode()).digest() * (size // 64 + 1))[:size]


def make_cache(root: Path, limit: int = 1 << 30) -> KernelCache:
    return KernelCache(CacheSettings(root, limit))


@pytest.fixture(autouse=True)
def _fresh_warning(monkeypatch):
    monkeypatch.setattr(kernel_cache, "_warned", False)


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(kernel_cache.TEMP_PREFIX)]


def test_round_trip(tmp_path):
    cache = make_cache(tmp_path / "k")
    key = key_of("conv 3x3")
    assert cache.get(key) is None
    assert cache.put(key, b"\x7fELF object bytes")
    assert cache.get(key) == b"\x7fELF object bytes"
    path = tmp_path / "k" / key[:2] / key
    blob = path.read_bytes()
    magic, version, length, digest = HEADER.unpack_from(blob)
    assert (magic, version, length) == (kernel_cache.MAGIC, kernel_cache.VERSION, 17)
    assert digest == hashlib.sha256(b"\x7fELF object bytes").digest()
    assert cache.put(key, b"")
    assert cache.get(key) == b""
    stats = cache.stats()
    assert (stats.root, stats.entries, stats.bytes, stats.limit_bytes) == (tmp_path / "k", 1, HEADER.size, 1 << 30)
    assert not temp_files(tmp_path)


@pytest.mark.parametrize("bad", ["", "ab", key_of("x").upper(), key_of("x")[:63], key_of("x") + "0",
                                 "../" + key_of("x")[3:], "g" * 64, 123])
def test_bad_keys_are_refused(tmp_path, bad):
    cache = make_cache(tmp_path)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        cache.get(bad)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        cache.put(bad, b"x")


def _flip_payload_byte(path: Path) -> None:
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0x40
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize("damage", {
    "flipped payload byte": _flip_payload_byte,
    "truncated payload": lambda p: p.write_bytes(p.read_bytes()[:-100]),
    "truncated header": lambda p: p.write_bytes(p.read_bytes()[:HEADER.size - 5]),
    "empty file": lambda p: p.write_bytes(b""),
    "appended bytes": lambda p: p.write_bytes(p.read_bytes() + b"\0"),
    "other format version": lambda p: p.write_bytes(p.read_bytes()[:8] + b"\x02" + p.read_bytes()[9:]),
    "not an entry": lambda p: p.write_bytes(b"\x7fELF" + bytes(200)),
}.items(), ids=lambda item: item[0])
def test_damaged_entry_is_a_miss_removed_and_rebuilt(tmp_path, damage):
    cache = make_cache(tmp_path)
    key = key_of("depthwise")
    data = payload_of(key, 1000)
    assert cache.put(key, data)
    path = cache.path(key)
    damage[1](path)
    assert cache.get(key) is None
    assert not path.exists()
    assert cache.put(key, data)
    assert cache.get(key) == data


def _hammer(root: str, limit: int, keys: list[str], seed: int, rounds: int, clears: bool) -> tuple[int, int, int]:
    """One process: random puts and gets over shared KEYS (and some clears); (hits, misses, wrong reads)."""
    return _exercise(make_cache(Path(root), limit), keys, seed, rounds, clears)


def _exercise(cache: KernelCache, keys: list[str], seed: int, rounds: int = 300,
              clears: bool = False) -> tuple[int, int, int]:
    rng = random.Random(seed)
    hits = misses = wrong = 0
    for i in range(rounds):
        key = rng.choice(keys)
        if rng.random() < 0.5:
            cache.put(key, payload_of(key))
        wanted = rng.choice(keys)
        got = cache.get(wanted)
        if got is None:
            misses += 1
        elif got == payload_of(wanted):
            hits += 1
        else:
            wrong += 1
        if clears and i % 97 == 96:
            cache.clear()
    return hits, misses, wrong


@pytest.mark.parametrize("limit", [1 << 30, 48 << 10], ids=["no pruning", "pruning all along"])
def test_processes_share_a_cache_without_corrupt_reads(tmp_path, limit):
    keys = [key_of(f"kernel {i}") for i in range(40)]
    ctx = multiprocessing.get_context("spawn")
    jobs = [(str(tmp_path), limit, keys, seed, 400, seed == 0) for seed in range(4)]
    with ctx.Pool(4) as pool:
        results = pool.starmap(_hammer, jobs)
    assert sum(r[2] for r in results) == 0, results
    assert sum(r[0] for r in results) > 100, results
    cache = make_cache(tmp_path, limit)
    for key in keys:
        assert cache.get(key) in (None, payload_of(key))
    assert not temp_files(tmp_path)
    assert cache.stats().bytes <= limit + 4 * (limit // 10)


def test_threads_share_one_cache_object(tmp_path):
    keys = [key_of(f"thread {i}") for i in range(30)]
    cache = make_cache(tmp_path, 40 << 10)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda seed: _exercise(cache, keys, seed), range(8)))
    assert sum(r[2] for r in results) == 0 and sum(r[0] for r in results) > 100, results
    assert not temp_files(tmp_path) and cache.stats().bytes <= 40 << 10


def test_limit_evicts_least_recently_used(tmp_path):
    keys = [key_of(name) for name in "abcd"]
    size = HEADER.size + 1000
    cache = make_cache(tmp_path, 3 * size + size // 2)
    for key in keys[:3]:
        assert cache.put(key, payload_of(key, 1000))
    assert cache.get(keys[0]) is not None  # a is now the most recently used
    assert cache.put(keys[3], payload_of(keys[3], 1000))
    present = [cache.path(k).exists() for k in keys]
    assert present == [True, False, True, True]
    assert cache.stats().bytes == 3 * size <= cache.settings.limit_bytes
    assert cache.prune(size) == 2 * size
    assert [cache.path(k).exists() for k in keys] == [False, False, False, True]
    assert cache.prune() == 0


def test_one_writer_never_exceeds_the_limit(tmp_path):
    size = HEADER.size + 1000
    cache = make_cache(tmp_path, 10 * size)
    keys = [key_of(f"w{i}") for i in range(60)]
    for i, key in enumerate(keys):
        assert cache.put(key, payload_of(key, 1000))
        assert cache.stats().bytes <= 10 * size
    assert [cache.get(k) is not None for k in keys[-9:]] == [True] * 9


def test_an_entry_over_the_limit_is_not_stored(tmp_path):
    cache = make_cache(tmp_path, 1000)
    key = key_of("huge")
    assert not cache.put(key, bytes(2000))
    assert cache.get(key) is None
    assert cache.stats().entries == 0


def test_clear_removes_entries_and_directories(tmp_path):
    cache = make_cache(tmp_path / "k")
    keys = [key_of(f"k{i}") for i in range(20)]
    for key in keys:
        cache.put(key, payload_of(key))
    assert cache.clear() == 20
    assert cache.stats().entries == 0
    assert list((tmp_path / "k").iterdir()) == []
    assert cache.put(keys[0], b"again") and cache.get(keys[0]) == b"again"


@contextlib.contextmanager
def tmpfs(where: Path, options: str):
    """A tmpfs mounted at WHERE (True), or False when this container refuses to mount."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    except OSError:
        done = None
    mounted = done is not None and done.returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", str(where)], check=True)


def _fail_with(monkeypatch, code: int) -> None:
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(kernel_cache.os, "replace", refuse)


def test_full_disk(tmp_path, monkeypatch, capsys):
    with tmpfs(tmp_path / "disk", "size=256k") as mounted:
        cache = make_cache(tmp_path / "disk" / "kernels")
        stored = [key_of(f"first {i}") for i in range(4)]
        for key in stored:
            assert cache.put(key, payload_of(key, 20000))
        if not mounted:
            _fail_with(monkeypatch, errno.ENOSPC)
        results = [cache.put(key_of(f"more {i}"), payload_of(key_of(f"more {i}"), 20000)) for i in range(20)]
        assert results[-1] is False and results.count(False) >= 2
        warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
        assert len(warnings) == 1 and "could not store a kernel" in warnings[0], warnings
        if mounted:
            assert "No space left on device" in warnings[0]
        for key in stored:
            assert cache.get(key) == payload_of(key, 20000)
        assert not temp_files(tmp_path / "disk")


def test_read_only_cache(tmp_path, monkeypatch, capsys):
    with tmpfs(tmp_path / "ro", "size=1m") as mounted:
        cache = make_cache(tmp_path / "ro" / "kernels")
        key = key_of("stored before")
        assert cache.put(key, b"payload")
        if mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(tmp_path / "ro")], check=True)
        elif os.geteuid() != 0:
            for d in (cache.root, cache.path(key).parent):
                d.chmod(0o555)
        else:
            _fail_with(monkeypatch, errno.EROFS)
        try:
            assert cache.put(key_of("new"), b"other") is False
            assert cache.put(key_of("newer"), b"other") is False
            assert cache.get(key) == b"payload"
            assert cache.get(key_of("new")) is None
            assert cache.clear() == 0 or not mounted
        finally:
            for d in (cache.root, cache.path(key).parent):
                if not mounted and os.geteuid() != 0:
                    d.chmod(0o755)
        warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
        assert len(warnings) == 1, warnings


def test_default_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path))
    monkeypatch.delenv("FLUIDML_XC_CACHE_LIMIT", raising=False)
    assert default_settings() == CacheSettings(tmp_path / "kernels", 1 << 30)
    for text, limit in (("512M", 512 << 20), ("2G", 2 << 30), ("123456", 123456), ("64k", 64 << 10)):
        monkeypatch.setenv("FLUIDML_XC_CACHE_LIMIT", text)
        assert default_settings().limit_bytes == limit
    for bad in ("lots", "-5", "0", "1.5.2G"):
        monkeypatch.setenv("FLUIDML_XC_CACHE_LIMIT", bad)
        with pytest.raises(InputError, match=r"FLUIDML_XC_CACHE_LIMIT=.* is not a size: set it to") as info:
            default_settings()
        assert "\n" not in str(info.value)


def fill_caches(root: Path) -> list[str]:
    """Three kernels, an optimizer plan, a measured-cost file with two entries and a runtime build under ROOT; the
    kernel keys."""
    keys = [key_of(f"cli {i}") for i in range(3)]
    cache = make_cache(root / "kernels")
    for key in keys:
        cache.put(key, payload_of(key, 1000))
    make_cache(root / "plans").put(key_of("plan"), bytes(10))
    (root / "costs").mkdir()
    (root / "costs" / "x86_64-linux-musl--x86-64-v3.json").write_text(
        json.dumps({"format": 1, "entries": {"a": {"ms": 1.0}, "b": {"ms": 2.0}}}))
    runtime = root / "runtime" / "x86_64-0123456789abcdef"
    runtime.mkdir(parents=True)
    for name in ("npy.o", "pool.o"):
        (runtime / name).write_bytes(bytes(100))
    return keys


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path))
    monkeypatch.setenv("FLUIDML_XC_CACHE_LIMIT", "64M")
    return tmp_path


def test_cli_show(cache_env):
    fill_caches(cache_env)
    code, out, _ = run_cli("cache", "--json")
    assert code == 0
    data = json.loads(out)
    size = 3 * (HEADER.size + 1000)
    assert data["kernels"] == {"root": str(cache_env / "kernels"), "entries": 3, "bytes": size, "limit_bytes": 64 << 20}
    assert {k: v for k, v in data["costs"].items() if k != "bytes"} == {"root": str(cache_env / "costs"),
                                                                       "targets": 1, "entries": 2}
    assert data["runtimes"] == {"root": str(cache_env / "runtime"), "builds": 1, "objects": 2, "bytes": 200}
    assert data["plans"] == {"root": str(cache_env / "plans"), "entries": 1, "bytes": HEADER.size + 10}
    code, out, _ = run_cli("cache", "show")
    assert code == 0 and str(cache_env / "kernels") in out and "3 entries, 3.1 KiB of 64.0 MiB" in out
    assert "2 entries for 1 target(s)" in out and "1 build(s), 2 objects" in out
    assert str(cache_env / "plans") in out and f"1 entries, {HEADER.size + 10} B" in out


def test_cli_clear(cache_env):
    keys = fill_caches(cache_env)
    code, out, _ = run_cli("cache", "clear")
    assert code == 0 and "removed 3 compiled kernel(s) and 1 optimizer plan(s)" in out
    assert make_cache(cache_env / "plans").stats().entries == 0
    assert all(make_cache(cache_env / "kernels").get(k) is None for k in keys)
    assert (cache_env / "costs" / "x86_64-linux-musl--x86-64-v3.json").is_file()
    assert (cache_env / "runtime" / "x86_64-0123456789abcdef" / "npy.o").is_file()
    assert make_cache(cache_env / "kernels").put(keys[0], b"k")
    code, out, _ = run_cli("cache", "clear", "--all", "--json")
    assert code == 0
    assert json.loads(out) == {"removed": {"kernels": 1, "plans": 0, "costs": 1, "runtimes": 1}, "kernels_left": 0}
    assert not list((cache_env / "costs").iterdir()) and not list((cache_env / "runtime").iterdir())


def test_cli_errors(cache_env, monkeypatch):
    code, out, err = run_cli("cache", "show", "--all")
    assert code == 2 and not out and err.count("\n") == 1 and "--all goes with `cache clear`" in err
    monkeypatch.setenv("FLUIDML_XC_CACHE_LIMIT", "2 gigs")
    for action in ("show", "clear"):
        code, out, err = run_cli("cache", action)
        assert code == 2 and not out and err.count("\n") == 1, err
        assert err.startswith("fluidml-xc: error: FLUIDML_XC_CACHE_LIMIT='2 gigs' is not a size"), err
