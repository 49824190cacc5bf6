"""One incident per fault: repeats fold into the open incident with a count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fleet import FleetNode

from sigwatch.detectors.folding import Folder
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.sinks.eventlog import EventLogSink

XID = "NVRM: Xid (PCI:0000:8a:00): 79, pid={pid}, name=python, GPU has fallen off the bus."
T0 = 1_700_000_000.0


@pytest.fixture(name="node")
def _node(tmp_path: Path) -> FleetNode:
    return FleetNode(tmp_path)


def _count(paged: list[Detection]) -> int:
    """What the status page counts: the highest total each folded incident reported."""
    totals: dict[str, int] = {}
    for d in paged:
        episode = d.incident or d.event_id
        totals[episode] = max(totals.get(episode, 0), d.occurrence if d.incident else 1)
    return sum(totals.values())


class TestRepeatsOfOneFault:
    def test_thousands_of_xid_lines_are_one_incident_with_their_count(
            self, node: FleetNode) -> None:
        kernel = node.open("/dev/kmsg", source="kernel")
        for i in range(5000):
            node.write(kernel, XID.format(pid=i), time=T0 + i * 0.01)
        node.advance(400.0)  # quiet for longer than the incident's window: it closes

        firsts = [d for d in node.paged.detections if not d.incident]
        assert 1 == len(firsts)
        assert 5000 == _count(node.paged.detections)
        assert len(node.paged.detections) < 20  # the first, and a few count updates

    def test_sinks_that_want_every_occurrence_still_get_each_one(
            self, node: FleetNode) -> None:
        kernel = node.open("/dev/kmsg", source="kernel")
        for i in range(100):
            node.write(kernel, XID.format(pid=i), time=T0 + i)

        every = node.every.detections
        assert 100 == len(every)
        first = every[0]
        assert ("", 1) == (first.incident, first.occurrence)
        assert {first.event_id} == {d.incident for d in every[1:]}
        assert list(range(2, 101)) == [d.occurrence for d in every[1:]]
        assert 100 == node.registry.get_sample_value(
            "sigwatch_detections_total",
            {"signature": "test_xid_79", "severity": "critical", "source": "kernel"})
        assert 1 == node.registry.get_sample_value(
            "sigwatch_incidents_opened_total", {"severity": "critical"})

    def test_count_updates_come_at_most_every_update_interval(self, node: FleetNode) -> None:
        kernel = node.open("/dev/kmsg", source="kernel")
        for second in range(120):
            node.write(kernel, XID.format(pid=second), time=T0 + second)
            node.advance(1.0)
        updates = [d for d in node.paged.detections if d.incident]
        node.pipeline.report_incidents()

        assert 120 == _count(node.paged.detections)
        assert 2 < len(updates) <= 12  # 120 s at one update per 10 s at most

    def test_the_last_count_goes_out_when_the_daemon_stops(self, node: FleetNode) -> None:
        kernel = node.open("/dev/kmsg", source="kernel")
        for i in range(7):
            node.write(kernel, XID.format(pid=i), time=T0 + i)

        node.pipeline.report_incidents()

        assert 7 == _count(node.paged.detections)

    def test_each_job_has_its_own_incident(self, node: FleetNode) -> None:
        for job in ("job-a", "job-b"):
            h = node.open(f"/training/{job}/rank0.log")
            node.write(h, "ZeroDivisionError: one", "ZeroDivisionError: two")

        assert ["job-a", "job-b"] == [d.job for d in node.paged.detections]

    def test_ranks_of_one_job_on_one_node_are_one_incident(self, node: FleetNode) -> None:
        """Eight ranks printing the same timeout: one incident, count 8, every rank seen."""
        for rank in range(8):
            h = node.open(f"/training/job-a/rank{rank}.log")
            node.write(h, f"[Rank {rank}] Watchdog caught collective operation timeout: x")
        node.pipeline.report_incidents()

        assert 8 == _count(node.paged.detections)
        assert 8 == len({d.rank for d in node.every.detections})


class TestEpisodes:
    def test_a_repeat_after_a_quiet_gap_opens_a_new_incident(self, node: FleetNode) -> None:
        """Decided on the lines' own times: a log read late folds as it was written."""
        kernel = node.open("/dev/kmsg", source="kernel")
        node.write(kernel, XID.format(pid=1), time=T0)
        node.write(kernel, XID.format(pid=2), time=T0 + 10)
        node.write(kernel, XID.format(pid=3), time=T0 + 3600)

        firsts = [d for d in node.paged.detections if not d.incident]
        assert 2 == len(firsts)
        assert 3 == _count(node.paged.detections)  # the first episode's repeat was reported

    def test_a_resolution_is_never_folded_away(self) -> None:
        folder = Folder()
        d = Detection(signature="training_stalled", title="t", severity=Severity.WARNING,
                      status="resolved", source="s", path="p", stream_key="k", line=None,
                      offset=None, text=None, time=T0, remediation=Remediation(), key="r1")
        assert folder.fold(d, T0).first
        assert folder.fold(d, T0 + 1).first


class TestEventLogRecords:
    def test_a_repeat_is_a_compact_record_naming_its_incident(self, tmp_path: Path,
                                                              node: FleetNode) -> None:
        log = EventLogSink(tmp_path / "events.jsonl", fsync=False)
        node.pipeline.sinks.append(log)
        node.pipeline._every.append(log)  # noqa: SLF001 - as build_pipeline sorts the sinks
        kernel = node.open("/dev/kmsg", source="kernel")
        node.write(kernel, XID.format(pid=1), XID.format(pid=2), time=T0)
        log.close()

        first, repeat = (json.loads(x) for x in (tmp_path / "events.jsonl").read_text()
                         .splitlines())
        assert "remediation" in first
        assert first["incident"] is None
        assert "remediation" not in repeat
        assert (first["event_id"], 2) == (repeat["incident"], repeat["occurrence"])
        assert {"pci": "0000:8a:00"} == repeat["captures"]


class TestCheckpoint:
    def test_open_incidents_and_unreported_counts_survive_a_restart(
            self, tmp_path: Path) -> None:
        node = FleetNode(tmp_path)
        kernel = node.open("/dev/kmsg", source="kernel")
        for i in range(30):
            node.write(kernel, XID.format(pid=i), time=T0 + i)
        state = json.loads(json.dumps(node.pipeline.snapshot()))

        again = FleetNode(tmp_path, clock=node.clock)
        again.pipeline.restore(state)
        kernel = again.open("/dev/kmsg", source="kernel")
        for i in range(30, 50):
            again.write(kernel, XID.format(pid=i), time=T0 + i)
        again.pipeline.report_incidents()

        assert [] == [d for d in again.paged.detections if not d.incident]  # no new incident
        assert 50 == _count(node.paged.detections + again.paged.detections)
