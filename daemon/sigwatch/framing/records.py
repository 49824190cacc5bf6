"""``TimedSegment``: one line that carries the time its source gave it.

Files carry their time (if any) inside the text; the journal, ``/dev/kmsg`` and container logs
carry it beside the text. Those sources emit one line per segment (``offset`` is that line's
position: a sequence number, a journal counter, the first record of a reassembled container
line) and put the time on the segment, so the runtime can set ``LogLine.time`` without parsing.
A plain ``Segment`` has no ``time``; read it with ``getattr(seg, "time", None)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sigwatch.framing.lines import Segment

__all__ = ["TimedSegment", "one_line"]


@dataclass(frozen=True, slots=True)
class TimedSegment(Segment):
    """One whole line (``data`` ends with ``\\n``) at position ``offset``, with its time.

    ``tag`` says which sub-stream it came from when the source knows one (``stdout`` or
    ``stderr`` in a container log, the unit or identifier in the journal).
    """

    time: float | None = None
    tag: str = ""


def one_line(text: bytes, position: int, next_position: int, time: float | None,
             tag: str = "", *, truncated: bool = False,
             unterminated: bool = False) -> TimedSegment:
    """A segment of exactly one line: newlines inside ``text`` are made visible, never split."""
    if b"\n" in text:
        text = text.replace(b"\n", b"\\n")
    return TimedSegment(text + b"\n", position, next_position, truncated, unterminated,
                        time, tag)
