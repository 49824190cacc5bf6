"""Incidents on the status page: repeats folded, fallout under its cause, open ones first."""

from __future__ import annotations

import dataclasses

from support.web import NOW, make_detection

from sigwatch.model import Detection, RootCause, Severity
from sigwatch.web.incidents import build_incidents
from sigwatch.web.store import DetectionStore, StoredDetection


def _held(*detections: Detection) -> list[StoredDetection]:
    store = DetectionStore(None)
    for d in detections:
        store.add(d)
    return store.items()


def _cause_of(root: Detection) -> RootCause:
    return RootCause(root.signature, root.title, root.text or "", root.path, root.offset or 0)


XID79 = make_detection(0, signature="nvidia_xid_79_fallen_off_bus",
                       title="GPU Has Fallen Off The Bus", severity=Severity.CRITICAL,
                       source="kernel", path="/dev/kmsg", rank=None)


class TestFolding:
    def test_repeats_of_one_signature_are_one_incident_with_their_count_and_ranks(self) -> None:
        """Sixty-four ranks printing the same error: one incident, 64 detections, 64 ranks."""
        items = _held(*(make_detection(n, rank=str(n)) for n in range(64)))

        [incident] = build_incidents(items, now=NOW + 100)

        assert 64 == incident.count
        assert 64 == len(incident.ranks)
        assert (NOW, NOW + 63) == (incident.first_seen, incident.last_seen)
        assert items[0] is incident.first  # the cause's line and fix come from the first

    def test_fallout_is_folded_under_its_cause_even_through_a_chain(self) -> None:
        """Xid 45 names Xid 79; a SIGTERM fan-out names an Xid 45: all under the Xid 79."""
        xid45 = [make_detection(n, signature="nvidia_xid_45_preemptive_cleanup",
                                title="Xid 45", severity=Severity.INFO, source="kernel",
                                path="/dev/kmsg", root_cause=_cause_of(XID79))
                 for n in (1, 2)]
        fanout = make_detection(3, signature="torchelastic_sigterm_fanout",
                                title="SIGTERM Fan-Out", severity=Severity.WARNING,
                                root_cause=_cause_of(xid45[0]))

        [incident] = build_incidents(_held(XID79, *xid45, fanout), now=NOW + 10)

        assert "nvidia_xid_79_fallen_off_bus" == incident.cause.signature
        assert 1 == incident.count
        assert 3 == incident.fallout_count
        assert [("SIGTERM Fan-Out", 1), ("Xid 45", 2)] == [
            (g.title, g.count) for g in incident.fallout_groups()]
        assert Severity.CRITICAL == incident.severity

    def test_fallout_whose_cause_is_no_longer_held_is_an_incident_of_its_own(self) -> None:
        """The ring evicted the cause: the fallout still shows, under its own name."""
        orphan = make_detection(1, signature="nvidia_xid_45_preemptive_cleanup",
                                root_cause=_cause_of(XID79))

        [incident] = build_incidents(_held(orphan), now=NOW + 10)

        assert "nvidia_xid_45_preemptive_cleanup" == incident.cause.signature
        assert 0 == incident.fallout_count


class TestOrder:
    def test_open_incidents_come_first_most_severe_first(self) -> None:
        """A newer warning does not sit above an older critical; a stale error comes last."""
        stale = make_detection(0, signature="old_error", severity=Severity.ERROR,
                               time=NOW - 7200)
        warning = make_detection(2, signature="some_warning", severity=Severity.WARNING)
        incidents = build_incidents(_held(stale, XID79, warning), now=NOW + 60)

        assert [("nvidia_xid_79_fallen_off_bus", True), ("some_warning", True),
                ("old_error", False)] == [(i.cause.signature, i.open) for i in incidents]

    def test_an_incident_closes_after_the_window_without_a_repeat(self) -> None:
        """Open while its last detection is within the window, then not."""
        items = _held(XID79)

        assert build_incidents(items, now=NOW + 3599, window=3600)[0].open
        assert not build_incidents(items, now=NOW + 3601, window=3600)[0].open

    def test_a_detector_can_hold_an_incident_open_past_the_window(self) -> None:
        """A stall not over is open whatever its age, even when the ring no longer holds it."""
        stall = make_detection(0, signature="training_stalled", line=None, offset=None,
                               text=None, about="no progress for 20 min", key="s1",
                               time=NOW - 86400)

        [held] = build_incidents(_held(stall), now=NOW, held_open=[stall])
        [unheld] = build_incidents([], now=NOW, held_open=[stall])

        assert held.open and held.held_open
        assert unheld.open and "no progress for 20 min" == unheld.cause.about

    def test_a_resolution_closes_the_incident_until_it_fires_again(self) -> None:
        """training_stalled, then its 'resolved' twin: closed; a new stall reopens it."""
        def stall(n: int, status: str = "experimental") -> Detection:
            return make_detection(n, signature="training_stalled", line=None, offset=None,
                                  text=None, key=f"k{n}", status=status)

        closed = build_incidents(_held(stall(0), stall(1, "resolved")), now=NOW + 5)
        reopened = build_incidents(_held(stall(0), stall(1, "resolved"), stall(2)),
                                   now=NOW + 5)

        assert (False, True) == (closed[0].open, closed[0].resolved)
        assert (True, 2) == (reopened[0].open, reopened[0].count)


class TestFieldsDetectionsMayCarry:
    def test_incidents_are_per_job_and_count_folded_repeats(self) -> None:
        """Two jobs failing the same way are two incidents; a count update saying the folded
        incident is at 5 occurrences makes it 5, however many times it is delivered."""
        base = make_detection(0)
        a = dataclasses.replace(base, owner="user", jobs=("4471203",))
        a5 = dataclasses.replace(a, offset=900, incident=a.event_id, occurrence=5, repeats=4)
        b = dataclasses.replace(a, offset=5000, jobs=("4471204",))
        b5 = dataclasses.replace(b, offset=5900, incident=b.event_id, occurrence=5, repeats=4)

        incidents = build_incidents(_held(a, a5, b, b5, b5), now=NOW + 1)

        assert [("4471204", 5), ("4471203", 5)] == sorted(
            ((i.key[2], i.count) for i in incidents), reverse=True)
