"""Targets (targets/*.toml: triple, cpu, toolchain, emulator) and boards (boards/*.toml)."""
from __future__ import annotations

import platform
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ..errors import InputError
from ..resources import data_dir


@dataclass(frozen=True)
class Target:
    name: str
    triple: str
    cpu: str
    features: str
    vector_bits: int
    alignment: int
    zig_target: str
    elf_machine: str
    elf_class: int
    uname_machines: tuple[str, ...]
    emulator: str
    accumulators: int = 12
    """Vector registers the float GEMM register tile keeps accumulators in (targets/*.toml)."""
    conv_accumulators: int = 12
    """The same for the Conv and depthwise tiles (their taps are unrolled: more operands live at once)."""

    @property
    def pointer_bits(self) -> int:
        return self.elf_class


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    target: Target
    cpu: str
    features: str
    cores: int
    memory_mb: int
    emulated: bool
    aliases: tuple[str, ...]
    ssh_user: str
    ssh_port: int
    detect: dict = field(default_factory=dict, hash=False, compare=False)
    telemetry: dict = field(default_factory=dict, hash=False, compare=False)


def _load_toml(path: Path) -> dict:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


@cache
def targets() -> dict[str, Target]:
    found = {}
    for path in sorted(data_dir("targets").glob("*.toml")):
        raw = _load_toml(path)
        raw["uname_machines"] = tuple(raw.get("uname_machines", ()))
        found[raw["name"]] = Target(**raw)
    return found


@cache
def boards() -> dict[str, Board]:
    found = {}
    all_targets = targets()
    for path in sorted(data_dir("boards").glob("*.toml")):
        raw = _load_toml(path)
        target = all_targets[raw["target"]]
        ssh = raw.get("ssh", {})
        found[raw["name"]] = Board(
            name=raw["name"], description=raw.get("description", ""), target=target,
            cpu=raw.get("cpu", target.cpu), features=raw.get("features", target.features),
            cores=raw.get("cores", 0), memory_mb=raw.get("memory_mb", 0), emulated=raw.get("emulated", False),
            aliases=tuple(raw.get("aliases", ())), ssh_user=ssh.get("user", ""), ssh_port=ssh.get("port", 22),
            detect=raw.get("detect", {}), telemetry=raw.get("telemetry", {}))
    return found


def default_board_name() -> str:
    machine = platform.machine().lower()
    for board in boards().values():
        if not board.emulated and machine in board.target.uname_machines and board.cpu == "native":
            return board.name
    return "x86_64"


def get_board(name: str | None) -> Board:
    name = name or default_board_name()
    all_boards = boards()
    if name in all_boards:
        return all_boards[name]
    for board in all_boards.values():
        if name in board.aliases:
            return board
    raise InputError(f"unknown board {name!r}; valid boards: {', '.join(sorted(all_boards))} (see `fluidml-xc boards`)")


def get_target(name: str) -> Target:
    try:
        return targets()[name]
    except KeyError:
        raise InputError(f"unknown target {name!r}; valid targets: {', '.join(sorted(targets()))}") from None
