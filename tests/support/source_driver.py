"""A tiny runtime for one ``Source``: the exactly-once model test's view of any source.

It does what the daemon's runtime does with a source and nothing else: ``start`` from a saved
blob, ``poll`` until nothing more is waiting, keep the lines of each stream with their
positions, take a ``snapshot`` (through JSON, as the checkpoint does) with a ``need`` the test
chooses, ``stop``, and start a new instance from that snapshot. Lines a restarted stream
replays below its ``replay_below`` are kept apart (``replayed``): the runtime rebuilds state
from them but never delivers them twice, so ``delivered`` is what a sink would see.

Tests wait on conditions with a deadline (``poll_until``); between polls they wait on the
source's descriptors when it has some (``select``), never for a fixed time.
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sigwatch.sources.base import (
    ReplayNeed,
    Source,
    StreamClosed,
    StreamEvent,
    StreamLines,
    StreamOpened,
)

__all__ = ["Delivered", "SourceDriver", "stop_all"]

_LIVE: list[SourceDriver] = []


def stop_all() -> None:
    """Stop every source a driver still runs (a test's teardown: no leaked fds or children)."""
    while _LIVE:
        driver = _LIVE.pop()
        if driver.source is not None:
            driver.stop()


@dataclass(frozen=True, slots=True)
class Delivered:
    """One line as the runtime would see it: stream key, position, text, the source's time."""

    key: str
    position: int
    text: str
    time: float | None
    lineno: int


@dataclass
class _Stream:
    opened: StreamOpened
    lineno: int
    closed: bool = False


@dataclass
class SourceDriver:
    """Runs ``factory()`` sources one after the other, as successive daemon lifetimes."""

    factory: Callable[[], Source]
    need: Callable[[int], ReplayNeed] = field(default=lambda _handle: ReplayNeed())
    source: Source | None = None
    saved: Any = None
    delivered: list[Delivered] = field(default_factory=list)
    replayed: list[Delivered] = field(default_factory=list)
    opened: list[StreamOpened] = field(default_factory=list)
    closed: list[StreamClosed] = field(default_factory=list)
    streams: dict[int, _Stream] = field(default_factory=dict)
    lifetimes: int = 0

    # -- lifetimes ------------------------------------------------------------------------

    def start(self, *, first_start: bool | None = None) -> Source:
        """A new daemon lifetime: a fresh source resumes from the last snapshot."""
        self.source = self.factory()
        first = self.saved is None if first_start is None else first_start
        self.source.start(self.saved, first_start=first)
        self.streams = {}
        self.lifetimes += 1
        if self not in _LIVE:
            _LIVE.append(self)
        return self.source

    def snapshot(self) -> Any:
        """What the checkpoint would store now (round-tripped through JSON)."""
        assert self.source is not None
        self.saved = json.loads(json.dumps(self.source.snapshot(self.need)))
        return self.saved

    def stop(self) -> None:
        """Graceful stop: the last events are consumed, then the snapshot is taken."""
        assert self.source is not None
        for event in self.source.stop():
            self._consume(event)
        self.source = None

    def restart(self) -> Source:
        """Snapshot, stop, start a new instance from the snapshot."""
        self.snapshot()
        self.stop()
        return self.start()

    def crash(self) -> Source:
        """Lose everything since the last snapshot (no new snapshot, no events consumed)."""
        if self.source is not None:
            for _event in self.source.stop():  # only to release fds and children
                pass
        self.source = None
        return self.start()

    # -- polling --------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> int:
        """One runtime turn: poll until the source has nothing more waiting; returns events."""
        assert self.source is not None
        count = 0
        while True:
            for event in self.source.poll(time.monotonic() if now is None else now):
                self._consume(event)
                count += 1
            if not self.source.more_waiting():
                return count

    def poll_until(self, condition: Callable[[], object], timeout: float = 60.0,
                   what: str = "") -> None:
        """Poll until ``condition()`` holds; waits on the source's descriptors in between."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if condition():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
            fds = getattr(self.source, "fds", lambda: ())()
            poller = select.poll()  # not select(): descriptors above 1023 are fine
            for fd in fds:
                poller.register(fd, select.POLLIN)
            poller.poll(int(min(left, 0.2 if fds else 0.02) * 1000) + 1)

    def _consume(self, event: StreamEvent) -> None:
        if isinstance(event, StreamOpened):
            self.opened.append(event)
            self.streams[event.handle] = _Stream(event, event.lineno)
        elif isinstance(event, StreamLines):
            stream = self.streams.get(event.handle)
            assert stream is not None, f"lines of handle {event.handle} before StreamOpened"
            for seg in event.segments:
                time_of = getattr(seg, "time", None)
                lines = seg.data.split(b"\n")[:-1]
                pos = seg.offset
                for raw in lines:
                    stream.lineno += 1
                    item = Delivered(event.info.key, pos, raw.decode("utf-8", "replace"),
                                     time_of, stream.lineno)
                    if pos < stream.opened.replay_below:
                        self.replayed.append(item)
                    else:
                        self.delivered.append(item)
                    pos += len(raw) + 1
        else:
            self.closed.append(event)
            if event.handle in self.streams:
                self.streams[event.handle].closed = True

    # -- views ----------------------------------------------------------------------------

    def texts(self, key: str | None = None) -> list[str]:
        """Delivered texts, in order (of one stream when ``key`` is given)."""
        return [d.text for d in self.delivered if key is None or d.key == key]

    def duplicates(self) -> list[tuple[str, int]]:
        """(stream, position) pairs delivered more than once: must always be empty."""
        seen: set[tuple[str, int]] = set()
        dupes: list[tuple[str, int]] = []
        for d in self.delivered:
            if (d.key, d.position) in seen:
                dupes.append((d.key, d.position))
            seen.add((d.key, d.position))
        return dupes

    def positions_grow(self) -> bool:
        """Within each lifetime's stream, positions only grow (what the runtime relies on)."""
        last: dict[str, int] = {}
        for d in self.delivered:
            if d.key in last and d.position <= last[d.key]:
                return False
            last[d.key] = d.position
        return True
