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
    "detection_from_json",
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
    # Which job the stream belongs to, and its rank, where the path or the environment says
    # (``labels_from_path``, a CRI pod path, ``sigwatch exec``); "" and None when unknown.
    job: str = ""
    rank: str | None = None
    labels: tuple[tuple[str, str], ...] = ()  # namespace, pod (a CRI pod log), as known


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
    # The jobs it belongs to: the stream's own job, or, for a kernel-log fault, every job the
    # node was running when it was delivered (empty: none known).
    jobs: tuple[str, ...] = ()
    # Folding (``detectors/folding.py``): the event id of the detection that opened the
    # incident this one repeats ("" for that first one), its ordinal in the incident, and how
    # many occurrences this record stands for (a count update to the console stands for many).
    incident: str = ""
    occurrence: int = 1
    repeats: int = 1

    @property
    def job(self) -> str:
        """The job as one label value: "" when none, the jobs joined by "," when several."""
        return ",".join(self.jobs)

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
            "line_time": self.line_time,
            "job": self.job or None,
            "jobs": list(self.jobs),
            "incident": self.incident or None,
            "occurrence": self.occurrence,
            "repeats": self.repeats,
        }

    def to_repeat_json(self) -> dict[str, Any]:
        """The compact record of a repeat: where and when, and the incident it folds into.

        Everything else (title, severity, source, path, owner, job, context, the fix) is the
        incident's first record's.
        """
        stamp = datetime.fromtimestamp(self.time, tz=UTC).isoformat(timespec="milliseconds")
        return {"event_id": self.event_id, "time": stamp.replace("+00:00", "Z"),
               "signature": self.signature, "path": self.path, "stream": self.stream_key,
               "line": self.line,
               "offset": self.offset, "rank": self.rank, "text": self.text,
               "captures": dict(self.captures), "incident": self.incident,
               "occurrence": self.occurrence}


def detection_from_json(doc: dict[str, Any], *, time: float | None = None, key: str = "",
                        first_offset: int = -1) -> Detection:
    """Rebuild a ``Detection`` from ``Detection.to_json()`` (plus what that shape leaves out).

    ``to_json`` rounds the time to milliseconds and omits ``key`` and ``first_offset``; the
    store keeps them beside the JSON so the rebuilt detection has the same ``event_id``.
    Raises ``KeyError``, ``TypeError`` or ``ValueError`` on a malformed document.
    """
    rem = doc["remediation"]
    root = doc.get("root_cause")
    return Detection(
        signature=str(doc["signature"]), title=str(doc["title"]),
        severity=Severity.parse(str(doc["severity"])), status=str(doc["status"]),
        source=str(doc["source"]), path=str(doc["path"]), stream_key=str(doc["stream"]),
        line=_opt_int(doc.get("line")), offset=_opt_int(doc.get("offset")),
        text=None if doc.get("text") is None else str(doc["text"]),
        time=float(time) if time is not None else _parse_time(str(doc["time"])),
        remediation=Remediation(summary=str(rem["summary"]),
                                steps=tuple(str(s) for s in rem["steps"]),
                                runbook=str(rem["runbook"]), action=str(rem["action"])),
        context=tuple(str(c) for c in doc.get("context") or ()),
        rank=None if doc.get("rank") is None else str(doc["rank"]),
        captures=tuple((str(k), str(v)) for k, v in (doc.get("captures") or {}).items()),
        labels=tuple((str(k), str(v)) for k, v in (doc.get("labels") or {}).items()),
        root_cause=None if root is None else RootCause(
            signature=str(root["signature"]), title=str(root["title"]),
            text=str(root["text"]), path=str(root["path"]), offset=int(root["offset"])),
        host=str(doc.get("host") or ""),
        first_offset=first_offset,
        about=str(doc.get("about") or ""),
        key=key,
        facts=tuple((str(k), str(v)) for k, v in (doc.get("facts") or {}).items()),
        owner=str(doc.get("owner") or "unknown"),
        line_time=_opt_float(doc.get("line_time")),
        jobs=tuple(str(j) for j in doc.get("jobs") or ()),
        incident=str(doc.get("incident") or ""),
        occurrence=int(doc.get("occurrence") or 1),
        repeats=int(doc.get("repeats") or 1),
    )


def _opt_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"expected an integer, got {value!r}"
        raise TypeError(msg)
    return value


def _parse_time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _opt_float(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"expected a number, got {value!r}"
        raise TypeError(msg)
    return float(value)
