"""``LineFramer``: a byte stream in, segments of whole lines out.

The framer never splits a line: a partial last line waits for its newline. A line longer than
``max_line_bytes`` is cut to the limit (and counted) so memory stays bounded whatever arrives.
Segments are contiguous byte ranges of the file, so every line keeps its exact byte offset.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_LINE_BYTES", "LineFramer", "Segment", "find_long_lines"]

DEFAULT_MAX_LINE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Segment:
    """Whole lines (each ends with ``\\n``) that start at byte ``offset`` of the stream.

    ``truncated`` is set when the segment is one line cut to the limit; its bytes then no
    longer cover the file range, and ``next_offset`` says where the next byte after it is.
    """

    data: bytes
    offset: int
    next_offset: int
    truncated: bool = False
    unterminated: bool = False


def find_long_lines(buf: bytes, limit: int) -> list[tuple[int, int]]:
    """``(start, newline_index)`` of each line in ``buf`` longer than ``limit`` bytes.

    ``buf`` must end with a newline. Jumps ``limit`` bytes at a time, so a buffer of short
    lines costs about ``len(buf) / limit`` searches, not one per line.
    """
    found: list[tuple[int, int]] = []
    n = len(buf)
    if n <= limit:
        return found
    pos = 0
    while pos < n:
        window_end = min(n, pos + limit + 1)
        last_nl = buf.rfind(b"\n", pos, window_end)
        if last_nl == -1:
            end = buf.find(b"\n", window_end)
            found.append((pos, end))
            pos = end + 1
        else:
            pos = last_nl + 1
    return found


class LineFramer:
    """Frames one stream. ``committed_offset`` is the end of the last whole line handed out."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, offset: int = 0) -> None:
        self.max_line_bytes = max_line_bytes
        self._line_start = offset  # stream offset where the pending partial line starts
        self._pending = bytearray()
        self._overflow = 0  # bytes of the pending line dropped beyond the limit

    @property
    def committed_offset(self) -> int:
        """Offset just after the last complete line emitted: where a restart resumes."""
        return self._line_start

    @property
    def pending_bytes(self) -> int:
        """Bytes read but held back because their line has no newline yet."""
        return len(self._pending) + self._overflow

    def reset(self, offset: int) -> None:
        """Forget the partial line and continue from ``offset`` (after truncation or rotation)."""
        self._line_start = offset
        self._pending.clear()
        self._overflow = 0

    def _hold(self, data: bytes | memoryview) -> None:
        room = self.max_line_bytes - len(self._pending)
        if room > 0:
            self._pending += data[:room]
        self._overflow += max(0, len(data) - max(room, 0))

    def feed(self, data: bytes) -> list[Segment]:
        """Take the next bytes of the stream; return the segments of lines they complete."""
        out: list[Segment] = []
        if not data:
            return out
        start = 0
        if self._pending or self._overflow:
            nl = data.find(b"\n")
            if nl == -1:
                self._hold(data)
                return out
            self._hold(memoryview(data)[:nl])
            full = self._pending_full_length()
            out.append(self._pending_segment(full, terminated=True))
            self._line_start += full + 1
            self._pending.clear()
            self._overflow = 0
            start = nl + 1
        last_nl = data.rfind(b"\n", start)
        if last_nl != -1:
            complete = data[start:last_nl + 1]
            out.extend(self._split_long(complete, self._line_start))
            self._line_start += len(complete)
            start = last_nl + 1
        if start < len(data):
            self._hold(memoryview(data)[start:])
        return out

    def finish(self) -> list[Segment]:
        """Emit a final line that never got its newline (end of a one-shot input)."""
        if not (self._pending or self._overflow):
            return []
        full = self._pending_full_length()
        seg = self._pending_segment(full, terminated=False)
        self._line_start += full
        self._pending.clear()
        self._overflow = 0
        return [seg]

    def _pending_full_length(self) -> int:
        return len(self._pending) + self._overflow

    def _pending_segment(self, full: int, *, terminated: bool) -> Segment:
        cut = full > self.max_line_bytes
        body = bytes(self._pending[: self.max_line_bytes]) + b"\n"
        end = self._line_start + full + (1 if terminated else 0)
        return Segment(body, self._line_start, end, truncated=cut, unterminated=not terminated)

    def _split_long(self, complete: bytes, base: int) -> list[Segment]:
        long_lines = find_long_lines(complete, self.max_line_bytes)
        if not long_lines:
            return [Segment(complete, base, base + len(complete))]
        segments: list[Segment] = []
        pos = 0
        for begin, nl in long_lines:
            if begin > pos:
                segments.append(Segment(complete[pos:begin], base + pos, base + begin))
            cut = complete[begin:begin + self.max_line_bytes] + b"\n"
            segments.append(Segment(cut, base + begin, base + nl + 1, truncated=True))
            pos = nl + 1
        if pos < len(complete):
            segments.append(Segment(complete[pos:], base + pos, base + len(complete)))
        return segments
