"""Targets (targets/*.toml: triple, cpu, toolchain, emulator) and boards (boards/*.toml)."""
from __future__ import annotations

import os
import platform
import re
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
    vector_accumulators: int = 0
    """`accumulators` when the cpu and features enable an optional vector unit (RISC-V's V); 0: the same."""
    vector_conv_accumulators: int = 0
    """`conv_accumulators` likewise."""
    emulator_vector_cpu: str = ""
    """The emulator's -cpu for code using the optional vector unit ({vlen}: the VLEN the code assumes)."""
    private_caches: bool = False
    """The target's cores may sit in cache domains they do not share (x86: CCXs, sockets, a VM's vCPUs on either),
    where a line another core wrote or holds costs several local accesses: a threaded whole-image Winograd conv
    then gives each thread its own copy of V (fluid/winograd_split.py v_copies)."""
    vector_lmul: int = 1
    """RISC-V: the kernels' vectors are register groups of this many V registers (LMUL): a `<16 x float>` at VLEN
    256 and LMUL 2 loads 16 floats in one `vle32.v` (4 cycles on the X60 against 3 for 8 at LMUL 1), and each
    `vfmacc` issues for 2 cycles, which covers the loads and the scalar operand loads the in-order core issues
    between them (docs/RISCV_KERNELS.md); the `vector_*` budgets count register groups."""

    @property
    def pointer_bits(self) -> int:
        return self.elf_class

    def emulator_args(self, features: str) -> tuple[str, ...]:
        """The emulator's options for code built with `features` (a manifest's, explicit): qemu-riscv64's
        default CPU has no V, so RVV code runs under `-cpu rv64,v=true,vlen=N` at the largest +zvlNb (128: +v)."""
        flags = set(features.split(","))
        if not self.emulator_vector_cpu or "+v" not in flags:
            return ()
        vlens = [int(m.group(1)) for f in flags if (m := re.fullmatch(r"\+zvl(\d+)b", f))]
        extensions = "".join(f",{f[1:]}=true" for f in sorted(flags & set(EMULATOR_EXTENSIONS)))
        return ("-cpu", self.emulator_vector_cpu.format(vlen=max([128, *vlens])) + extensions)


EMULATOR_EXTENSIONS = ("+zicond",)
"""RISC-V extensions qemu's rv64 CPU leaves off, switched on (`zicond=true`) when the build's features name them (the
SpacemiT X60 has Zicond: LLVM's `czero` selects, kernels/epilogue.py's branch-free scalar Clip)."""


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
    cpu_variants: tuple[str, ...] = ()
    """x86-64 levels the model is compiled for at once, the widest the CPU has chosen at init (`cpu` is the lowest)."""
    ref: str = ""
    """How a manifest names the board: its name, or the absolute path of a board file given by path."""


BOARD_KEYS = frozenset({"name", "description", "target", "cpu", "features", "cpu_variants", "cores", "memory_mb",
                        "emulated", "aliases", "ssh", "detect", "telemetry"})


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


def _board(raw: dict, path: Path, ref: str) -> Board:
    """A Board from one parsed board file; a missing or unknown key or target is an InputError naming the file."""
    unknown = sorted(set(raw) - BOARD_KEYS)
    if unknown or not isinstance(raw.get("name"), str) or not isinstance(raw.get("target"), str):
        problem = f"unknown key {unknown[0]!r}" if unknown else "it needs `name` and `target` (strings)"
        raise InputError(f"board file {path}: {problem}; keys: {', '.join(sorted(BOARD_KEYS))} (docs/BOARDS.md)")
    all_targets = targets()
    if raw["target"] not in all_targets:
        raise InputError(f"board file {path}: unknown target {raw['target']!r}; valid targets: {', '.join(sorted(all_targets))}")
    target = all_targets[raw["target"]]
    ssh = raw.get("ssh", {})
    try:
        return Board(
            name=raw["name"], description=str(raw.get("description", "")), target=target,
            cpu=str(raw.get("cpu", target.cpu)), features=str(raw.get("features", target.features)),
            cores=int(raw.get("cores", 0)), memory_mb=int(raw.get("memory_mb", 0)), emulated=bool(raw.get("emulated", False)),
            aliases=tuple(map(str, raw.get("aliases", ()))), ssh_user=str(ssh.get("user", "")), ssh_port=int(ssh.get("port", 22)),
            detect=dict(raw.get("detect", {})), telemetry=dict(raw.get("telemetry", {})),
            cpu_variants=tuple(map(str, raw.get("cpu_variants", ()))), ref=ref)
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"board file {path}: a value has the wrong type ({exc}); see docs/BOARDS.md") from None


def user_board_dirs() -> tuple[Path, ...]:
    """Where your own board files live: $FLUIDML_XC_BOARDS (directories separated by ':'), else
    ~/.config/fluidml-xc/boards ($XDG_CONFIG_HOME)."""
    if os.environ.get("FLUIDML_XC_BOARDS"):
        return tuple(Path(d).expanduser() for d in os.environ["FLUIDML_XC_BOARDS"].split(os.pathsep) if d)
    return (Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "fluidml-xc" / "boards",)


def load_board_file(path: Path, ref: str | None = None) -> Board:
    try:
        raw = _load_toml(path)
    except OSError as exc:
        raise InputError(f"cannot read board file {path} ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"board file {path} is not valid TOML ({exc})") from None
    return _board(raw, path, ref if ref is not None else str(raw.get("name", "")))


@cache
def _boards(user_dirs: tuple[Path, ...]) -> dict[str, Board]:
    found = {}
    for directory in (data_dir("boards"), *user_dirs):
        for path in sorted(directory.glob("*.toml")) if directory.is_dir() else ():
            board = load_board_file(path)
            found[board.name] = board
    return found


def boards() -> dict[str, Board]:
    """The packaged boards (boards/*.toml), then your own (user_board_dirs(); a same name replaces a packaged one)."""
    return _boards(user_board_dirs())


def default_board_name() -> str:
    machine = platform.machine().lower()
    for board in boards().values():
        if not board.emulated and machine in board.target.uname_machines and board.cpu_variants:
            return board.name
    return "x86_64"


def is_board_path(name: str) -> bool:
    return name.endswith(".toml") or "/" in name or os.sep in name


def get_board(name: str | None) -> Board:
    """A board by name or alias, or a board file by path (`--board ./myboard.toml`: its manifest records the
    absolute path, so deploy and verify find it again)."""
    name = name or default_board_name()
    if is_board_path(name):
        path = Path(name).expanduser().resolve()
        if not path.is_file():
            raise InputError(f"board file {name} does not exist; give a board name (see `fluidml-xc boards`) or a path to "
                             f"a board .toml")
        return load_board_file(path, str(path))
    all_boards = boards()
    if name in all_boards:
        return all_boards[name]
    for board in all_boards.values():
        if name in board.aliases:
            return board
    raise InputError(f"unknown board {name!r}; valid boards: {', '.join(sorted(all_boards))} (see `fluidml-xc boards`, "
                     f"or give a board file's path)")


def get_target(name: str) -> Target:
    try:
        return targets()[name]
    except KeyError:
        raise InputError(f"unknown target {name!r}; valid targets: {', '.join(sorted(targets()))}") from None
