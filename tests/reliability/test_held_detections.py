"""A generic detection held for a specific multi-step signature survives a crash exactly once.

The checkpoint records held detections as pending: after SIGKILL the replay delivers them once
(or drops them, if the specific signature completes), never twice and never not at all.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness import Harness

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
