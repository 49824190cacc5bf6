"""One-shot reading of whole inputs through the real pipeline (``scan``, self-test, bench)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import BinaryIO, Protocol

from sigwatch.framing.container import framer_for
from sigwatch.framing.lines import DEFAULT_MAX_LINE_BYTES, Segment
from sigwatch.model import Detection, StreamInfo
from sigwatch.pipeline import Pipeline
from sigwatch.sources.base import StreamOpened

__all__ = ["READ_SIZE", "scan_bytes", "scan_stream"]

READ_SIZE = 1 << 20


class _Framer(Protocol):
    def feed(self, data: bytes) -> Sequence[Segment]: ...
    def finish(self) -> Sequence[Segment]: ...


def _segments(reader: BinaryIO, framer: _Framer) -> Iterator[Sequence[Segment]]:
    while True:
        chunk = reader.read(READ_SIZE)
        if not chunk:
            break
        yield framer.feed(chunk)
    yield framer.finish()


def scan_stream(pipeline: Pipeline, stream: StreamInfo, reader: BinaryIO,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, kind: str = "scan",
                fmt: str = "plain") -> list[Detection]:
    """Read ``reader`` to its end, including a last line without newline.

    ``fmt``: ``plain``, a container log format (``cri``, ``docker``) or ``auto`` (recognised
    from the first line), as for a file source.
    """
    handle = pipeline.new_handle()
    pipeline.open(StreamOpened(handle, stream, kind=kind))
    framer = framer_for(fmt, max_line_bytes=max_line_bytes)
    found: list[Detection] = []
    for segments in _segments(reader, framer):
        found.extend(pipeline.process(handle, segments))
    found.extend(pipeline.finish(handle))
    return found


def scan_bytes(pipeline: Pipeline, stream: StreamInfo, data: bytes,
               max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, kind: str = "scan",
               ) -> list[Detection]:
    """Same as ``scan_stream`` for bytes already in memory."""
    handle = pipeline.new_handle()
    pipeline.open(StreamOpened(handle, stream, kind=kind))
    framer = framer_for("plain", max_line_bytes=max_line_bytes)
    found = pipeline.process(handle, [*framer.feed(data), *framer.finish()])
    return found + pipeline.finish(handle)
