"""The status page's memory: a bounded ring, deduplicated, kept on disk across restarts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from support.web import engine_store, make_detection

from sigwatch.model import RootCause, Severity
from sigwatch.web.store import DetectionStore, StatusPageSink, detection_from_json


class TestRing:
    def test_newest_first(self) -> None:
        """Queries list the latest detection first."""
        store = DetectionStore(None)
        for n in range(3):
            store.add(make_detection(n))

        assert [12, 11, 10] == [s.detection.line for s in store.query().items]

    def test_the_ring_keeps_only_the_newest(self) -> None:
        """Beyond capacity the oldest go."""
        store = DetectionStore(None, capacity=3)
        for n in range(5):
            store.add(make_detection(n))

        assert [14, 13, 12] == [s.detection.line for s in store.query().items]

    def test_a_replayed_detection_is_kept_once(self) -> None:
        """After a crash the same detection (same event_id) can arrive again."""
        store = DetectionStore(None)
        d = make_detection(1)

        assert [True, False] == [store.add(d), store.add(dataclasses.replace(d, time=d.time + 9))]
        assert (1, 1) == (len(store), store.duplicates)

    def test_a_replay_of_an_evicted_detection_does_not_come_back(self) -> None:
        """Recently evicted ids are remembered too, so a late replay is not listed as new."""
        store = DetectionStore(None, capacity=2)
        first = make_detection(0)
        for d in (first, make_detection(1), make_detection(2)):
            store.add(d)

        assert not store.add(first)

    def test_filters_and_cursor_paging(self) -> None:
        """Filtering by severity, signature and source; a cursor continues below a page."""
        store = DetectionStore(None)
        for n in range(6):
            store.add(make_detection(n, severity=Severity.WARNING if n % 2 else Severity.ERROR))

        first = store.query(severities={Severity.ERROR}, limit=2)
        second = store.query(severities={Severity.ERROR}, limit=2, before=first.next_cursor)

        assert ([14, 12], 3) == ([s.detection.line for s in first.items], first.total)
        assert ([10], None) == ([s.detection.line for s in second.items], second.next_cursor)


class TestPersistence:
    def test_detections_survive_a_restart_in_order(self, tmp_path: Path) -> None:
        """A new store on the same file lists the same detections, same ids, same order."""
        path = tmp_path / "status.jsonl"
        store = DetectionStore(path)
        for n in range(4):
            store.add(make_detection(n))
        store.close()

        again = DetectionStore(path)

        assert ([s.event_id for s in store.query().items]
                == [s.event_id for s in again.query().items])
        assert [s.detection for s in store.query().items] == [
            s.detection for s in again.query().items]

    def test_engine_detections_round_trip_exactly(self, library, tmp_path: Path) -> None:
        """Real detections (context, captures, invalid UTF-8 shown as U+FFFD) come back equal."""
        path = tmp_path / "status.jsonl"
        store = DetectionStore(path)
        found = engine_store(library, store)
        store.close()

        again = DetectionStore(path)

        assert found
        assert sorted(found, key=lambda d: d.event_id) == sorted(
            (s.detection for s in again.query().items), key=lambda d: d.event_id)
        assert any("\ufffd" in (d.text or "") for d in found)

    def test_a_line_less_detection_keeps_its_id(self, tmp_path: Path) -> None:
        """A stall has no line: its key (not in to_json) is stored so the id is the same."""
        path = tmp_path / "status.jsonl"
        stall = make_detection(0, line=None, offset=None, text=None, context=(),
                               about="no progress for 10 min", key="deadline-42",
                               facts=(("last_step", "4100"),))
        store = DetectionStore(path)
        store.add(stall)
        store.close()

        again = DetectionStore(path).get(stall.event_id)

        assert again is not None
        assert stall == again.detection

    def test_a_replay_after_restart_is_not_listed_twice(self, tmp_path: Path) -> None:
        """Dedup holds across a restart: the replayed detection is already on disk."""
        path = tmp_path / "status.jsonl"
        store = DetectionStore(path)
        store.add(make_detection(1))
        store.close()

        again = DetectionStore(path)

        assert not again.add(make_detection(1))
        assert 1 == len(again)

    def test_a_torn_last_line_is_skipped_and_the_file_repaired(self, tmp_path: Path) -> None:
        """A crash mid-append leaves half a line: it is counted, and later appends are fine."""
        path = tmp_path / "status.jsonl"
        store = DetectionStore(path)
        store.add(make_detection(0))
        store.close()
        with path.open("a", encoding="utf-8") as fh:
            fh.write('{"v":1,"seq":2,"t":1.0,"detection":{"event_')

        again = DetectionStore(path)
        again.add(make_detection(5))
        again.close()
        third = DetectionStore(path)

        assert (1, 0) == (again.skipped, third.skipped)
        assert [15, 10] == [s.detection.line for s in third.query().items]

    def test_the_file_stays_bounded(self, tmp_path: Path) -> None:
        """Compaction keeps the file to at most twice the ring."""
        path = tmp_path / "status.jsonl"
        store = DetectionStore(path, capacity=10)
        for n in range(95):
            store.add(make_detection(n))
        store.close()

        lines = path.read_text(encoding="utf-8").splitlines()

        assert len(lines) < 20
        assert 10 == len(DetectionStore(path, capacity=10))

    def test_the_file_is_private(self, tmp_path: Path) -> None:
        """Log lines can be sensitive: the file is readable by the daemon's user only."""
        path = tmp_path / "status.jsonl"
        DetectionStore(path).add(make_detection(0))

        assert 0o600 == path.stat().st_mode & 0o777

    def test_an_unwritable_file_does_not_stop_the_store(self, tmp_path: Path) -> None:
        """A state directory that cannot be written: detections stay in memory, errors are
        counted."""
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("x")
        store = DetectionStore(blocker / "status.jsonl")

        kept = store.add(make_detection(0))

        assert (True, 1) == (kept, len(store))
        assert store.write_errors >= 1


