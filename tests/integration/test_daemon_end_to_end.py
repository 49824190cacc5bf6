"""The daemon, end to end: a real process, real files, real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from support.daemon import free_port, sample, scrape, wait_for, wait_started, whole_jsonl

pytestmark = pytest.mark.integration

INCIDENT_LINE = ("[rank0]: 0: :0:rocdevice.cpp            :2982: 4097143577 us: [pid:1141 "
                 "tid:0x7f2b1e5fe700] Callback: Queue 0x7f2a0a600000 aborting with error : "
                 "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access "
                 "memory beyond the largest legal address. code: 0x29\n")


def _start(daemon, tmp_path: Path, logs: Path, *extra: str) -> tuple[object, int, Path]:
    """Start `sigwatch run` on logs/*.log with an event log; returns (process, port, events)."""
    events = tmp_path / "events.jsonl"
    port = free_port()
    d = daemon("--watch", str(logs / "*.log"), "--events", str(events), "--listen",
               f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "state"), "--no-console",
               *extra)
    return d, port, events


def _events(path: Path) -> list[dict[str, Any]]:
    return whole_jsonl(path)


def test_appended_incident_line_reaches_event_log_and_metrics(tmp_path: Path, daemon) -> None:
    """Appending an incident line shows the detection in the event log and on /metrics."""
    logs = tmp_path / "logs"
    logs.mkdir()
    train = logs / "train.log"
    train.write_text("epoch 1 step 1 loss 2.31\n")
    d, port, events = _start(daemon, tmp_path, logs)
    wait_started(port)
    metric = ('sigwatch_detections_total{severity="error",'
              'signature="rocm_hsa_aperture_violation",source="files"}')
    assert 0.0 == sample(scrape(port), metric)

    appended = time.monotonic()
    with train.open("a") as fh:
        fh.write(INCIDENT_LINE)
    found = wait_for(lambda: _events(events), what="the event")
    latency = time.monotonic() - appended

    assert ["rocm_hsa_aperture_violation"] == [e["signature"] for e in found]
    assert "0" == found[0]["rank"]
    assert "XDG_CACHE_HOME" in json.dumps(found[0]["remediation"])
    assert 25 == found[0]["offset"]
    wait_for(lambda: sample(scrape(port), metric) == 1.0, what="the counter")
    print(f"append-to-event latency: {latency * 1000:.0f} ms")
    assert 0 == d.stop()


def test_file_created_after_start_is_read_from_byte_zero(tmp_path: Path, daemon) -> None:
    """A new file's first line is seen, even if written before the daemon noticed the file."""
    logs = tmp_path / "logs"
    logs.mkdir()
    d, port, events = _start(daemon, tmp_path, logs)
    wait_started(port)

    (logs / "late.log").write_text(INCIDENT_LINE)

    found = wait_for(lambda: _events(events), what="the event")
    assert 0 == found[0]["offset"]


def test_existing_content_is_skipped_at_first_start(tmp_path: Path, daemon) -> None:
    """Files present at the very first start are read from their end (start_at = end)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "old.log").write_text(INCIDENT_LINE + "later line\n")
    d, port, events = _start(daemon, tmp_path, logs)
    wait_started(port)

    with (logs / "old.log").open("a") as fh:
        fh.write(INCIDENT_LINE)

    found = wait_for(lambda: _events(events), what="the event")
    assert [len(INCIDENT_LINE) + 11] == [e["offset"] for e in found]


def test_sighup_reloads_patterns_and_keeps_old_set_when_broken(tmp_path: Path,
                                                              daemon) -> None:
    """A valid new set is swapped in; a broken one is reported and the old one keeps working."""
    pats = tmp_path / "patterns" / "t"
    pats.mkdir(parents=True)
    sig = 'id = "{id}"\ntitle = "T"\nseverity = "error"\n[match]\nregex = \'{rx}\'\n'
    (pats / "first_sig.toml").write_text(sig.format(id="first_sig", rx="FIRST"))
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "a.log"
    log.write_text("")
    d, port, events = _start(daemon, tmp_path, logs, "--patterns", str(tmp_path / "patterns"))
    wait_started(port)

    (pats / "second_sig.toml").write_text(sig.format(id="second_sig", rx="SECOND"))
    d.signal(signal.SIGHUP)
    wait_for(lambda: "sigwatch_patterns_loaded 2.0" in scrape(port), what="reload")
    (pats / "broken.toml").write_text(sig.format(id="broken", rx="(unclosed"))
    d.signal(signal.SIGHUP)
    wait_for(lambda: "sigwatch_patterns_last_reload_successful 0.0" in scrape(port),
             what="failed reload to be reported")
    with log.open("a") as fh:
        fh.write("FIRST\nSECOND\n")

    found = wait_for(lambda: len(_events(events)) >= 2 and _events(events), what="events")
    assert ["first_sig", "second_sig"] == [e["signature"] for e in found]
    assert "pattern_reload_failed" in d.stderr()
    assert "broken.toml: match.regex" in d.stderr()
    assert "sigwatch_pattern_reload_failures_total 1.0" in scrape(port)


def test_bad_pattern_at_start_exits_two_with_one_line(tmp_path: Path, daemon) -> None:
    """The daemon refuses to start on a broken library and says where."""
    pats = tmp_path / "patterns"
    pats.mkdir()
    (pats / "x.toml").write_text('id = "x_y"\ntitle = "T"\nseverity = "error"\n'
                                 "[match]\nregex = 'a(b'\n")

    d = daemon("--watch", str(tmp_path / "*.log"), "--patterns", str(pats), "--listen",
               f"127.0.0.1:{free_port()}", "--state-dir", str(tmp_path / "s"))

    assert 2 == d.proc.wait(timeout=30)
    assert "x.toml: match.regex: missing ) at position 3" in d.stderr()
