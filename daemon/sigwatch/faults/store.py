"""``FaultStore``: the fault book on disk, ``<state_dir>/faults.json``.

It holds what the checkpoint does not and must survive everything the checkpoint may not: the
faults and their states, the lines already acted on (by event id, with their own time), the
occurrences still counting toward a ``count`` within a window, the boots seen, and the times
of this node's own drains (the circuit breaker's rate). Written atomically (tmp file, fsync,
rename, fsync of the folder) before any action is taken on a decision, with the previous
generation kept; loading falls back to it when the newest is unreadable.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sigwatch.faults.model import Fault

__all__ = ["FaultBook", "FaultStore"]

VERSION = 1
MAX_SEEN = 20_000
MAX_CLEARED = 500


@dataclass(slots=True)
class FaultBook:
    """Everything the fault engine remembers (mutable; owned by the engine's lock)."""

    boot_id: str = ""
    boot_start: float = 0.0
    boots: list[tuple[str, float]] = field(default_factory=list)  # (id, first seen)
    faults: dict[str, Fault] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)  # event id -> line time
    occurrences: dict[str, list[float]] = field(default_factory=dict)
    drains: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION, "boot_id": self.boot_id, "boot_start": self.boot_start,
            "boots": [list(b) for b in self.boots],
            "faults": [f.to_json() for f in self.faults.values()],
            "seen": self.seen, "occurrences": self.occurrences, "drains": self.drains,
        }

    @classmethod
    def from_json(cls, doc: Any) -> FaultBook:
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            version = doc.get("version") if isinstance(doc, dict) else None
            raise ValueError(f"unsupported version {version!r}")
        faults = [Fault.from_json(f) for f in doc.get("faults") or ()]
        return cls(
            boot_id=str(doc.get("boot_id") or ""),
            boot_start=float(doc.get("boot_start") or 0.0),
            boots=[(str(b[0]), float(b[1])) for b in doc.get("boots") or ()],
            faults={f.id: f for f in faults},
            seen={str(k): float(v) for k, v in (doc.get("seen") or {}).items()},
            occurrences={str(k): [float(t) for t in v]
                         for k, v in (doc.get("occurrences") or {}).items()},
            drains=[float(t) for t in doc.get("drains") or ()],
        )

    def prune(self, now: float, keep_seconds: float) -> None:
        """Forget lines, boots and cleared faults older than ``keep_seconds``."""
        floor = now - keep_seconds
        if len(self.seen) > MAX_SEEN or any(t < floor for t in self.seen.values()):
            kept = sorted(((t, k) for k, t in self.seen.items() if t >= floor), reverse=True)
            self.seen = {k: t for t, k in reversed(kept[:MAX_SEEN])}
        cleared = [f for f in self.faults.values() if not f.open]
        cleared.sort(key=lambda f: f.cleared_at or 0.0)
        drop = {f.id for f in cleared if (f.cleared_at or 0.0) < floor}
        drop |= {f.id for f in cleared[: max(0, len(cleared) - MAX_CLEARED)]}
        for fid in drop:
            del self.faults[fid]
        self.boots = self.boots[-20:]
        self.drains = [t for t in self.drains if t >= now - 3600.0]


class FaultStore:
    """Reads and writes the fault book; ``read_only`` for the command line's ``list``."""

    def __init__(self, state_dir: Path, *, fsync: bool = True) -> None:
        self.state_dir = state_dir
        self.path = state_dir / "faults.json"
        self.prev = state_dir / "faults.json.prev"
        self.tmp = state_dir / "faults.json.tmp"
        self._fsync = fsync
        self.problems: list[str] = []

    def load(self) -> FaultBook | None:
        """The newest readable generation, None when there is none (``problems`` say why)."""
        self.problems = []
        for path in (self.path, self.prev):
            try:
                raw = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except OSError as exc:
                self.problems.append(f"{path}: cannot read: {exc.strerror}")
                continue
            try:
                return FaultBook.from_json(json.loads(raw))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                self.problems.append(f"{path}: unusable: {exc}")
        return None

    def save(self, book: FaultBook) -> None:
        """Commit atomically; raises OSError for the caller to log."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data = json.dumps(book.to_json(), ensure_ascii=False, sort_keys=True).encode() + b"\n"
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if self.path.exists():
            os.replace(self.path, self.prev)
        os.replace(self.tmp, self.path)
        if self._fsync:
            dfd = os.open(self.state_dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
