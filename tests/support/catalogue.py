"""The metric names sigwatch exports, and the names a PromQL expression uses.

Deployment files (rules, dashboards) must only name metrics that exist: this is the list they
are checked against, built from ``SelfMetrics`` on a fresh registry, plus the series Prometheus
itself makes (``up``, ``ALERTS``) and the process collector's ``process_*``.
"""

from __future__ import annotations

from typing import Any

import promql_parser
from prometheus_client import CollectorRegistry, ProcessCollector

from sigwatch.telemetry.metrics import JOB_GAUGES, SelfMetrics

__all__ = ["PROMETHEUS_SERIES", "catalogue", "metric_names"]

PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped",
                               "ALERTS", "ALERTS_FOR_STATE"})

_SUFFIXES = {"counter": ("_total",), "info": ("_info",), "gauge": ("",),
             "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", ""),
             "stateset": ("",), "enum": ("",), "unknown": ("",)}


def _names(registry: CollectorRegistry) -> set[str]:
    out: set[str] = set()
    for family in registry.collect():
        for suffix in _SUFFIXES[family.type]:
            out.add(family.name + suffix)
    return out


def catalogue() -> frozenset[str]:
    """Every series name sigwatch exports (on a fresh registry, and the gauges of the jobs it
    follows) or Prometheus adds."""
    registry = CollectorRegistry()
    SelfMetrics(registry, "0.0.0")
    names = _names(registry) | set(JOB_GAUGES)
    if not any(n.startswith("process_") for n in names):
        process = CollectorRegistry()
        ProcessCollector(registry=process)
        names |= _names(process)
    return frozenset(names | PROMETHEUS_SERIES)


def _walk(node: Any) -> list[str]:
    if isinstance(node, promql_parser.VectorSelector):
        found = [node.name] if node.name else []
        found += [m.value for m in node.matchers.matchers if m.name == "__name__"]
        return found
    found = []
    for attr in ("lhs", "rhs", "expr", "vector_selector", "param"):
        child = getattr(node, attr, None)
        if child is not None:
            found += _walk(child)
    for child in getattr(node, "args", None) or []:
        found += _walk(child)
    return found


def metric_names(expr: str) -> list[str]:
    """The metric names an expression selects (raises ValueError when it does not parse)."""
    return _walk(promql_parser.parse(expr))
