"""Does the board fit the artifact? Architecture (uname -m), userland width (getconf LONG_BIT), disk space."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import RemoteError
from .artifact import Artifact
from .progress import human_bytes
from .shell import Shell, ascii_int, check, sh, shown

_PROBE = r'''
base=$1; emulator=$2
mkdir -p -- "$base" || exit 3
echo "machine=$(uname -m)"
echo "long_bit=$(getconf LONG_BIT 2>/dev/null)"
df -Pk -- "$base" 2>/dev/null | { read -r header; read -r fs blocks used avail rest; echo "free_kb=$avail"; }
for tool in sha256sum shasum openssl timeout "$emulator"; do
  [ -n "$tool" ] && command -v "$tool" >/dev/null 2>&1 && echo "tool=$tool"
done
exit 0
'''

# Keep this much free beyond the artifact itself (logs, inputs and outputs of verify runs).
SPACE_MARGIN = 1 << 20


@dataclass(frozen=True)
class BoardFacts:
    """What a probe of the board found."""

    machine: str
    long_bit: int | None
    free_bytes: int | None
    tools: frozenset[str]


@dataclass(frozen=True)
class RunPlan:
    """How to start a runner on the board: directly, or through the emulator (emulated boards)."""

    emulator: str = ""
    has_timeout: bool = False
    emulator_args: tuple[str, ...] = ()
    """The emulator's options (qemu-riscv64's -cpu with V for RVV code: Target.emulator_args)."""

    def argv(self, executable: str, args: Sequence[str]) -> list[str]:
        return [self.emulator, *self.emulator_args, executable, *args] if self.emulator else [executable, *args]


def probe(shell: Shell, base_dir: str, emulator: str = "") -> BoardFacts:
    """Create base_dir if needed and read machine, userland bits, free space and available tools."""
    result = check(shell.run(sh(_PROBE, base_dir, emulator)), shell.label, f"preparing {base_dir}")
    values: dict[str, str] = {}
    tools = set()
    for line in result.out.splitlines():
        key, _, value = line.partition("=")
        if key == "tool":
            tools.add(value)
        else:
            values[key] = shown(value.strip(), 80)
    free, bits = ascii_int(values.get("free_kb")), ascii_int(values.get("long_bit"))
    return BoardFacts(values.get("machine", "unknown"), bits, free * 1024 if free is not None else None, frozenset(tools))


def plan_run(artifact: Artifact, facts: BoardFacts, where: str) -> RunPlan:
    """Check the architecture; native runners run directly, emulated boards' through their emulator."""
    target, board = artifact.target, artifact.board
    userland = f"{facts.long_bit}-bit userland" if facts.long_bit else "unknown userland width"
    native = facts.machine in target.uname_machines or (
        target.elf_class == 32 and facts.machine in ("aarch64", "arm64") and facts.long_bit == 32)
    if native:
        if facts.long_bit and facts.long_bit != target.elf_class:
            other = "a 32-bit board such as rpi3" if facts.long_bit == 32 else "a 64-bit board such as rpi4"
            raise RemoteError(f"{where} runs a {userland} on {facts.machine} but the artifact is {target.elf_class}-bit "
                              f"{target.name} (board {board.name}): rebuild it with --board for {other}")
        return RunPlan("", "timeout" in facts.tools)
    if board.emulated and artifact.emulator:
        if artifact.emulator not in facts.tools:
            raise RemoteError(f"board {board.name} runs its runner through {artifact.emulator}, which is not installed "
                              f"on {where} ({facts.machine}): install qemu-user-static there")
        return RunPlan(artifact.emulator, "timeout" in facts.tools, target.emulator_args(artifact.manifest.features))
    raise RemoteError(f"{where} is {facts.machine} ({userland}) but the artifact is for {target.name} "
                      f"(board {board.name}): rebuild with the board's --board (`fluidml-xc boards detect --host ...` "
                      f"names it), or use an emulated board (qemu-aarch64, qemu-armv7, qemu-riscv64) to run under qemu there")


def check_space(facts: BoardFacts, needed: int, base_dir: str, where: str) -> None:
    if facts.free_bytes is not None and facts.free_bytes < needed + SPACE_MARGIN:
        raise RemoteError(f"not enough disk space on {where}: the artifact needs {human_bytes(needed)} in {base_dir} "
                          f"but only {human_bytes(facts.free_bytes)} is free; free some space or pass --base-dir "
                          f"on another filesystem")
