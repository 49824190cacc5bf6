"""``EventLogSink``: an append-only JSONL file, one detection per line.

Exactly-once across crashes: the checkpoint records the event log's size at each commit. At
start-up, records past that size were written for lines whose offsets were never committed;
they are cut off, and the replay of those lines writes them again. A file that is not the one
the checkpoint names (rotated by logrotate, say) is never cut.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import structlog

from sigwatch.model import Detection

__all__ = ["EventLogCommit", "EventLogSink"]

log = structlog.get_logger("sigwatch.eventlog")


@dataclass(frozen=True, slots=True)
class EventLogCommit:
    """What the checkpoint stores about the event log."""

    dev: int
    ino: int
    size: int


class EventLogSink:
    """Appends detections as JSON lines; ``flush`` fsyncs."""

    name = "eventlog"

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._fsync = fsync
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "ab")  # noqa: SIM115 - held for the sink's lifetime
        self._dirty = False
        self._unsynced = False

    def roll_back_to(self, commit: EventLogCommit | None) -> int:
        """Cut records written after the last commit; returns how many were removed."""
        if commit is None:
            return 0
        st = os.fstat(self._fh.fileno())
        if (st.st_dev, st.st_ino) != (commit.dev, commit.ino) or st.st_size <= commit.size:
            return 0
        with open(self.path, "rb") as fh:
            fh.seek(commit.size)
            removed = fh.read().count(b"\n")
        os.truncate(self._fh.fileno(), commit.size)
        log.warning("event_log_rolled_back", path=str(self.path), records=removed,
                    size=commit.size)
        return removed

    def emit(self, detection: Detection) -> None:
        line = json.dumps(detection.to_json(), ensure_ascii=False, separators=(",", ":"))
        self._fh.write(line.encode("utf-8") + b"\n")
        self._dirty = True

    def flush(self) -> None:
        """Hand written records to the kernel so readers see them (no fsync)."""
        if self._dirty:
            self._fh.flush()
            self._dirty = False
            self._unsynced = True

    def commit_point(self) -> EventLogCommit:
        """Flush and fsync, then describe the file for the checkpoint."""
        self.flush()
        if self._fsync and self._unsynced:
            os.fsync(self._fh.fileno())
            self._unsynced = False
        st = os.fstat(self._fh.fileno())
        return EventLogCommit(st.st_dev, st.st_ino, st.st_size)

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        self.commit_point()
        self._fh.close()
