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
from dataclasses import dataclass

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

MAX_EVENT_LINES_QUOTED = 10
"""Earlier matched lines of a multi-line event quoted as its context."""


@dataclass(slots=True)
class _Event:
    """A multi-line event being read (``event_lines``): the first match and the latest."""

    first: Fired
    merged: Fired
    last_lineno: int
    opened_at: float
    window: int
    earlier: list[str]


class SignatureDetector:
    """The signature library as a detector."""

    name = "signatures"
    interest = None

    def __init__(self, patterns: PatternSet, *, clock: Clock, host: str = "",
                 regex_timeout: float = 0.05, lineno_of: Callable[[int], int] | None = None,
                 hold_seconds: float = HOLD_SECONDS,
                 folded: Callable[[str, LineEvent], bool] | None = None) -> None:
        """``folded(signature, event)``: True when a detection of ``signature`` on this line
        would only repeat an open incident: its context lines are then not gathered (a repeat
        is recorded without them; 800,000 repeats would otherwise each read their context)."""
        self.patterns = patterns
        self.clock = clock
        self.host = host
        self.regex_timeout = regex_timeout
        self.hold_seconds = hold_seconds
        self._lineno_of = lineno_of or (lambda _h: 0)
        self.folded = folded or (lambda _sig, _event: False)
        self._trackers: dict[int, SequenceTracker] = {}
        self._events: dict[int, dict[tuple[str, str | None], _Event]] = {}
        self._streams: dict[int, StreamContext] = {}
        self._said_once: set[tuple[str, str]] = set()  # (stream key, signature)

    # -- reload ---------------------------------------------------------------------------------

    def swap(self, patterns: PatternSet) -> list[Detection]:
        """Use a new pattern set; open sequences whose signature still exists are kept."""
        self.patterns = patterns
        out: list[Detection] = []
        for handle, tracker in self._trackers.items():
            out.extend(self._detections(self._streams[handle], tracker.retain(patterns)))
        for handle, events in self._events.items():
            gone = [k for k in events if (sig := patterns.get(k[0])) is None
                    or not sig.event_lines]
            out.extend(self._detections(self._streams[handle],
                                        [self._ended(events.pop(k)) for k in gone]))
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
            if (match.step == 0 and sig is not None and sig.context_before
                    and not self.folded(sig.id, event)):
                context_of[sig.id] = self._context(sig, event)
        now = self.clock.monotonic()
        fired = tracker.feed(patterns, list(event.matches), context_of, now)
        fired = [self._with_story(f, event) for f in fired]
        if any((sig := patterns.get(f.signature)) is not None and sig.event_lines
               for f in fired):
            fired = self._group(event.stream.handle, fired, event.line.lineno, now)
        return self._detections(event.stream, fired)

    def _group(self, handle: int, fired: list[Fired], lineno: int, now: float) -> list[Fired]:
        """Matches of one multi-line event (``event_lines``) become one detection: the event
        is held until its end line, a gap of more than its window, or ``hold_seconds``."""
        events = self._events.setdefault(handle, {})
        out: list[Fired] = []
        for f in fired:
            sig = self.patterns.get(f.signature)
            if sig is None or not sig.event_lines:
                out.append(f)
                continue
            key = (f.signature, f.last.line.rank)
            ev = events.get(key)
            if ev is not None and lineno - ev.last_lineno <= ev.window:
                if len(ev.earlier) < MAX_EVENT_LINES_QUOTED:
                    ev.earlier.append(ev.merged.last.line.text)
                captures = dict(ev.merged.captures)
                captures.update(f.captures)
                ev.merged = Fired(f.signature, ev.first.first, f.last, tuple(captures.items()),
                                  ev.first.context)
                ev.last_lineno = lineno
            else:
                if ev is not None:
                    out.append(self._ended(events.pop(key)))
                ev = events[key] = _Event(f, f, lineno, now, sig.event_lines, [])
            end = sig.event_end
            if end is not None and _safe_search(end, f.last.line.text, self.regex_timeout):
                out.append(self._ended(events.pop(key)))
        return out

    @staticmethod
    def _ended(ev: _Event) -> Fired:
        """The event's one detection: its last matched line, the earlier ones as context."""
        return dataclasses.replace(ev.merged, context=(*ev.merged.context, *ev.earlier))

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
        events = self._events.get(handle)
        if (tracker is None or tracker.is_empty()) and not events:
            return []
        lineno, now = self._lineno_of(handle), self.clock.monotonic()
        released = (tracker.expire(lineno, now, self.hold_seconds)
                    if tracker is not None and not tracker.is_empty() else [])
        if events:
            done = [k for k, ev in events.items() if lineno - ev.last_lineno > ev.window
                    or now - ev.opened_at >= self.hold_seconds]
            released += [self._ended(events.pop(k)) for k in done]
        return self._detections(self._streams[handle], released)

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        _ = clean
        tracker = self._trackers.pop(stream.handle, None)
        events = self._events.pop(stream.handle, {})
        self._streams.pop(stream.handle, None)
        released = tracker.release_all() if tracker is not None else []
        released += [self._ended(ev) for ev in events.values()]
        return self._detections(stream, released) if released else ()

    def tick(self, now: float) -> Sequence[Detection]:
        _ = now
        out: list[Detection] = []
        for handle in list(self._trackers):
            out.extend(self.after_chunk(handle))
        return out

    def next_deadline(self) -> float | None:
        waits = [t for tr in self._trackers.values() if (t := tr.earliest_hold()) is not None]
        waits += [ev.opened_at for events in self._events.values() for ev in events.values()]
        return min(waits) + self.hold_seconds if waits else None

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        tracker = self._trackers.get(handle)
        floors = [f for f in (tracker.earliest_open() if tracker is not None else None,)
                  if f is not None]
        floors += [(ev.first.first.line.offset, ev.first.first.line.lineno)
                   for ev in self._events.get(handle, {}).values()]
        return min(floors) if floors else None

    def held(self, handle: int) -> tuple[int, ...]:
        tracker = self._trackers.get(handle)
        held = set(tracker.held_offsets() if tracker is not None else ())
        held.update(ev.merged.last.line.offset for ev in self._events.get(handle, {}).values())
        return tuple(sorted(held))

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
