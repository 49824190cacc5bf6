"""One incident per fault: repeats of a signature fold into the open incident with a count.

800,000 Xid lines from one GPU are one incident, not 800,000 console blocks and pages. An
incident is keyed by (signature, source, job); it opens with its first detection and stays open
while repeats come less than ``quiet`` seconds apart. What each kind of sink sees:

- sinks that want every occurrence (the event log, the counters) get the first detection and
  then each repeat, marked with the incident it folds into and its ordinal (``occurrence``);
- the others (console, status page, pager, fault policy) get the first detection, then a count
  update now and then: the latest repeat, standing for the ``repeats`` seen since the last
  update. Updates come at most every ``update`` seconds, less often as the incident ages (a
  quarter of its age, up to ``max_update``), and when it closes.

The state is small (one entry per open incident, at most ``max_open``) and goes into the
checkpoint, so a restart keeps counting the same incident: the replay after a crash delivers
only what was not delivered before, so nothing is counted twice.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sigwatch.model import Detection, detection_from_json

__all__ = ["Folded", "Folder"]

MAX_OPEN = 10_000


@dataclass(slots=True)
class _Incident:
    """An open incident: its first detection's id, counts and times (wall clock)."""

    first_id: str
    count: int  # occurrences so far, the first included
    reported: int  # occurrences the incident sinks have been told of
    opened: float
    last_seen: float  # when the last occurrence was read (schedules updates and the close)
    next_update: float
    last_time: float  # the last occurrence's own time (its line's, else when read)
    latest: Detection | None = None  # the newest repeat not reported yet

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first_id, "count": self.count, "reported": self.reported,
                "opened": self.opened, "last_seen": self.last_seen,
                "next_update": self.next_update, "last_time": self.last_time,
                "latest": _pending_json(self.latest)}


def _pending_json(d: Detection | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {"time": d.time, "key": d.key, "first_offset": d.first_offset, "doc": d.to_json()}


@dataclass(frozen=True, slots=True)
class Folded:
    """What folding made of one detection: the record for every sink, and whether it is the
    first of its incident (then every sink gets it; else only those wanting occurrences)."""

    detection: Detection
    first: bool
    closed: Detection | None = None  # the last count of an incident this one replaces


class Folder:
    """Open incidents by (signature, source, job)."""

    name = "incidents"

    def __init__(self, *, quiet: float = 300.0, update: float = 10.0, max_update: float = 60.0,
                 max_open: int = MAX_OPEN) -> None:
        self.quiet = quiet
        self.update = update
        self.max_update = max_update
        self.max_open = max_open
        self._open: OrderedDict[tuple[str, str, str], _Incident] = OrderedDict()

    @staticmethod
    def key(d: Detection) -> tuple[str, str, str]:
        return (d.signature, d.source, d.job)

    def fold(self, d: Detection, now: float) -> Folded:
        """Open an incident with ``d``, or count ``d`` into the open one.

        Whether ``d`` repeats the open incident is decided on the lines' own times when they
        have them (a log read late, or read again after a crash, folds as it was written).
        """
        if d.status == "resolved":
            return Folded(d, first=True)  # progress resumed: never folded away
        key = self.key(d)
        t = d.line_time if d.line_time is not None else now
        inc = self._open.get(key)
        closed: Detection | None = None
        if inc is not None and t - inc.last_time > self.quiet:
            del self._open[key]  # a new episode: the old one's last count goes out first
            closed = self._report(inc, now) if inc.latest is not None else None
            inc = None
        if inc is None:
            self._open[key] = _Incident(d.event_id, 1, 1, now, now, now + self.update, t)
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)
            return Folded(d, first=True, closed=closed)
        inc.count += 1
        inc.last_seen = now
        inc.last_time = max(inc.last_time, t)
        self._open.move_to_end(key)
        repeat = dataclasses.replace(d, incident=inc.first_id, occurrence=inc.count, repeats=1)
        inc.latest = repeat
        return Folded(repeat, first=False)

    def due(self, now: float) -> list[Detection]:
        """Count updates owed now (and incidents closed by quiet), for the incident sinks."""
        out: list[Detection] = []
        for key, inc in list(self._open.items()):
            closing = now - inc.last_seen > self.quiet
            if inc.latest is not None and (closing or now >= inc.next_update):
                out.append(self._report(inc, now))
            if closing:
                del self._open[key]
        return out

    def flush(self, now: float) -> list[Detection]:
        """Every count not reported yet (the daemon is stopping)."""
        return [self._report(inc, now) for inc in self._open.values() if inc.latest is not None]

    def _report(self, inc: _Incident, now: float) -> Detection:
        assert inc.latest is not None
        update = dataclasses.replace(inc.latest, repeats=inc.count - inc.reported)
        inc.reported = inc.count
        inc.latest = None
        age = max(now - inc.opened, 0.0)
        inc.next_update = now + min(max(self.update, age / 4), self.max_update)
        return update

    def next_deadline(self) -> float | None:
        """Wall-clock time of the next update or close (None: nothing open)."""
        times = [min(inc.next_update if inc.latest is not None else float("inf"),
                     inc.last_seen + self.quiet)
                 for inc in self._open.values()]
        return min(times) if times else None

    def is_open(self, key: tuple[str, str, str], t: float) -> bool:
        """Whether an occurrence of ``key`` at (line) time ``t`` would fold into an open
        incident (then nothing needs its context lines)."""
        inc = self._open.get(key)
        return inc is not None and t - inc.last_time <= self.quiet

    def open_count(self, d: Detection) -> int:
        """Occurrences so far of the incident ``d`` belongs to (0: none open)."""
        inc = self._open.get(self.key(d))
        return inc.count if inc is not None else 0

    # -- checkpoint ----------------------------------------------------------------------------

    def snapshot(self) -> object:
        return [[list(key), inc.to_json()] for key, inc in self._open.items()]

    def restore(self, state: object) -> None:
        self._open.clear()
        if not isinstance(state, list):
            return
        for entry in state:
            try:
                key_raw, raw = entry
                key = (str(key_raw[0]), str(key_raw[1]), str(key_raw[2]))
                pending = raw.get("latest")
                latest = None
                if pending is not None:
                    latest = detection_from_json(pending["doc"], time=float(pending["time"]),
                                                 key=str(pending["key"]),
                                                 first_offset=int(pending["first_offset"]))
                self._open[key] = _Incident(
                    str(raw["first"]), int(raw["count"]), int(raw["reported"]),
                    float(raw["opened"]), float(raw["last_seen"]),
                    float(raw["next_update"]), float(raw["last_time"]), latest)
            except (KeyError, TypeError, ValueError, IndexError):
                continue
