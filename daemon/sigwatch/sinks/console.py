"""``ConsoleSink``: human-readable detections on a text stream (stdout for the daemon)."""

from __future__ import annotations

from typing import TextIO

from sigwatch.model import Detection

__all__ = ["ConsoleSink", "format_detection"]


def format_detection(d: Detection, *, location: str | None = None) -> str:
    """One detection as a few readable lines: what, where, the line, the fix."""
    where = location or f"{d.path}:{d.line}" if d.line else (location or d.path)
    rank = f" rank {d.rank}" if d.rank is not None else ""
    out = [f"{d.severity.label.upper():8} {d.signature}: {d.title}",
           f"         at {where} (byte {d.offset}){rank}",
           f"         | {d.text}"]
    if d.root_cause:
        out.append(f"         caused by {d.root_cause.signature}: {d.root_cause.text}")
    if d.remediation.summary:
        out.append(f"         fix: {d.remediation.summary}")
    return "\n".join(out)


class ConsoleSink:
    """Writes each detection as it arrives."""

    name = "console"

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def emit(self, detection: Detection) -> None:
        self._stream.write(format_detection(detection) + "\n")

    def flush(self) -> None:
        self._stream.flush()

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        self.flush()
