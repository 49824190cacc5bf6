"""Incidents for on-call: the status page's detections folded the way a person reads them.

An incident is every held detection of one signature from one source (and one job, once
detections carry one): repeats are counted into it, not listed again. A detection whose root
cause is held is *fallout*: it is folded under the incident of its cause (a chain of fallout
ends at the first cause), grouped by signature with a count. An incident is **open** while its
last detection is at most ``window`` seconds old, or while a detector holds it open (a stall
not over); a ``resolved`` detection (progress resumed) closes it until it fires again.

Open incidents come first, the most severe first, then the most recent; the rest follow,
newest first. Nothing here renders HTML (``pages.py`` does) or touches the server.

An incident groups by job (``Detection.job``), and counts the repeats folding folded into
it: a count update carries its incident's total so far (``occurrence``), and the highest total
of each folded incident is what counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sigwatch.model import Detection, Severity
from sigwatch.web.store import StoredDetection

__all__ = [
    "DEFAULT_WINDOW",
    "FalloutGroup",
    "Incident",
    "build_incidents",
    "detection_field",
    "incident_key",
]

DEFAULT_WINDOW = 3600.0
"""Seconds after its last detection that an incident still counts as open."""

_MAX_RANKS = 64  # distinct ranks remembered per incident (the page shows a count and a few)


def detection_field(d: Detection, name: str) -> str:
    """An optional field of a detection (``job``, ``owner``...) as text, "" when absent."""
    value = getattr(d, name, None)
    if value is None:
        return ""
    text = getattr(value, "value", value)  # an enum's value
    return str(text)


def _weight(d: Detection) -> int:
    """How many occurrences one detection stands for (a detection may fold repeats)."""
    repeats = getattr(d, "repeats", None)
    return repeats if isinstance(repeats, int) and repeats > 0 else 1


class _Occurrences:
    """Occurrences counted per folded incident (``detectors/folding.py``): each count update
    says the incident's total so far (``occurrence``), so the count is the highest total per
    incident, which an update delivered twice (a restart after a crash) cannot inflate."""

    __slots__ = ("_seen", "total")

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self.total = 0

    def add(self, d: Detection) -> None:
        episode = d.incident or d.event_id
        known = self._seen.get(episode, 0)
        now = max(known, d.occurrence if d.incident else 1)
        self._seen[episode] = now
        self.total += now - known


def incident_key(d: Detection) -> tuple[str, str, str]:
    """(signature, source, job): what makes two detections the same incident on one node."""
    return (d.signature, d.source, detection_field(d, "job"))


@dataclass(slots=True)
class FalloutGroup:
    """Fallout of one signature under an incident."""

    signature: str
    title: str
    severity: Severity
    count: int = 0
    latest: StoredDetection | None = None


@dataclass(slots=True)
class Incident:
    """One incident: its first detection (the cause, with the fix), its latest, its counts."""

    key: tuple[str, str, str]
    first: StoredDetection | None  # None: known only from a detector holding it open
    latest: Detection
    latest_stored: StoredDetection | None
    severity: Severity
    count: int = 0
    first_seen: float = 0.0
    last_seen: float = 0.0
    ranks: list[str] = field(default_factory=list)
    fallout: dict[str, FalloutGroup] = field(default_factory=dict)
    occurrences: _Occurrences = field(default_factory=_Occurrences)
    resolved: bool = False
    held_open: bool = False
    open: bool = False

    @property
    def cause(self) -> Detection:
        """The detection whose line and fix describe the incident (the first one held)."""
        return self.first.detection if self.first is not None else self.latest

    @property
    def fallout_count(self) -> int:
        return sum(g.count for g in self.fallout.values())

    def fallout_groups(self) -> list[FalloutGroup]:
        """Most severe first, then the most frequent."""
        return sorted(self.fallout.values(), key=lambda g: (-g.severity, -g.count, g.title))

    def _add_repeat(self, item: StoredDetection) -> None:
        d = item.detection
        if d.status == "resolved":
            self.resolved = True
            self.latest, self.latest_stored = d, item
            self.last_seen = max(self.last_seen, d.time)
            return
        if self.resolved:  # it fired again after a resolution: a new episode
            self.resolved = False
        self.occurrences.add(d)
        self.count = self.occurrences.total
        self.severity = max(self.severity, d.severity)
        self.first_seen = min(self.first_seen, d.time) if self.count > 1 else d.time
        self.last_seen = max(self.last_seen, d.time)
        self.latest, self.latest_stored = d, item
        if d.rank is not None and d.rank not in self.ranks and len(self.ranks) < _MAX_RANKS:
            self.ranks.append(d.rank)

    def _add_fallout(self, item: StoredDetection) -> None:
        d = item.detection
        group = self.fallout.get(d.signature)
        if group is None:
            group = self.fallout[d.signature] = FalloutGroup(d.signature, d.title, d.severity)
        group.count += _weight(d)
        group.latest = item
        self.last_seen = max(self.last_seen, d.time)


def _cause_key(d: Detection) -> tuple[str, str, int] | None:
    rc = d.root_cause
    return None if rc is None else (rc.signature, rc.path, rc.offset)


def build_incidents(items: Iterable[StoredDetection], *, now: float,
                    window: float = DEFAULT_WINDOW,
                    held_open: Sequence[Detection] = ()) -> list[Incident]:
    """Fold ``items`` (any order) into incidents: open ones first, by severity, then recency.

    ``held_open``: detections a detector still holds open (``StatusProvider.open_incidents``);
    their incidents are open whatever their age, and are listed even when not held.
    """
    ordered = sorted(items, key=lambda s: s.seq)
    incidents: dict[tuple[str, str, str], Incident] = {}
    where: dict[tuple[str, str, int | None], tuple[str, str, str]] = {}
    for item in ordered:
        d = item.detection
        cause = _cause_key(d)
        home = where.get(cause) if cause is not None else None
        if home is not None:
            incidents[home]._add_fallout(item)
            where[(d.signature, d.path, d.offset)] = home
            continue
        key = incident_key(d)
        incident = incidents.get(key)
        if incident is None:
            incident = incidents[key] = Incident(
                key, item if d.status != "resolved" else None, d, item, d.severity,
                first_seen=d.time, last_seen=d.time)
        elif incident.first is None and d.status != "resolved":
            incident.first = item
        incident._add_repeat(item)
        where[(d.signature, d.path, d.offset)] = key
    for d in held_open:
        key = incident_key(d)
        incident = incidents.get(key)
        if incident is None:
            incident = incidents[key] = Incident(key, None, d, None, d.severity, count=1,
                                                 first_seen=d.time, last_seen=d.time)
        incident.held_open = True
        incident.resolved = False
    for incident in incidents.values():
        recent = now - incident.last_seen <= window
        incident.open = incident.held_open or (recent and not incident.resolved)
    open_first = sorted((i for i in incidents.values() if i.open),
                        key=lambda i: (-i.severity, -i.last_seen))
    closed = sorted((i for i in incidents.values() if not i.open),
                    key=lambda i: -i.last_seen)
    return open_first + closed
