"""`fluidml-xc boards detect --host H`: probe a board over SSH and name the matching board file: its rules
(machine, device-tree model, L4T release, RISC-V uarch) and the CPU extensions its /proc/cpuinfo shows (flags on
x86, Features on ARM, the isa line on RISC-V) against what each board's code uses; and what is deployed in the base directory, with the space left there."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..target.boards import Board, boards
from ..target.cpus import RVV_LEAF, CpuFeature, cpuinfo_flags, missing_on, required_features
from ..resources import data_dir
from .progress import human_bytes
from .shell import Shell, ascii_int, sh, shown

_PROBE = r'''
echo "@uname"; uname -s -r -m
echo "@long_bit"; getconf LONG_BIT 2>/dev/null
echo "@model"; [ -r /proc/device-tree/model ] && tr -d '\000' < /proc/device-tree/model; echo
echo "@tegra"; [ -r /etc/nv_tegra_release ] && head -n 1 /etc/nv_tegra_release
echo "@meminfo"; head -n 1 /proc/meminfo 2>/dev/null
echo "@cpuinfo"; cat /proc/cpuinfo 2>/dev/null
echo "@base"; b=$1; while [ -n "$b" ] && [ ! -d "$b" ] && [ "$b" != / ]; do b=$(dirname -- "$b"); done
df -Pk -- "${b:-/}" 2>/dev/null | { read -r header; read -r fs blocks used avail rest; echo "$avail"; }
echo "@current"; readlink -- "$1/current" 2>/dev/null
exit 0
'''

# ARM "CPU part" codes (/proc/cpuinfo) of the cores our boards use.
ARM_PARTS = {"0xd03": "Cortex-A53", "0xd04": "Cortex-A35", "0xd05": "Cortex-A55", "0xd07": "Cortex-A57",
             "0xd08": "Cortex-A72", "0xd09": "Cortex-A73", "0xd0a": "Cortex-A75", "0xd0b": "Cortex-A76",
             "0xd0d": "Cortex-A77", "0xd41": "Cortex-A78", "0xd42": "Cortex-A78AE", "0xd4b": "Cortex-A78C"}

THEAD_VENDOR = "0x5b7"
"""T-Head's mvendorid: its C906/C910 (Lichee Pi 4A, Milk-V Duo) have RVV 0.7.1, whose encoding is not RVV 1.0's."""


@dataclass(frozen=True)
class BoardInfo:
    """What the board says about itself."""

    kernel: str
    machine: str
    long_bit: int | None
    model: str
    tegra_release: str
    cpu: str
    cores: int
    memory_kb: int | None
    flags: frozenset[str] = field(default_factory=frozenset)
    """/proc/cpuinfo's flags (x86), Features (ARM) or isa extensions (RISC-V) of the first processor."""
    uarch: str = ""
    """RISC-V: /proc/cpuinfo's uarch (sifive,u74-mc; spacemit,x60; thead,c910)."""
    mvendorid: str = ""
    base_free_kb: int | None = None
    current: str = ""
    """What `current` in the base directory points to (the deployed artifact), "" for none."""


def parse_probe(text: str) -> BoardInfo:
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@"):
            current = line[1:].strip()
            sections[current] = []
        elif current:
            sections[current].append(line)
    first = lambda key: next((l.strip() for l in sections.get(key, []) if l.strip()), "")  # noqa: E731
    uname = first("uname").split()
    cpuinfo = sections.get("cpuinfo", [])
    fields: dict[str, str] = {}
    cores = 0
    for line in cpuinfo:
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "processor":
            cores += 1
        fields.setdefault(key, value.strip())
    cpu = fields.get("model name") or fields.get("hardware") or fields.get("uarch") or ""
    part = ARM_PARTS.get(fields.get("cpu part", "").lower())
    if part and part not in cpu:
        cpu = f"{part} ({cpu})" if cpu else part
    mem = first("meminfo").split()
    bits = first("long_bit")
    return BoardInfo(kernel=shown(" ".join(uname[:2]), 120), machine=shown(uname[2], 80) if len(uname) > 2 else "unknown",
                     long_bit=ascii_int(bits), model=shown(first("model"), 120),
                     tegra_release=shown(first("tegra"), 120), cpu=shown(cpu or fields.get("model") or "unknown", 120),
                     cores=cores, memory_kb=ascii_int(mem[1]) if len(mem) > 1 else None,
                     flags=cpuinfo_flags("\n".join(cpuinfo)), base_free_kb=ascii_int(first("base")),
                     current=shown(first("current"), 120), uarch=shown(fields.get("uarch", ""), 80),
                     mvendorid=shown(fields.get("mvendorid", "").lower(), 20))


def rvv_071(info: BoardInfo) -> bool:
    """A T-Head core whose vector unit is RVV 0.7.1 (its kernel may still show `v` in the isa line)."""
    return is_rvv_071(info.uarch, info.mvendorid, info.flags)


def is_rvv_071(uarch: str, mvendorid: str, flags: frozenset[str]) -> bool:
    """rvv_071 from /proc/cpuinfo's uarch and mvendorid lines and the isa line's extensions."""
    return (uarch.strip().lower().startswith("thead,") or mvendorid.strip().lower() == THEAD_VENDOR
            or bool({"xtheadvector", "xtheadv"} & flags))


