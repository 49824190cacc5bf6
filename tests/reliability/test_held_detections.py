"""A generic detection held for a specific multi-step signature survives a crash exactly once.

The checkpoint records held detections as pending: after SIGKILL the replay delivers them once
(or drops them, if the specific signature completes), never twice and never not at all.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness import Harness, error_line

from sigwatch.app import build_generic

GENERIC = """\
id = "test_generic_crash"
title = "Generic Crash"
severity = "error"
[match]
regex = 'CRASH here'
"""

SPECIFIC = """\
id = "test_specific_crash"
title = "Specific Crash"
severity = "error"
supersedes = ["test_generic_crash"]
[match]
regex = 'CRASH here'
[[match.then]]
regex = 'FRAME known'
within_lines = 3
"""


def _harness(tmp_path: Path) -> Harness:
    h = Harness(tmp_path)
    (h.patterns / "test" / "test_generic_crash.toml").write_text(GENERIC)
    (h.patterns / "test" / "test_specific_crash.toml").write_text(SPECIFIC)
    h.start()
    return h


def _signatures(h: Harness) -> list[str]:
    if h.eventlog is not None and h.service is not None:
        h.eventlog.flush()
    return [json.loads(line)["signature"] for line in h.events.read_text().splitlines()]


def test_held_generic_detection_is_delivered_once_after_a_crash(tmp_path: Path) -> None:
    """Crash while the generic detection waits; after restart it is delivered exactly once."""
    h = _harness(tmp_path)
    log = h.logs / "a.log"
    log.write_text("CRASH here\n")
    h.tick()
    h.service.commit(force=True)
    assert [] == _signatures(h)

    h.restart(crash=True)
    with log.open("a") as fh:
        fh.write("filler\n" * 10)
    h.settle()

    assert ["test_generic_crash"] == _signatures(h)


def test_sequence_completed_after_a_crash_replaces_the_held_generic(tmp_path: Path) -> None:
    """Crash between the two steps; the replay completes the specific signature only."""
    h = _harness(tmp_path)
    log = h.logs / "a.log"
    log.write_text("CRASH here\n")
    h.tick()
    h.service.commit(force=True)

    h.restart(crash=True)
    with log.open("a") as fh:
        fh.write("FRAME known\nfiller\n")
    h.settle()

    assert ["test_specific_crash"] == _signatures(h)


# -- the generic layer (detectors/generic) --------------------------------------------------------

TRACEBACK = (
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "/job/train.py", line 71, in <module>\n'
    "[rank1]:     main()\n"
    "[rank1]: ValueError: bad shard index 7\n")


def _generic_harness(tmp_path: Path) -> Harness:
    h = Harness(tmp_path, detector_factory=lambda clock: [build_generic(clock=clock)])
    h.start()
    return h


def test_held_generic_traceback_is_delivered_once_after_a_crash(tmp_path: Path) -> None:
    """The generic layer waits after a traceback (did the process go on?); killed while it
    waits, the next start replays it and delivers it once."""
    h = _generic_harness(tmp_path)
    log = h.logs / "a.log"
    log.write_text(TRACEBACK)
    h.tick()
    h.service.commit(force=True)
    assert [] == _signatures(h)

    h.restart(crash=True)
    h.settle()
    h.tick(60.0)
    h.settle()

    assert ["generic_traceback"] == _signatures(h)


def test_a_generic_record_waiting_on_a_signatures_line_is_not_delivered_twice(
        tmp_path: Path) -> None:
    """``ERROR seq=1`` is the signature's line and a generic error record waiting for the
    process to end. A pending line names every detection on it: kept pending, the restart
    would deliver the signature's detection again. The generic layer gives the line up."""
    h = _generic_harness(tmp_path)
    log = h.logs / "a.log"
    log.write_bytes(error_line(1) + b"INFO filler 1\n")
    h.tick()
    h.service.commit(force=True)
    assert [1] == h.seqs()

    h.restart(crash=True)
    with log.open("ab") as fh:
        fh.write(b"INFO filler 2\n" * 60)
    h.settle()
    h.tick(60.0)
    h.settle()

    assert [1] == h.seqs()
