"""Deploy an artifact: content-addressed directory under a base directory, sha256 checked on the board,
`current` switched atomically. A deploy cut off at any point leaves the previous one in place."""
from __future__ import annotations

import posixpath
import secrets
from dataclasses import dataclass
from typing import Callable

import paramiko

from ..errors import RemoteError
from ..target.cpus import FEATURES, RVV_LEAF, cpuinfo_flags, missing_on
from .artifact import Artifact
from .detect import is_rvv_071
from .fit import BoardFacts, RunPlan, check_space, plan_run, probe
from .progress import human_bytes
from .shell import ascii_int, sh
from .ssh import Connection

DEFAULT_BASE_DIR = "~/.fluidml-xc"
CHUNK = 32768

Progress = Callable[[int, int, str], None]

_SHA256 = r'''
cd -- "$1" 2>/dev/null || exit 3; shift
if command -v sha256sum >/dev/null 2>&1; then sha256sum -- "$@"
elif command -v shasum >/dev/null 2>&1; then shasum -a 256 -- "$@"
elif command -v openssl >/dev/null 2>&1; then
  for f; do h=$(openssl dgst -sha256 -r "$f") && echo "${h%% *}  $f"; done
else echo "the board has no sha256sum, shasum or openssl" >&2; exit 4; fi
'''

_CLEAN_STALE = r'''
cd -- "$1" || exit 3
for d in .tmp-* .current-*; do if [ -e "$d" ] || [ -L "$d" ]; then rm -rf -- "$d"; fi; done
readlink current 2>/dev/null
exit 0
'''

_INSTALL = r'''
cd -- "$1" || exit 3
if [ -e "$3" ]; then rm -rf -- "$3" || exit 3; fi
mv -T -- "$2" "$3"
'''

# Atomic switch: a new symlink renamed over `current` (rename(2) replaces it in one step).
_SWITCH = r'''
cd -- "$1" || exit 3
ln -s -- "$2" "$3" && mv -T -- "$3" current
'''

_CPU_LINES = r'''for key in 'flags|features|isa' uarch mvendorid; do
  grep -m 1 -i -E "^($key)[[:space:]]*:" /proc/cpuinfo 2>/dev/null
done; exit 0'''
"""The first processor's extension line, and on RISC-V its uarch and mvendorid (a T-Head core's RVV 0.7.1)."""

_FREE = r'''df -Pk -- "$1" 2>/dev/null | { read -r header; read -r fs blocks used avail rest; echo "$avail"; }'''


@dataclass(frozen=True)
class DeployOptions:
    base_dir: str = DEFAULT_BASE_DIR
    switch_current: bool = True
    progress: Progress | None = None


@dataclass(frozen=True)
class Deployment:
    """Where an artifact lives on the board and what the deploy did."""

    where: str
    base_dir: str
    remote_dir: str
    digest: str
    already_present: bool
    uploaded_files: int
    uploaded_bytes: int
    previous: str | None
    plan: RunPlan
    facts: BoardFacts

    def path(self, name: str) -> str:
        return posixpath.join(self.remote_dir, name)


def remote_hashes(conn: Connection, directory: str, names: list[str]) -> dict[str, str] | None:
    """sha256 of each file in directory on the board; None when the directory does not exist."""
    result = conn.run(sh(_SHA256, directory, *names))
    if result.status == 3:
        return None
    if result.status == 4:
        raise RemoteError(f"cannot check sha256 on {conn.label}: {result.err.strip()}")
    found = {}
    for line in result.out.splitlines():
        digest, _, name = line.partition("  ")
        found[name.lstrip("*")] = digest.lstrip("\\")
    return found


def deploy(conn: Connection, artifact: Artifact, options: DeployOptions = DeployOptions()) -> Deployment:
    """Upload the artifact unless already present and intact, verify it on the board, switch `current`."""
    base = conn.absolute(options.base_dir)
    facts = probe(conn, base, artifact.emulator)
    plan = plan_run(artifact, facts, conn.label)
    if not plan.emulator:
        check_cpu(conn, artifact)
    dirname = f"{artifact.name}-{artifact.digest[:16]}"
    final = posixpath.join(base, dirname)
    expected = {f.name: f.sha256 for f in artifact.files}
    present = remote_hashes(conn, final, sorted(expected)) == expected
    previous = conn.run(sh(_CLEAN_STALE, base)).out.strip() or None
    nonce = secrets.token_hex(4)
    uploaded = 0
    if not present:
        check_space(facts, artifact.size, base, conn.label)
        tmp = posixpath.join(base, f".tmp-{dirname}-{nonce}")
        uploaded = _upload(conn, artifact, tmp, base, options.progress)
        got = remote_hashes(conn, tmp, sorted(expected)) or {}
        bad = sorted(name for name in expected if got.get(name) != expected[name])
        if bad:
            full = _disk_full(conn, base, 0, f"after uploading {', '.join(bad)}")
            conn.run(["rm", "-rf", "--", tmp])
            raise full or RemoteError(f"sha256 mismatch on {conn.label} for {', '.join(bad)} after upload (corrupted "
                                      f"in transit or on disk); the previous deploy is untouched, re-run deploy")
        result = conn.run(sh(_INSTALL, base, posixpath.basename(tmp), dirname))
        if not result.ok:
            raise RemoteError(f"installing {dirname} in {base} on {conn.label} {result.failure()}")
    if options.switch_current and previous != dirname:
        result = conn.run(sh(_SWITCH, base, dirname, f".current-{nonce}"))
        if not result.ok:
            raise RemoteError(f"switching {base}/current to {dirname} on {conn.label} {result.failure()}")
    return Deployment(conn.label, base, final, artifact.digest, present, 0 if present else len(artifact.files),
                      uploaded, previous, plan, facts)


