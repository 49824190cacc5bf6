"""Small detectors used by runtime tests."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sigwatch.clock import Clock
from sigwatch.detectors.base import LineEvent, StreamContext
from sigwatch.model import Detection, Remediation, Severity

__all__ = ["DeadlineOnlyDetector"]


class DeadlineOnlyDetector:
    """Fires one line-less detection ``after`` seconds after it first started; nothing else.

    Its deadline is kept as wall time in the snapshot, so it survives a restart: a restart
    before the deadline still fires at the original time, a restart after it does not fire
    again.
    """

    name = "deadline_only"
    interest: re.Pattern[bytes] | None = None

    def __init__(self, clock: Clock, after: float) -> None:
        self.clock = clock
        self.after = after
        self.deadline_wall = clock.time() + after
        self.fired = False

    def on_open(self, stream: StreamContext) -> None:
        _ = stream

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        _ = event
        return ()

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        _ = stream, clean
        return ()

    def next_deadline(self) -> float | None:
        if self.fired:
            return None
        return self.clock.monotonic() + (self.deadline_wall - self.clock.time())

    def tick(self, now: float) -> Sequence[Detection]:
        _ = now
        if self.fired or self.clock.time() < self.deadline_wall:
            return ()
        self.fired = True
        return (Detection(
            signature="test_deadline", title="Deadline passed", severity=Severity.WARNING,
            status="test", source="timer", path="", stream_key="timer", line=None,
            offset=None, text=None, time=self.clock.time(), remediation=Remediation(),
            about=f"no input for {self.after:.0f} s", key=f"{self.deadline_wall:.3f}"),)

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        _ = handle
        return None

    def held(self, handle: int) -> tuple[int, ...]:
        _ = handle
        return ()

    def snapshot(self) -> object:
        return {"deadline": self.deadline_wall, "fired": self.fired}

    def restore(self, state: object) -> None:
        assert isinstance(state, dict)
        self.deadline_wall = float(state["deadline"])
        self.fired = bool(state["fired"])
