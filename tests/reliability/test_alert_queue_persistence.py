"""The Alertmanager queue is on disk from the moment a page is raised, not only at a clean stop.

Alertmanager keeps nothing for us while it is down, and the line that raised the page is
committed (it will not be read again): the sink's saved queue is the only copy of the page.
A crash is modelled by building a new sink on the same state file without closing the old one
(exactly what a SIGKILL leaves behind); ``tests/hostile/test_hostile_alert_queue.py`` does it
with a real daemon, SIGKILL and a real Alertmanager.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from sigwatch.clock import FakeClock
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.sinks.alertmanager import AlertmanagerSink, PostResult

NOW = 1_700_000_000.0


def _page(n: int = 0, **changes: Any) -> Detection:
    d = Detection(
        signature="nvidia_xid_79", title="NVIDIA Xid 79", severity=Severity.CRITICAL,
        status="stable", source="kernel", path="/dev/kmsg", stream_key="kmsg", line=None,
        offset=4000 + n, text="NVRM: Xid 79, GPU has fallen off the bus.", time=NOW,
        remediation=Remediation(summary="Reboot the node.", steps=("Drain.", "Reboot.")))
    return dataclasses.replace(d, **changes)


class Transport:
    """Alertmanager as the sink sees it: down (connection refused) or up (recording)."""

    def __init__(self, up: bool) -> None:
        self.up = up
        self.posted: list[list[dict[str, Any]]] = []

    def __call__(self, url: str, body: bytes, timeout: float) -> PostResult:
        if not self.up:
            return PostResult(False, "connect", "refused")
        self.posted.append(json.loads(body))
        return PostResult(True)


def _sink(state: Path, transport: Transport, clock: FakeClock) -> AlertmanagerSink:
    return AlertmanagerSink(["http://am:9093"], node="gpu-7", clock=clock, state_path=state,
                            transport=transport, backoff_initial=1.0)


def test_a_page_raised_during_an_outage_survives_a_crash(tmp_path: Path) -> None:
    """Emit and flush (what the sink's worker does after each batch), then crash without
    close(): the next daemon finds the page and delivers it once Alertmanager is back."""
    clock = FakeClock(NOW)
    state = tmp_path / "alerts.json"
    first = _sink(state, Transport(up=False), clock)
    first.emit(_page())
    first.flush()
    assert 1 == first.undelivered()
    # SIGKILL: no close(), nothing more from the first sink.

    up = Transport(up=True)
    second = _sink(state, up, clock)
    second.tick(clock.time())

    assert [["nvidia_xid_79"]] == [[a["labels"]["signature"] for a in p] for p in up.posted]
    assert 0 == second.undelivered()


def test_a_repeat_and_a_second_page_during_the_outage_are_saved_too(tmp_path: Path) -> None:
    """Every change of the queue is saved, not only the first page."""
    clock = FakeClock(NOW)
    state = tmp_path / "alerts.json"
    first = _sink(state, Transport(up=False), clock)
    first.emit(_page(0))
    first.flush()
    clock.advance(5)
    first.emit(_page(1))  # a repeat of the same incident
    first.emit(_page(2, signature="nvidia_xid_48", title="NVIDIA Xid 48"))
    first.flush()

    up = Transport(up=True)
    second = _sink(state, up, clock)
    second.tick(clock.time())

    got = {a["labels"]["signature"]: a["annotations"]["repeats"] for a in up.posted[-1]}
    assert {"nvidia_xid_79": "2", "nvidia_xid_48": "1"} == got
