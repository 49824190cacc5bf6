"""``ListSource``: a source whose positions are record numbers, not byte offsets.

It reads an append-only list of records shared with the test (a stand-in for the journal or
``/dev/kmsg``), one record per line and one line per segment, so the position of a line is its
index. It exists to show that the runtime's exactly-once protocol is not bound to files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sigwatch.framing.lines import Segment
from sigwatch.model import StreamInfo
from sigwatch.sources.base import (
    JSONValue,
    ReplayNeed,
    StreamEvent,
    StreamLines,
    StreamOpened,
)

__all__ = ["ListSource"]


class ListSource:
    """Records ``log[i]`` at position ``i``; resumes from its snapshot."""

    kind = "test"

    def __init__(self, log: list[bytes], *, name: str = "records", budget: int = 3) -> None:
        self.name = name
        self.log = log
        self.budget = budget
        self.info = StreamInfo(name, f"list:{name}", f"list:{name}")
        self._next = 0
        self._lineno = 0
        self._replay_below = -1
        self._pending: tuple[int, ...] = ()
        self._opened = False
        self._more = False

    def start(self, saved: JSONValue | None, *, first_start: bool) -> None:
        _ = first_start
        if isinstance(saved, dict):
            self._next = int(saved["resume"])
            self._lineno = int(saved["lineno"])
            self._replay_below = int(saved["delivered"])
            self._pending = tuple(saved["pending"])

    def poll(self, now: float) -> Iterator[StreamEvent]:
        _ = now
        if not self._opened:
            self._opened = True
            yield StreamOpened(1, self.info, position=self._next, lineno=self._lineno,
                               replay_below=self._replay_below, pending=self._pending,
                               kind=self.kind)
        end = min(len(self.log), self._next + self.budget)
        segments = tuple(Segment(self.log[i] + b"\n", i, i + 1)
                         for i in range(self._next, end))
        self._more = end < len(self.log)
        if segments:
            self._next = end
            yield StreamLines(1, self.info, segments, sum(len(s.data) for s in segments))

    def more_waiting(self) -> bool:
        return self._more

    def snapshot(self, need: Callable[[int], ReplayNeed]) -> JSONValue:
        wanted = need(1) if self._opened else ReplayNeed(lineno_at_end=self._lineno)
        resume, lineno = self._next, wanted.lineno_at_end if self._opened else self._lineno
        if wanted.position is not None and wanted.lineno is not None \
                and wanted.position < resume:
            resume, lineno = wanted.position, wanted.lineno - 1
        # Still replaying below what an earlier run delivered: that stays delivered; its
        # held detections not replayed yet stay pending.
        pending = set(wanted.held) | {p for p in self._pending if p >= self._next}
        return {"resume": resume, "lineno": lineno,
                "delivered": max(self._next, self._replay_below), "pending": sorted(pending)}

    def next_wakeup(self, now: float) -> float | None:
        return now + 1.0

    def stop(self) -> Iterator[StreamEvent]:
        yield from ()
