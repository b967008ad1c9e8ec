"""The shareable certificate: one self-contained HTML page that shows the verdict.

Checked twice: structurally (no script, no external resource, every case present) and in a
real headless browser (Debian's chromium), which must render the verdict from the file
alone with the network off.
"""

from __future__ import annotations

import html.parser
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conformance_mutants import SoftmaxWithoutMaxSubtraction
from helpers import plugin_for
from riftco.conformance import cli
from riftco.conformance.html import render

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _certificate(tmp_path: Path, argv: list[str]) -> tuple[int, Path, dict[str, Any]]:
    page, report = tmp_path / "report.html", tmp_path / "report.json"
    rc = cli.main([*argv, "--html", str(page), "--json", str(report), "--quiet"])
    return rc, page, json.loads(report.read_text())


def test_page_is_self_contained_and_lists_every_case(tmp_path: Path) -> None:
    rc, page, report = _certificate(
        tmp_path, ["cpu", "--ops", "softmax*,matmul", "--max-examples", "1"]
    )
    assert rc == 0
    parser = _Tags()
    parser.feed(page.read_text(encoding="utf-8"))
    tags = [t for t, _ in parser.tags]
    assert (
        "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    )
    for _, attrs in parser.tags:  # nothing loads from anywhere
        for key in ("src", "href"):
            assert not attrs.get(key), attrs
    text = " ".join(parser.text)
    assert "PASS" in text and "riftco conformance certificate: cpu" in text
    for case in report["devices"][0]["cases"]:
        assert case["id"] in text
    assert "Throughput on this device" in text and "GB/s" in text
    assert report["devices"][0]["throughput"], "the JSON holds the throughput the page shows"


def test_failing_run_shows_fail_and_the_failing_example(registry: Any, tmp_path: Path) -> None:
    registry.register(plugin_for(SoftmaxWithoutMaxSubtraction), name="mutant")
    rc, page, _ = _certificate(tmp_path, ["mutant", "--ops", "softmax[*", "--max-examples", "1"])
    text = page.read_text(encoding="utf-8")
    assert rc == 1 and 'id="verdict">FAIL<' in text
    assert "1e4 (past exp overflow)" in text  # the failing example, named


def test_render_escapes_what_a_backend_reports() -> None:
    report = json.loads((Path(__file__).parent / "data" / "report_min.json").read_text())
    report["backend"] = "<script>alert(1)</script>"
    page = render(report)
    assert "<script>" not in page and "&lt;script&gt;" in page


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt install chromium)")
def test_page_renders_the_verdict_in_a_headless_browser(tmp_path: Path) -> None:
    rc, page, _ = _certificate(tmp_path, ["cpu", "--ops", "gelu", "--max-examples", "1"])
    assert rc == 0
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
        page.as_uri(),
    ]  # fmt: skip
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    assert 'id="verdict">PASS</span>' in dom, dom[:2000]
    assert "gelu[float32]" in dom and "Model check" in dom
