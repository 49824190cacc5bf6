"""The ``Detector`` protocol: state machines over lines, matches and time.

The runtime reads lines from sources, runs the signature matcher on the lines its prefilter
selects, and hands every detector:

- ``on_open``/``on_close`` when a stream starts or ends;
- ``on_line`` for each line it wants: lines with signature matches, plus the lines its own
  cheap ``interest`` byte pattern selects (a miner wants error-looking lines, a step-time
  extractor wants progress lines), so nothing slow runs on every line;
- ``tick(now)`` when ``next_deadline`` has passed (a stall needs no input line at all).

Detectors return detections; they never write to sinks. State that replay cannot rebuild
(a deadline, a learned baseline) goes into ``snapshot``/``restore`` and the checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sigwatch.model import Detection, LogLine, Match, StreamInfo

__all__ = ["Detector", "LineEvent", "RecentLines", "StreamContext"]


@dataclass(frozen=True, slots=True)
class StreamContext:
    """What a detector knows about the stream a line came from."""

    handle: int
    info: StreamInfo
    kind: str = "file"


class RecentLines(Protocol):
    """Lines just before the current one (from the chunk and the stream's tail)."""

    def before(self, count: int, rank: str | None = None) -> list[str]:
        """The ``count`` raw lines preceding the current one, normalised, oldest first.

        With ``rank``, parts that carry another rank are left out (interleaved launchers).
        """
        ...


@dataclass(frozen=True, slots=True)
class LineEvent:
    """One normalised line and the signature steps it matched (often none)."""

    stream: StreamContext
    line: LogLine
    matches: tuple[Match, ...]
    recent: RecentLines
    replaying: bool = False  # below the stream's replay point: rebuild state, emit nothing


class Detector(Protocol):
    """A state machine fed by the runtime on one thread."""

    name: str

    @property
    def interest(self) -> re.Pattern[bytes] | None:
        """A bytes regex selecting raw lines this detector wants besides matched ones."""
        ...

    def on_open(self, stream: StreamContext) -> None:
        """A stream started (or restarted after truncation) under a new handle."""
        ...

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        """Take one line; return what it completes."""
        ...

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        """The stream ended: release what is held for it."""
        ...

    def tick(self, now: float) -> Sequence[Detection]:
        """Time passed (monotonic ``now``): fire deadlines, release holds."""
        ...

    def next_deadline(self) -> float | None:
        """The monotonic time ``tick`` should next run; None when nothing is pending."""
        ...

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        """(position, lineno) of the oldest line of ``handle`` that open state started on."""
        ...

    def held(self, handle: int) -> tuple[int, ...]:
        """Positions of detections held back (not delivered yet) for ``handle``."""
        ...

    def snapshot(self) -> object:
        """JSON-serialisable state that replay cannot rebuild (None if there is none)."""
        ...

    def restore(self, state: object) -> None:
        """Take back what ``snapshot`` returned before a restart."""
        ...
