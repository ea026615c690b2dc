"""What the action plugins share: the task's arguments and the host's inventory variables -> fluidml-xc calls."""
from __future__ import annotations

from pathlib import Path

from ...errors import FxcError, InputError
from ...remote.artifact import Artifact, load_artifact
from ..builds import build_once
from ..inventory import ALIASES, HOST_VARS, FleetHost
from ..tasks import HostUnreachable, Reach

COMMON_ARGS = frozenset({"artifact", "model", "board", "opt", "precision", "build_dir", "base_dir", "known_hosts",
                         "accept_new_host_key", "ssh_config", "connect_timeout"})


def host_from_vars(name: str, task_vars: dict, templar, board: str | None) -> FleetHost:
    def get(key: str):
        for var in (key, *ALIASES.get(key, ())):
            value = task_vars.get(var)
            if value is not None:
                return templar.template(value) if templar is not None else value
        return None
    values = {f: get(v) for f, v in HOST_VARS.items()}
    identity = values["identity"]
    return FleetHost(name=name, address=str(values["address"] or name),
                     port=int(values["port"]) if values["port"] is not None else None,
                     user=str(values["user"]) if values["user"] else None,
                     identity=str(Path(str(identity)).expanduser()) if identity else None,
                     board=board or (str(values["board"]) if values["board"] else None),
                     base_dir=str(values["base_dir"]) if values["base_dir"] else None,
                     known_hosts=str(Path(str(values["known_hosts"])).expanduser()) if values["known_hosts"] else None)


def reach_from_args(args: dict) -> Reach:
    from ...remote.deploy import DEFAULT_BASE_DIR
    from ...remote.ssh import DEFAULT_CONNECT_TIMEOUT

    return Reach(known_hosts=args.get("known_hosts"), accept_new_host_key=bool(args.get("accept_new_host_key", False)),
                 ssh_config=args.get("ssh_config"), connect_timeout=float(args.get("connect_timeout") or DEFAULT_CONNECT_TIMEOUT),
                 base_dir=args.get("base_dir") or DEFAULT_BASE_DIR)


def artifact_for_host(args: dict, host: FleetHost) -> Artifact:
    """`artifact: DIR` as built, or `model: M.onnx` built once for the host's board (shared by all forks)."""
    if bool(args.get("artifact")) == bool(args.get("model")):
        raise InputError("pass exactly one of artifact (a build directory) or model (an ONNX file to build per board)")
    if args.get("artifact"):
        artifact = load_artifact(Path(args["artifact"]))
        if host.board and host.board_name() != artifact.board.name:
            raise InputError(f"{host.name} is a {host.board_name()} but the artifact is built for {artifact.board.name}: "
                             f"pass model: to build per board")
        return artifact
    model = Path(args["model"])
    if not model.is_file():
        raise InputError(f"model {str(model)!r} does not exist")
    if not host.board:
        raise InputError(f"{host.name} has no fluidml_board variable (nor a board: argument): set it to build for it")
    board = host.board_name()
    options = {key: args[key] for key in ("opt", "precision") if args.get(key)}
    return build_once(model, board, Path(args.get("build_dir") or "build") / f"{model.stem}-{board}", options,
                      quiet=True)


def failure(exc: Exception) -> dict:
    """An Ansible result for a fluidml-xc error: `unreachable` when the host could not be reached."""
    if isinstance(exc, HostUnreachable):
        return {"unreachable": True, "msg": str(exc)}
    if isinstance(exc, FxcError):
        return {"failed": True, "msg": str(exc), "exit_code": exc.exit_code}
    return {"failed": True, "msg": f"{type(exc).__name__}: {exc}"}
