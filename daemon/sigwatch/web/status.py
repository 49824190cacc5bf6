"""What the HTTP application needs from the runtime, as small types the runtime fills in.

The web package never sees the tail service, the pipeline or the config: the composition root
hands it a ``Liveness`` (the pump beats it), a ``StatusProvider`` (reader health, the loaded
signatures, open incidents) and a ``DetectionStore`` (recent detections).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from prometheus_client import CollectorRegistry

from sigwatch.clock import Clock
from sigwatch.model import Detection, Severity

__all__ = [
    "LagUnit",
    "Liveness",
    "Progress",
    "RegistryStatus",
    "SignatureInfo",
    "SourceStatus",
    "StaticStatus",
    "StatusProvider",
    "signature_infos",
]

LagUnit = Literal["bytes", "seconds", "entries", "none"]
"""How a source measures how far behind it is: unread bytes (files), seconds (journal), ..."""


class Liveness:
    """The pump's heartbeat and the daemon's readiness, read by ``/-/healthy`` and ``/-/ready``.

    The pump calls ``beat()`` on every turn of its loop (and during long work such as a first
    scan); ``healthy()`` is true while the last beat is at most ``max_silence`` seconds old.
    ``ready`` turns true once, when patterns are loaded and the first scan is done.
    """

    def __init__(self, clock: Clock, max_silence: float = 30.0) -> None:
        self._clock = clock
        self.max_silence = max_silence
        self._lock = threading.Lock()
        self._last: float | None = None
        self._ready = False
        self._why_not_ready = "starting"

    def beat(self) -> None:
        """The pump is alive (cheap: called on every loop turn)."""
        now = self._clock.monotonic()
        with self._lock:
            self._last = now

    def healthy(self, now: float | None = None) -> bool:
        """True when the pump beat within ``max_silence`` (``now`` on the monotonic clock)."""
        at = self._clock.monotonic() if now is None else now
        with self._lock:
            return self._last is not None and at - self._last <= self.max_silence

    def silence(self) -> float | None:
        """Seconds since the last beat (None before the first one)."""
        with self._lock:
            last = self._last
        return None if last is None else self._clock.monotonic() - last

    def set_ready(self, ready: bool = True, reason: str = "") -> None:
        """Mark ready (first scan done, patterns loaded) or not ready, saying why."""
        with self._lock:
            self._ready = ready
            self._why_not_ready = "" if ready else (reason or "not ready")

    @property
    def ready(self) -> bool:
        with self._lock:
            return self._ready

    @property
    def not_ready_reason(self) -> str:
        with self._lock:
            return self._why_not_ready


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """One configured source as the status page shows it (reader health)."""

    name: str
    kind: str  # "file", "journal", "kmsg", "pipe", ...
    streams: int  # files followed, or 1 for a journal
    lines: int
    bytes: int
    lag: float | None  # how far behind, in ``lag_unit``; None when unknown
    lag_unit: LagUnit
    last_read: float | None  # wall-clock time of the last read that returned data
    errors: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "streams": self.streams, "lines": self.lines,
            "bytes": self.bytes, "lag": self.lag, "lag_unit": self.lag_unit,
            "last_read": self.last_read, "errors": self.errors,
        }


@dataclass(frozen=True, slots=True)
class SignatureInfo:
    """One loaded signature: what ``/api/v1/signatures`` lists and the filters offer."""

    id: str
    title: str
    severity: Severity
    area: str
    status: str
    summary: str  # the remediation summary
    runbook: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "title": self.title, "severity": self.severity.label,
            "area": self.area, "status": self.status, "summary": self.summary,
            "runbook": self.runbook,
        }


class StatusProvider(Protocol):
    """Implemented by the composition root; called from HTTP threads (must be thread-safe)."""

    def sources(self) -> Sequence[SourceStatus]:
        """Every configured source, in configuration order."""
        ...

    def signatures(self) -> Sequence[SignatureInfo]:
        """The signatures loaded now (after the latest successful reload)."""
        ...

    def open_incidents(self) -> Sequence[Detection]:
        """Detections still open: a stall not yet over, a regression not yet recovered."""
        ...


class _HasSignatureFields(Protocol):
    """The part of ``CompiledSignature`` that ``signature_infos`` reads."""

    @property
    def id(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def status(self) -> str: ...
    @property
    def labels(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def remediation(self) -> Any: ...


def signature_infos(signatures: Iterable[_HasSignatureFields]) -> list[SignatureInfo]:
    """``SignatureInfo`` for each compiled signature (``PatternSet.signatures``), sorted by id."""
    out = [
        SignatureInfo(
            id=s.id, title=s.title, severity=s.severity, area=dict(s.labels).get("area", ""),
            status=s.status, summary=s.remediation.summary, runbook=s.remediation.runbook)
        for s in signatures
    ]
    return sorted(out, key=lambda i: i.id)


class StaticStatus:
    """A ``StatusProvider`` over fixed values: for tests, ``scan``-like tools and start-up."""

    def __init__(self, sources: Sequence[SourceStatus] = (),
                 signatures: Sequence[SignatureInfo] = (),
                 open_incidents: Sequence[Detection] = ()) -> None:
        self._sources = list(sources)
        self._signatures = list(signatures)
        self._open = list(open_incidents)

    def sources(self) -> Sequence[SourceStatus]:
        return list(self._sources)

    def signatures(self) -> Sequence[SignatureInfo]:
        return list(self._signatures)

    def open_incidents(self) -> Sequence[Detection]:
        return list(self._open)


Progress = Callable[[str], tuple[float | None, LagUnit, float | None]]
"""For a source name: (lag, its unit, wall-clock time of the last read), from the runtime."""

_COUNTS = {
    "sigwatch_lines_total": "lines",
    "sigwatch_bytes_read_total": "bytes",
    "sigwatch_files_watched": "streams",
    "sigwatch_file_errors_total": "errors",
}


class RegistryStatus:
    """A ``StatusProvider`` that reads reader health from the daemon's own metrics.

    Lines, bytes, streams and errors come from the catalogue's series
    (``sigwatch_lines_total``, ``sigwatch_bytes_read_total``, ``sigwatch_files_watched``,
    ``sigwatch_file_errors_total`` summed over reasons) in one pass over the registry, so the
    page and Prometheus never disagree; lag and last read come from ``progress``, which the
    runtime provides (the metrics have no such series yet).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        sources: Sequence[tuple[str, str]],
        *,
        signatures: Callable[[], Sequence[SignatureInfo]],
        open_incidents: Callable[[], Sequence[Detection]] = tuple,
        progress: Progress | None = None,
    ) -> None:
        """``sources``: (name, kind) for each configured source, in configuration order."""
        self._registry = registry
        self._sources = list(sources)
        self._signatures = signatures
        self._open = open_incidents
        self._progress = progress or (lambda _name: (None, "none", None))

    def sources(self) -> Sequence[SourceStatus]:
        counts: dict[tuple[str, str], float] = {}
        for family in self._registry.collect():
            for sample in family.samples:
                field = _COUNTS.get(sample.name)
                source = sample.labels.get("source")
                if field is not None and source is not None:
                    key = (source, field)
                    counts[key] = counts.get(key, 0.0) + sample.value
        out = []
        for name, kind in self._sources:
            lag, unit, last = self._progress(name)
            out.append(SourceStatus(
                name=name, kind=kind, streams=int(counts.get((name, "streams"), 0)),
                lines=int(counts.get((name, "lines"), 0)),
                bytes=int(counts.get((name, "bytes"), 0)), lag=lag, lag_unit=unit,
                last_read=last, errors=int(counts.get((name, "errors"), 0))))
        return out

    def signatures(self) -> Sequence[SignatureInfo]:
        return list(self._signatures())

    def open_incidents(self) -> Sequence[Detection]:
        return list(self._open())
