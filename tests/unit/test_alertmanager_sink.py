"""AlertmanagerSink's paging policy, with a fake clock and a recording transport.

The same behaviours against a real Alertmanager are in tests/integration/test_alertmanager_sink.py;
here every timing rule (re-send, quiet period, backoff, retention) is checked exactly.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sigwatch.clock import FakeClock
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.sinks.alertmanager import ALERTNAME, AlertmanagerSink, PostResult
from sigwatch.telemetry.metrics import SelfMetrics

NCCL_LINE = ("[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
             "operation timeout: WorkNCCL(SeqNum=81, OpType=ALLREDUCE) ran for 600000 ms")


def detection(n: int = 0, **changes: Any) -> Detection:
    base = Detection(
        signature="nccl_watchdog_timeout", title="NCCL Watchdog Collective Timeout",
        severity=Severity.ERROR, status="stable", source="training",
        path="/var/log/training/job.log", stream_key="dev:ino:abc", line=10 + n,
        offset=1000 + 100 * n, text=NCCL_LINE, time=1_700_000_000.0 + n,
        remediation=Remediation(
            summary="A rank stopped participating in a collective.",
            steps=("Find the first rank that failed.", "Check the NIC counters."),
            runbook="https://example.org/runbooks/nccl-timeout", action="investigate"),
        context=("step 4100 loss 2.31",), rank=str(n), host="gpu-node-7")
    return dataclasses.replace(base, **changes)


class Recorder:
    """A transport that records posts and answers what the test says."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, list[dict[str, Any]]]] = []
        self.down: set[str] = set()

    def __call__(self, url: str, body: bytes, timeout: float) -> PostResult:
        assert timeout > 0
        self.posts.append((url, json.loads(body)))
        if any(url.startswith(d) for d in self.down):
            return PostResult(False, "connect", "refused")
        return PostResult(True)

    def to(self, base: str) -> list[list[dict[str, Any]]]:
        return [alerts for url, alerts in self.posts if url.startswith(base)]

    def clear(self) -> None:
        self.posts.clear()


AM1, AM2 = "http://am1:9093", "http://am2:9093"


def make(tmp_path: Path, clock: FakeClock, transport: Recorder, **kw: Any) -> AlertmanagerSink:
    args: dict[str, Any] = {
        "node": "gpu-node-7", "clock": clock, "transport": transport,
        "resend_interval": 60.0, "resolve_after": 300.0, "resolved_retention": 900.0,
        "state_path": tmp_path / "alerts.json", "link_base": "https://gpu-node-7:9750/",
        "backoff_initial": 1.0, "backoff_max": 60.0}
    args.update(kw)
    urls = args.pop("urls", [AM1, AM2])
    return AlertmanagerSink(urls, **args)


@pytest.fixture(name="clock")
def _clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture(name="am")
def _am() -> Recorder:
    return Recorder()


def test_a_paging_detection_is_posted_to_every_replica_with_bounded_labels_and_the_fix(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am)
    d = detection()
    sink.emit(d)
    sink.flush()

    assert [AM1 + "/api/v2/alerts", AM2 + "/api/v2/alerts"] == [u for u, _ in am.posts]
    [alert] = am.posts[0][1]
    assert {"alertname": ALERTNAME, "signature": "nccl_watchdog_timeout", "severity": "error",
            "owner": "unknown", "node": "gpu-node-7", "source": "training",
            "rank": "0"} == alert["labels"]
    notes = alert["annotations"]
    assert "NCCL Watchdog Collective Timeout on gpu-node-7" == notes["summary"]
    assert NCCL_LINE == notes["line"]
    assert "step 4100 loss 2.31" == notes["context"]
    assert "1. Find the first rank that failed.\n2. Check the NIC counters." == notes[
        "remediation"]
    assert "https://example.org/runbooks/nccl-timeout" == notes["runbook_url"]
    link = f"https://gpu-node-7:9750/detections/{d.event_id}"
    assert link == notes["detection_url"] == alert["generatorURL"]
    assert "2023-11-14T22:13:20.000Z" == alert["startsAt"]
    assert "2023-11-14T22:17:20.000Z" == alert["endsAt"]  # four re-send intervals ahead


def test_severities_that_do_not_page_are_not_sent(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am, page_severities=[Severity.CRITICAL])
    sink.emit(detection(severity=Severity.ERROR))
    sink.emit(detection(severity=Severity.WARNING))
    sink.flush()
    assert [] == am.posts
    sink.emit(detection(severity=Severity.CRITICAL))
    sink.flush()
    assert 2 == len(am.posts)


