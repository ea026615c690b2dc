#!/usr/bin/env python3
"""Try the newest releases before adopting them: resolve every dependency to its newest version
(pyproject's upper bounds lifted), install that into a scratch virtualenv, run the test suite there,
and print what changed against constraints.txt and how the suite fared.

    python .ci/upgrade_check.py                      # the default test run (pytest -n 2 -q)
    python .ci/upgrade_check.py -- tests/test_lowp_dtypes.py -q   # other pytest arguments
    python .ci/upgrade_check.py --write              # green: also write the new lock to constraints.txt

Needs `uv` (pip install uv) for the resolution. Upgrading is then a commit of its own: the new
constraints.txt, pyproject bounds moved to the versions tested, and this script's output in the message.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "constraints.txt"
COMPILE = ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28", "--no-header", "--annotation-style", "line"]


def pins(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s#]+)", line.strip())
        if m:
            found[m.group(1).lower().replace("_", "-")] = m.group(2)
    return found


def unbounded_requirements() -> list[str]:
    """pyproject's dependencies and test extra with upper bounds removed (lower bounds kept)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += [r for r in extra if not r.startswith("fluidml-xc")]
    out = []
    for req in reqs:
        name = re.match(r"[A-Za-z0-9_.\-\[\]]+", req).group(0)
        lower = [c for c in req[len(name):].split(",") if c.strip().startswith(">=")]
        out.append(name + (lower[0].strip() if lower else ""))
    return sorted(set(out))


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(cmd, **kw)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="when the suite passes, write the new lock to constraints.txt")
    parser.add_argument("pytest_args", nargs="*", default=["-n", "2", "-q"], help="arguments for pytest (after --)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="fxc-upgrade-") as tmp:
        tmp = Path(tmp)
        (tmp / "requirements.in").write_text("\n".join(unbounded_requirements()) + "\n")
        newest = tmp / "newest.txt"
        if run(["uv", "pip", "compile", str(tmp / "requirements.in"), *COMPILE, "-o", str(newest)]).returncode:
            print("upgrade-check: the newest releases do not resolve together", file=sys.stderr)
            return 1
        old, new = pins(LOCK.read_text()), pins(newest.read_text())
        changes = [(n, old.get(n, "-"), new.get(n, "-")) for n in sorted(set(old) | set(new)) if old.get(n) != new.get(n)]
        print("\nchanges against constraints.txt:" if changes else "\nconstraints.txt already holds the newest releases")
        for name, a, b in changes:
            print(f"  {name:24s} {a:>14s} -> {b}")

        venv = tmp / "venv"
        if run([sys.executable, "-m", "venv", str(venv)]).returncode:
            return 1
        py = str(venv / "bin" / "python")
        if run([py, "-m", "pip", "install", "-q", "-c", str(newest), f"{ROOT}[test]"]).returncode:
            print("upgrade-check: installing the newest releases failed", file=sys.stderr)
            return 1
        tests = run([py, "-m", "pytest", "-p", "no:cacheprovider", *args.pytest_args], cwd=ROOT)
        verdict = "passed" if tests.returncode == 0 else f"FAILED (pytest exit {tests.returncode})"
        print(f"\nupgrade-check: {len(changes)} version change(s); the suite {verdict} with the newest releases")
        if tests.returncode == 0 and args.write and changes:
            header = [line for line in LOCK.read_text().splitlines() if line.startswith("#")]
            LOCK.write_text("\n".join(header) + "\n" + newest.read_text())
            print(f"wrote {LOCK}: move pyproject's bounds to these versions and commit the upgrade on its own")
        return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