def artifact_needs(artifact: Artifact) -> list:
    """The CPU extensions the artifact's code needs (manifest `cpu_needs`; older manifests: none checked)."""
    table = {f.name: f for f in FEATURES.get(artifact.target.name, ())}
    return [table[name] for name in artifact.manifest.cpu_needs if name in table]


def check_cpu(conn: Connection, artifact: Artifact) -> None:
    """Refuse a board whose /proc/cpuinfo lacks an extension the artifact's code uses (its runner would refuse it)."""
    needs = artifact_needs(artifact)
    if not needs:
        return
    lines = conn.run(sh(_CPU_LINES)).out
    flags = cpuinfo_flags(lines)
    missing = missing_on(tuple(needs), flags, artifact.target.name)
    if is_rvv_071(_field(lines, "uarch"), _field(lines, "mvendorid"), flags) and any(f.leaf == RVV_LEAF for f in needs):
        core = _field(lines, "uarch") or _field(lines, "mvendorid") or "xtheadvector"
        raise RemoteError(f"{conn.label} is a T-Head core ({core}) "
                          "whose vector unit is RVV 0.7.1, not the RVV 1.0 the artifact's code uses (board "
                          f"{artifact.board.name}); nothing uploaded: rebuild with --board riscv64 (no vectors)")
    if missing:
        built = artifact.manifest.cpu or artifact.board.cpu
        raise RemoteError(f"{conn.label}'s CPU lacks {', '.join(f.name for f in missing)} (/proc/cpuinfo), which the "
                          f"artifact's code uses (cpu {built}, board {artifact.board.name}); nothing uploaded: rebuild "
                          f"for this board (`fluidml-xc boards detect --host ...` names it)")


def _field(cpuinfo: str, key: str) -> str:
    """The value of the first `key : value` line of a /proc/cpuinfo text, "" when absent."""
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == key:
            return value.strip()
    return ""


def _upload(conn: Connection, artifact: Artifact, tmp: str, base: str, progress: Progress | None) -> int:
    """SFTP every file into tmp; classify failures as connection lost, disk full or other."""
    total, done, name = artifact.size, 0, ""
    try:
        conn.run(["mkdir", "-p", "--", tmp])
        sftp = conn.sftp()
        for f in artifact.files:
            name = f.name
            remote = posixpath.join(tmp, f.name)
            with open(artifact.path / f.name, "rb") as src, sftp.open(remote, "wb") as dst:
                dst.set_pipelined(True)
                while chunk := src.read(CHUNK):
                    dst.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total, f.name)
            arrived = sftp.stat(remote).st_size  # pipelined writes can fail silently (e.g. a full disk)
            if arrived != f.size:
                raise OSError(f"only {arrived} of {f.size} bytes of {f.name} arrived")
            sftp.chmod(remote, 0o755 if f.executable else 0o644)
            if progress and f.size == 0:
                progress(done, total, f.name)
    except (OSError, EOFError, paramiko.SSHException, RemoteError) as exc:
        state = f"while uploading {name} ({human_bytes(done)} of {human_bytes(total)})"
        if not conn.alive:
            raise RemoteError(f"connection to {conn.label} lost {state}; the previous deploy is untouched, "
                              f"re-run deploy to retry") from None
        full = _disk_full(conn, base, max(total - done, 0), state)
        conn.run(["rm", "-rf", "--", tmp])
        if full:
            raise full from None
        if isinstance(exc, RemoteError):
            raise
        raise RemoteError(f"upload to {conn.label} failed {state}: {exc}; the previous deploy is untouched") from None
    return done


def _disk_full(conn: Connection, base: str, still_needed: int, state: str) -> RemoteError | None:
    """A 'disk full' error when the filesystem of base has (almost) no room left, else None."""
    free = ascii_int(conn.run(sh(_FREE, base)).out)
    if free is not None and free * 1024 < still_needed + 64 * 1024:
        return RemoteError(f"the disk on {conn.label} is full ({free} KB free in {base}) {state}; the previous "
                           f"deploy is untouched: free some space or pass --base-dir on another filesystem")
    return None
