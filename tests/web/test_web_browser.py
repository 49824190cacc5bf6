"""What on-call sees: the status page in a real headless Chromium (Debian's chromium and
chromium-driver, installed by the test when missing).

Detections come from the real engine over incident lines (a GPU fallen off the bus with the
driver's clean-up as fallout, a device-side assert holding HTML, an OOM holding bytes that are
not UTF-8), through the real status-page sink into a persisted store; the page is served by the
daemon's own server. The screenshots at phone (390 px) and desktop (1280 px) widths are written
by the tests to ``$SIGWATCH_TEST_OUTPUT/status_page/`` (default ``tests/artifacts/``, not
tracked by git): ``*-index.png`` whole pages, ``phone-first-screen.png`` what a phone shows
before any scrolling.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.browser import Browser
from support.web import Served, engine_detections, engine_store, status_for

from sigwatch.model import Detection
from sigwatch.web.store import DetectionStore, StatusPageSink

pytestmark = pytest.mark.integration

ARTIFACTS = Path(os.environ.get("SIGWATCH_TEST_OUTPUT")
                 or Path(__file__).resolve().parent.parent / "artifacts") / "status_page"
KERNEL_LOG = (
    b"May 18 19:02:39 node7 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the "
    b"bus.\n"
    + b"".join(b"May 18 19:02:40 node7 kernel: NVRM: Xid (PCI:0000:2b:00): 45, pid=18189%d, "
               b"name=python3, Ch 0000000%d\n" % (n, n) for n in range(4)))
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
    engine_detections(library, KERNEL_LOG, sinks=[StatusPageSink(store)])
    found = engine_store(library, store)
    s = serve(store=store, status=status_for(library), node="gpu-node-17")
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
    assert "gpu-node-17" in browser.text("header")
    assert "open incidents" in browser.text("h1")
    first = browser.text("article.incident")  # the worst open incident, with its fix
    assert "GPU Has Fallen Off The Bus" in first
    assert "Fix: Xid 79" in first
    assert "Fallout: 4 detections caused by this" in first
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
    """390 px wide: no sideways scrolling; the first screen shows the worst incident, its
    line and its fix; the detection and its fix readable."""
    s, found = site
    html_line = _by_text(found, "<script>")
    browser.resize(390, 844)

    browser.get(s.base + "/")
    width = browser.run("return window.innerWidth")
    screen = browser.run("return window.innerHeight")
    index_overflow = browser.run("return document.documentElement.scrollWidth")
    bottoms = browser.run(
        "const card = document.querySelector('article.incident');"
        "const end = el => el.getBoundingClientRect().bottom;"
        "return [end(card.querySelector('h2')), end(card.querySelector('pre.trigger')),"
        "        end(card.querySelector('.fix p'))];")
    assert "GPU Has Fallen Off The Bus" in browser.text("article.incident h2")
    assert all(bottom <= screen for bottom in bottoms), (bottoms, screen)
    assert "CUDA Device-Side Assert Triggered" in browser.text("table.detections")
    browser.screenshot(ARTIFACTS / "phone-first-screen.png", full_page=False)
    browser.screenshot(ARTIFACTS / "phone-index.png")

    browser.get(s.base + f"/detections/{html_line.event_id}")
    detail_overflow = browser.run("return document.documentElement.scrollWidth")
    assert html_line.text == browser.text("pre.log mark")
    assert browser.texts("ol.steps li")
    browser.screenshot(ARTIFACTS / "phone-detection.png")

    assert width <= 400
    assert (width, width) == (index_overflow, detail_overflow)
    assert browser.alert_text() is None
