"""Issue 14's "done when", on the real daemon: `sigwatch run` as a process, real log lines
(one holding HTML, one holding bytes that are not UTF-8), the pages opened in a real headless
Chromium (Debian chromium and chromium-driver, installed when missing), the JSON API, the ring
kept across a restart, and basic auth covering /metrics too.

Screenshots at phone and desktop widths go to tests/artifacts/status_page_daemon/.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.browser import Browser
from support.daemon import DaemonProcess, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "status_page_daemon"
SCRIPT = "<script>document.title='PWNED';alert(1)</script>"
HTML_LINE = (f"RuntimeError: CUDA error: device-side assert triggered {SCRIPT}\n").encode()
BAD_UTF8 = (b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB \xff\xfe "
            b"(GPU 0; 79.15 GiB total capacity)\n")
CONTEXT = b"[rank0]: Assertion `t >= 0 && t < n_classes` failed.\n"


def _get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _detections(base: str) -> list[dict[str, object]]:
    status, body = _get(base + "/api/v1/detections?limit=100")
    if status != 200:
        return []
    items = json.loads(body)["detections"]
    assert isinstance(items, list)
    return items


@pytest.fixture(name="node")
def _node(tmp_path: Path) -> Iterator[tuple[Path, str, list[DaemonProcess]]]:
    (tmp_path / "logs").mkdir()
    port = free_port()
    procs: list[DaemonProcess] = []
    yield tmp_path, f"127.0.0.1:{port}", procs
    for proc in procs:
        proc.stop()


def _start(tmp_path: Path, listen: str, procs: list[DaemonProcess],
           *extra: str) -> DaemonProcess:
    proc = DaemonProcess(["--watch", str(tmp_path / "logs" / "*.log"), "--listen", listen,
                          "--state-dir", str(tmp_path / "state"), "--start-at", "beginning",
                          "--no-console", *extra], tmp_path / f"daemon{len(procs)}.log")
    procs.append(proc)
    return proc


def test_on_call_opens_the_real_daemons_page_and_sees_the_story(
        node: tuple[Path, str, list[DaemonProcess]]) -> None:
    tmp_path, listen, procs = node
    base = f"http://{listen}"
    _start(tmp_path, listen, procs, "--node", "gpu-node-17")
    wait_for(lambda: _get(base + "/-/ready")[0] == 200, timeout=20, what="readiness")
    with open(tmp_path / "logs" / "train.log", "ab") as fh:
        fh.write(b"step 10 loss 2.1\n" + CONTEXT + HTML_LINE + BAD_UTF8)
    wait_for(lambda: len(_detections(base)) >= 2, timeout=120, what="two detections")
    found = _detections(base)
    html = next(d for d in found if SCRIPT in str(d["text"]))

    browser = Browser(tmp_path / "profile", tmp_path / "chromedriver.out")
    try:
        browser.get(base + "/")
        assert "gpu-node-17" in browser.text("header")  # --node, not the host name
        assert {"gpu-node-17"} == {d["host"] for d in found}
        assert "open incidents" in browser.text("h1")
        assert SCRIPT in browser.text("body")
        assert "PWNED" not in browser.title
        assert browser.alert_text() is None
        browser.screenshot(ARTIFACTS / "desktop-index.png")

        browser.get(base + f"/detections/{html['event_id']}")
        assert html["text"] == browser.text("pre.log mark")
        assert "Assertion `t >= 0 && t < n_classes` failed." in browser.text("pre.log")
        assert browser.texts("ol.steps li")  # the fix, step by step
        assert "PWNED" not in browser.title
        assert browser.alert_text() is None
        browser.screenshot(ARTIFACTS / "desktop-detection.png")

        oom = next(d for d in found if "out of memory" in str(d["text"]))
        browser.resize(390, 844)
        browser.get(base + f"/detections/{oom['event_id']}")
        assert "\ufffd" in browser.text("pre.log mark")
        browser.screenshot(ARTIFACTS / "phone-detection.png")
        wide = browser.run(
            "return [...document.querySelectorAll('body *')].filter("
            "e => e.getBoundingClientRect().right > window.innerWidth + 1)"
            ".map(e => e.tagName + '.' + e.className).slice(0, 8)")
        assert [] == wide
        assert browser.run("return document.documentElement.scrollWidth") <= 400
    finally:
        browser.close()

    procs[0].stop()
    _start(tmp_path, listen, procs)
    wait_for(lambda: _get(base + "/-/ready")[0] == 200, timeout=20, what="readiness again")
    assert {d["event_id"] for d in found} <= {d["event_id"] for d in _detections(base)}


def test_with_basic_auth_on_unauthenticated_requests_get_401_and_metrics_too(
        node: tuple[Path, str, list[DaemonProcess]]) -> None:
    tmp_path, listen, procs = node
    from sigwatch.web.auth import hash_password  # noqa: PLC0415

    config = tmp_path / "sigwatch.toml"
    config.write_text(f'[web.basic_auth_users]\noncall = "{hash_password("s3cret")}"\n')
    base = f"http://{listen}"
    _start(tmp_path, listen, procs, "--config", str(config))
    wait_for(lambda: _get(base + "/-/ready", ("oncall", "s3cret"))[0] == 200, timeout=20,
             what="readiness with credentials")

    assert 401 == _get(base + "/metrics")[0]
    assert 401 == _get(base + "/")[0]
    assert 401 == _get(base + "/metrics", ("oncall", "wrong"))[0]
    status, body = _get(base + "/metrics", ("oncall", "s3cret"))
    assert 200 == status
    assert b"sigwatch_detections_total" in body
