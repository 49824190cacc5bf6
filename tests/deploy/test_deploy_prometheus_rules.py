"""The shipped Prometheus rules: promtool checks them, unit-tests each one (the job verdict in
its own test file), and every metric they name is in sigwatch's catalogue or recorded by a
rule before them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.catalogue import catalogue, metric_names
from support.debian import require

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules" / "sigwatch.rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "tests" / "sigwatch.rules.test.yml"
JOB_TESTS = REPO / "deploy" / "prometheus" / "tests" / "sigwatch.jobs.test.yml"
SCRAPE_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
SEVERITIES = {"critical", "error", "warning", "info"}


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require("promtool"), *args], cwd=cwd, capture_output=True,
                          text=True, check=False, timeout=120)


@pytest.mark.integration
def test_promtool_accepts_the_rule_file() -> None:
    result = promtool("check", "rules", str(RULES))
    assert 0 == result.returncode, result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("tests", [RULE_TESTS, JOB_TESTS], ids=lambda p: p.name)
def test_every_rule_passes_its_promtool_unit_tests(tests: Path) -> None:
    result = promtool("test", "rules", str(tests))
    assert 0 == result.returncode, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.integration
def test_the_example_scrape_config_is_valid_and_loads_the_rules() -> None:
    result = promtool("check", "config", str(SCRAPE_CONFIG))
    assert 0 == result.returncode, result.stdout + result.stderr
    assert "SUCCESS: 34 rules found" in result.stdout


def test_every_alert_has_a_test_where_it_fires_and_one_where_it_does_not() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for tests in (RULE_TESTS, JOB_TESTS):
        for group in yaml.safe_load(tests.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                (fired if case["exp_alerts"] else quiet).add(case["alertname"])
    names = {r["alert"] for r in alerts()}
    assert set() == names - fired, "rules never shown firing"
    assert set() == names - quiet - {"SigwatchRegexTimeouts", "SigwatchSinkDropped"}, \
        "rules never shown quiet"


def test_every_metric_a_rule_uses_is_in_the_catalogue_or_recorded_before_it() -> None:
    known = set(catalogue())
    for rule in rules():
        name = rule.get("alert") or rule["record"]
        for used in metric_names(rule["expr"]):
            assert used in known, f"{name}: {used} is not a sigwatch metric nor recorded before"
        if "record" in rule:
            known.add(rule["record"])


def test_every_alert_says_what_happened_and_how_urgent_it_is() -> None:
    for rule in alerts():
        assert rule["alert"].startswith("Sigwatch"), rule["alert"]
        notes = rule["annotations"]
        assert notes.get("summary") and notes.get("description"), rule["alert"]
        severity = rule.get("labels", {}).get("severity")
        if severity is None:  # the detection rule takes the severity of the series
            assert "severity" in rule["expr"], rule["alert"]
        elif "{{" in severity:  # chosen by a template: every branch is a severity
            assert set() != set(re.findall(r"}}(\w+){{", severity)), rule["alert"]
            assert set(re.findall(r"}}(\w+){{", severity)) <= SEVERITIES, rule["alert"]
        else:
            assert severity in SEVERITIES, rule["alert"]


def test_every_counter_rule_also_catches_a_series_born_above_zero() -> None:
    """increase() alone misses a counter whose first sample is already 1 (promtool shows it)."""
    exempt = {"SigwatchSinkErrors", "SigwatchRegexTimeouts", "SigwatchCheckpointFailing",
              "SigwatchAlertDeliveryFailing"}  # series created at zero before any error
    for rule in alerts():
        if "increase(" in rule["expr"] and rule["alert"] not in exempt:
            assert "unless" in rule["expr"] and "offset" in rule["expr"], rule["alert"]
