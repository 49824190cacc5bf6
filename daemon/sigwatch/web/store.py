"""Recent detections for the status page: a bounded ring in memory, kept on disk across restarts.

Persistence is an append-only JSON-lines file with compaction, not a periodic snapshot:

- each detection costs one appended line (O(1)), where a snapshot rewrites the whole ring;
- what was appended survives a crash right away (a snapshot loses everything since the last one),
  and ``flush`` (called before each checkpoint) fsyncs it;
- a line torn by a crash is the last one: loading skips lines that do not parse and compaction
  rewrites the file whole, so the next append never lands after a torn line;
- the file is compacted (rewritten atomically: temporary file, fsync, rename) when it holds
  twice the ring's capacity, and at every start-up, so it stays bounded.

The store is written by the status-page sink's worker and read by HTTP threads: one lock guards
memory, another the file, and readers get immutable ``StoredDetection`` values.

A replay after a crash can deliver a detection again; ``add`` ignores an ``event_id`` it holds
or recently evicted, so the page never lists a detection twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog

from sigwatch.model import Detection, Severity, detection_from_json

__all__ = [
    "DEFAULT_CAPACITY",
    "DetectionStore",
    "Page",
    "StatusPageSink",
    "StoredDetection",
    "detection_from_json",
]

log = structlog.get_logger("sigwatch.web.store")

DEFAULT_CAPACITY = 1000
_FORMAT = 1
# A file name that is not UTF-8 holds surrogates; inside a JSON string their backslash form is
# the JSON escape, so the record reads back with the exact name (as the event log does).
_ERRORS = "backslashreplace"


@dataclass(frozen=True, slots=True)
class StoredDetection:
    """A detection with its place in the ring: ``seq`` grows with every new detection."""

    seq: int
    detection: Detection

    @property
    def event_id(self) -> str:
        return self.detection.event_id


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a query, newest first. ``next_cursor`` is None on the last page."""

    items: list[StoredDetection]
    total: int
    next_cursor: int | None


def _record(seq: int, d: Detection) -> str:
    rec = {"v": _FORMAT, "seq": seq, "t": d.time, "key": d.key,
           "first_offset": d.first_offset, "detection": d.to_json()}
    return json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n"


def _parse_record(line: str) -> StoredDetection:
    rec = json.loads(line)
    if not isinstance(rec, dict) or rec.get("v") != _FORMAT:
        msg = "not a version-1 record"
        raise ValueError(msg)
    doc = rec["detection"]
    d = detection_from_json(doc, time=float(rec["t"]), key=str(rec.get("key", "")),
                            first_offset=int(rec.get("first_offset", -1)))
    if d.event_id != doc.get("event_id"):
        msg = "event_id does not match the detection"
        raise ValueError(msg)
    return StoredDetection(int(rec["seq"]), d)


