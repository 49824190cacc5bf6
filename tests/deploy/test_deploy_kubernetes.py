"""The Kubernetes manifests, validated offline like kubeconform would: strict Kubernetes 1.29
schemas for the core kinds, the prometheus-operator CRD schemas for PodMonitor and
PrometheusRule (both stored under tests/deploy/schemas/), plus an unknown-field check the CRD
schemas lack. The PrometheusRule carries exactly the rules of deploy/prometheus."""

from __future__ import annotations

import copy
import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from support.debian import require

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes"
RULES = REPO / "deploy" / "prometheus" / "rules" / "sigwatch.rules.yml"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
K8S = json.loads((SCHEMAS / "kubernetes-v1.29-strict.json").read_text())
CRDS = json.loads((SCHEMAS / "prometheus-operator-v0.93-crds.json").read_text())


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def one(kind: str) -> dict[str, Any]:
    [doc] = [d for d in documents() if d["kind"] == kind]
    return doc


def unknown_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Keys the CRD schema does not declare (CRD schemas do not set additionalProperties)."""
    found: list[str] = []
    if isinstance(obj, dict) and "properties" in schema:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return found
        for key, value in obj.items():
            if key not in schema["properties"]:
                found.append(f"{path}.{key}")
            else:
                found += unknown_fields(value, schema["properties"][key], f"{path}.{key}")
    elif isinstance(obj, list) and "items" in schema:
        for i, item in enumerate(obj):
            found += unknown_fields(item, schema["items"], f"{path}[{i}]")
    return found


def problems(doc: dict[str, Any]) -> list[str]:
    """Every validation error of one manifest, as 'path: message' lines."""
    kind = doc["kind"]
    if kind in K8S["kinds"]:
        schema = {"$defs": K8S["$defs"], **K8S["kinds"][kind]}
        extra: list[str] = []
    elif kind in CRDS["kinds"]:
        schema = CRDS["kinds"][kind]
        extra = [f"{p}: unknown field" for p in unknown_fields(doc, schema)]
    else:
        return [f"no schema for kind {kind}"]
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
              for e in validator.iter_errors(doc)]
    return errors + extra


def test_every_manifest_is_valid_against_its_schema() -> None:
    docs = documents()
    kinds = sorted(d["kind"] for d in docs)
    assert ["ConfigMap", "DaemonSet", "NetworkPolicy", "PodMonitor", "PrometheusRule",
            "ServiceAccount"] == kinds
    for doc in docs:
        assert [] == problems(doc), doc["kind"]


@pytest.mark.parametrize(("kind", "change", "expected"), [
    ("DaemonSet", lambda d: d["spec"]["template"]["spec"].update(tolerationz=[]),
     "tolerationz"),
    ("DaemonSet", lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0]
     .update(containerPort="9750"), "is not of type 'integer'"),
    ("PodMonitor", lambda d: d["spec"]["podMetricsEndpoints"][0].update(interval="30 seconds"),
     "does not match"),
    ("PodMonitor", lambda d: d["spec"].update(podMetricEndpoints=[]), "unknown field"),
    ("PrometheusRule", lambda d: d["spec"]["groups"][1]["rules"][0].update(**{"for": "3 min"}),
     "does not match"),
])
def test_the_validation_catches_a_planted_mistake(kind: str, change: Any, expected: str) -> None:
    doc = copy.deepcopy(one(kind))
    change(doc)
    assert any(expected in p for p in problems(doc)), problems(doc)


def test_the_prometheusrule_carries_exactly_the_rules_of_deploy_prometheus() -> None:
    shipped = yaml.safe_load(RULES.read_text())["groups"]
    assert shipped == one("PrometheusRule")["spec"]["groups"], (
        "regenerate deploy/kubernetes/prometheusrule.yaml from the rules file")


@pytest.mark.integration
def test_promtool_accepts_the_prometheusrule_groups(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": one("PrometheusRule")["spec"]["groups"]}))
    result = subprocess.run([require("promtool"), "check", "rules", str(rules)],
                            capture_output=True, text=True, check=False, timeout=60)
    assert 0 == result.returncode, result.stdout + result.stderr


def test_the_daemonset_reads_host_logs_read_only_and_tolerates_gpu_nodes() -> None:
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    [container] = spec["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert {"/var/log", "/dev/kmsg", "/run/log/journal", "/var/lib/sigwatch",
            "/etc/machine-id"} == set(host.values())
    for name, path in host.items():
        assert bool(mounts[name].get("readOnly")) is (path != "/var/lib/sigwatch"), name
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        spec["tolerations"]
    resources = container["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert ["ALL"] == security["capabilities"]["drop"]
    assert "privileged" not in security
    assert [9750] == [p["containerPort"] for p in container["ports"]]


def test_the_podmonitor_scrapes_the_daemonsets_port_as_job_sigwatch_with_a_node_label() -> None:
    monitor = one("PodMonitor")["spec"]
    pod_labels = one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= pod_labels.items()
    assert "sigwatch" == pod_labels[monitor["jobLabel"]]
    [endpoint] = monitor["podMetricsEndpoints"]
    assert "metrics" == endpoint["port"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
            "action": "replace"} in endpoint["relabelings"]


def _configmap_config(tmp_path: Path) -> Any:
    from sigwatch.config import load_config

    text = one("ConfigMap")["data"]["sigwatch.toml"]
    tomllib.loads(text)
    path = tmp_path / "sigwatch.toml"
    path.write_text(text)
    return load_config(path)


def test_the_configmap_holds_a_config_sigwatch_accepts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-17")
    config = _configmap_config(tmp_path)
    assert config.listen.endswith(":9750")


def test_the_node_name_is_the_nodes_from_the_downward_api(tmp_path: Path,
                                                          monkeypatch) -> None:
    """NODE_NAME is set from spec.nodeName and the config takes the node name from it; a pod
    without it fails with a clear error instead of labelling everything with the pod's name."""
    from sigwatch.errors import ConfigError

    [container] = one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in \
        container["env"]
    monkeypatch.setenv("NODE_NAME", "gpu-node-17")
    assert "gpu-node-17" == _configmap_config(tmp_path).node
    monkeypatch.delenv("NODE_NAME")
    with pytest.raises(ConfigError, match="NODE_NAME is not set"):
        _configmap_config(tmp_path)


def test_pod_logs_are_read_as_container_logs(tmp_path: Path, monkeypatch) -> None:
    """/var/log/pods is read with the container format recognised (auto), not as plain text."""
    monkeypatch.setenv("NODE_NAME", "gpu-node-17")
    [pods] = [s for s in _configmap_config(tmp_path).sources
              if "/var/log/pods/*/*/*.log" in s.paths]
    assert "auto" == (pods.format or "auto")


def test_the_status_page_links_reach_the_pod_on_its_node() -> None:
    """http://<node>:9750/ (dashboard, pages) needs the port on the node: a hostPort (or host
    network); and the NetworkPolicy must admit more than Prometheus for on-call to open it."""
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    [container] = spec["containers"]
    host_ports = [p.get("hostPort") for p in container["ports"]]
    assert spec.get("hostNetwork") is True or [9750] == host_ports
    rules = one("NetworkPolicy")["spec"]["ingress"]
    assert any("ipBlock" in peer for rule in rules for peer in rule["from"])
