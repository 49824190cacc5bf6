"""The fleet end to end on 127.0.0.1: two `sigwatch run` daemons (stand-ins for two GPU nodes),
the real Prometheus scraping them with the shipped rules, two clustered Alertmanager replicas,
and a webhook receiver standing in for the pager.

Intervals are short (1 s scrapes and evaluations, 1 s group_wait) and the shipped rules' `for`
durations are cut to 1 s; their expressions are the shipped ones (promtool tests the
durations). The direct-paging tests need `sigwatch run --alertmanager URL` (repeatable),
`--alert-resolve-after SECONDS` and `--node NAME`; they are skipped until the runtime has them.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.daemon import DaemonProcess, free_port, wait_for, wait_started
from support.servers import AlertmanagerCluster, Prometheus, WebhookReceiver, alertmanager_config

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules" / "sigwatch.rules.yml"
SIGNATURE = "rocm_hsa_aperture_violation"
INCIDENT_LINE = ("[rank0]: 0: :0:rocdevice.cpp            :2982: 4097143577 us: [pid:1141 "
                 "tid:0x7f2b1e5fe700] Callback: Queue 0x7f2a0a600000 aborting with error : "
                 "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access "
                 "memory beyond the largest legal address. code: 0x29\n")


@dataclass
class Node:
    name: str
    port: int
    log: Path
    process: DaemonProcess

    def write(self, text: str) -> None:
        with self.log.open("a") as fh:
            fh.write(text)


@dataclass
class Fleet:
    tmp: Path
    pager: WebhookReceiver
    alertmanagers: AlertmanagerCluster
    nodes: dict[str, Node] = field(default_factory=dict)
    prometheus: Prometheus | None = None

    def start_node(self, name: str, *extra: str) -> Node:
        logs = self.tmp / name / "logs"
        logs.mkdir(parents=True)
        log = logs / "train.log"
        log.write_text("epoch 1 step 1 loss 2.31\n")
        port = free_port()
        process = DaemonProcess(
            ["--watch", str(logs / "*.log"), "--listen", f"127.0.0.1:{port}",
             "--state-dir", str(self.tmp / name / "state"), "--no-console", *extra],
            self.tmp / f"{name}.stderr")
        node = Node(name, port, log, process)
        self.nodes[name] = node
        return node

    def start_prometheus(self) -> Prometheus:
        rules = yaml.safe_load(RULES.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "1s"
        workdir = self.tmp / "prometheus"
        workdir.mkdir()
        (workdir / "rules.yml").write_text(yaml.safe_dump(rules))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "900ms"},
            "rule_files": [str(workdir / "rules.yml")],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [
                u.removeprefix("http://") for u in self.alertmanagers.urls]}]}]},
            "scrape_configs": [{"job_name": "sigwatch", "static_configs": [
                {"targets": [f"127.0.0.1:{n.port}"], "labels": {"node": n.name}}
                for n in self.nodes.values()]}],
        }
        self.prometheus = Prometheus(workdir, json.dumps(config))
        self.prometheus.wait_ready()
        return self.prometheus

    def stop(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
        for node in self.nodes.values():
            node.process.stop()
        self.alertmanagers.stop()
        self.pager.stop()


@pytest.fixture(name="fleet")
def _fleet(tmp_path: Path) -> Iterator[Fleet]:
    pager = WebhookReceiver()
    cluster = AlertmanagerCluster(tmp_path / "alertmanagers", alertmanager_config(
        pager.url, group_by=("alertname", "signature"), group_wait="1s", group_interval="2s"))
    fleet = Fleet(tmp_path, pager, cluster)
    try:
        cluster.wait_ready()
        yield fleet
    finally:
        fleet.stop()


def _alerts(pager: WebhookReceiver, alertname: str, status: str, **labels: str) -> list[Any]:
    return pager.alerts(status, alertname=alertname, **labels)


def test_prometheus_pages_when_a_daemon_is_killed(fleet: Fleet) -> None:
    a = fleet.start_node("node-a")
    b = fleet.start_node("node-b")
    wait_started(a.port)
    wait_started(b.port)
    prom = fleet.start_prometheus()
    wait_for(lambda: sorted(prom.targets_up().values()) == [1.0, 1.0], 30, "both targets up")

    b.process.signal(signal.SIGKILL)

    fleet.pager.wait(lambda p: _alerts(p, "SigwatchDown", "firing", node="node-b"), 30,
                     "SigwatchDown for node-b at the pager")
    assert [] == _alerts(fleet.pager, "SigwatchDown", "firing", node="node-a")
    [firing] = prom.firing("SigwatchDown")
    assert "node-b" == firing["labels"]["node"]


def test_prometheus_pages_a_detection_on_one_node_through_the_clustered_alertmanagers(
        fleet: Fleet) -> None:
    a = fleet.start_node("node-a")
    b = fleet.start_node("node-b")
    wait_started(a.port)
    wait_started(b.port)
    prom = fleet.start_prometheus()
    # The counter must be scraped at zero before the detection (promtool tests the other case).
    wait_for(lambda: prom.query(f'sigwatch_detections_total{{signature="{SIGNATURE}"}}')
             ["data"]["result"], 30, "the detection counters scraped at zero")

    a.write(INCIDENT_LINE)

    fleet.pager.wait(lambda p: _alerts(p, "SigwatchSignatureSeen", "firing"), 30,
                     "SigwatchSignatureSeen at the pager")
    [alert] = _alerts(fleet.pager, "SigwatchSignatureSeen", "firing")
    assert {"node": "node-a", "signature": SIGNATURE, "severity": "error"}.items() <= \
        alert["labels"].items()
    assert "http://127.0.0.1:" in alert["annotations"]["status_page"]


# -- direct paging (needs the runtime wiring) ---------------------------------------------------


def _paging_nodes(fleet: Fleet, *names: str, resolve_after: int = 3) -> list[Node]:
    extra: list[str] = []
    for url in fleet.alertmanagers.urls:
        extra += ["--alertmanager", url]
    nodes = [fleet.start_node(n, *extra, "--alert-resolve-after", str(resolve_after),
                              "--node", n) for n in names]
    for n in nodes:
        wait_started(n.port)
    return nodes


def test_an_incident_reaches_the_pager_once_with_the_fix_and_resolves_after_the_quiet_period(
        fleet: Fleet) -> None:
    [a] = _paging_nodes(fleet, "node-a")

    for _ in range(8):  # the same line from every rank: one incident
        a.write(INCIDENT_LINE)

    fleet.pager.wait(lambda p: _alerts(p, "SigwatchDetection", "firing"), 30, "the page")
    fleet.pager.wait(lambda p: _alerts(p, "SigwatchDetection", "resolved"), 30,
                     "the resolution after the quiet period")
    [page] = _alerts(fleet.pager, "SigwatchDetection", "firing")
    assert {"signature": SIGNATURE, "node": "node-a", "source": "files"}.items() <= \
        page["labels"].items()
    assert "XDG_CACHE_HOME" in page["annotations"]["remediation"]
    assert "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION" in page["annotations"]["line"]
    firing = [n for n in fleet.pager.notifications() if n["status"] == "firing"]
    assert 1 == len(firing)  # two replicas, eight lines: paged once


def test_the_same_incident_on_two_nodes_is_one_grouped_notification(fleet: Fleet) -> None:
    a, b = _paging_nodes(fleet, "node-a", "node-b", resolve_after=60)

    a.write(INCIDENT_LINE)
    b.write(INCIDENT_LINE)

    def both(p: WebhookReceiver) -> bool:
        nodes = {x["labels"]["node"] for x in _alerts(p, "SigwatchDetection", "firing")}
        return nodes == {"node-a", "node-b"}

    fleet.pager.wait(both, 30, "pages for both nodes")
    grouped = [n for n in fleet.pager.notifications()
               if {x["labels"]["node"] for x in n["alerts"]} == {"node-a", "node-b"}]
    assert grouped, fleet.pager.notifications()


def test_alertmanagers_stopped_during_an_incident_lose_no_page(fleet: Fleet) -> None:
    [a] = _paging_nodes(fleet, "node-a", resolve_after=60)
    for replica in fleet.alertmanagers.replicas:
        replica.stop()

    a.write(INCIDENT_LINE)
    wait_for(lambda: "sigwatch_alertmanager_post_failures_total" in _failures(a), 30,
             "failed posts while every replica is down")
    for replica in fleet.alertmanagers.replicas:
        replica.start()
    fleet.alertmanagers.wait_ready()

    fleet.pager.wait(lambda p: _alerts(p, "SigwatchDetection", "firing"), 60,
                     "the page raised during the outage")


def _failures(node: Node) -> str:
    from support.daemon import sample, scrape

    text = scrape(node.port)
    value = sample(text, 'sigwatch_alertmanager_post_failures_total{reason="connect"}')
    return "sigwatch_alertmanager_post_failures_total" if value and value > 0 else ""