def _matches(board: Board, info: BoardInfo) -> bool:
    rules = board.detect
    machines = rules.get("machine") or []
    if not machines or info.machine not in machines:
        return False
    if info.long_bit and info.long_bit != board.target.elf_class:
        return False
    if rules.get("device_tree_model") and rules["device_tree_model"] not in info.model:
        return False
    if rules.get("nv_tegra_release") and rules["nv_tegra_release"] not in info.tegra_release:
        return False
    if rules.get("uarch") and rules["uarch"] not in info.uarch:
        return False
    return True


def board_needs(board: Board) -> tuple[CpuFeature, ...]:
    """The CPU extensions every CPU running the board's code must have (its lowest cpu)."""
    target = board.target
    return required_features(target.name, target.zig_target, board.cpu, board.features)


def lacks(board: Board, info: BoardInfo) -> list[CpuFeature]:
    needs = board_needs(board)
    missing = missing_on(needs, info.flags, board.target.name)
    if rvv_071(info):  # RVV 1.0 code on RVV 0.7.1: refused, whatever the isa line says
        missing += [f for f in needs if f.leaf == RVV_LEAF and f not in missing]
    return missing


def candidates(info: BoardInfo) -> list[Board]:
    """Boards whose detect rules all hold, most specific first; a board with code variants before the
    single-level ones, and those widest first."""
    found = [b for b in boards().values() if not b.emulated and _matches(b, info)]
    return sorted(found, key=lambda b: (-len([k for k, v in b.detect.items() if v]), not b.cpu_variants,
                                        -len(board_needs(b)), b.name))


def match_boards(info: BoardInfo) -> list[Board]:
    """Boards whose detect rules hold and whose code this CPU runs (its /proc/cpuinfo has every extension)."""
    return [b for b in candidates(info) if not lacks(b, info)]


def detect(shell: Shell, base_dir: str = "") -> tuple[BoardInfo, list[Board]]:
    result = shell.run(sh(_PROBE, base_dir))
    info = parse_probe(result.out)
    return info, match_boards(info)


def _level_line(info: BoardInfo, matches: list[Board]) -> str | None:
    """For a board with code variants (x86_64): which of its levels this CPU runs, and the board for that level."""
    best = matches[0]
    levels = [b for b in matches[1:] if b.target == best.target and not b.cpu_variants and b.cpu in best.cpu_variants]
    if not best.cpu_variants or not levels:
        return None
    top = levels[0]
    return (f"level     {top.cpu}: --board {best.name} runs its {top.cpu} code here; --board {top.name} builds only "
            f"that (smaller, faster to build, refuses lower CPUs)")


def _misfits(info: BoardInfo, matches: list[Board]) -> list[str]:
    """Boards the rules match whose code this CPU cannot run."""
    lines = []
    for board in candidates(info):
        if board not in matches:
            names = ", ".join(f.name for f in lacks(board, info))
            lines.append(f"not       {board.name} ({board.cpu}): this CPU lacks {names}")
    return lines


def describe(where: str, info: BoardInfo, matches: list[Board], base_dir: str = "") -> str:
    memory = f"{info.memory_kb / 1048576:.1f} GB" if info.memory_kb else "-"
    bits = f" ({info.long_bit}-bit userland)" if info.long_bit else ""
    lines = [
        f"host      {where}",
        f"kernel    {info.kernel} {info.machine}{bits}",
        f"model     {info.model or '- (no /proc/device-tree/model)'}",
        f"tegra     {info.tegra_release or '- (no /etc/nv_tegra_release)'}",
        f"cpu       {info.cpu} x {info.cores or '?'}",
        f"memory    {memory}",
    ]
    if matches:
        best = matches[0]
        boards_dir = data_dir("boards").name
        lines.append(f"board     {best.name} ({boards_dir}/{best.name}.toml): build with "
                     f"`fluidml-xc build --board {best.name} MODEL.onnx`")
        level = _level_line(info, matches)
        if level:
            lines.append(level)
    elif candidates(info):
        lines.append("board     none fits: this CPU lacks extensions every matching board's code uses; build with a "
                     "lower --cpu (`fluidml-xc build --help`)")
    else:
        targets = sorted({b.target.name for b in boards().values() if info.machine in b.target.uname_machines})
        hint = (f"its architecture is supported (target {', '.join(targets)}): add a boards/NAME.toml for it"
                if targets else f"no target runs {info.machine}")
        lines.append(f"board     unknown: no board file matches machine {info.machine!r}"
                     + (f", model {info.model!r}" if info.model else "") + f"; {hint}")
    lines += _misfits(info, matches)
    if base_dir:
        free = human_bytes(info.base_free_kb * 1024) if info.base_free_kb is not None else "unknown"
        lines.append(f"base dir  {base_dir}: {free} free; deployed: {info.current or 'nothing'}")
    if rvv_071(info):
        lines.append(f"vector    RVV 0.7.1 ({info.uarch or 'T-Head'}): not RVV 1.0, so no board with V runs here; "
                     "--board riscv64 builds without vectors")
    return "\n".join(lines)
