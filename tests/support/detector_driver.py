"""Drive ``Detector``s directly, the way the runtime does, without files or threads.

Bytes are framed into lines (exact byte offsets, 1-based line numbers), each raw line is tested
against each detector's ``interest`` (and an optional matcher standing in for the signature
engine), normalised (ANSI, ``\\r`` rewrites, rank prefixes), turned into ``LineEvent``s, and
``tick`` runs whenever a detector's deadline has passed on the ``FakeClock``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

from sigwatch.clock import FakeClock
from sigwatch.detectors.base import Detector, LineEvent, StreamContext
from sigwatch.framing.normalize import normalize
from sigwatch.model import Detection, LogLine, Match, StreamInfo

__all__ = ["DetectorDriver", "Stream"]

MatchFn = Callable[[LogLine], tuple[Match, ...]]


class _Recent:
    def __init__(self, lines: deque[str]) -> None:
        self._lines = lines

    def before(self, count: int) -> list[str]:
        return list(self._lines)[-count:] if count > 0 else []


class Stream:
    """One open stream: its context and where the next line starts."""

    def __init__(self, ctx: StreamContext) -> None:
        self.ctx = ctx
        self.offset = 0
        self.lineno = 0
        self.partial = b""
        self.recent: deque[str] = deque(maxlen=20)


class DetectorDriver:
    """Feeds detectors like the runtime; every detection they return lands in ``detections``."""

    def __init__(self, detectors: Sequence[Detector], clock: FakeClock, *,
                 matcher: MatchFn | None = None) -> None:
        self.detectors = list(detectors)
        self.clock = clock
        self.matcher = matcher
        self.detections: list[Detection] = []
        self.lines_seen = 0
        self.lines_delivered = 0
        self._next_handle = 1

    def open(self, name: str = "train.log", *, source: str = "train", key: str | None = None,
             offset: int = 0, lineno: int = 0) -> Stream:
        ctx = StreamContext(self._next_handle, StreamInfo(source, name, key or name))
        self._next_handle += 1
        stream = Stream(ctx)
        stream.offset, stream.lineno = offset, lineno
        for d in self.detectors:
            d.on_open(ctx)
        return stream

    def close(self, stream: Stream, *, clean: bool = True) -> list[Detection]:
        out: list[Detection] = []
        for d in self.detectors:
            out.extend(d.on_close(stream.ctx, clean=clean))
        self.detections.extend(out)
        return out

    def feed(self, stream: Stream, data: bytes, *, seconds_per_line: float = 0.0,
             replaying: bool = False) -> list[Detection]:
        """Whole lines of ``data`` (a trailing partial line waits for the next call)."""
        data = stream.partial + data
        out: list[Detection] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end == -1:
                break
            raw = data[start:end]
            out.extend(self._line(stream, raw, replaying=replaying))
            stream.offset += end + 1 - start
            start = end + 1
            if seconds_per_line:
                out.extend(self.advance(seconds_per_line))
        stream.partial = data[start:]
        return out

    def feed_lines(self, stream: Stream, lines: Iterable[str], *,
                   seconds_per_line: float = 0.0) -> list[Detection]:
        out: list[Detection] = []
        for text in lines:
            out.extend(self.feed(stream, text.encode() + b"\n",
                                 seconds_per_line=seconds_per_line))
        return out

    def advance(self, seconds: float) -> list[Detection]:
        """Move the clock and run every deadline that has passed."""
        self.clock.advance(seconds)
        return self.tick()

    def tick(self) -> list[Detection]:
        now = self.clock.monotonic()
        out: list[Detection] = []
        for d in self.detectors:
            deadline = d.next_deadline()
            if deadline is not None and deadline <= now:
                out.extend(d.tick(now))
        self.detections.extend(out)
        return out

    def _line(self, stream: Stream, raw: bytes, *, replaying: bool) -> list[Detection]:
        stream.lineno += 1
        self.lines_seen += 1
        text_raw = raw.rstrip(b"\r").decode("utf-8", "replace")
        wanted = [d for d in self.detectors if d.interest is not None and d.interest.search(raw)]
        out: list[Detection] = []
        for rank, text in normalize(text_raw):
            line = LogLine(stream.ctx.info, stream.offset, stream.lineno, text, rank)
            matches = self.matcher(line) if self.matcher is not None else ()
            targets = self.detectors if matches else wanted
            if targets:
                self.lines_delivered += 1
            event = LineEvent(stream.ctx, line, matches, _Recent(stream.recent), replaying)
            for d in targets:
                out.extend(d.on_line(event))
            stream.recent.append(text)
        self.detections.extend(out)
        return out
