"""The Grafana dashboard: every query parses, names only sigwatch's metrics, and is valid PromQL
for the real Prometheus; panels use the datasource variable and link to the node's page.

What the numbers mean is checked with the real Prometheus engine too (``promtool test rules``
evaluating the panels' own queries over made-up series): nodes are counted once whatever their
targets and sources, counts are whole numbers per interval, and a counter whose first scraped
sample is already above 0 is counted. Counts are bars or stats, every axis has one unit, and
every column of a table that merges queries has a name."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.catalogue import catalogue, metric_names
from support.debian import require
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


def substituted(expr: str, **macros: str) -> str:
    """What Grafana sends: macros become durations, variables match anything."""
    for macro, value in {**MACROS, **{f"$__{k}": v for k, v in macros.items()}}.items():
        expr = expr.replace(macro, value)
    return re.sub(r"\$\{?[A-Za-z_]\w*\}?", ".*", expr)  # not label_replace's "$1"


def panel(title: str) -> dict[str, Any]:
    [found] = [p for p in panels() if p["title"] == title]
    return found


def counts(p: dict[str, Any]) -> bool:
    """The panel shows how many things happened (counter differences), not a level or rate."""
    return any("increase(" in t["expr"] or " offset " in t["expr"] for t in p["targets"])


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


def test_the_dashboard_covers_fleet_jobs_detections_readers_and_alert_delivery() -> None:
    rows = [p["title"] for p in dashboard()["panels"] if p["type"] == "row"]
    assert ["Fleet", "Jobs", "Detections", "Reader health", "Alert delivery"] == rows
    titles = {p["title"] for p in panels()}
    assert {"Nodes", "Failing jobs and their culprits", "Straggling nodes",
            "Detections by signature", "Lines read per second",
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


def test_rates_use_the_rate_interval_and_counts_their_interval_or_the_range() -> None:
    """rate() over $__rate_interval; a count per bar over exactly the bar's $__interval (with a
    minimum interval of two scrapes), or over the whole $__range."""
    for p in panels():
        for t in p["targets"]:
            for window in re.findall(r"rate\([^\[]*\[([^\]]+)\]", t["expr"]):
                assert "$__rate_interval" == window, p["title"]
            for window in re.findall(r"(?:increase\([^\[]*\[|offset )(\$__\w+)", t["expr"]):
                assert window in ("$__interval", "$__range"), p["title"]
                if window == "$__interval":
                    assert "1m" == p.get("interval"), p["title"]


def test_counts_are_bars_or_stats_of_whole_numbers() -> None:
    """Counts per interval drawn as lines overlap and look fractional: bars, no decimals."""
    count_panels = [p for p in panels() if counts(p)]
    assert {"Detections by signature", "Paging detections", "Top signatures in the range",
            "Read errors and data loss"} <= {p["title"] for p in count_panels}
    for p in count_panels:
        defaults = p["fieldConfig"]["defaults"]
        assert p["type"] in ("stat", "table", "timeseries"), p["title"]
        if p["type"] == "timeseries":
            assert "bars" == defaults["custom"]["drawStyle"], p["title"]
            assert "normal" == defaults["custom"]["stacking"]["mode"], p["title"]
        assert 0 == defaults["decimals"], p["title"]


def test_every_axis_has_one_unit() -> None:
    """No panel mixes bytes, seconds and records: nothing is split by a unit label unless the
    query keeps one unit, and each lag panel carries its own unit."""
    for p in panels():
        for t in p["targets"]:
            grouped = re.findall(r"by \(([^)]*)\)", t["expr"])
            assert not any("unit" in g.split(", ") for g in grouped), p["title"]
            assert "{{unit}}" not in t.get("legendFormat", ""), p["title"]
    lags = {p["title"]: p for p in panels() if p["title"].startswith("Reader lag")}
    assert {"Reader lag (bytes)": "bytes", "Reader lag (seconds)": "s",
            "Reader lag (records)": "short"} == {
        title: p["fieldConfig"]["defaults"]["unit"] for title, p in lags.items()}


def test_tables_that_merge_queries_name_every_column() -> None:
    """'Value #A', 'Value #B'... are renamed (or hidden); so is a table's lone 'Value'."""
    for p in panels():
        if p["type"] != "table":
            continue
        organize = [x["options"] for x in p.get("transformations", [])
                    if x["id"] == "organize"]
        assert organize, p["title"]
        named = set(organize[0].get("renameByName", {})) | {
            k for k, hidden in organize[0].get("excludeByName", {}).items() if hidden}
        values = ({f"Value #{t['refId']}" for t in p["targets"]} if len(p["targets"]) > 1
                  else {"Value"})
        assert values <= named, p["title"]


