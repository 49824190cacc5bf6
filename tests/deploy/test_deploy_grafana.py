"""The Grafana dashboard: every query parses, names only sigwatch's metrics, and is valid PromQL
for the real Prometheus; panels use the datasource variable and link to the node's page."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.catalogue import catalogue, metric_names
from support.servers import Prometheus

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "sigwatch-dashboard.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
MACROS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}


def dashboard() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return result


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def queries() -> list[tuple[str, str]]:
    """(where, expression) for every panel target, annotation and variable query."""
    out = [(f"panel {p['title']!r} {t['refId']}", t["expr"])
           for p in panels() for t in p["targets"]]
    out += [(f"annotation {a['name']!r}", a["expr"])
            for a in dashboard()["annotations"]["list"]]
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            found = re.fullmatch(r"label_values\((.+), *(\w+)\)", var["query"]["query"])
            assert found, var["name"]
            out.append((f"variable {var['name']}", found.group(1)))
    return out


def substituted(expr: str) -> str:
    """What Grafana sends: macros become durations, variables match anything."""
    for macro, value in MACROS.items():
        expr = expr.replace(macro, value)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def test_the_dashboard_has_a_prometheus_datasource_variable_every_panel_uses() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert "datasource" == variables["datasource"]["type"]
    assert "prometheus" == variables["datasource"]["query"]
    for p in panels():
        assert DS == p["datasource"], p["title"]
        for t in p["targets"]:
            assert DS == t["datasource"], p["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert DS == v["datasource"], v["name"]


def test_the_dashboard_covers_fleet_detections_readers_and_alert_delivery() -> None:
    rows = [p["title"] for p in dashboard()["panels"] if p["type"] == "row"]
    assert ["Fleet", "Detections", "Reader health", "Alert delivery"] == rows
    titles = {p["title"] for p in panels()}
    assert {"Nodes", "Detections by signature", "Lines read per second",
            "Posts to Alertmanager"} <= titles
    variables = [v["name"] for v in dashboard()["templating"]["list"]]
    assert ["datasource", "job", "node", "signature"] == variables


def test_every_panel_has_a_title_a_description_a_unit_and_a_place() -> None:
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels():
        assert p["title"] and p["description"], p
        assert p["fieldConfig"]["defaults"]["unit"], p["title"]
        grid = p["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, p["title"]


def test_rates_use_the_rate_interval_or_the_range() -> None:
    for where, expr in queries():
        for window in re.findall(r"(?:rate|increase)\([^\[]*\[([^\]]+)\]", expr):
            assert window in ("$__rate_interval", "$__range"), where


def test_the_node_status_page_is_linked() -> None:
    links = [link["url"] for link in dashboard()["links"]]
    assert "http://${node}:9750/" in links
    node_table = next(p for p in panels() if p["title"] == "Nodes")
    urls = [link["url"] for link in node_table["fieldConfig"]["defaults"]["links"]]
    assert ["http://${__data.fields.node}:9750/"] == urls


def test_every_metric_a_query_names_is_in_sigwatchs_catalogue() -> None:
    known = catalogue()
    for where, expr in queries():
        names = metric_names(substituted(expr))
        assert names, where
        for name in names:
            assert name in known, f"{where}: {name} is not a sigwatch metric"


@pytest.fixture(name="prometheus", scope="module")
def _prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    prom = Prometheus(tmp_path_factory.mktemp("prom"),
                      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
    prom.wait_ready()
    yield prom
    prom.stop()


@pytest.mark.integration
def test_every_query_is_valid_promql_for_the_real_prometheus(prometheus: Prometheus) -> None:
    bad = []
    for where, expr in queries():
        answer = prometheus.query(substituted(expr))
        if answer["status"] != "success":
            bad.append(f"{where}: {answer.get('error')}")
    assert [] == bad


@pytest.mark.integration
def test_the_validity_check_rejects_a_broken_query(prometheus: Prometheus) -> None:
    answer = prometheus.query(substituted('sum by (node (up{node=~"$node"})'))
    assert "error" == answer["status"]
