"""Where detections go: event log, metrics, console; later Alertmanager."""

from __future__ import annotations

__all__: list[str] = []
