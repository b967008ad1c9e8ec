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
    report = json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "report_min.json").read_text()
    )
    report["backend"] = "<script>alert(1)</script>"
    page = render(report)
    assert "<script>" not in page and "&lt;script&gt;" in page


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt install chromium)")
def test_page_renders_the_verdict_in_a_headless_browser(tmp_path: Path) -> None:
    rc, page, _ = _certificate(tmp_path, ["cpu", "--ops", "gelu", "--max-examples", "1"])
    assert rc == 0
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert 'id="verdict">PASS</span>' in dom, dom[:2000]
    assert "gelu[float32]" in dom and "Model check" in dom


#: Colours only these boxes use (conformance/html.py's CSS), to find them in a screenshot.
_VERDICT_GREEN, _SUMMARY_BLUE, _COMMAND_SAND = (
    (0x1A, 0x7F, 0x37),
    (0xEE, 0xF4, 0xFB),
    (0xF3, 0xF0, 0xE6),
)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt install chromium)")
def test_verdict_summary_and_command_fill_the_first_screen(tmp_path: Path) -> None:
    """A full run's page (hundreds of rows) seen in a 1280x800 window: the verdict, the
    coverage summary and the reproduce command are all visible without scrolling."""
    image = pytest.importorskip("PIL.Image", reason="Pillow reads the screenshot (riftco[plot])")
    rc, page, _ = _certificate(tmp_path, ["cpu", "--max-examples", "0", "--no-throughput"])
    assert rc == 0
    shot = tmp_path / "first_screen.png"
    done = _chromium(tmp_path, "--window-size=1280,800", "--force-device-scale-factor=1",
                     "--hide-scrollbars", f"--screenshot={shot}", page.as_uri())  # fmt: skip
    assert shot.exists(), done.stderr[-2000:]
    with image.open(shot) as img:
        assert img.size == (1280, 800)
        colours = {c for _, c in img.convert("RGB").getcolors(maxcolors=1 << 20)}
    for name, rgb in (("verdict", _VERDICT_GREEN), ("coverage summary", _SUMMARY_BLUE),
                      ("reproduce command", _COMMAND_SAND)):  # fmt: skip
        assert rgb in colours, f"the {name} box is not on the first screen"
    text = page.read_text(encoding="utf-8")
    assert text.index('id="summary"') < text.index('id="reproduce"') < text.index("Op x dtype")
