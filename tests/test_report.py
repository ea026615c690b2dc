"""`fluidml-xc report` and `profile --html`: real artifacts and profiles, the page rendered in headless Chromium."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from browser import chromium_path
from modelrun import build, cli, graph_model, one_line_error

ROOT = Path(__file__).resolve().parent.parent


def small_cnn():
    rng = np.random.default_rng(3)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r2"]),
        helper.make_node("Conv", ["r2", "W3", "B3"], ["c3"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "W4", "B4"], ["y"], transB=1),
    ]
    consts = {"W1": w(8, 3, 3, 3), "B1": w(8), "W2": w(8, 8, 3, 3), "B2": w(8), "W3": w(16, 8, 3, 3), "B3": w(16),
              "W4": w(10, 16), "B4": w(10)}
    return graph_model(nodes, {"x": np.zeros((1, 3, 32, 32), np.float32)}, ["y"], consts)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict[str, Path]:
    """Two builds of one model (--opt greedy and fluid) and a local profile of each."""
    tmp = tmp_path_factory.mktemp("report")
    model = small_cnn()
    out = {"tmp": tmp}
    for opt in ("greedy", "fluid"):
        out[opt] = build(model, tmp / opt, opt=opt)
        out[f"{opt}.json"] = tmp / f"{opt}.json"
        proc = cli("profile", str(out[opt]), "--local", "--runs", "5", "--warmup", "1", "--json")
        assert proc.returncode == 0, proc.stderr
        json.loads(proc.stdout)  # stdout is the JSON alone
        out[f"{opt}.json"].write_text(proc.stdout)
    return out


def test_manifest_memory_plan_matches_the_planner_figures(work):
    from fluidml_xc.report import load_artifact

    for opt in ("greedy", "fluid"):
        art = load_artifact(work[opt])
        manifest = json.loads((work[opt] / "manifest.json").read_text())
        assert art.plan is not None and art.plan.steps == len(manifest["ops"])
        assert max(art.plan.live_bytes()) == manifest["memory"]["live_peak_bytes"]
        assert art.plan.extent() == manifest["memory"]["arena_bytes"]
        # no two buffers live at the same step overlap in the arena
        names = list(art.plan.intervals)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                (s1, e1), (s2, e2) = art.plan.intervals[a], art.plan.intervals[b]
                if s1 <= e2 and s2 <= e1:
                    o1, o2 = art.plan.offsets[a], art.plan.offsets[b]
                    assert o1 + art.plan.sizes[a] <= o2 or o2 + art.plan.sizes[b] <= o1, (a, b)
    assert any(op.get("fused") for op in json.loads((work["fluid"] / "manifest.json").read_text())["ops"])


def test_report_side_by_side_in_headless_chromium(work, tmp_path):
    if not chromium_path():
        pytest.skip("needs chromium (apt-get install chromium; .ci/run installs it)")
    from browser import Browser

    page = tmp_path / "report.html"
    proc = cli("report", str(work["greedy"]), str(work["fluid"]), "--profile", str(work["greedy.json"]),
               "--profile", str(work["fluid.json"]), "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    text = page.read_text()
    assert "<script" not in text and "<link" not in text and "@import" not in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)|url\(\s*["']?(https?:|//)""", text)
    greedy = json.loads((work["greedy"] / "manifest.json").read_text())
    assert f"{greedy['memory']['arena_bytes'] / 1024:,.1f} KiB" in text
    with Browser() as browser:
        browser.load(page)
        sizes = browser.evaluate(
            "Array.from(document.querySelectorAll('figure.plot')).map(f => {const r = f.querySelector('svg')"
            ".getBoundingClientRect(); return [f.id, r.width, r.height, f.querySelectorAll('svg path').length]})")
        shot = browser.screenshot(tmp_path / "report.png")
        assert browser.console_errors() == []
        assert browser.requests() == [page.resolve().as_uri()]
    figures = {fid: (w, h, paths) for fid, w, h, paths in sizes}
    for kind in ("memory-map-0", "memory-map-1", "live-bytes-0", "live-bytes-1", "top-ops-0-0", "top-ops-1-1",
                 "by-type-0-0", "compare-memory", "compare-latency", "op-deltas-1"):
        width, height, paths = figures[kind]
        assert width > 500 and height > 100 and paths > 10, (kind, figures[kind])
    # the memory map draws one bar per planned buffer
    n_buffers = len(greedy["memory"]["plan"]["intervals"])
    assert figures["memory-map-0"][2] >= n_buffers
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000
    print(f"screenshot: {shot}")


def test_profile_html_and_json_on_stdout(work, tmp_path):
    page = tmp_path / "p.html"
    proc = cli("profile", str(work["fluid"]), "--local", "--runs", "3", "--warmup", "0", "--json",
               "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    text = page.read_text()
    assert 'id="memory-map-0"' in text and 'id="top-ops-0-0"' in text
    assert data["ops"][0]["name"] in text


def test_report_errors_are_one_line_and_keep_the_output(work, tmp_path):
    page = tmp_path / "keep.html"
    page.write_text("mine")
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "m"}')
    err = one_line_error(cli("report", str(work["fluid"]), "--profile", str(bad), "-o", str(page)))
    assert "profile ... --json-out FILE" in err
    err = one_line_error(cli("report", str(tmp_path), "-o", str(page)))
    assert "not a fluidml-xc artifact" in err
    assert page.read_text() == "mine"
    err = one_line_error(cli("report", str(work["fluid"]), "-o", str(page),
                             pre="sys.modules['matplotlib'] = None; "))
    assert "fluidml-xc[report]" in err
    assert page.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "keep.html"]