PROMTOOL_INPUT = [
    # Node n1 has two targets and two sources; n2 one of each; n3 is down.
    ('up{job="sigwatch",node="n1",instance="a:9750"}', "1x20"),
    ('up{job="sigwatch",node="n1",instance="b:9750"}', "1x20"),
    ('up{job="sigwatch",node="n2",instance="c:9750"}', "1x20"),
    ('up{job="sigwatch",node="n3",instance="d:9750"}', "0x20"),
    # Samples every 30 s from t=0: 3 detections on n1/pods, 1 on n1/kernel ...
    ('sigwatch_detections_total{job="sigwatch",node="n1",instance="a:9750",source="pods",'
     'signature="nccl_watchdog_timeout",severity="error"}', "0 0 0 1 1 1 3 3 3 3 3"),
    ('sigwatch_detections_total{job="sigwatch",node="n1",instance="a:9750",source="kernel",'
     'signature="nccl_watchdog_timeout",severity="error"}', "0 0 0 0 1 1 1 1 1 1 1"),
    # ... and 2 on n2 whose counter is first scraped at t=3m already at 2 (it detected them
    # before Prometheus first saw it): increase() alone would miss both.
    ('sigwatch_detections_total{job="sigwatch",node="n2",instance="c:9750",source="pods",'
     'signature="nccl_watchdog_timeout",severity="error"}', "_ _ _ _ _ _ 2 2 2 2 2"),
    # Jobs: train-1 on n1 and n2, train-2 on n1 (the daemon's job and node renamed by the
    # scrape), train-3 on n2 scraped with honor_labels (its own job label kept).
    ('sigwatch_job_active{job="sigwatch",node="n1",instance="a:9750",exported_job="train-1",'
     'exported_node="n1"}', "1x20"),
    ('sigwatch_job_active{job="sigwatch",node="n2",instance="c:9750",exported_job="train-1",'
     'exported_node="n2"}', "1x20"),
    ('sigwatch_job_active{job="sigwatch",node="n1",instance="a:9750",exported_job="train-2",'
     'exported_node="n1"}', "1x20"),
    ('sigwatch_job_active{job="train-3",node="n2",instance="c:9750"}', "1x20"),
    ('sigwatch_job_rank_step_seconds{job="sigwatch",node="n1",instance="a:9750",'
     'exported_job="train-1",exported_node="n1",rank="0"}', "0.8x20"),
    ('sigwatch_job_rank_step_seconds{job="sigwatch",node="n2",instance="c:9750",'
     'exported_job="train-1",exported_node="n2",rank="4"}', "1.12x20"),
    ('sigwatch_job_rank_step_seconds{job="sigwatch",node="n2",instance="c:9750",'
     'exported_job="train-1",exported_node="n2",rank="5"}', "1.05x20"),
    # Verdicts: train-1 blames n1, train-2 is the user's code (no node); n2 straggles in train-1.
    ('ALERTS{alertname="SigwatchJobIncident",alertstate="firing",job="train-1",'
     'culprit_node="n1",owner="node",signature="nvidia_xid_79_fallen_off_bus",basis="fault",'
     'severity="critical"}', "1x20"),
    ('ALERTS{alertname="SigwatchJobIncident",alertstate="firing",job="train-2",owner="user",'
     'signature="python_uncaught_exception",basis="user_fault",severity="error"}', "1x20"),
    ('ALERTS{alertname="SigwatchJobStraggler",alertstate="firing",job="train-1",node="n2",'
     'severity="warning"}', "1x20"),
]


def _expr(title: str, ref: str = "A", **macros: str) -> str:
    [t] = [t for t in panel(title)["targets"] if t["refId"] == ref]
    return substituted(t["expr"], **macros)


@pytest.mark.integration
def test_what_the_panels_count_in_the_real_prometheus_engine(tmp_path: Path) -> None:
    """promtool evaluates the panels' queries: 2 nodes up and 1 down (not 3 targets), the
    signature on 2 nodes (not 3 node-and-source series), 6 paging detections in 5 minutes
    (the 2 of a counter first seen at 2 included), whole-number bars per minute, 3 jobs (not 4
    node-and-job series), 2 failing, 1 node named, and the straggler's slowest rank."""
    sig = {"signature": "nccl_watchdog_timeout"}
    cases: list[tuple[str, str, list[tuple[dict[str, str], float]]]] = [
        (_expr("Nodes up"), "5m", [({}, 2)]),
        (_expr("Nodes down"), "5m", [({}, 1)]),
        (_expr("Paging detections", range="5m"), "5m", [({}, 6)]),
        (_expr("Top signatures in the range", "A", range="5m"), "5m",
         [({**sig, "severity": "error"}, 6)]),
        (_expr("Top signatures in the range", "B", range="5m"), "5m",
         [({**sig, "severity": "error"}, 2)]),
        (_expr("Nodes", "C", range="5m"), "5m",
         [({"node": "n1", "instance": "a:9750"}, 4), ({"node": "n2", "instance": "c:9750"}, 2)]),
        # Bars of one minute: (1m,2m] has n1/pods 0->1 and n1/kernel 0->1; (2m,3m] n1/pods
        # 1->3 and n2 born at 2; nothing after.
        (_expr("Detections by signature", interval="1m"), "2m", [(sig, 2)]),
        (_expr("Detections by signature", interval="1m"), "3m", [(sig, 4)]),
        (_expr("Detections by signature", interval="1m"), "4m", [(sig, 0)]),
        # Jobs: counted once across nodes, whatever the scrape did with their labels.
        (_expr("Jobs followed"), "5m", [({}, 3)]),
        (_expr("Failing jobs"), "5m", [({}, 2)]),
        (_expr("Nodes named culprit"), "5m", [({}, 1)]),
        (_expr("Stragglers"), "5m", [({}, 1)]),
        (_expr("Straggling nodes"), "5m", [({"job": "train-1", "node": "n2"}, 1.12)]),
    ]
    tests = {"rule_files": [], "evaluation_interval": "30s", "tests": [{
        "interval": "30s",
        "input_series": [{"series": s, "values": v} for s, v in PROMTOOL_INPUT],
        "promql_expr_test": [
            {"expr": expr, "eval_time": at, "exp_samples": [
                {"labels": "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                 + "}", "value": value} for labels, value in expected]}
            for expr, at, expected in cases]}]}
    path = tmp_path / "dashboard.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))

    result = subprocess.run([require("promtool"), "test", "rules", str(path)],
                            capture_output=True, text=True, check=False, timeout=120)

    assert 0 == result.returncode, result.stdout + result.stderr


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
