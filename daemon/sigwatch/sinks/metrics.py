"""``MetricsSink``: detection counters on the injected registry."""

from __future__ import annotations

from sigwatch.model import Detection
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["MetricsSink"]


class MetricsSink:
    """Counts detections by signature, severity and source: every occurrence, folded or not."""

    name = "metrics"
    every_occurrence = True

    def __init__(self, metrics: SelfMetrics) -> None:
        self._metrics = metrics

    def emit(self, detection: Detection) -> None:
        self._metrics.detections.labels(
            detection.signature, detection.severity.label, detection.source).inc()
        self._metrics.last_detection.labels(detection.signature, detection.source).set(
            detection.time)

    def flush(self) -> None:
        return None

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        return None
