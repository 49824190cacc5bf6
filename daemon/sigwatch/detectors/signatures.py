"""``SignatureDetector``: known signatures, one step or many, with hold and supersede.

Matches arrive per line from the runtime (the engine matched them). One-step signatures fire at
once; multi-step ones walk their steps per (stream, rank) in a ``SequenceTracker``. A specific
multi-step signature holds the generic detection made on its first line and drops it when the
sequence completes (one incident, one detection, with the specific fix). Context lines are
quoted from the lines before the trigger, filtered by the signature's ``include`` patterns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from sigwatch.clock import Clock
from sigwatch.detectors.base import LineEvent, StreamContext
from sigwatch.detectors.sequence import Fired, SequenceTracker
from sigwatch.model import Detection
from sigwatch.patterns.compiled import CompiledSignature, PatternSet

__all__ = ["HOLD_SECONDS", "SignatureDetector"]

MAX_STORY_LINES = 40
"""At most this many lines between a sequence's first and last step are quoted."""

HOLD_SECONDS = 5.0
"""How long a generic detection waits for a specific multi-step signature that may supersede it."""


class SignatureDetector:
    """The signature library as a detector."""

    name = "signatures"
    interest = None

    def __init__(self, patterns: PatternSet, *, clock: Clock, host: str = "",
                 regex_timeout: float = 0.05, lineno_of: Callable[[int], int] | None = None,
                 hold_seconds: float = HOLD_SECONDS) -> None:
        self.patterns = patterns
        self.clock = clock
        self.host = host
        self.regex_timeout = regex_timeout
        self.hold_seconds = hold_seconds
        self._lineno_of = lineno_of or (lambda _h: 0)
        self._trackers: dict[int, SequenceTracker] = {}
        self._streams: dict[int, StreamContext] = {}
        self._said_once: set[tuple[str, str]] = set()  # (stream key, signature)

    # -- reload ---------------------------------------------------------------------------------

    def swap(self, patterns: PatternSet) -> list[Detection]:
        """Use a new pattern set; open sequences whose signature still exists are kept."""
        self.patterns = patterns
        out: list[Detection] = []
        for handle, tracker in self._trackers.items():
            out.extend(self._detections(self._streams[handle], tracker.retain(patterns)))
        return out

    # -- the protocol -----------------------------------------------------------------------

    def on_open(self, stream: StreamContext) -> None:
        self._trackers[stream.handle] = SequenceTracker()
        self._streams[stream.handle] = stream

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        if not event.matches:
            return ()
        tracker = self._trackers.get(event.stream.handle)
        if tracker is None:
            self.on_open(event.stream)
            tracker = self._trackers[event.stream.handle]
        patterns = self.patterns
        context_of: dict[str, tuple[str, ...]] = {}
        for match in event.matches:
            sig = patterns.get(match.signature)
            if match.step == 0 and sig is not None and sig.context_before:
                context_of[sig.id] = self._context(sig, event)
        fired = tracker.feed(patterns, list(event.matches), context_of, self.clock.monotonic())
        fired = [self._with_story(f, event) for f in fired]
        return self._detections(event.stream, fired)

    def _with_story(self, f: Fired, event: LineEvent) -> Fired:
        """A completed sequence quotes the lines from its first step to its last: the frames
        of a traceback up to the exception, the stack after a SIGSEGV up to the frame."""
        if f.last is f.first or f.last.line is not event.line:
            return f
        span = min(event.line.lineno - f.first.line.lineno, MAX_STORY_LINES)
        story = event.recent.before(span, event.line.rank) if span > 0 else []
        return dataclasses.replace(f, context=(*f.context, *story))

    def after_chunk(self, handle: int) -> list[Detection]:
        """Release holds whose line window passed (called after each chunk of a stream)."""
        tracker = self._trackers.get(handle)
        if tracker is None or tracker.is_empty():
            return []
        released = tracker.expire(self._lineno_of(handle), self.clock.monotonic(),
                                  self.hold_seconds)
        return self._detections(self._streams[handle], released)

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        _ = clean
        tracker = self._trackers.pop(stream.handle, None)
        self._streams.pop(stream.handle, None)
        if tracker is None:
            return ()
        return self._detections(stream, tracker.release_all())

    def tick(self, now: float) -> Sequence[Detection]:
        _ = now
        out: list[Detection] = []
        for handle in list(self._trackers):
            out.extend(self.after_chunk(handle))
        return out

    def next_deadline(self) -> float | None:
        waits = [t for tr in self._trackers.values() if (t := tr.earliest_hold()) is not None]
        return min(waits) + self.hold_seconds if waits else None

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        tracker = self._trackers.get(handle)
        return tracker.earliest_open() if tracker is not None else None

    def held(self, handle: int) -> tuple[int, ...]:
        tracker = self._trackers.get(handle)
        return tracker.held_offsets() if tracker is not None else ()

    def snapshot(self) -> object:
        return None  # open sequences are rebuilt by replaying from ``replay_floor``

    def restore(self, state: object) -> None:
        _ = state

    # -- building detections --------------------------------------------------------------

    def _detections(self, stream: StreamContext, fired: list[Fired]) -> list[Detection]:
        if not fired:
            return []
        patterns = self.patterns
        ids = {f.signature for f in fired}
        superseded: set[str] = set()
        for sig_id in ids:
            sig = patterns.get(sig_id)
            if sig is not None:
                superseded |= sig.supersedes & (ids - {sig_id})
        now = self.clock.time()
        out: list[Detection] = []
        for f in fired:
            sig = patterns.get(f.signature)
            if sig is None or f.signature in superseded:
                continue
            if sig.once_per_stream:
                said = (stream.info.key, sig.id)
                if said in self._said_once:
                    continue
                self._said_once.add(said)
            out.append(self._detection(sig, stream, f, now))
        return out

    def _detection(self, sig: CompiledSignature, stream: StreamContext, f: Fired,
                   now: float) -> Detection:
        line = f.last.line
        info = stream.info
        return Detection(
            signature=sig.id, title=sig.title, severity=sig.severity, status=sig.status,
            source=info.source, path=info.path, stream_key=info.key,
            line=line.lineno, offset=line.offset, text=line.text, time=now,
            remediation=sig.remediation, context=f.context, rank=line.rank,
            captures=f.captures, labels=sig.labels, host=self.host,
            first_offset=f.first.line.offset, owner=sig.owner, line_time=line.time,
        )

    def _context(self, sig: CompiledSignature, event: LineEvent) -> tuple[str, ...]:
        """The ``before`` lines preceding the trigger, of the same rank, filtered by include."""
        lines = event.recent.before(sig.context_before, event.line.rank)
        if not sig.context_include:
            return tuple(lines)
        return tuple(text for text in lines
                     if any(_safe_search(p, text, self.regex_timeout)
                            for p in sig.context_include))


def _safe_search(pattern: object, text: str, timeout: float) -> bool:
    try:
        return pattern.search(text, timeout=timeout) is not None  # type: ignore[attr-defined]
    except TimeoutError:
        return False
