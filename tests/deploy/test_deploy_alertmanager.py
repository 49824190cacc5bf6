"""The example Alertmanager configuration: amtool accepts it, routes sigwatch's alerts by
severity and nobody else's, the real Alertmanager inhibits a node's job-level errors under a
node-level critical and a failing job's collateral under its verdict, and the notification
template shows the fix."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.daemon import wait_for
from support.debian import require
from support.servers import Alertmanager, post_json

from sigwatch.clock import FakeClock
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.sinks.alertmanager import AlertmanagerSink, PostResult

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
RULES = REPO / "deploy" / "prometheus" / "rules" / "sigwatch.rules.yml"
TEMPLATE = REPO / "deploy" / "alertmanager" / "templates" / "sigwatch.tmpl"


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require("amtool"), *args], capture_output=True, text=True,
                          check=False, timeout=60)


def test_amtool_accepts_the_example_config_and_its_template() -> None:
    result = amtool("check-config", str(CONFIG))
    assert 0 == result.returncode, result.stdout + result.stderr
    assert "1 templates" in result.stdout
    assert "3 inhibit rules" in result.stdout


def routed_to(*labels: str) -> str:
    """The receiver(s) amtool routes an alert with ``labels`` to, as it prints them."""
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}", *labels)
    return result.stdout.strip()


@pytest.mark.parametrize("alertname", ["SigwatchDetection", "SigwatchSignatureSeen",
                                       "SigwatchDaemonDown"])
@pytest.mark.parametrize(("severity", "receiver"), [
    ("critical", "sigwatch-pager"), ("error", "sigwatch-pager"),
    ("warning", "sigwatch-tickets"), ("info", "sigwatch-blackhole")])
def test_sigwatchs_alerts_are_routed_by_severity(alertname: str, severity: str,
                                                 receiver: str) -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    f"--verify.receivers={receiver}", f"alertname={alertname}",
                    f"severity={severity}", "signature=x", "node=gpu-node-7")
    assert 0 == result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("labels", [
    ("alertname=KubeNodeNotReady", "severity=critical", "node=gpu-node-7"),
    ("alertname=HighErrorRate", "severity=error", "service=checkout"),
    ("alertname=NodeFilesystemAlmostOutOfSpace", "severity=warning"),
    ("alertname=DeadMansSwitch", "severity=critical", "signature=nvidia_xid_79_fallen_off_bus"),
    ("alertname=MySigwatchLookalike", "severity=critical"),
])
def test_a_foreign_alert_is_not_routed_to_sigwatchs_receivers(labels: tuple[str, ...]) -> None:
    """Merged into a site's tree, sigwatch's routes take only sigwatch's alerts: another
    system's critical (even one carrying a signature label) goes to the site's default."""
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    "--verify.receivers=site-default", *labels)

    assert 0 == result.returncode, result.stdout + result.stderr
    assert "sigwatch" not in routed_to(*labels)


def test_every_sigwatch_receiver_is_reached_only_under_the_alertname_route() -> None:
    """The scoping is structural: no route outside the Sigwatch.* one names a sigwatch-*
    receiver, so a merge cannot leak other alerts into them."""
    route = yaml.safe_load(CONFIG.read_text())["route"]
    [scoped] = [r for r in route["routes"] if 'alertname=~"Sigwatch.*"' in r["matchers"]]
    outside = [r for r in route["routes"] if r is not scoped]

    assert not route["receiver"].startswith("sigwatch")
    assert [] == [r["receiver"] for r in outside if r["receiver"].startswith("sigwatch")]
    assert all(r["receiver"].startswith("sigwatch-") for r in scoped["routes"])


@pytest.mark.parametrize(("owner", "severity"), [("node", "critical"), ("fabric", "critical"),
                                               ("user", "error"), ("unknown", "error")])
def test_a_failing_jobs_verdict_pages_whoever_owns_it(owner: str, severity: str) -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    "--verify.receivers=sigwatch-pager", "alertname=SigwatchJobIncident",
                    f"severity={severity}", f"owner={owner}", "job=train-a",
                    "signature=nvidia_xid_79_fallen_off_bus")
    assert 0 == result.returncode, result.stdout + result.stderr


def test_a_straggler_makes_a_ticket_not_a_page() -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    "--verify.receivers=sigwatch-tickets", "alertname=SigwatchJobStraggler",
                    "severity=warning", "job=train-a", "node=gpu-node-3")
    assert 0 == result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(("severity", "receiver"), [
    ("critical", "sigwatch-pager"), ("error", "sigwatch-pager"),
    ("warning", "sigwatch-tickets"), ("info", "sigwatch-blackhole")])
def test_a_daemons_page_in_a_job_still_goes_by_severity(severity: str, receiver: str) -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    f"--verify.receivers={receiver}", "alertname=SigwatchDetection",
                    f"severity={severity}", "job=train-a", "node=gpu-node-0",
                    "signature=nccl_watchdog_timeout")
    assert 0 == result.returncode, result.stdout + result.stderr


def _seconds(duration: str) -> float:
    value, unit = re.fullmatch(r"(\d+)([smh])", duration).groups()  # type: ignore[union-attr]
    return float(value) * {"s": 1, "m": 60, "h": 3600}[unit]


def test_a_daemons_page_in_a_job_waits_for_the_jobs_verdict() -> None:
    """The daemons page at once; the job's verdict fires 20 s after the job's first error, then
    a scrape (5 s) and an evaluation (5 s) later reaches Alertmanager. The job's direct pages
    are held longer than that, with room to spare, so the verdict inhibits them first."""
    route = yaml.safe_load(CONFIG.read_text())["route"]
    [scoped] = [r for r in route["routes"] if 'alertname=~"Sigwatch.*"' in r["matchers"]]
    [held] = [r for r in scoped["routes"] if 'job=~".+"' in r["matchers"]]
    [verdict] = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                 if r.get("alert") == "SigwatchJobIncident"]
    settle = float(re.search(r"first_error_seconds >= (\d+)", verdict["expr"]).group(1))  # type: ignore[union-attr]

    assert 'alertname="SigwatchDetection"' in held["matchers"]
    assert _seconds(held["group_wait"]) >= 2 * (settle + 5 + 5)
    assert all("group_wait" not in r for r in held["routes"])  # no severity shortens it


def _alert(alertname: str, severity: str, node: str, signature: str) -> dict[str, Any]:
    return {"labels": {"alertname": alertname, "severity": severity, "node": node,
                       "signature": signature, "source": "kernel"},
            "annotations": {"summary": f"{signature} on {node}"}}


@pytest.fixture(name="example_am")
def _example_am(tmp_path: Path) -> Iterator[Alertmanager]:
    """The example's routes and inhibit rules, with receivers that send nothing."""
    config = yaml.safe_load(CONFIG.read_text())
    config.pop("templates")
    for receiver in config["receivers"]:
        for key in [k for k in receiver if k.endswith("_configs")]:
            del receiver[key]
    am = Alertmanager(tmp_path / "am", yaml.safe_dump(config))
    am.wait_ready()
    yield am
    am.stop()


