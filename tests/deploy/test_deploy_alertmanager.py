"""The example Alertmanager configuration: amtool accepts it, routes sigwatch's alerts by
severity and nobody else's, the real Alertmanager inhibits a node's job-level errors under a
node-level critical, and the notification template shows the fix."""

from __future__ import annotations

import json
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
TEMPLATE = REPO / "deploy" / "alertmanager" / "templates" / "sigwatch.tmpl"


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require("amtool"), *args], capture_output=True, text=True,
                          check=False, timeout=60)


def test_amtool_accepts_the_example_config_and_its_template() -> None:
    result = amtool("check-config", str(CONFIG))
    assert 0 == result.returncode, result.stdout + result.stderr
    assert "1 templates" in result.stdout
    assert "2 inhibit rules" in result.stdout


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