def test_sixty_four_ranks_printing_the_same_timeout_make_one_alert(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am)
    for rank in range(64):
        sink.emit(detection(rank, offset=5000 + rank))
    sink.flush()

    assert 1 == len(sink.alerts())
    [alert] = am.to(AM1)[-1]
    assert "64" == alert["annotations"]["repeats"]


def test_the_alert_carries_the_job_so_the_jobs_incident_can_inhibit_it(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    """Issue 21: direct pages carry the labels of the job gauges (job, rank, node, owner)."""
    sink = make(tmp_path, clock, am)
    sink.emit(detection(3, jobs=("slurm-4242",), owner="node"))
    sink.flush()

    [alert] = am.to(AM1)[-1]
    assert {"job": "slurm-4242", "rank": "3", "node": "gpu-node-7", "owner": "node"}.items() \
        <= alert["labels"].items()


def test_a_kernel_fault_of_a_node_running_two_jobs_is_one_alert_per_job(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am)
    sink.emit(detection(source="kernel", rank=None, jobs=("job-a", "job-b")))
    sink.flush()

    assert ["job-a", "job-b"] == sorted(a["labels"]["job"] for a in am.to(AM1)[-1])


def test_a_count_update_from_folding_adds_its_repeats(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am)
    first = detection()
    sink.emit(first)
    sink.emit(detection(1, incident=first.event_id, occurrence=800_000, repeats=799_999))
    sink.flush()

    [alert] = am.to(AM1)[-1]
    assert "800000" == alert["annotations"]["repeats"]


def test_another_signature_or_source_is_another_alert(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am)
    sink.emit(detection())
    sink.emit(detection(signature="cuda_out_of_memory"))
    sink.emit(detection(source="kernel"))
    sink.flush()
    keys = {(a["labels"]["signature"], a["labels"]["source"]) for a in am.to(AM1)[-1]}
    assert {("nccl_watchdog_timeout", "training"), ("cuda_out_of_memory", "training"),
            ("nccl_watchdog_timeout", "kernel")} == keys


def test_firing_alerts_are_re_sent_every_resend_interval_and_not_in_between(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am)
    sink.emit(detection())
    sink.flush()
    am.clear()

    clock.advance(59)
    sink.tick(clock.time())
    assert [] == am.posts
    clock.advance(1)
    sink.tick(clock.time())
    assert 2 == len(am.posts)
    [alert] = am.to(AM1)[0]
    assert "2023-11-14T22:18:20.000Z" == alert["endsAt"]  # moved on with the re-send


def test_an_incident_resolves_after_the_quiet_period_and_the_resolution_is_re_sent(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am)
    sink.emit(detection())
    sink.flush()
    clock.advance(200)
    sink.emit(detection(1))  # a repeat restarts the quiet period
    sink.tick(clock.time())
    clock.advance(299)
    sink.tick(clock.time())
    assert "2023-11-14T22:16:20.000Z" < am.to(AM1)[-1][0]["endsAt"]  # still firing

    am.clear()
    clock.advance(1)
    sink.tick(clock.time())
    [resolved] = am.to(AM1)[-1]
    assert "2023-11-14T22:21:40.000Z" == resolved["endsAt"]  # = now: resolved
    assert "2" == resolved["annotations"]["repeats"]

    clock.advance(60)
    sink.tick(clock.time())
    assert resolved["endsAt"] == am.to(AM1)[-1][0]["endsAt"]  # re-sent as resolved
    clock.advance(900)
    sink.tick(clock.time())
    am.clear()
    clock.advance(60)
    sink.tick(clock.time())
    assert [] == am.posts  # forgotten after the retention


def test_a_detection_after_resolution_opens_a_new_incident(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am)
    sink.emit(detection())
    sink.flush()
    clock.advance(300)
    sink.tick(clock.time())
    clock.advance(10)
    sink.emit(detection(7, time=clock.time()))
    sink.flush()
    [alert] = am.to(AM1)[-1]
    assert "1" == alert["annotations"]["repeats"]
    assert "2023-11-14T22:18:30.000Z" == alert["startsAt"]
    assert alert["endsAt"] > "2023-11-14T22:18:30.000Z"


def test_while_alertmanager_is_down_posts_back_off_exponentially(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    am.down = {AM1, AM2}
    sink = make(tmp_path, clock, am, urls=[AM1])
    sink.emit(detection())
    attempts = []
    for _ in range(200):
        before = len(am.posts)
        sink.tick(clock.time())
        if len(am.posts) > before:
            attempts.append(clock.time() - 1_700_000_000.0)
        clock.advance(1)
    assert [0, 1, 3, 7, 15, 31, 63, 123, 183] == attempts  # 1 s doubling, at most 60 s


def test_a_page_raised_during_an_outage_arrives_after_it_and_only_then_starts_to_resolve(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry, "test")
    am.down = {AM1, AM2}
    sink = make(tmp_path, clock, am, metrics=metrics)
    sink.emit(detection())
    sink.flush()
    clock.advance(3600)  # an hour of outage: far past the quiet period
    sink.tick(clock.time())
    assert 1 == sink.undelivered()
    assert 1 == registry.get_sample_value("sigwatch_alerts_undelivered")

    am.down = set()
    clock.advance(60)
    am.clear()
    sink.tick(clock.time())
    [alert] = am.to(AM1)[-1]
    assert "2023-11-14T23:18:20.000Z" == alert["endsAt"]  # arrives firing, not resolved
    assert 0 == sink.undelivered()
    assert 1 == registry.get_sample_value(
        "sigwatch_alerts_delivered_total", {"severity": "error"})
    assert registry.get_sample_value(
        "sigwatch_alertmanager_post_failures_total", {"reason": "connect"}) >= 2

    clock.advance(299)
    sink.tick(clock.time())
    assert "2023-11-14T23:23:19.000Z" == am.to(AM1)[-1][0]["endsAt"]  # still firing
    clock.advance(1)
    sink.tick(clock.time())
    assert "2023-11-14T23:19:20.000Z" == am.to(AM1)[-1][0]["endsAt"]  # resolved: = now


def test_one_replica_down_does_not_hold_back_the_other_and_catches_up_when_back(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    am.down = {AM2}
    sink = make(tmp_path, clock, am)
    sink.emit(detection())
    sink.flush()
    assert 1 == len(am.to(AM1))
    assert 0 == sink.undelivered()
    am.down = set()
    clock.advance(1)
    sink.tick(clock.time())
    assert 2 == len(am.to(AM2))  # the failed try, then the catch-up


def test_undelivered_alerts_survive_a_restart_of_the_daemon(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    am.down = {AM1, AM2}
    sink = make(tmp_path, clock, am)
    sink.emit(detection())
    sink.flush()
    sink.close()

    am.down = set()
    am.clear()
    again = make(tmp_path, clock, am)
    assert 1 == again.undelivered()
    again.tick(clock.time())
    [alert] = am.to(AM1)[-1]
    assert NCCL_LINE == alert["annotations"]["line"]
    assert 0 == again.undelivered()


def test_a_corrupt_state_file_is_ignored_not_fatal(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    (tmp_path / "alerts.json").write_text('{"version": 1, "alerts": [{"labels": {}}]}')
    sink = make(tmp_path, clock, am)
    assert [] == sink.alerts()


def test_the_queue_is_bounded_and_drops_are_counted(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry, "test")
    am.down = {AM1, AM2}
    sink = make(tmp_path, clock, am, max_alerts=3, metrics=metrics)
    for i in range(5):
        sink.emit(detection(signature=f"sig_{i}"))
        clock.advance(1)
    signatures = [a["labels"]["signature"] for a in sink.alerts()]
    assert ["sig_2", "sig_3", "sig_4"] == signatures
    assert 2 == registry.get_sample_value(
        "sigwatch_alerts_dropped_total", {"reason": "queue_full"})


def test_every_alerting_series_exists_at_zero_from_start_up() -> None:
    registry = CollectorRegistry()
    SelfMetrics(registry, "test")
    for series, labels in [
            ("sigwatch_alerts_delivered_total", {"severity": "critical"}),
            ("sigwatch_alerts_raised_total", {"severity": "info"}),
            ("sigwatch_alerts_dropped_total", {"reason": "queue_full"}),
            ("sigwatch_alertmanager_post_failures_total", {"reason": "timeout"}),
            ("sigwatch_alertmanager_posts_total", {}),
            ("sigwatch_alerts_firing", {}),
            ("sigwatch_alerts_undelivered", {})]:
        assert 0 == registry.get_sample_value(series, labels), series


def test_a_detection_stamped_in_the_future_starts_now_so_alertmanager_accepts_it(
        tmp_path: Path, clock: FakeClock, am: Recorder) -> None:
    sink = make(tmp_path, clock, am, resolve_after=1.0)
    sink.emit(detection(time=clock.time() + 3600))  # a log clock an hour ahead
    sink.flush()
    clock.advance(1)
    sink.tick(clock.time())
    [alert] = am.to(AM1)[-1]
    assert alert["startsAt"] <= alert["endsAt"]
    assert "2023-11-14T22:13:20.000Z" == alert["startsAt"]


def test_a_url_that_is_not_http_is_refused(clock: FakeClock, am: Recorder) -> None:
    with pytest.raises(ValueError, match="not an http"):
        AlertmanagerSink(["am1:9093"], node="n", clock=clock, transport=am)
