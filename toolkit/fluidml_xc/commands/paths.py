"""What a path argument is (an ONNX model, an artifact directory, a directory of builds), so that a command given
one where it wants the other says so and names the command that fits."""
from __future__ import annotations

import os
from pathlib import Path

from ..artifact import MANIFEST, ManifestError, read_manifest, sha256_file
from ..errors import InputError

BUILD_ROOT = Path("build")
SHOWN = 3
"""Builds named in a message before `...`."""


def _is_artifact(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def _builds_in(path: Path) -> list[Path]:
    try:
        return sorted(d for d in path.iterdir() if d.is_dir() and _is_artifact(d))
    except OSError:
        return []


def _listing(paths: list[Path]) -> str:
    return ", ".join(str(p) for p in paths[:SHOWN]) + (", ..." if len(paths) > SHOWN else "")


def _source_model(artifact_dir: Path) -> str:
    try:
        path = read_manifest(artifact_dir).model_path(artifact_dir)
    except (ManifestError, InputError, OSError):
        return ""
    if path is None:
        return ""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _builds_of(model: Path) -> list[Path]:
    """The artifacts under build/ made from MODEL (same sha256)."""
    candidates = _builds_in(BUILD_ROOT) if BUILD_ROOT.is_dir() else []
    if not candidates:
        return []
    digest = sha256_file(model)
    found = []
    for d in candidates:
        try:
            if read_manifest(d).model.sha256 == digest:
                found.append(d)
        except (ManifestError, InputError, OSError):
            continue
    return found


def check_model_argument(value: str | Path | None, command: str) -> None:
    """An ONNX model is wanted: refuse an artifact or a directory of builds with what to pass instead."""
    if value is None:
        return
    path = Path(value)
    if not path.is_dir():
        return
    if _is_artifact(path):
        model = _source_model(path)
        raise InputError(f"{path} is an artifact, not a model: `{command}` takes the .onnx file"
                         + (f" ({path} was built from {model})" if model else "")
                         + f"; to run or inspect this build: fluidml-xc run {path}")
    builds = _builds_in(path)
    if builds:
        raise InputError(f"{path} is a directory of builds ({_listing(builds)}), not a model: `{command}` takes the "
                         f".onnx file, e.g. fluidml-xc {command} MODEL.onnx")
    models = sorted(path.glob("*.onnx"))
    raise InputError(f"{path} is a directory, not a model: `{command}` takes the .onnx file"
                     + (f", e.g. fluidml-xc {command} {models[0]}" if models else ""))


def check_artifact_argument(value: str | Path | None, command: str, fleet_hint: bool = False) -> None:
    """An artifact directory is wanted: refuse an ONNX model, another file or a directory of builds with what to
    pass instead (FLEET_HINT: the command also takes a model with --inventory)."""
    if value is None:
        return
    path = Path(value)
    if path.is_file():
        if path.suffix.lower() != ".onnx":
            raise InputError(f"{path} is a file, not an artifact: `{command}` takes the directory `fluidml-xc build` "
                             f"wrote (with manifest.json in it)")
        builds = _builds_of(path)
        fleet = " (with --inventory FILE, a model is built for each board)" if fleet_hint else ""
        if builds:
            raise InputError(f"{path} is a model, not an artifact: it is built already, pass the build: "
                             f"fluidml-xc {command} {builds[0]}" + (f" (or {_listing(builds[1:])})" if builds[1:] else "")
                             + fleet)
        raise InputError(f"{path} is a model, not an artifact: build it first with `fluidml-xc build {path} "
                         f"[--board BOARD]`, then `fluidml-xc {command} build/{path.stem}-BOARD`{fleet}")
    if path.is_dir() and not _is_artifact(path):
        builds = _builds_in(path)
        if builds:
            raise InputError(f"{path} is a directory of builds, not an artifact: pass one of them ({_listing(builds)})")
        raise InputError(f"{path} is not a fluidml-xc artifact (no {MANIFEST} in it): pass the directory `fluidml-xc build` "
                         f"wrote, or build one with `fluidml-xc build MODEL.onnx`")


def check_profile_argument(value: str | Path) -> None:
    """A `profile --json-out` file is wanted (report --profile): refuse an artifact, a directory or a model."""
    path = Path(value)
    if path.is_dir():
        what = "an artifact" if _is_artifact(path) else "a directory"
        raise InputError(f"--profile {path} is {what}, not a profile: write one with `fluidml-xc profile "
                         f"{path if _is_artifact(path) else 'DIR'} --local --json-out P.json` (or --host HOST), "
                         f"then pass --profile P.json")
    if path.suffix.lower() == ".onnx" and path.is_file():
        raise InputError(f"--profile {path} is a model, not a profile: build it, then `fluidml-xc profile DIR --local "
                         f"--json-out P.json` and pass --profile P.json")
