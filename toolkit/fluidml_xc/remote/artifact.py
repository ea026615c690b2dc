"""The local artifact directory (manifest.json + runner + ...) as deploy, profile and verify see it."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..target.boards import Board, Target, get_board, get_target
from ..artifact import LAST_BUILD, MANIFEST, Manifest, read_manifest, sha256_file
from ..errors import InputError

DEPLOYED = frozenset({"manifest.json", "runner", "runner_prof"})
"""What the board needs; model.o, libmodel.a and the C sources stay on the host for linking into apps."""
NO_BUILD = "no build found: run `fluidml-xc build MODEL.onnx` first or pass the artifact directory"


def resolve_artifact_dir(arg: str | None) -> Path:
    """DIR as given, or the most recent build recorded in build/.last."""
    if arg:
        return Path(arg)
    if not LAST_BUILD.is_file():
        raise InputError(NO_BUILD)
    recorded = LAST_BUILD.read_text(encoding="utf-8").strip()
    if not recorded:
        raise InputError(NO_BUILD)
    path = Path(recorded)
    if not path.is_dir():
        raise InputError(f"the most recent build ({path}, from {LAST_BUILD}) no longer exists: rebuild it or pass "
                         f"the artifact directory")
    return path


@dataclass(frozen=True)
class ArtifactFile:
    name: str
    size: int
    sha256: str
    executable: bool


@dataclass(frozen=True)
class Artifact:
    """A built artifact: its directory, parsed manifest and the files a deploy uploads (DEPLOYED)."""

    path: Path
    manifest: Manifest
    files: tuple[ArtifactFile, ...]

    @cached_property
    def board(self) -> Board:
        return get_board(self.manifest.board)

    @cached_property
    def target(self) -> Target:
        return get_target(self.manifest.target or self.board.target.name)

    @property
    def emulator(self) -> str:
        return self.manifest.emulator or self.target.emulator

    @property
    def model_name(self) -> str:
        return self.manifest.model.name or self.path.name

    @property
    def name(self) -> str:
        """A file-name-safe `model-board` used for the remote directory."""
        raw = f"{self.model_name}-{self.board.name}"
        return re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._") or "model"

    @cached_property
    def digest(self) -> str:
        """Content address: sha256 over the (name, sha256) of every file."""
        listing = "".join(f"{f.sha256}  {f.name}\n" for f in sorted(self.files, key=lambda f: f.name))
        return hashlib.sha256(listing.encode()).hexdigest()

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def runner(self, profiling: bool = False) -> str:
        """File name of the runner to use (the profiling one when asked and present)."""
        names = {f.name for f in self.files}
        if profiling and "runner_prof" in names:
            return "runner_prof"
        if "runner" not in names:
            raise InputError(f"{self.path} has no runner executable: rebuild the artifact")
        return "runner"


def load_artifact(path: Path) -> Artifact:
    """Read DIR/manifest.json, check each listed file against its recorded sha256, keep the DEPLOYED ones."""
    if not path.is_dir():
        raise InputError(f"artifact directory {path} does not exist")
    manifest = read_manifest(path)
    recorded = manifest.files or {
        p.name: None for p in sorted(path.iterdir()) if p.is_file() and not p.name.startswith(".")
    }
    files = []
    for name in sorted(set(recorded) | {MANIFEST}):
        file_path = path / name
        if "/" in name or name.startswith(".") or not file_path.is_file():
            raise InputError(f"{path} is incomplete: {name!r} listed in manifest.json is missing; rebuild it")
        actual = sha256_file(file_path)
        if recorded.get(name) and recorded[name] != actual:
            raise InputError(f"{file_path} does not match the sha256 in manifest.json (modified after the build?): "
                             f"rebuild the artifact")
        if name not in DEPLOYED:
            continue
        stat = file_path.stat()
        files.append(ArtifactFile(name, stat.st_size, actual, bool(stat.st_mode & 0o111)))
    return Artifact(path, manifest, tuple(files))
