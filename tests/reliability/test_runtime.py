"""The runtime's own promises: line-less deadlines, reload mid-sequence, checkpoint migration."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from harness import Harness, Writer, duplicates
from support.detectors import DeadlineOnlyDetector
from support.listsource import ListSource

from sigwatch.clock import FakeClock
from sigwatch.framing.lines import LineFramer
from sigwatch.model import StreamInfo
from sigwatch.patterns.compiled import PatternSet
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened
from sigwatch.sources.files import TailOptions


def _deadline_events(events: Path) -> list[dict[str, object]]:
    if not events.exists():
        return []
    docs = [json.loads(line) for line in events.read_bytes().splitlines() if line.strip()]
    return [d for d in docs if d["signature"] == "test_deadline"]


def _timer_harness(root: Path, *, checkpoint_interval: float = 1.0) -> Harness:
    return Harness(root, source_factory=lambda _c, _m: ListSource([]),
                   detector_factory=lambda clock: [DeadlineOnlyDetector(clock, 600)],
                   options=TailOptions(checkpoint_interval=checkpoint_interval))


def test_a_deadline_fires_a_lineless_detection_with_no_input_at_all(tmp_path: Path) -> None:
    h = _timer_harness(tmp_path)
    h.start()
    h.tick(599)
    assert [] == _deadline_events(h.events)

    h.tick(2)
    h.seqs()  # flushes the event log
    found = _deadline_events(h.events)
    assert 1 == len(found)
    assert (None, None, None) == (found[0]["line"], found[0]["offset"], found[0]["text"])
    assert "no input for 600 s" == found[0]["about"]


def test_a_fired_deadline_does_not_fire_again_after_a_restart(tmp_path: Path) -> None:
    h = _timer_harness(tmp_path)
    h.start()
    h.tick(601)
    h.restart()
    h.tick(5000)
    h.seqs()
    assert 1 == len(_deadline_events(h.events))


def test_a_deadline_pending_at_a_restart_keeps_its_original_time(tmp_path: Path) -> None:
    h = _timer_harness(tmp_path)
    h.start()
    h.tick(400)
    h.restart()
    h.tick(100)
    assert [] == _deadline_events(h.events)
    h.tick(101)
    h.seqs()
    assert 1 == len(_deadline_events(h.events))


def test_a_crash_between_firing_and_commit_fires_exactly_once(tmp_path: Path) -> None:
    """The event log is cut back to the commit and the detector state restored: once."""
    h = _timer_harness(tmp_path, checkpoint_interval=3600)
    h.start()
    h.tick(601)  # fired and written, not committed
    h.restart(crash=True)
    h.tick(1)
    h.restart()
    h.tick(1)
    h.seqs()
    assert 1 == len(_deadline_events(h.events))


# -- reload -------------------------------------------------------------------------------------

def _two_step_detections(library: PatternSet, *, reload_between: bool) -> list[tuple]:
    data = (Path(__file__).parents[1] / "corpus/incidents/003_xla_gethandle_segfault.log"
            ).read_bytes()
    cut = data.index(b"GetHandle")
    cut = data.rfind(b"\n", 0, cut) + 1  # the first step is read, the frame is not yet
    sink = CollectingSink()
    pipeline = Pipeline(Engine(library), [sink], clock=FakeClock())
    handle = pipeline.new_handle()
    pipeline.open(StreamOpened(handle, StreamInfo("s", "f.log", "k")))
    framer = LineFramer()
    pipeline.process(handle, framer.feed(data[:cut]))
    if reload_between:
        pipeline.swap(Engine(library))
    pipeline.process(handle, framer.feed(data[cut:]) + framer.finish())
    pipeline.finish(handle)
    return [(d.signature, d.offset, d.severity, d.context) for d in sink.detections]


def test_a_reload_in_the_middle_of_a_sequence_changes_no_detection(library: PatternSet) -> None:
    without = _two_step_detections(library, reload_between=False)
    assert "xla_pjrt_gethandle_segfault" in {d[0] for d in without}

    assert without == _two_step_detections(library, reload_between=True)


# -- checkpoint migration ------------------------------------------------------------------------

def _rewrite_as_v1(state: Path) -> None:
    """Turn the v2 checkpoint into the v1 format an older sigwatch wrote."""
    doc = json.loads((state / "checkpoint.json").read_bytes())
    body = doc["body"]
    v1 = {"files": body["sources"]["files"]["files"], "event_log": body["event_log"],
          "saved_at": body["saved_at"]}
    crc = zlib.crc32(json.dumps(v1, sort_keys=True, separators=(",", ":")).encode())
    (state / "checkpoint.json").write_text(json.dumps({"version": 1, "crc": crc, "body": v1}))
    (state / "checkpoint.json.prev").unlink(missing_ok=True)


def test_a_v1_checkpoint_is_migrated_with_nothing_reread_or_skipped(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    w.lines(30)
    h.pump()
    h.stop()
    _rewrite_as_v1(h.state)
    w.lines(20)  # written while the old version was stopped
    h.start()
    assert "current" == h.service.start_mode if h.service else False
    h.pump()
    w.lines(10)
    h.settle()

    got = h.seqs()
    assert {} == duplicates(got)
    assert sorted(w.written) == sorted(got)
    assert 0 == h.counter("sigwatch_checkpoint_recoveries_total")


def test_a_corrupt_checkpoint_resumes_from_the_previous_generation(tmp_path: Path) -> None:
    """The newest checkpoint is unreadable (a torn write on a failing disk, a bit flip). The
    generation before it is used: files resume from its offsets (only what came after it is
    read again, never everything from byte 0) and detector state comes back from it, so a
    deadline that had fired does not fire again. Without that generation, the cursors and
    the detector state would both be lost."""
    h = Harness(tmp_path, detector_factory=lambda clock: [DeadlineOnlyDetector(clock, 600)],
                options=TailOptions(checkpoint_interval=1e9))  # commits only when told
    w = Writer(h.logs / "app.log", filler=1)
    h.start()
    w.lines(20)
    h.pump()
    h.tick(601)  # the deadline fires
    h.service.commit(force=True)  # type: ignore[union-attr]  # the previous generation
    w.lines(10)
    h.pump()
    h.service.commit(force=True)  # type: ignore[union-attr]  # the newest one
    read_before = h.counter("sigwatch_lines_total")
    h.crash()
    (h.state / "checkpoint.json").write_bytes(b'{"version":2,"crc":1,"bo')
    w.lines(5)

    h.start()
    h.tick(5000)
    h.settle()

    assert 1 == h.counter("sigwatch_checkpoint_recoveries_total", mode="previous")
    assert 0 == h.counter("sigwatch_checkpoint_recoveries_total", mode="corrupt")
    assert 1 == len(_deadline_events(h.events))
    assert 60 == read_before
    assert read_before + 2 * (10 + 5) == h.counter("sigwatch_lines_total")  # not 2 * 35
    assert {} == duplicates(h.seqs())
    assert sorted(w.written) == sorted(h.seqs())
