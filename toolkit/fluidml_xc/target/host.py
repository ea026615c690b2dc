"""Whether this machine runs code for a triple and CPU (the JIT, the measurer, the native variants ask)."""
from __future__ import annotations

import platform
from functools import cache

import llvmlite.binding as llvm

from .boards import targets
from .cpus import required_features
from ..errors import FxcError


def host_can_run(triple: str, cpu: str) -> bool:
    """Code for `triple` and `cpu` runs on this machine: same architecture, and this cpu, native, generic, or a cpu
    whose extensions this one has (x86-64-v3 on a Zen 3)."""
    arch = triple.split("-")[0]
    host = platform.machine().lower()
    same_arch = arch == host or (arch == "x86_64" and host in ("amd64", "x86_64")) or (arch == "aarch64" and host == "arm64")
    if not same_arch:
        return False
    if cpu in (llvm.get_host_cpu_name(), "native", "generic"):
        return True
    return _host_has(arch, cpu)


@cache
def _host_has(arch: str, cpu: str) -> bool:
    target = next((t for t in targets().values() if t.triple.split("-")[0] == arch), None)
    if target is None:
        return False
    try:
        needs = required_features(target.name, target.zig_target, cpu)
        have = required_features(target.name, target.zig_target, "native")
    except FxcError:
        return False
    return set(needs) <= set(have)
