"""One artifact per distinct board of a fleet: the given build where it fits, one build per other board."""
from __future__ import annotations

import dataclasses
import fcntl
import sys
from pathlib import Path

from ..target.boards import get_board
from ..errors import InputError
from ..artifact import Manifest
from ..remote.artifact import Artifact, load_artifact, resolve_artifact_dir
from .inventory import FleetHost

REBUILD_KEYS = ("opt", "input_shapes", "precision")
"""Build options a rebuild for another board takes from the given artifact's manifest (threads are left to
each board's default: the given build's count is its own board's cores). An fp16 build's rebuild for a board
without float16 arithmetic is refused as `build --precision fp16` refuses it (pipeline.check_precision)."""


def _precision(manifest: Manifest) -> str:
    return (manifest.precision or {}).get("mode", "fp32")


def _board_of(host: FleetHost, default: str | None) -> str:
    name = host.board or default
    if not name:
        raise InputError(f"inventory host {host.name!r} has no fluidml_board variable and a model file gives no "
                         f"board: set fluidml_board (see `fluidml-xc boards`)")
    return get_board(name).name


def _options_from(manifest: Manifest) -> dict:
    from ..build import BuildOptions

    fields = {f.name for f in dataclasses.fields(BuildOptions)}
    out = {}
    for key in REBUILD_KEYS:
        value = _precision(manifest) if key == "precision" else getattr(manifest, key)
        if key in fields and value:
            out[key] = dict(value) if key == "input_shapes" else value
    return out


def artifacts_for(hosts: list[FleetHost], source: str | None,
                  out_root: Path | None = None) -> tuple[dict[str, Artifact], str | None]:
    """Board name -> the artifact its hosts get, and the board of hosts without fluidml_board. SOURCE is an
    artifact directory (reused for its own board, its model rebuilt with the same options for the others), an
    ONNX model (built once per board) or None (the most recent build). Rebuilds go to OUT_ROOT (default:
    beside the given artifact, or build/)."""
    given: Artifact | None = None
    model: Path | None = None
    options: dict = {}
    if source and Path(source).is_file():
        model = Path(source)
    else:
        given = load_artifact(resolve_artifact_dir(source))
        model = given.manifest.model_path(given.path) or Path("")
        options = _options_from(given.manifest)
    out_root = out_root or (given.path.parent if given else Path("build"))
    boards = list(dict.fromkeys(_board_of(h, given.board.name if given else None) for h in hosts))
    out: dict[str, Artifact] = {}
    for board in boards:
        if given is not None and given.board.name == board:
            out[board] = given
            continue
        if not model or not model.is_file():
            raise InputError(f"hosts need a build for {board}, but the model {str(model)!r} recorded in "
                             f"{given.path}/manifest.json is gone: pass the ONNX model instead of the artifact")
        name = (given.model_name if given else model.stem)
        out[board] = build_once(model, board, out_root / f"{name}-{board}", options)
    return out, (given.board.name if given else None)


def _up_to_date(out_dir: Path, model: Path, board: str, options: dict) -> Artifact | None:
    """The artifact already in OUT_DIR when it is this model (sha256), board, options (opt, input shapes, precision)
    and fluidml-xc version."""
    from .. import __version__
    from ..artifact import sha256_file

    try:
        artifact = load_artifact(out_dir)
    except InputError:
        return None
    m = artifact.manifest
    same = (m.board == board and m.model.sha256 == sha256_file(model) and m.tools.get("fluidml-xc") == __version__
            and m.opt == options.get("opt", "fluid") and _precision(m) == options.get("precision", "fp32")
            and dict(m.input_shapes) == {k: tuple(v) for k, v in (options.get("input_shapes") or {}).items()})
    return artifact if same else None


def build_once(model: Path, board: str, out_dir: Path, options: dict | None = None, quiet: bool = False) -> Artifact:
    """Build MODEL for BOARD into OUT_DIR unless an identical build is there; concurrent callers (Ansible's
    forks) wait on a lock file beside OUT_DIR, so each board is built once."""
    from ..build import BuildOptions, build_model

    options = options or {}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(out_dir.parent / f".{out_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _up_to_date(out_dir, model, board, options)
        if found:
            if not quiet:
                print(f"using {out_dir} (built from {model.name} for {board})", file=sys.stderr)
            return found
        if not quiet:
            print(f"building {model.name} for {board} -> {out_dir}", file=sys.stderr)
        result = build_model(model, BuildOptions(board=board, out_dir=out_dir, record_last=False, **options))
        return load_artifact(result.artifact)