class TestSink:
    def test_the_sink_feeds_the_store_and_flush_makes_it_durable(self, tmp_path: Path) -> None:
        """emit -> store; flush fsyncs; close closes."""
        path = tmp_path / "status.jsonl"
        sink = StatusPageSink(DetectionStore(path))
        sink.emit(make_detection(0))
        sink.flush()
        sink.tick(0.0)

        records = [json.loads(line) for line in path.read_text().splitlines()]
        sink.close()

        assert ["status_page", [make_detection(0).event_id]] == [
            sink.name, [r["detection"]["event_id"] for r in records]]


class TestRelations:
    def test_root_cause_and_fallout_are_found_in_the_ring(self) -> None:
        """A collateral detection points at its root; the root lists its fallout."""
        store = DetectionStore(None)
        root = make_detection(0, signature="xid_79", title="GPU Fell Off The Bus")
        fallout = make_detection(1, root_cause=RootCause(
            "xid_79", root.title, root.text or "", root.path, root.offset or 0))
        store.add(root)
        store.add(fallout)
        root_item, fallout_item = store.get(root.event_id), store.get(fallout.event_id)
        assert root_item is not None
        assert fallout_item is not None

        assert root_item == store.root_cause_of(fallout_item)
        assert [fallout_item] == store.fallout_of(root_item)


def test_from_json_reads_what_to_json_writes() -> None:
    """The public JSON shape is enough to rebuild a detection (time to the millisecond)."""
    d = make_detection(3, time=1_700_000_000.25)

    assert d == detection_from_json(d.to_json(), key=d.key, first_offset=d.first_offset)


class TestCountUpdatesOfAFoldedIncident:
    """A flood of days sends a count update every minute: the ring keeps the incident's first
    detection and its latest count, never thousands of updates pushing everything else out."""

    @staticmethod
    def _updates(n: int):  # noqa: ANN205
        first = make_detection(0)
        return first, [dataclasses.replace(first, offset=10_000 + i, incident=first.event_id,
                                           occurrence=100 * (i + 1)) for i in range(n)]

    def test_only_the_latest_count_of_an_incident_is_held(self, tmp_path: Path) -> None:
        store = DetectionStore(tmp_path / "status.jsonl", capacity=10)
        other = make_detection(1, signature="cuda_out_of_memory")
        store.add(other)
        first, updates = self._updates(50)
        store.add(first)
        for u in updates:
            store.add(u)

        held = [s.detection for s in store.items()]
        assert [other, first, updates[-1]] == held
        again = [s.detection for s in DetectionStore(tmp_path / "status.jsonl").items()]
        assert [other, first, updates[-1]] == again

    def test_an_older_count_sent_again_is_ignored(self) -> None:
        store = DetectionStore(None)
        first, updates = self._updates(3)
        for d in (first, updates[2], updates[1]):
            store.add(d)

        assert [first, updates[2]] == [s.detection for s in store.items()]
