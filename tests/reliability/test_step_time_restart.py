"""A slowdown is paged once, however often the daemon restarts while it lasts (issue 25).

The step-time detector keeps whether it already reported the running regression in its state;
the checkpoint carries that state across a restart. These tests drive the real runtime (file
source, pipeline, event log, checkpoint) and append new slow steps *after* the restored offset,
so that the detector really judges them after the restart.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness import Harness
from support.training_logs import MI300_ROCM_630_HEADER, run

from sigwatch.clock import FakeClock
from sigwatch.detectors.base import Detector
from sigwatch.detectors.training import ProgressReader, StepTimeDetector
from sigwatch.sources.files import TailOptions


def _step_time(clock: FakeClock) -> list[Detector]:
    return [StepTimeDetector(clock, reader=ProgressReader())]


def _harness(root: Path) -> Harness:
    return Harness(root, detector_factory=_step_time,
                   options=TailOptions(poll_interval=1.0, rescan_interval=1.0,
                                       checkpoint_interval=1.0, rotate_wait=5.0))


def _regressions(events: Path) -> list[dict[str, object]]:
    if not events.exists():
        return []
    docs = [json.loads(line) for line in events.read_bytes().splitlines() if line.strip()]
    return [d for d in docs if d["signature"] == "step_time_regression"]


def _append(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.writelines(line + "\n" for line in lines)


def _slow_run_then_restart(tmp_path: Path, *, crash: bool) -> Harness:
    """Incident 004's slowdown is reported, then the daemon restarts mid-slowdown and reads
    200 more slow steps written after its checkpoint."""
    h = _harness(tmp_path)
    log = h.logs / "train.log"
    _append(log, [*MI300_ROCM_630_HEADER, *run("megatron", 300, slow_from=150)])
    h.start()
    h.pump()
    h.service.commit(force=True)  # type: ignore[union-attr]
    h.seqs()
    assert 1 == len(_regressions(h.events))

    h.restart(crash=crash)
    _append(log, run("megatron", 100, start=301, slow_from=0))
    h.pump()
    h.restart()
    _append(log, run("megatron", 100, start=401, slow_from=0))
    h.pump()
    h.seqs()
    return h


def test_a_restart_during_a_slowdown_does_not_page_it_again(tmp_path: Path) -> None:
    """Stop, restart, 100 new slow steps; again: still the one detection of the slowdown."""
    h = _slow_run_then_restart(tmp_path, crash=False)

    found = _regressions(h.events)
    assert 1 == len(found), [d["about"] for d in found]
    assert "004" == dict(found[0]["facts"])["incident"]  # type: ignore[call-overload]


def test_a_crash_during_a_slowdown_does_not_page_it_again(tmp_path: Path) -> None:
    """The same after a SIGKILL (the committed state is what the new daemon starts from)."""
    h = _slow_run_then_restart(tmp_path, crash=True)

    assert 1 == len(_regressions(h.events))


def test_a_slowdown_after_recovery_is_paged_again_after_a_restart(tmp_path: Path) -> None:
    """The flag is not stuck: back to normal, restart, slow again -> a second detection."""
    h = _harness(tmp_path)
    log = h.logs / "train.log"
    _append(log, run("megatron", 300, slow_from=150))
    h.start()
    h.pump()
    _append(log, run("megatron", 100, start=301))  # back to the old step time
    h.pump()
    h.restart()
    _append(log, run("megatron", 100, start=401, slow_from=0))
    h.pump()
    h.seqs()

    assert 2 == len(_regressions(h.events))
