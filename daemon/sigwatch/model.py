"""Frozen value types that cross layer boundaries.

``LogLine`` leaves framing, ``Match`` leaves the matcher, ``Detection`` leaves the detectors and is
what every sink receives. ``Detection.to_json`` is the stable JSON shape used by ``scan --format
json``, the event log and (later) alerts.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

__all__ = [
    "CUT_FIELDS",
    "Detection",
    "DetectionCaps",
    "LogLine",
    "Match",
    "Remediation",
    "RootCause",
    "Severity",
    "StreamInfo",
    "cap_detection",
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

# -- how much text a detection may carry -----------------------------------------------------

CUT_FIELDS = ("text", "context", "captures", "about")
"""The ``field`` label of ``sigwatch_detection_bytes_cut_total``."""


@dataclass(frozen=True, slots=True)
class DetectionCaps:
    """UTF-8 bytes a detection may carry, whatever the log writer wrote.

    A signature quoting 80 lines of context of 64 KiB each held 5 MB per detection: the status
    page's ring, the sink queues and every API response held that many times over. With these
    caps a detection is at most about 26 KiB of text; what is cut is marked in place and
    counted. The event id does not depend on any of it.
    """

    text: int = 4096  # the triggering line (and a root cause's line)
    context_line: int = 2048  # each quoted line
    context: int = 16384  # all quoted lines together (those nearest the trigger are kept)
    capture: int = 1024  # each captured value
    about: int = 4096  # what a line-less detection is about, and each fact


def _cut(text: str, limit: int) -> tuple[str, int]:
    """``text`` within ``limit`` UTF-8 bytes (marker included), and the bytes cut."""
    if len(text) * 4 <= limit:
        return text, 0  # cheap: even four bytes a character fits
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text, 0
    widest = len(f"… [{len(raw)} bytes cut]".encode())  # the marker at its longest
    keep = max(0, limit - widest)
    while keep and (raw[keep] & 0xC0) == 0x80:  # not inside a character
        keep -= 1
    kept = raw[:keep].decode("utf-8", "surrogatepass")
    n = len(raw) - keep
    return f"{kept}… [{n} bytes cut]", n


def _cut_context(lines: tuple[str, ...], caps: DetectionCaps) -> tuple[tuple[str, ...], int]:
    if sum(len(c) for c in lines) * 4 <= caps.context and all(
            len(c) * 4 <= caps.context_line for c in lines):
        return lines, 0
    cut = 0
    out: list[str] = []
    room = caps.context
    dropped = 0
    for line in reversed(lines):  # the lines nearest the trigger matter most
        text, n = _cut(line, caps.context_line)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > room:
            dropped += 1
            cut += len(line.encode("utf-8", "surrogatepass"))
            continue
        room -= size
        cut += n
        out.append(text)
    if dropped:
        out.append(f"… [{dropped} earlier lines cut]")
    return tuple(reversed(out)), cut


def cap_detection(d: Detection, caps: DetectionCaps | None = None,
                  ) -> tuple[Detection, dict[str, int]]:
    """``d`` within ``caps``, and the bytes cut per field (empty when nothing was)."""
    c = caps or DetectionCaps()
    cut: dict[str, int] = {}
    changes: dict[str, Any] = {}
    if d.text is not None:
        text, n = _cut(d.text, c.text)
        if n:
            changes["text"], cut["text"] = text, n
    context, n = _cut_context(d.context, c)
    if n:
        changes["context"], cut["context"] = context, n
    captures = []
    total = 0
    for key, value in d.captures:
        value_cut, n = _cut(value, c.capture)
        captures.append((key, value_cut))
        total += n
    if total:
        changes["captures"], cut["captures"] = tuple(captures), total
    total = 0
    about, n = _cut(d.about, c.about)
    total += n
    facts = []
    for key, value in d.facts:
        value_cut, n = _cut(value, c.about)
        facts.append((key, value_cut))
        total += n
    if d.root_cause is not None:
        root_text, n = _cut(d.root_cause.text, c.text)
        if n:
            changes["root_cause"] = dataclasses.replace(d.root_cause, text=root_text)
            cut["text"] = cut.get("text", 0) + n
    if total:
        changes["about"], changes["facts"] = about, tuple(facts)
        cut["about"] = total
    return (dataclasses.replace(d, **changes) if changes else d), cut
