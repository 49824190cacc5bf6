"""What on-call sees: the status page in a real headless Chromium (Debian's chromium and
chromium-driver, installed by the test when missing).

Detections come from the real engine over incident lines, one holding HTML and one holding
bytes that are not UTF-8, through the real status-page sink into a persisted store; the page is
served by the daemon's own server. Screenshots at phone (390 px) and desktop (1280 px) widths
are saved under tests/artifacts/status_page/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.browser import Browser
from support.web import Served, engine_store, status_for

from sigwatch.model import Detection
from sigwatch.web.store import DetectionStore

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "status_page"
SCRIPT = "<script>document.title='PWNED';alert(1)</script>"


@pytest.fixture(name="browser")
def _browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path / "profile", tmp_path / "chromedriver.out")
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(name="site")
def _site(serve, library, tmp_path: Path) -> tuple[Served, list[Detection]]:
    store = DetectionStore(tmp_path / "state" / "status.jsonl")
    found = engine_store(library, store)
    s = serve(store=store, status=status_for(library))
    s.liveness.beat()
    s.liveness.set_ready()
    return s, found


def _by_text(found: list[Detection], needle: str) -> Detection:
    return next(d for d in found if needle in (d.text or ""))


def test_on_call_sees_the_detections_their_context_and_fix_and_no_script_runs(
        site: tuple[Served, list[Detection]], browser: Browser) -> None:
    """Desktop: the list, then one click to the detection with HTML in its line."""
    s, found = site
    html_line = _by_text(found, "<script>")
    oom = _by_text(found, "out of memory")
    browser.get(s.base + "/")

    listing = browser.text("body")
    assert "CUDA Device-Side Assert Triggered" in listing
    assert "CUDA Out Of Memory" in listing
    assert SCRIPT in listing  # the markup is shown as text...
    assert "PWNED" not in browser.title  # ...and never ran
    assert browser.alert_text() is None
    # the inline stylesheet is allowed by its CSP hash: a stale hash would leave it unstyled
    assert "rgb(255, 255, 255)" == browser.run(
        "return getComputedStyle(document.querySelector('.sev')).color")
    browser.screenshot(ARTIFACTS / "desktop-index.png")

    browser.click(f'table.detections td[data-label="Signature"] a[href="/detections/'
                  f'{html_line.event_id}"]')

    assert browser.url.endswith(f"/detections/{html_line.event_id}")
    assert "CUDA Device-Side Assert Triggered" in browser.text("h1")
    assert html_line.text == browser.text("pre.log mark")
    assert list(html_line.context) == browser.texts("pre.log .ctx")
    assert "Assertion `t >= 0 && t < n_classes` failed." in browser.text("pre.log .ctx")
    assert list(html_line.remediation.steps) == browser.texts("ol.steps li")
    assert html_line.path in browser.text("dl.meta")
    assert str(html_line.offset) in browser.text("dl.meta")
    earlier = browser.text("table.detections")
    assert "Assertion" in earlier
    assert "PWNED" not in browser.title
    assert browser.alert_text() is None
    browser.screenshot(ARTIFACTS / "desktop-detection.png")

    browser.get(s.base + f"/detections/{oom.event_id}")
    assert "\ufffd" in browser.text("pre.log mark")


def test_the_pages_fit_a_phone_screen(site: tuple[Served, list[Detection]],
                                      browser: Browser) -> None:
    """390 px wide: no sideways scrolling, the detection and its fix readable."""
    s, found = site
    html_line = _by_text(found, "<script>")
    browser.resize(390, 844)

    browser.get(s.base + "/")
    width = browser.run("return window.innerWidth")
    index_overflow = browser.run("return document.documentElement.scrollWidth")
    assert "CUDA Device-Side Assert Triggered" in browser.text("table.detections")
    browser.screenshot(ARTIFACTS / "phone-index.png")

    browser.get(s.base + f"/detections/{html_line.event_id}")
    detail_overflow = browser.run("return document.documentElement.scrollWidth")
    assert html_line.text == browser.text("pre.log mark")
    assert browser.texts("ol.steps li")
    browser.screenshot(ARTIFACTS / "phone-detection.png")

    assert width <= 400
    assert (width, width) == (index_overflow, detail_overflow)
    assert browser.alert_text() is None
