"""AlertmanagerSink against the real Debian Alertmanager, with a webhook receiver as the pager.

The sink runs on a fake clock set a few seconds behind the real time: the timestamps it posts
then mean to Alertmanager what they would in production (a resolution's ``endsAt = now`` is
not in Alertmanager's future), and the tests move it forward instead of waiting for re-sends.
Alertmanager flushes a new group at once when its first alert started more than group_wait
ago, so the grouping test uses a group_wait longer than that head start.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.servers import Alertmanager, AlertmanagerCluster, WebhookReceiver, alertmanager_config

from sigwatch.clock import FakeClock
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.sinks.alertmanager import AlertmanagerSink
from sigwatch.telemetry.metrics import SelfMetrics

pytestmark = pytest.mark.integration

BEHIND = 5.0  # seconds the fake clock starts behind the real one
LINE = "NVRM: Xid (PCI:0000:2b:00): 79, pid=0, GPU has fallen off the bus."


def xid79(n: int = 0, **changes: Any) -> Detection:
    d = Detection(
        signature="nvidia_xid_79_fallen_off_bus", title="NVIDIA Xid 79 GPU Has Fallen Off The Bus",
        severity=Severity.CRITICAL, status="stable", source="kernel", path="/dev/kmsg",
        stream_key="kmsg", line=None, offset=4000 + n, text=LINE, time=time.time(),
        remediation=Remediation(
            summary="The GPU fell off the bus; reboot the node.",
            steps=("Drain the node.", "Collect nvidia-bug-report.sh.", "Reboot the node."),
            runbook="https://example.org/runbooks/xid79", action="drain_node"),
        context=("NVRM: GPU at PCI:0000:2b:00: GPU-1234",))
    return dataclasses.replace(d, **changes)


@pytest.fixture(name="pager")
def _pager() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture(name="servers")
def _servers() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for s in started:
        s.stop()


def sink_for(urls: list[str], tmp_path: Path, clock: FakeClock, node: str = "gpu-node-7",
             **kw: Any) -> AlertmanagerSink:
    args: dict[str, Any] = {"resend_interval": 60.0, "resolve_after": 2.0,
                            "state_path": tmp_path / f"{node}.alerts.json",
                            "link_base": f"http://{node}:9750", "timeout": 2.0,
                            "backoff_initial": 0.5, "backoff_max": 2.0}
    args.update(kw)
    return AlertmanagerSink(urls, node=node, clock=clock, **args)


def test_a_detection_reaches_the_pager_once_with_the_fix_and_resolves_after_the_quiet_period(
        tmp_path: Path, pager: WebhookReceiver, servers: list[Any]) -> None:
    am = Alertmanager(tmp_path / "am", alertmanager_config(pager.url))
    servers.append(am)
    am.wait_ready()
    clock = FakeClock(time.time() - BEHIND)
    sink = sink_for([am.url], tmp_path, clock)

    for rank in range(8):  # every rank's copy of the kernel line is one incident
        sink.emit(xid79(rank))
    sink.flush()

    pager.wait(lambda p: p.alerts("firing"), 20, "the firing notification")
    [firing] = pager.alerts("firing")
    assert "nvidia_xid_79_fallen_off_bus" == firing["labels"]["signature"]
    assert "gpu-node-7" == firing["labels"]["node"]
    assert "1. Drain the node.\n2. Collect nvidia-bug-report.sh.\n3. Reboot the node." == \
        firing["annotations"]["remediation"]
    assert LINE == firing["annotations"]["line"]
    assert "8" == firing["annotations"]["repeats"]
    assert firing["generatorURL"].startswith("http://gpu-node-7:9750/detections/")

    clock.advance(2.0)
    sink.tick(clock.time())
    pager.wait(lambda p: p.alerts("resolved"), 20, "the resolved notification")
    assert 1 == len(pager.alerts("firing"))  # paged once, then resolved


def test_an_alertmanager_stopped_during_the_incident_loses_no_page(
        tmp_path: Path, pager: WebhookReceiver, servers: list[Any]) -> None:
    am = Alertmanager(tmp_path / "am", alertmanager_config(pager.url))
    servers.append(am)
    am.wait_ready()
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry, "test")
    clock = FakeClock(time.time() - BEHIND)
    sink = sink_for([am.url], tmp_path, clock, metrics=metrics)

    am.stop()
    sink.emit(xid79())
    sink.flush()
    for _ in range(5):  # the outage outlasts the quiet period several times over
        clock.advance(1.0)
        sink.tick(clock.time())
    assert 1 == sink.undelivered()
    assert registry.get_sample_value(
        "sigwatch_alertmanager_post_failures_total", {"reason": "connect"}) >= 2
    sink.close()  # and the daemon restarts during the outage

    am.start()
    am.wait_ready()
    clock.advance(2.0)
    again = sink_for([am.url], tmp_path, clock, metrics=metrics)
    again.tick(clock.time())

    pager.wait(lambda p: p.alerts("firing"), 20, "the page raised during the outage")
    assert LINE == pager.alerts("firing")[0]["annotations"]["line"]
    assert 1 == registry.get_sample_value(
        "sigwatch_alerts_delivered_total", {"severity": "critical"})


def test_two_clustered_replicas_page_once_and_the_same_incident_on_two_nodes_is_grouped(
        tmp_path: Path, pager: WebhookReceiver, servers: list[Any]) -> None:
    cluster = AlertmanagerCluster(tmp_path / "ams",
                                  alertmanager_config(pager.url, group_wait=f"{BEHIND + 3:.0f}s"))
    servers.append(cluster)
    cluster.wait_ready()
    clock = FakeClock(time.time() - BEHIND)
    node_a = sink_for(cluster.urls, tmp_path, clock, node="gpu-node-7")
    node_b = sink_for(cluster.urls, tmp_path, clock, node="gpu-node-8")

    node_a.emit(xid79())
    node_b.emit(xid79())
    node_a.flush()
    node_b.flush()
    for replica in cluster.replicas:  # each replica holds both alerts
        assert 2 == len(replica.alerts())

    pager.wait(lambda p: p.alerts("firing"), 20, "the grouped page")
    [notification] = pager.notifications()
    nodes = sorted(a["labels"]["node"] for a in notification["alerts"])
    assert ["gpu-node-7", "gpu-node-8"] == nodes

    clock.advance(2.0)
    node_a.tick(clock.time())
    node_b.tick(clock.time())
    pager.wait(lambda p: len(p.alerts("resolved")) == 2, 20, "both resolutions")
    firing_notifications = [n for n in pager.notifications() if n["status"] == "firing"]
    assert 1 == len(firing_notifications)  # the second replica did not page again