def test_a_node_level_critical_inhibits_that_nodes_job_level_errors_only(
        example_am: Alertmanager) -> None:
    alerts = [
        _alert("SigwatchDetection", "critical", "gpu-node-7", "nvidia_xid_79_fallen_off_bus"),
        _alert("SigwatchDetection", "error", "gpu-node-7", "nccl_watchdog_timeout"),
        _alert("SigwatchDetection", "error", "gpu-node-8", "nccl_watchdog_timeout"),
        _alert("SigwatchDetection", "critical", "gpu-node-7", "nvidia_xid_48_double_bit_ecc"),
    ]
    assert 200 == post_json(example_am.url + "/api/v2/alerts", alerts)

    def states() -> dict[tuple[str, str], str] | None:
        got = {(a["labels"]["node"], a["labels"]["signature"]): a["status"]["state"]
               for a in example_am.alerts()}
        return got if len(got) == 4 and "unprocessed" not in got.values() else None

    expected = {("gpu-node-7", "nvidia_xid_79_fallen_off_bus"): "active",
                ("gpu-node-7", "nccl_watchdog_timeout"): "suppressed",
                ("gpu-node-8", "nccl_watchdog_timeout"): "active",
                ("gpu-node-7", "nvidia_xid_48_double_bit_ecc"): "active"}
    # Alertmanager may list an alert as active for an instant before the inhibitor that
    # arrived in the same POST is applied: wait for the settled state, then compare.
    seen: list[dict[tuple[str, str], str] | None] = []

    def settled() -> bool:
        seen.append(states())
        return seen[-1] == expected

    try:
        wait_for(settled, 15, "alertmanager to apply the inhibition")
    finally:
        assert expected == seen[-1]


