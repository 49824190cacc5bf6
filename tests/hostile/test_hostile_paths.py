"""A log writer names a file with bytes that are not UTF-8: every sink and page must carry it.

A path is bytes. Python hands such a name over with surrogates (``os.fsdecode``); the event log
writes them as JSON escapes. Before: every post to Alertmanager failed on encoding the path,
later unrelated pages were never delivered, the failure was logged every second, SIGTERM left
``alerts.json.tmp`` and no saved queue, and ``/``, ``/detections/<id>`` and
``/api/v1/detections`` answered 500 while the detection was held. Now the page, the console and
Alertmanager show the name escaped (``bad\\xff.log``), the JSON API keeps it exact (as the event
log does) and one poison alert never blocks the ones behind it.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import wait_for
from support.hostile import Rig
from support.servers import Alertmanager, WebhookReceiver, alertmanager_config

pytestmark = pytest.mark.integration

BAD_NAME = b"bad\xff\xfe.log"
SHOWN = "bad\\xff\\xfe.log"  # how a person sees it on the page, the console and the pager

FATAL_SIGNATURE = """\
id = "test_fatal_other"
title = "Test Fatal Other"
severity = "critical"
[match]
regex = 'FATAL other=(?P<other>\\d+)'
keywords = ["FATAL other="]
"""


@pytest.fixture(name="pager")
def _pager() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture(name="alertmanager")
def _alertmanager(tmp_path: Path, pager: WebhookReceiver) -> Iterator[Alertmanager]:
    am = Alertmanager(tmp_path / "am", alertmanager_config(pager.url, group_by=["alertname",
                                                                               "signature"]))
    am.wait_ready()
    yield am
    am.stop()


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_file_name_that_is_not_utf8_reaches_every_sink_and_page_escaped(
        rig: Rig, alertmanager: Alertmanager, pager: WebhookReceiver) -> None:
    (rig.patterns / "test" / "test_fatal_other.toml").write_text(FATAL_SIGNATURE)
    d = rig.start("--alertmanager", alertmanager.url)
    d.wait_started()
    bad = os.path.join(os.fsencode(rig.logs), BAD_NAME)
    with open(bad, "wb") as fh:
        fh.write(b"ERROR seq=1 payload\n")
    rig.wait_seqs([1], daemon=d)
    # A later, unrelated page must not be stuck behind the first one.
    (rig.logs / "good.log").write_bytes(b"FATAL other=2\n")

    pager.wait(lambda p: p.alerts(signature="test_fatal_other")
               and p.alerts(signature="test_error_seq"), 60,
               "both pages, the poison one and the one after it")
    [first] = pager.alerts(signature="test_error_seq")[:1]
    assert first["annotations"]["where"].endswith(SHOWN + ":1")

    event = next(json.loads(line) for line in rig.events.read_bytes().splitlines()
                 if b"test_error_seq" in line)
    for path in ("/", f"/detections/{event['event_id']}"):
        status, body = _get(d.port, path)
        assert 200 == status, path
        assert SHOWN in body.decode("utf-8"), path
    status, body = _get(d.port, "/api/v1/detections")
    assert 200 == status
    [held] = [x for x in json.loads(body)["detections"] if x["signature"] == "test_error_seq"]
    assert os.fsencode(held["path"]).endswith(BAD_NAME)  # exact, as in the event log
    status, body = _get(d.port, f"/api/v1/detections/{event['event_id']}")
    assert 200 == status

    assert 0 == d.stop()
    assert not list(rig.state.glob("*.tmp"))
    saved = json.loads((rig.state / "alerts.json").read_bytes())
    assert {"test_error_seq", "test_fatal_other"} == {
        a["labels"]["signature"] for a in saved["alerts"]}
    assert "sink_failed" not in d.stderr()


BIG_CONTEXT_SIGNATURE = """\
id = "test_big_context"
title = "Test Big Context"
severity = "error"
[match]
regex = 'FATAL big=(?P<n>\\d+)'
keywords = ["FATAL big="]
[context]
before = 80
"""


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_long_lines_quoted_as_context_do_not_take_the_daemons_memory(rig: Rig) -> None:
    """20 detections each quoting 80 lines of 60 KB (4.8 MB of context apiece). Before: the
    daemon grew from 55 to 168 MB and one API response was 96 MB. Now each detection carries
    at most the caps (exact, in the event log and the API), the cut is counted, and the
    daemon's memory grows by far less than the uncapped context (a generous bound)."""
    from sigwatch.model import DetectionCaps
    from sigwatch.web.api import MAX_RESPONSE_BYTES

    caps = DetectionCaps()
    (rig.patterns / "test" / "test_big_context.toml").write_text(BIG_CONTEXT_SIGNATURE)
    # Twenty detections of one signature would fold into one incident (docs/fleet.md), its
    # repeats gathering no context at all: this test is about full detections, so no folding.
    d = rig.start(config="[incidents]\nfold = false\n")
    d.wait_started()
    before = _rss_bytes(d.pid)
    pad = "x" * 60_000
    lines = [f"INFO filler {n} {pad}\n" for n in range(80)]
    lines += [f"FATAL big={n} {pad}\n" for n in range(20)]
    (rig.logs / "big.log").write_text("".join(lines))

    def events() -> list[dict]:
        out = []
        for line in rig.events.read_bytes().splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a record still being written
            if doc["signature"] == "test_big_context":
                out.append(doc)
        return out

    def all_held() -> bool:
        status, body = _get(d.port, "/api/v1/detections?signature=test_big_context&limit=1")
        return status == 200 and json.loads(body)["total"] == 20 and len(events()) == 20
    wait_for(all_held, timeout=120, what="20 detections on the status page and in the log")
    grown = _rss_bytes(d.pid) - before
    status, body = _get(d.port, "/api/v1/detections?signature=test_big_context&limit=500")

    assert 20 == len(events())
    for event in events():
        assert len(event["text"].encode()) <= caps.text
        assert sum(len(c.encode()) for c in event["context"]) <= caps.context + 64
    assert 200 == status
    assert len(body) <= MAX_RESPONSE_BYTES
    assert (d.metric("sigwatch_detection_bytes_cut_total", field="context") or 0) > 20 * 4e6
    # Measured: 14 MB now, 246 MB with the detections uncapped (20 x 4.8 MB held by the
    # status page, the sink queues and the event log's buffer).
    assert grown < 40 << 20, f"grew by {grown >> 20} MB"
