"""The ``Source`` protocol: where lines come from, and how far they were read.

A source owns one or more *streams* (a file, a job's stderr, the journal, ``/dev/kmsg``) and
yields ``StreamEvent``s from ``poll``: a stream opened (with where its replay starts), whole
lines read from it, a stream closed. Positions inside a stream are integers that grow with the
stream (a byte offset for a file or a pipe, a sequence number for kmsg, a counter for the
journal); what a source needs to resume (a cursor, an inode and a marker, a boot id) stays
inside the opaque, JSON-serialisable blob it returns from ``snapshot``.

Exactly-once is shared between the runtime and the source. The runtime tells the source, per
stream, the oldest position a detector still needs (``ReplayNeed``) when it asks for a
snapshot; the source resumes there after a crash and says, in ``StreamOpened``, below which
position detections were already delivered (``replay_below``) and which held ones were not
(``pending``). The runtime then rebuilds detector state from the replayed lines without
emitting twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from sigwatch.framing.lines import Segment
from sigwatch.model import StreamInfo

__all__ = [
    "JSONValue",
    "ReplayNeed",
    "Source",
    "StreamClosed",
    "StreamEvent",
    "StreamLines",
    "StreamOpened",
]

JSONValue = object
"""Anything ``json.dumps`` accepts: what a source stores in the checkpoint."""


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """A stream starts (or restarts after a truncation) under a fresh ``handle``.

    ``lineno`` is the number of lines before ``position``; detections of lines below
    ``replay_below`` were already delivered before a restart, except those in ``pending``.
    """

    handle: int
    info: StreamInfo
    position: int = 0
    lineno: int = 0
    replay_below: int = -1
    pending: tuple[int, ...] = ()
    kind: str = "file"  # file | pipe | exec | journal | kmsg | container | test


@dataclass(frozen=True, slots=True)
class StreamLines:
    """Whole lines read from a stream; each segment carries its own position."""

    handle: int
    info: StreamInfo
    segments: tuple[Segment, ...]
    nbytes: int = 0  # bytes consumed from the source (for metrics; may exceed the segments)


@dataclass(frozen=True, slots=True)
class StreamClosed:
    """A stream ended for good (file gone and drained, pipe at EOF, truncated and restarted).

    Detectors release what they held for it. ``clean`` is False when it ended abnormally.
    """

    handle: int
    info: StreamInfo
    clean: bool = True


StreamEvent = StreamOpened | StreamLines | StreamClosed


@dataclass(frozen=True, slots=True)
class ReplayNeed:
    """What the detectors still need of one stream, as of the snapshot.

    ``position``/``lineno``: the oldest line an open detector state started on (None: nothing
    older than what was read is needed). ``held``: positions of detections held back and not
    delivered yet. ``lineno_at_end``: lines counted so far on that stream.
    """

    position: int | None = None
    lineno: int | None = None
    held: tuple[int, ...] = ()
    lineno_at_end: int = 0


class Source(Protocol):
    """Something that yields lines of named streams, resumably."""

    name: str
    """The configured source name: the ``source`` label of every metric and detection."""

    def start(self, saved: JSONValue | None, *, first_start: bool) -> None:
        """Resume from a snapshot (None: nothing saved for this source).

        ``first_start`` is True when the daemon has never committed anything (no checkpoint
        at all): sources that honour ``start_at = "end"`` skip what already exists.
        """
        ...

    def poll(self, now: float) -> Iterator[StreamEvent]:
        """Read what is available now, without blocking, in bounded slices.

        The runtime consumes each event before the generator continues, and may stop early
        (backpressure); the source must then resume where it stopped on the next call.
        """
        ...

    def more_waiting(self) -> bool:
        """True when the last ``poll`` stopped at its budget with more input ready."""
        ...

    def snapshot(self, need: Callable[[int], ReplayNeed]) -> JSONValue:
        """A JSON-serialisable position for the checkpoint; ``need(handle)`` per stream."""
        ...

    def next_wakeup(self, now: float) -> float | None:
        """When (monotonic seconds) to poll again even with no change hint; None: no timer."""
        ...

    def stop(self) -> Iterator[StreamEvent]:
        """Close everything; yields the last events (unterminated last lines, closes)."""
        ...


SourceFactory = Callable[[Mapping[str, object]], Source]
