"""The ``Sink`` protocol every output implements."""

from __future__ import annotations

from typing import Protocol

from sigwatch.model import Detection

__all__ = ["CollectingSink", "Sink"]


class Sink(Protocol):
    """Receives detections in order. ``flush`` makes what was emitted durable."""

    name: str

    def emit(self, detection: Detection) -> None:
        """Take one detection; must not block the pump for long."""
        ...

    def flush(self) -> None:
        """Make everything emitted so far durable (called before each checkpoint)."""
        ...

    def close(self) -> None:
        """Flush and release resources."""
        ...


class CollectingSink:
    """Keeps detections in memory: for ``scan``, the self-test and tests."""

    name = "collect"

    def __init__(self) -> None:
        self.detections: list[Detection] = []

    def emit(self, detection: Detection) -> None:
        self.detections.append(detection)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None
