"""Everything a user or contributor reads points inside the repository (issue #23): README.md, docs/ and the
docstrings of toolkit/ and benchmarks/ name no path outside it, every .md file they cite exists, and every
relative Markdown link resolves."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = re.compile(r"/work/|\.\./shared\b|(?<![\w.])/(?:home|root|tmp|mnt)/[\w.-]+/")
"""Absolute paths of this or another machine, and the sibling folder the project once used."""
MD_FILE = re.compile(r"(?<![\w/.*-])((?:\.\./|\./)*[\w-]+(?:/[\w.-]+)*\.md)\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _documents() -> dict[Path, str]:
    """README.md and docs/**/*.md by path, each with its text."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return {p: p.read_text(encoding="utf-8") for p in files}


def _docstrings() -> dict[Path, str]:
    """Every docstring (module, class, function) of toolkit/ and benchmarks/, joined per file."""
    out = {}
    for path in sorted([*(ROOT / "toolkit").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))]
        text = "\n".join(doc for n in nodes if (doc := ast.get_docstring(n)))
        if text:
            out[path] = text
    return out


def _resolves(reference: str, where: Path) -> bool:
    """REFERENCE names a file of the repository: relative to the citing file, the root, docs/ or the package."""
    for base in (where.parent, ROOT, ROOT / "docs", ROOT / "toolkit" / "fluidml_xc"):
        path = (base / reference).resolve()
        if path.is_relative_to(ROOT) and path.exists():
            return True
    return False


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, offset) + 1}"


def test_no_path_outside_the_repository():
    bad = [f"{_where(p, text, m.start())}: {m.group(0)}" for p, text in {**_documents(), **_docstrings()}.items()
           for m in OUTSIDE.finditer(text)]
    assert not bad, "paths outside the repository:\n" + "\n".join(bad)


def test_every_cited_md_file_exists():
    bad = [f"{_where(p, text, m.start())}: {m.group(1)}" for p, text in {**_documents(), **_docstrings()}.items()
           for m in MD_FILE.finditer(text) if not _resolves(m.group(1), p)]
    assert not bad, "cited .md files that are not in the repository:\n" + "\n".join(bad)


def test_every_relative_link_resolves():
    bad = []
    for path, text in _documents().items():
        for m in LINK.finditer(text):
            target = m.group(1).split("#", 1)[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            resolved = (path.parent / target).resolve()
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                bad.append(f"{_where(path, text, m.start())}: {m.group(1)}")
    assert not bad, "links that leave the repository or point nowhere:\n" + "\n".join(bad)


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The patterns find the references this test exists for (a check that matches nothing proves nothing)."""
    text = "See `../shared/DESIGN.md`; run `bench.py /work/shared/models/*.onnx`; the plan (DESIGN.md 1.7)."
    assert len(OUTSIDE.findall(text)) == 2
    cited = [m.group(1) for m in MD_FILE.finditer(text)]
    assert cited == ["../shared/DESIGN.md", "DESIGN.md"]
    assert not _resolves("../shared/DESIGN.md", ROOT / "README.md") and not _resolves("NOPE.md", ROOT / "README.md")
    assert _resolves("DESIGN.md", ROOT / "toolkit" / "fluidml_xc" / "planning" / "planner.py")




NOT_IN_THE_REPOSITORY = {
    "model.h": "a build's generated header", "model_glue.c": "a build's generated glue", "build/": "the default output folder",
    "rpi4-8g.toml": "a user's board file in the example", "fluidml-xc/boards/": "the user's board folder under ~/.config",
}
"""Names INTERNALS.md gives to files a build or a user makes; an upper-case part (NAME, NODE) is a placeholder."""


def _named_paths(text: str) -> list[tuple[int, str]]:
    found = []
    for span in re.finditer(r"`([^`\n]+)`", text):
        for m in re.finditer(r"(?<![\w.-])([\w-]+(?:/[\w.-]+)*(?:\.(?:py|c|h|j2|toml)(?![\w.])|/(?=\W|$)))", span.group(1)):
            placeholder = any(re.match(r"[A-Z]{2,}(_|\.|$)", part) for part in m.group(1).split("/") if part)
            if not placeholder and m.group(1) not in NOT_IN_THE_REPOSITORY:
                found.append((span.start() + m.start(), m.group(1)))
    return found


def _code_path_exists(name: str) -> bool:
    roots = (ROOT, ROOT / "toolkit" / "fluidml_xc", ROOT / "docs")
    if "/" not in name.rstrip("/"):
        return any((r / name).exists() for r in roots) or any(ROOT.glob(f"**/{name.rstrip('/')}"))
    return any((r / name).exists() for r in roots)


def test_internals_names_only_paths_that_exist():
    path = ROOT / "docs" / "INTERNALS.md"
    text = path.read_text(encoding="utf-8")
    bad = [f"{_where(path, text, at)}: {name}" for at, name in _named_paths(text) if not _code_path_exists(name)]
    assert not bad, "docs/INTERNALS.md names files or folders that do not exist:\n" + "\n".join(bad)
