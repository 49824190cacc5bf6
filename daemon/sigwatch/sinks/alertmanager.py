"""``AlertmanagerSink``: page on-call directly through Alertmanager's API v2, with the fix.

One alert per incident: every detection of a paging severity with the same (signature, node,
source, job) while the incident is open is a repeat (sixty-four ranks printing the same NCCL
timeout make one alert with ``repeats=64``; a count update from incident folding adds its
``repeats``), so the labels stay bounded: ``alertname``, ``signature``, ``severity``, ``owner``,
``node``, ``source``, and where known ``job`` and ``rank`` (the first detection's), the labels
the fleet rules use (``SigwatchJobIncident`` inhibits the pages of its job). The annotations
carry what on-call needs: the summary, the triggering line and its context, the remediation
steps, the runbook and a link to the detection's page on the node.

Alertmanager keeps alerts in memory only and resolves an alert whose ``endsAt`` passed, so the
sink behaves like Prometheus does (``prometheus/alertmanager:docs/clients.md``): it posts the
whole alert set to *every* replica (never through a load balancer; replicas do not share
alerts), re-sends firing alerts every ``resend_interval`` with ``endsAt`` four intervals ahead,
resolves an incident after ``resolve_after`` seconds without a repeat by posting
``endsAt = now``, and keeps re-sending the resolution for ``resolved_retention`` seconds.

While no replica answers, alerts wait in a bounded queue persisted to ``state_path`` (atomic
replace), retried with exponential backoff per replica; an alert is never resolved before some
replica accepted it firing, so a page raised during an outage (or across a daemon restart)
still arrives after it. The sink blocks only its own worker thread (``QueuedSink``), on HTTP
calls bounded by ``timeout``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from sigwatch.clock import Clock
from sigwatch.model import Detection, Severity
from sigwatch.telemetry.metrics import SelfMetrics
from sigwatch.visible import visible

__all__ = [
    "ALERTNAME",
    "AlertmanagerSink",
    "PostResult",
    "Transport",
    "http_post",
]

log = structlog.get_logger("sigwatch.alertmanager")

ALERTNAME = "SigwatchDetection"
STATE_VERSION = 1
_MAX_LINE = 1000  # characters of the triggering line in an annotation
_MAX_CONTEXT = 2000  # characters of context (the lines before it)


@dataclass(frozen=True, slots=True)
class PostResult:
    """What one POST came to: ``ok``, or the failure reason (a closed set, used as a label)."""

    ok: bool
    reason: str = ""  # connect | timeout | rejected (4xx) | server_error (5xx)
    detail: str = ""


Transport = Callable[[str, bytes, float], PostResult]
"""POST ``body`` (JSON) to a full URL with a timeout in seconds."""


def http_post(url: str, body: bytes, timeout: float) -> PostResult:
    """The real transport: one HTTP POST with urllib, every failure turned into a reason."""
    request = urllib.request.Request(  # noqa: S310 - the URL comes from the operator's config
        url, data=body, method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "sigwatch"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            response.read()
            return PostResult(True)
    except urllib.error.HTTPError as exc:
        text = exc.read(500).decode("utf-8", "replace").strip()
        reason = "server_error" if exc.code >= 500 else "rejected"
        return PostResult(False, reason, f"HTTP {exc.code}: {text}")
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError | socket.timeout):
            return PostResult(False, "timeout", str(exc.reason))
        return PostResult(False, "connect", str(exc.reason))
    except TimeoutError as exc:
        return PostResult(False, "timeout", str(exc))
    except OSError as exc:
        return PostResult(False, "connect", str(exc))


def _rfc3339(t: float) -> str:
    stamp = datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class _Alert:
    """One incident as Alertmanager sees it, plus its delivery bookkeeping (wall-clock times)."""

    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: float
    last_seen: float
    generator_url: str = ""
    repeats: int = 1
    delivered_at: float | None = None  # first time a replica accepted it firing
    resolved_at: float | None = None
    resolve_delivered: bool = False

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.labels["signature"], self.labels["node"], self.labels["source"],
                self.labels.get("job", ""))

    def payload(self, now: float, firing_for: float) -> dict[str, Any]:
        ends = self.resolved_at if self.resolved_at is not None else now + firing_for
        ends = max(ends, self.starts_at)  # Alertmanager rejects the whole batch otherwise
        body: dict[str, Any] = {
            "labels": dict(self.labels),
            "annotations": {**self.annotations, "repeats": str(self.repeats)},
            "startsAt": _rfc3339(self.starts_at),
            "endsAt": _rfc3339(ends),
        }
        if self.generator_url:
            body["generatorURL"] = self.generator_url
        return body

    def to_json(self) -> dict[str, Any]:
        return {
            "labels": self.labels, "annotations": self.annotations,
            "starts_at": self.starts_at, "last_seen": self.last_seen,
            "generator_url": self.generator_url, "repeats": self.repeats,
            "delivered_at": self.delivered_at, "resolved_at": self.resolved_at,
            "resolve_delivered": self.resolve_delivered,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Alert:
        labels = {str(k): str(v) for k, v in dict(data["labels"]).items()}
        for name in ("alertname", "signature", "severity", "node", "source"):
            if name not in labels:
                raise ValueError(f"label {name} missing")
        return cls(
            labels=labels,
            annotations={str(k): str(v) for k, v in dict(data["annotations"]).items()},
            starts_at=float(data["starts_at"]), last_seen=float(data["last_seen"]),
            generator_url=str(data.get("generator_url", "")),
            repeats=int(data.get("repeats", 1)),
            delivered_at=(None if data.get("delivered_at") is None
                          else float(data["delivered_at"])),
            resolved_at=(None if data.get("resolved_at") is None
                         else float(data["resolved_at"])),
            resolve_delivered=bool(data.get("resolve_delivered", False)))


@dataclass(slots=True)
class _Replica:
    """Delivery state of one Alertmanager replica."""

    url: str
    synced_version: int = -1  # the alert-set version this replica last accepted
    last_ok: float | None = None
    next_attempt: float = 0.0
    failures: int = 0
    down_logged: bool = field(default=False)


class AlertmanagerSink:
    """Sends paging detections to Alertmanager replicas as deduplicated, resolving alerts."""

    name = "alertmanager"

    def __init__(
        self,
        urls: Sequence[str],
        *,
        node: str,
        clock: Clock,
        page_severities: Collection[Severity] = (Severity.CRITICAL, Severity.ERROR),
        resend_interval: float = 60.0,
        resolve_after: float = 300.0,
        resolved_retention: float = 900.0,
        state_path: Path | None = None,
        link_base: str = "",
        max_alerts: int = 1000,
        timeout: float = 5.0,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        metrics: SelfMetrics | None = None,
        transport: Transport = http_post,
    ) -> None:
        if not urls:
            raise ValueError("at least one Alertmanager URL is needed")
        self.node = node
        self._clock = clock
        self._page = frozenset(page_severities)
        self._resend = resend_interval
        self._resolve_after = resolve_after
        self._retention = resolved_retention
        self._state_path = state_path
        self._link_base = link_base.rstrip("/")
        self._max_alerts = max_alerts
        self._timeout = timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._m = metrics
        self._transport = transport
        self._replicas = [_Replica(self._endpoint(u)) for u in urls]
        self._alerts: dict[tuple[str, str, str, str], _Alert] = {}
        self._version = 0
        self._dirty = False
        self._load()
        self._update_gauges()

    # -- the Sink protocol (all on the QueuedSink's worker thread) ---------------------------

    def emit(self, detection: Detection) -> None:
        """Open an incident for a paging detection, or count it into the open one.

        A detection of several jobs (a kernel fault on a node running two) is one alert per
        job, so each job's ``SigwatchJobIncident`` inhibits its own."""
        if detection.severity not in self._page:
            return
        now = self._clock.time()
        for job in detection.jobs or ("",):
            self._emit_for(detection, job, now)

    def _emit_for(self, detection: Detection, job: str, now: float) -> None:
        key = (detection.signature, self.node, detection.source, job)
        alert = self._alerts.get(key)
        if alert is not None and alert.resolved_at is None:
            # A count update of a folded incident says the total so far (idempotent).
            alert.repeats = (max(alert.repeats, detection.occurrence) if detection.incident
                             else alert.repeats + 1)
            alert.last_seen = max(alert.last_seen, now)
            self._dirty = True
            return
        if alert is None:
            self._make_room()
        self._alerts[key] = self._new_alert(detection, now, job)
        self._version += 1
        self._dirty = True
        if self._m is not None:
            self._m.alerts_raised.labels(detection.severity.label).inc()
        log.info("alert_raised", signature=detection.signature, source=detection.source,
                 severity=detection.severity.label, event_id=detection.event_id,
                 job=job or None)
        self._update_gauges()

    def flush(self) -> None:
        """Send what changed now (the page goes out right after the detection's batch)."""
        self.tick(self._clock.time())

    def tick(self, now: float) -> None:
        """Resolve quiet incidents, expire old resolutions, persist, (re-)send, retry, persist.

        The queue is saved before the posts: a page raised while Alertmanager is down (or while
        a post hangs until its timeout) is on disk before anything can go wrong, and survives
        a SIGKILL or a reboot.
        """
        self._resolve_quiet(now)
        self._expire(now)
        if self._dirty:
            self._save()
        for replica in self._replicas:
            if self._due(replica, now):
                self._post(replica, now)
        self._update_gauges()
        if self._dirty:
            self._save()

    def close(self) -> None:
        """Persist what is still owed; the next start re-sends it."""
        if self._dirty:
            self._save()

    # -- introspection for tests and the status page -----------------------------------------

    def alerts(self) -> list[dict[str, Any]]:
        """The current alert set as it would be posted now."""
        now = self._clock.time()
        return [a.payload(now, 4 * self._resend) for a in self._alerts.values()]

    def undelivered(self) -> int:
        return sum(1 for a in self._alerts.values()
                   if a.resolved_at is None and a.delivered_at is None)

    # -- internals -----------------------------------------------------------------------------

    @staticmethod
    def _endpoint(base: str) -> str:
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"not an http(s) URL: {base!r}")
        return base.rstrip("/") + "/api/v2/alerts"

    def _new_alert(self, d: Detection, now: float, job: str = "") -> _Alert:
        r = d.remediation
        steps = "\n".join(f"{i}. {s}" for i, s in enumerate(r.steps, 1))
        where = visible(d.path) if d.line is None else f"{visible(d.path)}:{d.line}"
        if d.rank is not None:
            where += f" (rank {d.rank})"
        link = (f"{self._link_base}/detections/{urllib.parse.quote(d.event_id, safe='')}"
                if self._link_base else "")
        annotations = {
            "summary": f"{d.title} on {self.node}",
            "description": r.summary,
            "remediation": steps,
            "action": r.action,
            "runbook_url": r.runbook,
            "line": _clip(visible(d.text if d.text is not None else d.about), _MAX_LINE),
            "context": _clip("\n".join(visible(c) for c in d.context), _MAX_CONTEXT),
            "where": where,
            "event_id": d.event_id,
            "detection_url": link,
        }
        if d.root_cause is not None:
            annotations["root_cause"] = (f"{d.root_cause.signature}: "
                                         f"{visible(d.root_cause.title)}")
        labels = {"alertname": ALERTNAME, "signature": d.signature,
                  "severity": d.severity.label, "owner": d.owner, "node": self.node,
                  "source": d.source}
        # Job identity (issue 21): the same labels as the job gauges, so a job's
        # SigwatchJobIncident inhibits this page. Absent when not known.
        if job:
            labels["job"] = job
        if d.rank is not None:
            labels["rank"] = d.rank
        return _Alert(labels=labels, annotations={k: v for k, v in annotations.items() if v},
                      starts_at=min(d.time, now), last_seen=now, generator_url=link)

    def _make_room(self) -> None:
        """Keep at most ``max_alerts``: old resolutions go first, then the oldest incident."""
        while len(self._alerts) >= self._max_alerts:
            resolved = [a for a in self._alerts.values() if a.resolved_at is not None]
            if resolved:
                victim = min(resolved, key=lambda a: a.resolved_at or 0.0)
            else:
                victim = min(self._alerts.values(),
                             key=lambda a: (a.delivered_at is None, a.last_seen))
                if self._m is not None:
                    self._m.alerts_dropped.labels("queue_full").inc()
                log.error("alert_dropped", reason="queue_full", signature=victim.key[0],
                          source=victim.key[2])
            del self._alerts[victim.key]
            self._version += 1
            self._dirty = True

    def _resolve_quiet(self, now: float) -> None:
        for alert in self._alerts.values():
            if alert.resolved_at is not None or alert.delivered_at is None:
                continue  # never resolve a page that has not reached anyone yet
            if now >= max(alert.last_seen, alert.delivered_at) + self._resolve_after:
                alert.resolved_at = now
                self._version += 1
                self._dirty = True
                log.info("alert_resolved", signature=alert.key[0], source=alert.key[2],
                         repeats=alert.repeats)

    def _expire(self, now: float) -> None:
        gone = [k for k, a in self._alerts.items()
                if a.resolved_at is not None and a.resolve_delivered
                and now - a.resolved_at >= self._retention]
        for key in gone:
            del self._alerts[key]
            self._dirty = True

    def _due(self, replica: _Replica, now: float) -> bool:
        if now < replica.next_attempt or not self._alerts:
            return False
        if replica.synced_version != self._version:
            return True
        return replica.last_ok is None or now - replica.last_ok >= self._resend

    def _body(self, now: float) -> bytes:
        """The alert set as JSON; an alert that cannot be encoded is dropped (and counted),
        never allowed to block the ones behind it."""
        parts: list[bytes] = []
        for alert in list(self._alerts.values()):
            try:
                parts.append(json.dumps(alert.payload(now, 4 * self._resend),
                                        ensure_ascii=False).encode("utf-8"))
            except (ValueError, TypeError) as exc:
                self._drop(alert, "unencodable", str(exc))
        return b"[" + b",".join(parts) + b"]"

    def _drop(self, alert: _Alert, reason: str, detail: str) -> None:
        del self._alerts[alert.key]
        self._version += 1
        self._dirty = True
        if self._m is not None:
            self._m.alerts_dropped.labels(reason).inc()
        log.error("alert_dropped", reason=reason, signature=alert.key[0], source=alert.key[2],
                  detail=detail[:200])

    def _post(self, replica: _Replica, now: float) -> None:
        body = self._body(now)
        version = self._version
        if self._m is not None:
            self._m.alert_posts.inc()
        result = self._transport(replica.url, body, self._timeout)
        if not result.ok and result.reason == "rejected" and len(self._alerts) > 1:
            result = self._isolate_rejected(replica, now)
            version = self._version
        if not result.ok:
            replica.failures += 1
            delay = min(self._backoff_max,
                        self._backoff_initial * 2 ** (replica.failures - 1))
            replica.next_attempt = now + delay
            if self._m is not None:
                self._m.alert_post_failures.labels(result.reason).inc()
            if not replica.down_logged or result.reason == "rejected":
                log.warning("alertmanager_post_failed", url=replica.url, reason=result.reason,
                            detail=result.detail, retry_in=delay,
                            undelivered=self.undelivered())
                replica.down_logged = True
            return
        if replica.down_logged:
            log.info("alertmanager_reachable", url=replica.url, after_failures=replica.failures)
        replica.failures = 0
        replica.down_logged = False
        replica.next_attempt = now
        replica.last_ok = now
        replica.synced_version = version
        if self._m is not None:
            self._m.alertmanager_last_success.set(now)
        for alert in self._alerts.values():
            if alert.delivered_at is None:
                alert.delivered_at = now
                self._dirty = True
                if self._m is not None:
                    self._m.alerts_delivered.labels(alert.labels["severity"]).inc()
            if alert.resolved_at is not None and not alert.resolve_delivered:
                alert.resolve_delivered = True
                self._dirty = True

    def _isolate_rejected(self, replica: _Replica, now: float) -> PostResult:
        """Alertmanager refused the whole batch (4xx): post each alert alone, drop those it
        refuses alone (counted), so one poison alert never blocks the queue behind it."""
        result = PostResult(True)
        for alert in list(self._alerts.values()):
            try:
                one = json.dumps([alert.payload(now, 4 * self._resend)],
                                 ensure_ascii=False).encode("utf-8")
            except (ValueError, TypeError) as exc:
                self._drop(alert, "unencodable", str(exc))
                continue
            if self._m is not None:
                self._m.alert_posts.inc()
            single = self._transport(replica.url, one, self._timeout)
            if single.ok:
                continue
            if single.reason == "rejected":
                self._drop(alert, "rejected", single.detail)
                continue
            return single  # the replica went away meanwhile: retry the whole set later
        return result

    def _update_gauges(self) -> None:
        if self._m is None:
            return
        self._m.alerts_firing.set(
            sum(1 for a in self._alerts.values() if a.resolved_at is None))
        self._m.alerts_undelivered.set(self.undelivered())

    def _load(self) -> None:
        path = self._state_path
        if path is None or not path.exists():
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"state version {data.get('version')!r}")
            alerts = [_Alert.from_json(a) for a in data["alerts"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("alert_state_unreadable", path=str(path), error=str(exc))
            return
        for alert in alerts[-self._max_alerts:]:
            if alert.labels["node"] != self.node:
                alert.labels["node"] = self.node
            self._alerts[alert.key] = alert
        self._version = 1 if self._alerts else 0
        log.info("alert_state_loaded", alerts=len(self._alerts),
                 undelivered=self.undelivered())

    def _save(self) -> None:
        path = self._state_path
        self._dirty = False
        if path is None:
            return
        data = {"version": STATE_VERSION,
                "alerts": [a.to_json() for a in self._alerts.values()]}
        tmp = path.with_name(path.name + ".tmp")
        try:
            # ASCII JSON: any text (a surrogate from a file name included) round-trips.
            raw = json.dumps(data, ensure_ascii=True).encode("ascii")
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the rename itself survives a reboot
            finally:
                os.close(dir_fd)
        except (OSError, ValueError) as exc:
            self._dirty = True  # try again on the next tick
            log.error("alert_state_not_saved", path=str(path), error=str(exc))
            with contextlib.suppress(OSError):
                tmp.unlink()
