"""The ``Sink`` protocol every output implements, and a collecting sink for scans and tests.

The runtime runs each sink but the event log behind a ``QueuedSink`` (``sinks/queued.py``): its
own bounded queue and worker thread, so a slow or failing sink (an Alertmanager that is down, a
console on a stuck terminal) never blocks reading. The event log is the commit log of the
exactly-once protocol and is written on the pump thread (``sinks/eventlog.py`` says why).
"""

from __future__ import annotations

from typing import Protocol

from sigwatch.model import Detection

__all__ = ["CollectingSink", "Sink"]


class Sink(Protocol):
    """Receives detections in order. ``flush`` makes what was emitted durable."""

    name: str

    def emit(self, detection: Detection) -> None:
        """Take one detection (on the sink's own worker thread when queued)."""
        ...

    def flush(self) -> None:
        """Make everything emitted so far durable (called before each checkpoint)."""
        ...

    def tick(self, now: float) -> None:
        """Time passed (wall-clock ``now``): re-send, resolve, retry. Often a no-op."""
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

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        return None