def test_the_daemons_own_page_makes_the_prometheus_rules_duplicate_redundant(
        example_am: Alertmanager) -> None:
    alerts = [
        _alert("SigwatchDetection", "error", "gpu-node-7", "nccl_watchdog_timeout"),
        _alert("SigwatchSignatureSeen", "error", "gpu-node-7", "nccl_watchdog_timeout"),
        _alert("SigwatchSignatureSeen", "error", "gpu-node-8", "nccl_watchdog_timeout"),
    ]
    assert 200 == post_json(example_am.url + "/api/v2/alerts", alerts)

    def states() -> dict[tuple[str, str], str] | None:
        got = {(a["labels"]["alertname"], a["labels"]["node"]): a["status"]["state"]
               for a in example_am.alerts()}
        return got if len(got) == 3 and "unprocessed" not in got.values() else None

    got = wait_for(states, 15, "alertmanager to process the alerts")
    assert {("SigwatchDetection", "gpu-node-7"): "active",
            ("SigwatchSignatureSeen", "gpu-node-7"): "suppressed",
            ("SigwatchSignatureSeen", "gpu-node-8"): "active"} == got


def _job_alert(alertname: str, severity: str, job: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": alertname, "severity": severity, "job": job, **labels},
            "annotations": {"summary": f"{alertname} of {job}"}}


def test_a_failing_jobs_verdict_inhibits_its_collateral_and_nothing_else(
        example_am: Alertmanager) -> None:
    alerts = [
        _job_alert("SigwatchJobIncident", "critical", "train-a", culprit_node="gpu-node-3",
                   signature="nvidia_xid_79_fallen_off_bus", owner="node", basis="fault"),
        # train-a's collateral on other nodes, and the culprit's own page:
        _job_alert("SigwatchDetection", "error", "train-a", node="gpu-node-0", rank="2",
                   signature="nccl_watchdog_timeout", owner="unknown", source="training"),
        _job_alert("SigwatchDetection", "error", "train-a", node="gpu-node-5",
                   signature="torchelastic_worker_sigabrt", owner="unknown", source="training"),
        _job_alert("SigwatchDetection", "critical", "train-a", node="gpu-node-3",
                   signature="nvidia_xid_79_fallen_off_bus", owner="node", source="kernel"),
        _job_alert("SigwatchJobStraggler", "warning", "train-a", node="gpu-node-6"),
        # another job, and alerts of no job (Prometheus gives them the scrape job):
        _job_alert("SigwatchDetection", "error", "train-b", node="gpu-node-9",
                   signature="nccl_watchdog_timeout", owner="unknown", source="training"),
        _job_alert("SigwatchSignatureSeen", "error", "sigwatch", node="gpu-node-7",
                   signature="nccl_watchdog_timeout", source="training"),
        _job_alert("SigwatchDown", "critical", "sigwatch", node="gpu-node-3"),
    ]
    assert 200 == post_json(example_am.url + "/api/v2/alerts", alerts)

    def key(a: dict[str, Any]) -> tuple[str, str, str]:
        labels = a["labels"]
        return (labels["alertname"], labels["job"], labels.get("node", ""))

    expected = {("SigwatchJobIncident", "train-a", ""): "active",
                ("SigwatchDetection", "train-a", "gpu-node-0"): "suppressed",
                ("SigwatchDetection", "train-a", "gpu-node-5"): "suppressed",
                ("SigwatchDetection", "train-a", "gpu-node-3"): "suppressed",
                ("SigwatchJobStraggler", "train-a", "gpu-node-6"): "suppressed",
                ("SigwatchDetection", "train-b", "gpu-node-9"): "active",
                ("SigwatchSignatureSeen", "sigwatch", "gpu-node-7"): "active",
                ("SigwatchDown", "sigwatch", "gpu-node-3"): "active"}
    seen: list[dict[tuple[str, str, str], str]] = []

    def settled() -> bool:
        seen.append({key(a): a["status"]["state"] for a in example_am.alerts()})
        return seen[-1] == expected

    try:
        wait_for(settled, 15, "alertmanager to apply the job's inhibition")
    finally:
        assert expected == seen[-1]