class DetectionStore:
    """The newest ``capacity`` detections, deduplicated by ``event_id``, optionally on disk.

    ``path`` None keeps them in memory only (tests, ``scan``). Reading a damaged or unreadable
    file never stops the daemon: what cannot be read is counted (``skipped``) and logged.
    """

    def __init__(self, path: Path | None, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            msg = "capacity must be at least 1"
            raise ValueError(msg)
        self.path = path
        self.capacity = capacity
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._items: OrderedDict[str, StoredDetection] = OrderedDict()
        self._evicted: OrderedDict[str, None] = OrderedDict()
        # A folded incident's latest count update (incident id -> its event id): only that one
        # is kept, so a flood that lasts days takes two places in the ring, not thousands.
        self._updates: dict[str, str] = {}
        self._next_seq = 1
        self._file: IO[str] | None = None
        self._lines_in_file = 0
        self._dirty = False
        self._needs_compact = False  # a failed write may have left a torn line
        self.skipped = 0  # records that could not be read at start-up
        self.duplicates = 0  # detections ignored because their event_id was already here
        self.write_errors = 0  # appends or compactions that failed (disk full, ...)
        if path is not None:
            self._load(path)

    # -- writing (the sink's worker) -----------------------------------------------------------

    def add(self, detection: Detection) -> bool:
        """Keep ``detection``; False when its ``event_id`` is already held (a replay)."""
        event_id = detection.event_id
        with self._lock:
            if event_id in self._items or event_id in self._evicted:
                self.duplicates += 1
                return False
            if detection.incident and not self._newer_update(detection):
                self.duplicates += 1  # an older count than the one held (sent again)
                return False
            seq = self._next_seq
            self._next_seq += 1
            self._items[event_id] = StoredDetection(seq, detection)
            while len(self._items) > self.capacity:
                old, gone = self._items.popitem(last=False)
                self._forget(old, gone)
        if self.path is not None:
            self._append(_record(seq, detection))
        return True

    def _newer_update(self, d: Detection) -> bool:
        """Make ``d`` its incident's held count update unless the one held is newer."""
        held_id = self._updates.get(d.incident)
        held = self._items.get(held_id) if held_id is not None else None
        if held is not None:
            if held.detection.occurrence > d.occurrence:
                return False
            del self._items[held.event_id]
            self._forget(held.event_id, held)
        self._updates[d.incident] = d.event_id
        return True

    def _forget(self, event_id: str, item: StoredDetection) -> None:
        self._evicted[event_id] = None
        if len(self._evicted) > self.capacity:
            self._evicted.popitem(last=False)
        incident = item.detection.incident
        if incident and self._updates.get(incident) == event_id:
            del self._updates[incident]

    def flush(self) -> None:
        """Make every added detection durable (fsync); cheap when nothing was added."""
        with self._io_lock:
            if self._file is None or not self._dirty:
                return
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._dirty = False
            except OSError as exc:
                self._write_failed("flush", exc)

    def close(self) -> None:
        self.flush()
        with self._io_lock:
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None

    # -- reading (HTTP threads) ----------------------------------------------------------------

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def get(self, event_id: str) -> StoredDetection | None:
        with self._lock:
            return self._items.get(event_id)

    def items(self) -> list[StoredDetection]:
        """Every held detection, oldest first (a copy: the incidents are built from it)."""
        with self._lock:
            return list(self._items.values())

    def query(
        self,
        *,
        severities: Collection[Severity] = (),
        signature: str = "",
        source: str = "",
        before: int | None = None,
        limit: int = 50,
    ) -> Page:
        """Newest first, filtered (empty filter = any), starting below seq ``before``."""
        def keep(s: StoredDetection) -> bool:
            d = s.detection
            return ((not severities or d.severity in severities)
                    and (not signature or d.signature == signature)
                    and (not source or d.source == source))
        return self._page(keep, before, limit)

    def earlier(self, item: StoredDetection, limit: int = 20) -> list[StoredDetection]:
        """Older detections of the same signature, newest first."""
        sig = item.detection.signature
        return self._page(lambda s: s.detection.signature == sig, item.seq, limit).items

    def root_cause_of(self, item: StoredDetection) -> StoredDetection | None:
        """The held detection named by ``item``'s root cause, if it is still in the ring."""
        rc = item.detection.root_cause
        if rc is None:
            return None
        with self._lock:
            for s in reversed(self._items.values()):
                d = s.detection
                if (d.signature, d.path, d.offset) == (rc.signature, rc.path, rc.offset):
                    return s
        return None

    def fallout_of(self, item: StoredDetection, limit: int = 50) -> list[StoredDetection]:
        """Held detections whose root cause is ``item`` (oldest first)."""
        d = item.detection
        out: list[StoredDetection] = []
        with self._lock:
            for s in self._items.values():
                rc = s.detection.root_cause
                if rc is not None and (rc.signature, rc.path, rc.offset) == (
                        d.signature, d.path, d.offset):
                    out.append(s)
                    if len(out) >= limit:
                        break
        return out

    def _page(self, keep: Callable[[StoredDetection], bool], before: int | None,
              limit: int) -> Page:
        items: list[StoredDetection] = []
        total = 0
        more = False
        with self._lock:
            for s in reversed(self._items.values()):
                if not keep(s):
                    continue
                total += 1
                if before is not None and s.seq >= before:
                    continue
                if len(items) < limit:
                    items.append(s)
                else:
                    more = True
        return Page(items, total, items[-1].seq if more and items else None)

    # -- the file ------------------------------------------------------------------------------

    def _load(self, path: Path) -> None:
        records: dict[str, StoredDetection] = {}
        try:
            with path.open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    try:
                        rec = _parse_record(line)
                    except (ValueError, KeyError, TypeError, AttributeError):
                        self.skipped += 1
                        continue
                    records.setdefault(rec.event_id, rec)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("status_store_unreadable", path=str(path), error=exc.strerror)
        latest: dict[str, StoredDetection] = {}
        for rec in records.values():  # one count update per incident: the highest
            incident = rec.detection.incident
            if incident and (incident not in latest
                             or rec.detection.occurrence > latest[incident].detection.occurrence):
                latest[incident] = rec
        kept = [r for r in records.values()
                if not r.detection.incident or latest[r.detection.incident] is r]
        ordered = sorted(kept, key=lambda s: s.seq)[-self.capacity:]
        for s in ordered:
            self._items[s.event_id] = s
            if s.detection.incident:
                self._updates[s.detection.incident] = s.event_id
        next_seq = max((r.seq for r in records.values()), default=0)
        self._next_seq = next_seq + 1
        if self.skipped:
            log.warning("status_store_records_skipped", path=str(path), count=self.skipped)
        with self._io_lock:
            self._compact_locked()

    def _append(self, text: str) -> None:
        with self._io_lock:
            if self._needs_compact and self._compact_locked():
                return  # the rewritten file already holds this detection
            try:
                if self._file is None:
                    self._open_locked()
                assert self._file is not None
                self._file.write(text)
                self._file.flush()  # to the kernel now: a crash of the process loses nothing
                self._dirty = True
                self._lines_in_file += 1
            except OSError as exc:
                self._write_failed("append", exc)
                return
            if self._lines_in_file >= 2 * self.capacity:
                self._compact_locked()

    def _open_locked(self) -> None:
        assert self.path is not None
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8", errors=_ERRORS)

    def _compact_locked(self) -> bool:
        """Rewrite the file with exactly the ring's content, atomically; False if it failed."""
        assert self.path is not None
        with self._lock:
            snapshot = list(self._items.values())
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8", errors=_ERRORS) as fh:
                fh.writelines(_record(s.seq, s.detection) for s in snapshot)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            self._write_failed("compact", exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return False
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        self._lines_in_file = len(snapshot)
        self._dirty = False
        self._needs_compact = False
        return True

    def _write_failed(self, what: str, exc: OSError) -> None:
        self.write_errors += 1
        self._needs_compact = True
        log.error("status_store_write_failed", op=what, path=str(self.path), error=exc.strerror)
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None  # reopened on the next append


class StatusPageSink:
    """The ``Sink`` that feeds the status page's store (run it behind a ``QueuedSink``)."""

    name = "status_page"

    def __init__(self, store: DetectionStore) -> None:
        self.store = store

    def emit(self, detection: Detection) -> None:
        self.store.add(detection)

    def flush(self) -> None:
        self.store.flush()

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        self.store.close()
