"""Container log files: CRI (Kubernetes) and Docker json-file records back into whole lines.

Both runtimes write one record per physical line and split a long log line over several
records (16 KiB each):

* CRI: ``<RFC3339Nano time> <stdout|stderr> <P|F>[:tags] <message>``; ``P`` records are
  partial, the ``F`` record completes the line.
* Docker json-file: ``{"log":"...","stream":"stderr","time":"..."}``; a record whose ``log``
  does not end with a newline is partial.

``ContainerFramer`` sits between a file stream's bytes and the lines: it takes the bytes with
their file offsets and returns one ``TimedSegment`` per whole line, positioned at the offset
of the line's *first* record and timed by it, tagged ``stdout``/``stderr``. Partials are
joined per stream (stdout and stderr interleave in one file); a line that completes while an
earlier line of the other stream is still partial waits for it, so positions only grow.
``committed_offset`` is where a restart must resume: the first record of any line not handed
out yet. ``feed``/``finish``/``reset``/``committed_offset``/``pending_bytes`` mirror
``LineFramer``, so a file stream can use either. The format is recognised from the first line
(``auto``) or forced; a line that is not a record of that format passes through as it is (and
is counted).

``AutoFramer`` is what a file gets by default (``format = "auto"``): it holds the bytes of the
first line, recognises the format from it, and from then on hands everything to a
``ContainerFramer`` or, for a plain file, to a ``LineFramer`` with the configured line limit,
so plain logs cost nothing more than before. A reset (truncation, rotation) recognises again.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import tzinfo

from sigwatch.framing.lines import DEFAULT_MAX_LINE_BYTES, LineFramer, Segment
from sigwatch.framing.records import TimedSegment
from sigwatch.framing.timestamps import match_timestamp

__all__ = ["FORMATS", "AutoFramer", "ContainerFramer", "detect_format", "framer_for"]

FORMATS = ("auto", "cri", "docker", "plain")
CRI_RE = re.compile(
    rb"^(?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})) "
    rb"(?P<stream>stdout|stderr) (?P<tag>[FP])(?::\S*)?(?: (?P<msg>.*))?$", re.DOTALL)
DOCKER_PREFIX = b'{"log":'
MAX_HELD_LINES = 10_000  # whole lines waiting behind another stream's partial line


def detect_format(line: bytes) -> str:
    """``cri``, ``docker`` or ``plain`` for the first line of a file."""
    if CRI_RE.match(line.rstrip(b"\n")):
        return "cri"
    if line.startswith(DOCKER_PREFIX) or (line.startswith(b"{") and b'"log"' in line[:64]):
        try:
            record = json.loads(line)
        except ValueError:
            return "plain"
        if isinstance(record, dict) and isinstance(record.get("log"), str):
            return "docker"
    return "plain"


@dataclass(slots=True)
class _Partial:
    """A line being assembled from records of one stream."""

    offset: int
    time: float | None
    end: int = 0
    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    truncated: bool = False


class ContainerFramer:
    """Bytes of one container log file in, whole lines (``TimedSegment``) out.

    ``feed(data)`` takes the next bytes of the file (from ``offset`` given at construction);
    ``feed_segments`` takes lines already framed by a ``LineFramer``. ``finish()`` at the end
    of a one-shot input flushes partial lines (flagged ``unterminated``).
    """

    def __init__(self, fmt: str = "auto", *, offset: int = 0,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, tz: tzinfo | None = None) -> None:
        if fmt not in FORMATS:
            msg = f"unknown container log format {fmt!r} (one of {', '.join(FORMATS)})"
            raise ValueError(msg)
        self.format = fmt
        self.max_line_bytes = max_line_bytes
        self.tz = tz
        # A record is longer than its message (header, JSON escapes): frame records generously.
        self.lines = LineFramer(max(max_line_bytes, 1 << 18) + 1024, offset)
        self.malformed = 0
        self.records = 0
        self._partials: dict[str, _Partial] = {}
        self._held: deque[TimedSegment] = deque()

    @property
    def committed_offset(self) -> int:
        """Where to resume after a restart: nothing before it is waiting to be handed out."""
        starts = [p.offset for p in self._partials.values()]
        starts += [s.offset for s in self._held]
        return min([*starts, self.lines.committed_offset])

    @property
    def pending_bytes(self) -> int:
        """Bytes read but not handed out yet (a partial record, partial or waiting lines)."""
        return self.lines.committed_offset - self.committed_offset + self.lines.pending_bytes

    def reset(self, offset: int) -> None:
        """Forget everything pending and continue from ``offset`` (truncation, rotation)."""
        self.lines.reset(offset)
        self._partials.clear()
        self._held.clear()

    def feed(self, data: bytes) -> list[TimedSegment]:
        """The next bytes of the file; returns the whole lines they complete."""
        return self.feed_segments(self.lines.feed(data))

    def feed_segments(self, segments: list[Segment]) -> list[TimedSegment]:
        out: list[TimedSegment] = []
        for seg in segments:
            pos = seg.offset
            for raw in seg.data.split(b"\n")[:-1]:
                self._record(raw, pos, pos + len(raw) + 1, out)
                pos += len(raw) + 1
        return out

    def finish(self) -> list[TimedSegment]:
        """End of input: partial lines are emitted as they are (``unterminated``)."""
        out: list[TimedSegment] = []
        for stream in sorted(self._partials, key=lambda s: self._partials[s].offset):
            part = self._partials[stream]
            self._held.append(self._whole(stream, part, part.end, unterminated=True))
        self._partials.clear()
        self._release(out)
        return out

    # -- records --------------------------------------------------------------------------

    def _record(self, raw: bytes, start: int, end: int, out: list[TimedSegment]) -> None:
        if self.format == "auto":
            self.format = detect_format(raw)
        if self.format == "cri":
            parsed = self._cri(raw)
        elif self.format == "docker":
            parsed = self._docker(raw)
        else:
            parsed = None
        if parsed is None:
            if self.format != "plain":
                self.malformed += 1
            self._held.append(TimedSegment(raw + b"\n", start, end))
            self._release(out)
            return
        self.records += 1
        stream, stamp, message, complete = parsed
        part = self._partials.get(stream)
        if part is None:
            part = _Partial(start, stamp)
        room = self.max_line_bytes - part.size
        if room > 0:
            part.parts.append(message[:room])
        if len(message) > room:
            part.truncated = True
        part.size += len(message)
        part.end = end
        if complete:
            self._partials.pop(stream, None)
            self._held.append(self._whole(stream, part, end))
        else:
            self._partials[stream] = part
        self._release(out)

    def _whole(self, stream: str, part: _Partial, end: int, *,
               unterminated: bool = False) -> TimedSegment:
        body = b"".join(part.parts)
        if b"\n" in body:
            body = body.replace(b"\n", b"\\n")
        return TimedSegment(body + b"\n", part.offset, end, part.truncated, unterminated,
                            part.time, stream)

    def _release(self, out: list[TimedSegment]) -> None:
        """Hand out held lines that no earlier partial line precedes."""
        first_partial = min((p.offset for p in self._partials.values()), default=None)
        if first_partial is not None and len(self._held) > MAX_HELD_LINES:
            # Another stream's partial line has waited too long: give it up as it is.
            stream = min(self._partials, key=lambda s: self._partials[s].offset)
            part = self._partials.pop(stream)
            self._held.append(self._whole(stream, part, part.end, unterminated=True))
            first_partial = min((p.offset for p in self._partials.values()), default=None)
        if len(self._held) > 1:
            self._held = deque(sorted(self._held, key=lambda s: s.offset))
        while self._held and (first_partial is None or self._held[0].offset < first_partial):
            out.append(self._held.popleft())

    def _cri(self, raw: bytes) -> tuple[str, float | None, bytes, bool] | None:
        m = CRI_RE.match(raw)
        if m is None:
            return None
        stamp_text = m.group("time").decode("ascii")
        found = match_timestamp(stamp_text, 0, tz=self.tz)
        return (m.group("stream").decode("ascii"), found.time if found else None,
                m.group("msg") or b"", m.group("tag") == b"F")

    def _docker(self, raw: bytes) -> tuple[str, float | None, bytes, bool] | None:
        try:
            record = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(record, dict) or not isinstance(record.get("log"), str):
            return None
        log = record["log"]
        stream = record.get("stream") if isinstance(record.get("stream"), str) else "stdout"
        found = None
        if isinstance(record.get("time"), str):
            found = match_timestamp(record["time"], 0, tz=self.tz)
        complete = log.endswith("\n")
        message = log[:-1].removesuffix("\r") if complete else log
        return (str(stream), found.time if found else None,
                message.encode("utf-8", "surrogateescape"), complete)


class AutoFramer:
    """Recognises a file's format from its first line, then frames it the way that needs.

    Until the first newline (or ``probe_limit`` bytes without one, which no container record
    reaches: that is a plain file) the bytes are held, and ``committed_offset`` stays where the
    stream started.
    """

    def __init__(self, *, offset: int = 0, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 tz: tzinfo | None = None) -> None:
        self.max_line_bytes = max_line_bytes
        self.tz = tz
        self.probe_limit = max(max_line_bytes, 1 << 18) + 1024
        self._offset = offset
        self._held = bytearray()
        self.inner: LineFramer | ContainerFramer | None = None

    @property
    def format(self) -> str:
        """``auto`` until the first line is seen, then ``cri``, ``docker`` or ``plain``."""
        if self.inner is None:
            return "auto"
        return self.inner.format if isinstance(self.inner, ContainerFramer) else "plain"

    @property
    def committed_offset(self) -> int:
        return self._offset if self.inner is None else self.inner.committed_offset

    @property
    def pending_bytes(self) -> int:
        return len(self._held) if self.inner is None else self.inner.pending_bytes

    def reset(self, offset: int) -> None:
        """Forget everything and recognise the format again from ``offset`` on."""
        self._offset = offset
        self._held.clear()
        self.inner = None

    def feed(self, data: bytes) -> list[Segment]:
        if self.inner is not None:
            return list(self.inner.feed(data))
        self._held += data
        newline = self._held.find(b"\n")
        if newline == -1 and len(self._held) < self.probe_limit:
            return []
        return self._decide(self._held[:newline] if newline != -1 else b"")

    def finish(self) -> list[Segment]:
        if self.inner is None:
            if not self._held:
                return []
            self._decide(bytes(self._held))
        assert self.inner is not None
        return list(self.inner.finish())

    def _decide(self, first_line: bytes | bytearray) -> list[Segment]:
        fmt = detect_format(bytes(first_line)) if first_line else "plain"
        self.inner = (LineFramer(self.max_line_bytes, self._offset) if fmt == "plain"
                      else ContainerFramer(fmt, offset=self._offset,
                                           max_line_bytes=self.max_line_bytes, tz=self.tz))
        held = bytes(self._held)
        self._held.clear()
        return list(self.inner.feed(held))


def framer_for(fmt: str, *, offset: int = 0, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
               ) -> LineFramer | ContainerFramer | AutoFramer:
    """The framer of a stream read as ``fmt``: ``auto`` (recognise), ``cri``, ``docker``,
    ``plain``."""
    if fmt not in FORMATS:
        msg = f"unknown log format {fmt!r} (one of {', '.join(FORMATS)})"
        raise ValueError(msg)
    if fmt == "plain":
        return LineFramer(max_line_bytes, offset)
    if fmt == "auto":
        return AutoFramer(offset=offset, max_line_bytes=max_line_bytes)
    return ContainerFramer(fmt, offset=offset, max_line_bytes=max_line_bytes)
