"""Replay bookkeeping shared by the sources whose positions are not file offsets.

Every stream remembers two things between checkpoints: how far it was read (``read_to``: the
position after the last line handed to the runtime, and the line count there) and what the
runtime still needs (``ReplayNeed``: the oldest position an open detector state started on,
and the detections held back). From those the snapshot stores where to resume, below which
position detections were already delivered, and which were held; ``StreamOpened`` repeats
them after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from sigwatch.sources.base import ReplayNeed

__all__ = ["Progress", "ResumePoint"]


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a restarted stream starts and what it must not deliver twice."""

    position: int
    lineno: int
    replay_below: int = -1
    pending: tuple[int, ...] = ()

    @classmethod
    def load(cls, data: object) -> ResumePoint | None:
        """From a snapshot's ``resume`` record; None when absent or malformed."""
        if not isinstance(data, dict):
            return None
        try:
            position = int(data["position"])
            lineno = int(data["lineno"])
            below = int(data.get("replay_below", -1))
            pending = tuple(int(p) for p in data.get("pending", ()))
        except (KeyError, TypeError, ValueError):
            return None
        return cls(position, lineno, below, pending)


@dataclass(slots=True)
class Progress:
    """How far one stream was read: the next position and the lines before it."""

    read_to: int = 0
    lineno: int = 0
    delivered_below: int = -1  # from the last restart: replayed lines below it were delivered

    @classmethod
    def resumed(cls, point: ResumePoint) -> Progress:
        """Progress right after restarting at ``point`` (before the replay is read again)."""
        return cls(point.position, point.lineno, point.replay_below)

    def advance(self, next_position: int, lines: int) -> None:
        self.read_to = next_position
        self.lineno += lines

    def record(self, need: ReplayNeed) -> dict[str, object]:
        """The ``resume`` record for a snapshot, given what the runtime still needs."""
        position, lineno = self.read_to, self.lineno
        if need.position is not None and need.position < self.read_to:
            position = need.position
            lineno = need.lineno if need.lineno is not None else lineno
        return {
            "position": position,
            "lineno": lineno,
            "replay_below": max(self.read_to, self.delivered_below),
            "pending": sorted(need.held),
        }