def test_the_notification_template_names_a_failing_jobs_culprit_and_fix(tmp_path: Path) -> None:
    alert = {"status": "firing", "fingerprint": "0",
             "labels": {"alertname": "SigwatchJobIncident", "job": "train-a",
                        "culprit_node": "gpu-node-3", "culprit_rank": "13", "owner": "node",
                        "basis": "fault", "severity": "critical",
                        "signature": "nvidia_xid_79_fallen_off_bus"},
             "annotations": {
                 "summary": "Job train-a failed because of gpu-node-3 (rank 13):"
                            " nvidia_xid_79_fallen_off_bus (node)",
                 "line": "gpu-node-3: NVRM: Xid (PCI:0000:2b:00): 79, pid=0, GPU has fallen off"
                         " the bus.",
                 "remediation": "Drain the node; reboot it."}}
    data = {"receiver": "sigwatch-pager", "status": "firing", "alerts": [alert],
            "groupLabels": {"alertname": "SigwatchJobIncident", "job": "train-a"},
            "commonLabels": alert["labels"], "commonAnnotations": alert["annotations"],
            "externalURL": "http://am:9093"}
    (tmp_path / "data.json").write_text(json.dumps(data))

    result = amtool("template", "render", f"--template.glob={TEMPLATE}",
                    f"--template.data={tmp_path / 'data.json'}",
                    '--template.text={{ template "sigwatch.title" . }}\n'
                    '{{ template "sigwatch.text" . }}')

    assert 0 == result.returncode, result.stderr
    text = result.stdout
    assert text.startswith("[FIRING:1] job train-a failed: nvidia_xid_79_fallen_off_bus on"
                           " gpu-node-3 rank 13\n"), text
    assert "Job: train-a   Culprit: gpu-node-3 rank 13   Owner: node" in text
    assert "Line:\n  gpu-node-3: NVRM: Xid (PCI:0000:2b:00): 79" in text
    assert "Fix:\nDrain the node; reboot it." in text


def test_the_notification_template_shows_the_line_and_the_fix(tmp_path: Path) -> None:
    posted: list[list[dict[str, Any]]] = []

    def transport(_url: str, body: bytes, _timeout: float) -> PostResult:
        posted.append(json.loads(body))
        return PostResult(True)

    sink = AlertmanagerSink(["http://am:9093"], node="gpu-node-7", clock=FakeClock(),
                            transport=transport, link_base="http://gpu-node-7:9750")
    sink.emit(Detection(
        signature="nvidia_xid_79_fallen_off_bus", title="NVIDIA Xid 79 GPU Has Fallen Off The Bus",
        severity=Severity.CRITICAL, status="stable", source="kernel", path="/dev/kmsg",
        stream_key="kmsg", line=None, offset=1,
        text="NVRM: Xid (PCI:0000:2b:00): 79, pid=0, GPU has fallen off the bus.",
        time=1_700_000_000.0, remediation=Remediation(
            summary="The GPU is unusable until the node is rebooted.",
            steps=("Drain the node.", "Reboot the node."),
            runbook="https://example.org/runbooks/xid79", action="drain_node")))
    sink.flush()
    [alert] = posted[-1]
    data = {"receiver": "pager", "status": "firing",
            "alerts": [{**alert, "status": "firing", "fingerprint": "0"}],
            "groupLabels": {"alertname": "SigwatchDetection"},
            "commonLabels": alert["labels"], "commonAnnotations": {},
            "externalURL": "http://am:9093"}
    (tmp_path / "data.json").write_text(json.dumps(data))

    result = amtool("template", "render", f"--template.glob={TEMPLATE}",
                    f"--template.data={tmp_path / 'data.json'}",
                    '--template.text={{ template "sigwatch.title" . }}\n'
                    '{{ template "sigwatch.text" . }}')

    assert 0 == result.returncode, result.stderr
    text = result.stdout
    assert text.startswith("[FIRING:1] nvidia_xid_79_fallen_off_bus on gpu-node-7\n")
    assert "GPU has fallen off the bus." in text
    assert "Fix:\n1. Drain the node.\n2. Reboot the node." in text
    assert "Runbook: https://example.org/runbooks/xid79" in text
    assert "Details: http://gpu-node-7:9750/detections/" in text
