"""CPU governor, frequency, temperatures and (Raspberry Pi) throttle flags, where the board exposes them."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .shell import Shell, ascii_int, sh

_SNAPSHOT = r'''
cpu=/sys/devices/system/cpu/cpu0/cpufreq
[ -r "$cpu/scaling_governor" ] && echo "governor=$(cat "$cpu/scaling_governor")"
[ -r "$cpu/scaling_cur_freq" ] && echo "cur_khz=$(cat "$cpu/scaling_cur_freq")"
[ -r "$cpu/cpuinfo_max_freq" ] && echo "max_khz=$(cat "$cpu/cpuinfo_max_freq")"
for zone in /sys/class/thermal/thermal_zone*; do
  [ -r "$zone/temp" ] || continue
  t=$(cat "$zone/temp" 2>/dev/null) || continue
  echo "zone=$(cat "$zone/type" 2>/dev/null || echo "${zone##*/}")=$t"
done
command -v vcgencmd >/dev/null 2>&1 && echo "throttled=$(vcgencmd get_throttled 2>/dev/null)"
exit 0
'''

# Raspberry Pi `vcgencmd get_throttled` bits.
THROTTLE_BITS = {
    0: "under-voltage now", 1: "ARM frequency capped now", 2: "throttled now", 3: "soft temperature limit now",
    16: "under-voltage occurred", 17: "ARM frequency capping occurred", 18: "throttling occurred",
    19: "soft temperature limit occurred",
}


def decode_throttled(value: int) -> list[str]:
    return [text for bit, text in THROTTLE_BITS.items() if value & (1 << bit)]


@dataclass(frozen=True)
class Telemetry:
    """One snapshot; fields are None (or empty) when the board does not expose them."""

    governor: str | None = None
    cur_mhz: float | None = None
    max_mhz: float | None = None
    temperatures_c: dict[str, float] = field(default_factory=dict)
    throttled: str | None = None
    throttle_flags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def max_temperature(self) -> float | None:
        return max(self.temperatures_c.values()) if self.temperatures_c else None


def snapshot(shell: Shell) -> Telemetry:
    """Read the board's telemetry; never fails (an unreadable board gives an empty snapshot)."""
    try:
        result = shell.run(sh(_SNAPSHOT), timeout=30)
    except Exception:  # telemetry is best effort: a missing value never fails a profile
        return Telemetry()
    values: dict[str, str] = {}
    temps: dict[str, float] = {}
    for line in result.out.splitlines():
        key, _, value = line.partition("=")
        if key == "zone":
            name, _, raw = value.rpartition("=")
            try:
                millis = float(raw)
            except ValueError:
                continue
            temps[_unique(temps, name or "zone")] = round(millis / 1000.0 if abs(millis) > 200 else millis, 1)
        else:
            values[key] = value.strip()
    throttled = values.get("throttled", "").partition("=")[2] or None
    flags: list[str] = []
    if throttled:
        try:
            flags = decode_throttled(int(throttled, 16))
        except ValueError:
            pass
    return Telemetry(values.get("governor"), _mhz(values.get("cur_khz")), _mhz(values.get("max_khz")), temps,
                     throttled, flags)


def _mhz(khz: str | None) -> float | None:
    value = ascii_int(khz)
    return round(value / 1000.0, 1) if value is not None else None


def _unique(existing: dict, name: str) -> str:
    if name not in existing:
        return name
    n = 2
    while f"{name}#{n}" in existing:
        n += 1
    return f"{name}#{n}"
