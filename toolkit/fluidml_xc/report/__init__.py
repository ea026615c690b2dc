"""`fluidml-xc report`: one self-contained HTML page (matplotlib plots as inline SVG) for artifacts and profiles.

Modules: `data` (what the page shows, read from manifest.json and `profile --json` files), `plots`
(matplotlib figures -> SVG), `page` (the HTML). Needs the `report` extra (matplotlib).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..tempfiles import write_text_atomic
from .data import ArtifactFacts, ProfileFacts, label_all, load_artifact, load_profile, profile_from_dict

__all__ = ["ArtifactFacts", "ProfileFacts", "load_artifact", "load_profile", "profile_from_dict", "render_report",
           "write_report"]


def render_report(artifacts: list[ArtifactFacts], profiles: list[ProfileFacts], title: str = "") -> str:
    from ..extras import require

    require("matplotlib", "report", "`fluidml-xc report`")
    from .page import render

    if not artifacts and not profiles:
        raise InputError("nothing to report: pass artifact directories and/or --profile FILE.json")
    arts, profs = label_all(artifacts, profiles)
    return render(arts, profs, title)


def write_report(path: str | Path, text: str) -> Path:
    """Write the page atomically (a temporary file renamed over PATH, so a failure leaves PATH as it was)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"-o {str(path)!r} is a directory: name the HTML file to write")
    return write_text_atomic(path, text, "-o")
