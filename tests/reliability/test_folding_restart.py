"""One incident across restarts: the event log stays exactly-once and the count stays right.

Thousands of repeats of one signature in one file (every line is ``ERROR seq=<n>``), read by
the real runtime (file source, checkpoint, event log) with incident folding as the daemon has
it by default, stopped or killed between passes. The event log must hold each line once: the
first as a full record, every other as a compact repeat of that same incident; what the
status page counts (the highest total each incident reported) must be the number of lines.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness import Harness, Writer, duplicates

from sigwatch.sources.files import TailOptions
from sigwatch.web.incidents import build_incidents
from sigwatch.web.store import DetectionStore


def _records(h: Harness) -> list[dict]:
    h.seqs()  # flushes what the running daemon holds
    return [json.loads(x) for x in h.events.read_text().splitlines() if x.strip()]


def _status_page_count(h: Harness) -> int:
    """The count the status page shows for the incident, from what its sink was given."""
    store = DetectionStore(None)
    for d in h.incidents.detections:
        store.add(d)
    [incident] = build_incidents(store.items(), now=h.clock.time())
    return incident.count


def _check(h: Harness, w: Writer) -> None:
    seqs = h.seqs()
    assert {} == duplicates(seqs)
    assert sorted(w.written) == sorted(seqs)
    records = _records(h)
    full = [r for r in records if "remediation" in r]
    assert 1 == len(full), "one incident: one full record"
    repeats = [r for r in records if "remediation" not in r]
    assert {full[0]["event_id"]} == {r["incident"] for r in repeats}
    assert list(range(2, len(w.written) + 1)) == sorted(r["occurrence"] for r in repeats)
    assert len(w.written) == _status_page_count(h)


def test_graceful_restarts_keep_one_incident_and_its_count(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    w = Writer(h.logs / "app.log", filler=1)
    h.start()
    for _ in range(6):
        w.lines(500)
        h.tick()
        h.restart()
    h.settle()
    h.stop()

    _check(h, w)


def test_crashes_between_passes_keep_the_event_log_exact_and_the_count_right(
        tmp_path: Path) -> None:
    """Killed with positions, incident state and event-log records not committed: the replay
    writes again exactly what was cut, and a count update sent twice counts once."""
    h = Harness(tmp_path, options=TailOptions(poll_interval=1, rescan_interval=1,
                                              checkpoint_interval=30))
    w = Writer(h.logs / "app.log", filler=1)
    h.start()
    for _ in range(12):
        w.lines(250)
        h.tick()  # read and delivered, not committed yet
        h.tick(11.0)  # a count update goes out; committed only every third round or so
        h.restart(crash=True)
    h.settle()
    h.stop()

    _check(h, w)
