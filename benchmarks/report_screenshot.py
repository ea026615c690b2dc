"""Render a `fluidml-xc report` page in headless Chromium and save a full-page PNG (the docs/report/ pictures).

    python benchmarks/report_screenshot.py OUT.png DIR [DIR ...] [--profile P.json ...] [--title T]

Writes OUT.html beside OUT.png (the page itself) and fails when the page logs a console error or makes a
network request. Needs chromium (apt-get install chromium) and fluidml-xc[report].
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from browser import Browser  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].endswith(".png"):
        print(__doc__, file=sys.stderr)
        return 2
    png = Path(argv[0])
    page = png.with_suffix(".html")
    subprocess.run([sys.executable, "-m", "fluidml_xc.cli", "report", *argv[1:], "-o", str(page)], check=True)
    with Browser(width=1100) as browser:
        browser.load(page)
        browser.screenshot(png)
        errors, requests = browser.console_errors(), browser.requests()
    if errors or requests != [page.resolve().as_uri()]:
        print(f"console errors {errors}, requests {requests}", file=sys.stderr)
        return 1
    print(f"wrote {png} ({png.stat().st_size:,} B)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
