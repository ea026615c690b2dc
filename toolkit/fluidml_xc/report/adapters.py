"""Entry points the other commands use (`profile --html`, the fleet's per-host reports)."""
from __future__ import annotations

import sys
from pathlib import Path

from . import load_artifact, profile_from_dict, render_report, write_report


def write_profile_html(artifact_dir: Path, profile: dict, output: str | Path, source: str = "this profile") -> Path:
    """The report of one artifact and one `profile` result, written to OUTPUT (atomically)."""
    path = write_report(output, render_report([load_artifact(artifact_dir)], [profile_from_dict(profile, source)]))
    print(f"wrote {path}", file=sys.stderr)
    return path


def write_fleet_html(artifact_dirs: list[Path], profiles: list[tuple[str, dict]], output: str | Path) -> Path:
    """One page for a fleet run: every artifact built and every host's profile, side by side."""
    path = write_report(output, render_report([load_artifact(d) for d in dict.fromkeys(artifact_dirs)],
                                              [profile_from_dict(p, host) for host, p in profiles]))
    print(f"wrote {path}", file=sys.stderr)
    return path
