"""Frozen value types that cross layer boundaries.

``LogLine`` leaves framing, ``Match`` leaves the matcher, ``Detection`` leaves the detectors and is
what every sink receives. ``Detection.to_json`` is the stable JSON shape used by ``scan --format
json``, the event log and (later) alerts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

__all__ = [
    "Detection",
    "LogLine",
    "Match",
    "Remediation",
    "RootCause",
    "Severity",
    "StreamInfo",
]


class Severity(IntEnum):
    """Ordered severities; the names are the label values."""

    INFO = 10
    WARNING = 20
    ERROR = 30
    CRITICAL = 40

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        return cls[text.upper()]


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """Where lines come from: the configured source name, the path, and a stable identity.

    ``key`` identifies the stream across restarts (device, inode and head fingerprint for a
    file; the path for a one-shot scan) and is part of every detection's ``event_id``.
    """

    source: str
    path: str
    key: str


@dataclass(frozen=True, slots=True)
class LogLine:
    """One normalised line: ANSI removed, ``\\r`` rewrites split, launcher prefix parsed."""

    stream: StreamInfo
    offset: int
    lineno: int
    text: str
    rank: str | None = None
    time: float | None = None  # the log's own timestamp when the line carries one


@dataclass(frozen=True, slots=True)
class Match:
    """One step of one signature matched one line."""

    signature: str
    step: int
    line: LogLine
    captures: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Remediation:
    """The known fix that travels with every detection."""

    summary: str = ""
    steps: tuple[str, ...] = ()
    runbook: str = ""
    action: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "steps": list(self.steps),
            "runbook": self.runbook,
            "action": self.action,
        }


@dataclass(frozen=True, slots=True)
class RootCause:
    """An earlier detection that this one is fallout of."""

    signature: str
    title: str
    text: str
    path: str
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "title": self.title,
            "text": self.text,
            "path": self.path,
            "offset": self.offset,
        }


@dataclass(frozen=True, slots=True)
class Detection:
    """A signature recognised in a stream: the one type every sink consumes."""

    signature: str
    title: str
    severity: Severity
    status: str
    source: str
    path: str
    stream_key: str
    line: int | None
    offset: int | None
    text: str | None
    time: float
    remediation: Remediation
    context: tuple[str, ...] = ()
    rank: str | None = None
    captures: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    root_cause: RootCause | None = None
    host: str = ""
    first_offset: int = field(default=-1)
    about: str = ""  # what a detection without a triggering line is about ("no progress ...")
    key: str = ""  # idempotency basis for a line-less detection (e.g. the deadline it fired at)
    facts: tuple[tuple[str, str], ...] = ()  # figures a detector measured (before/after, ...)
    owner: str = "unknown"  # whose fault: user | node | fabric | unknown
    # The triggering line's own timestamp (None when it carries none): ``time`` is when it
    # was read. A line read again after a lost checkpoint keeps its own time.
    line_time: float | None = None

    @property
    def event_id(self) -> str:
        """Stable idempotency key: the same line in the same file always gives the same id.

        A line-less detection (a stall, a regression) is identified by its ``key`` instead.
        """
        where = self.offset if self.offset is not None else f"~{self.key}"
        raw = f"{self.stream_key}\0{where}\0{self.signature}".encode()
        return hashlib.sha256(raw).hexdigest()[:24]

    @property
    def has_line(self) -> bool:
        """False for a detection that no single line triggered (stall, regression, burst)."""
        return self.offset is not None

    def to_json(self) -> dict[str, Any]:
        stamp = datetime.fromtimestamp(self.time, tz=UTC).isoformat(timespec="milliseconds")
        return {
            "event_id": self.event_id,
            "time": stamp.replace("+00:00", "Z"),
            "signature": self.signature,
            "title": self.title,
            "severity": self.severity.label,
            "status": self.status,
            "source": self.source,
            "path": self.path,
            "stream": self.stream_key,
            "line": self.line,
            "offset": self.offset,
            "rank": self.rank,
            "text": self.text,
            "context": list(self.context),
            "captures": dict(self.captures),
            "labels": dict(self.labels),
            "remediation": self.remediation.to_json(),
            "root_cause": self.root_cause.to_json() if self.root_cause else None,
            "host": self.host,
            "about": self.about or None,
            "facts": dict(self.facts),
            "owner": self.owner,
        }
