"""``EventLogSink``: an append-only JSONL file, one detection per line, the commit log.

Exactly-once across crashes: the checkpoint records the event log's identity, size and the
hash of its last bytes at each commit. At start-up, records past that point were written for
lines whose offsets were never committed; they are cut off, and the replay of those lines
writes them again. The cut follows the file through what logrotate and operators do to it:

- truncated since the commit (copytruncate): every record in the file is newer than the
  commit, so it is emptied; the copy next to it (found by the hash of the committed bytes)
  is cut back to the commit;
- replaced since the commit (renamed by logrotate, deleted by hand): the file at the path was
  created after the commit and is emptied; the committed file, if still next to it (found by
  inode), is cut back to the commit.

While running, records are kept in memory until written whole (one ``write`` per batch, so a
truncation never tears a record) and the path is checked before each batch: a deleted,
replaced or truncated event log is reopened (``reopened`` tells the runtime to commit at once).
A write that fails (disk full) keeps the records, is counted, and is retried by the runtime,
which stops reading sources meanwhile: nothing is dropped and the checkpoint never passes what
the file holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from sigwatch.model import Detection

__all__ = ["EventLogCommit", "EventLogSink"]

log = structlog.get_logger("sigwatch.eventlog")

TAIL_BYTES = 256


@dataclass(frozen=True, slots=True)
class EventLogCommit:
    """What the checkpoint stores about the event log (new fields have defaults: a v2
    checkpoint written before them still loads)."""

    dev: int
    ino: int
    size: int
    path: str = ""  # the event log's path at the commit ("" in older checkpoints)
    tail: str = ""  # hash of the last bytes before ``size`` ("" in older checkpoints)
    tail_len: int = 0


def _tail_hash(fd: int, size: int) -> tuple[int, str]:
    length = min(size, TAIL_BYTES)
    if not length:
        return 0, ""
    data = os.pread(fd, length, size - length)
    return len(data), hashlib.sha256(data).hexdigest()[:32]


def _count_records(fd: int, start: int) -> int:
    count = 0
    pos = start
    while True:
        data = os.pread(fd, 1 << 20, pos)
        if not data:
            return count
        count += data.count(b"\n")
        pos += len(data)


class EventLogSink:
    """Appends detections as JSON lines; ``flush`` writes, ``commit_point`` fsyncs.

    It records every occurrence (``every_occurrence``): a repeat folded into an open incident
    is a compact record (``Detection.to_repeat_json``: where, when, the captures, and the
    ``incident`` it folds into with its ``occurrence`` number) instead of a full one.
    """

    name = "eventlog"
    every_occurrence = True

    def __init__(self, path: Path, *, fsync: bool = True,
                 on_write_error: Callable[[], None] | None = None,
                 on_reopen: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._fsync = fsync
        self._on_write_error = on_write_error
        self._on_reopen = on_reopen
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = self._open()
        self._pending = bytearray()
        self._unsynced = False
        self._size = os.fstat(self._fd).st_size  # what the file held after our last write
        self.failing = False  # the last write failed; records wait in memory
        self.reopened = False  # reopened since the last commit: commit soon

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    @property
    def pending_bytes(self) -> int:
        """Bytes of records not written to the file yet."""
        return len(self._pending)

    # -- start-up --------------------------------------------------------------------------

    def roll_back_to(self, commit: EventLogCommit | None) -> int:
        """Cut records written after the last commit; returns how many were removed."""
        if commit is None:
            return 0
        st = os.fstat(self._fd)
        here = (st.st_dev, st.st_ino) == (commit.dev, commit.ino)
        if commit.path and commit.path != str(self.path):
            return 0  # the checkpoint names another event log: not ours to cut
        if here and st.st_size >= commit.size and self._tail_matches(self._fd, commit):
            return self._cut(self._fd, commit.size, str(self.path))
        if not commit.path:
            return 0  # an older checkpoint: no way to tell what happened; leave it
        # Truncated or replaced since the commit: everything in this file is newer.
        removed = self._cut(self._fd, 0, str(self.path))
        removed += self._cut_committed_copy(commit, here)
        return removed

    @staticmethod
    def _tail_matches(fd: int, commit: EventLogCommit) -> bool:
        if not commit.tail_len:
            return True
        try:
            return _tail_hash(fd, commit.size)[1] == commit.tail
        except OSError:
            return False

    def _cut_committed_copy(self, commit: EventLogCommit, truncated: bool) -> int:
        """Cut the file that holds the committed records (renamed, or a copy) to the commit."""
        folder, name = os.path.split(str(self.path))
        try:
            with os.scandir(folder) as entries:
                candidates = [e.path for e in entries
                              if e.name.startswith(name) and e.name != name]
        except OSError:
            return 0
        for candidate in sorted(candidates):
            try:
                fd = os.open(candidate, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if not stat_mod.S_ISREG(st.st_mode) or st.st_size < commit.size:
                    continue
                same = (st.st_dev, st.st_ino) == (commit.dev, commit.ino)
                copy = truncated and commit.tail_len and self._tail_matches(fd, commit)
                if same or copy:
                    return self._cut(fd, commit.size, candidate)
            finally:
                os.close(fd)
        log.warning("event_log_commit_not_found", path=str(self.path),
                    note="records after the last commit may appear twice in a rotated copy")
        return 0

    @staticmethod
    def _cut(fd: int, size: int, path: str) -> int:
        try:
            if os.fstat(fd).st_size <= size:
                return 0
            removed = _count_records(fd, size)
            os.truncate(fd, size)
        except OSError as exc:
            log.error("event_log_roll_back_failed", path=path, error=str(exc))
            return 0
        log.warning("event_log_rolled_back", path=path, records=removed, size=size)
        return removed

    # -- the pump ----------------------------------------------------------------------------

    def emit(self, detection: Detection) -> None:
        doc = detection.to_repeat_json() if detection.incident else detection.to_json()
        line = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        # A file name that is not UTF-8 holds surrogates: written as JSON escapes.
        self._pending += line.encode("utf-8", "backslashreplace") + b"\n"

    def _check_path(self) -> None:
        """Reopen when the file at the path is gone, another one, or was truncated."""
        reason = ""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            reason = "deleted"
        except OSError:
            return
        else:
            mine = os.fstat(self._fd)
            if (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
                reason = "replaced"
            elif mine.st_size < self._size:
                reason = "truncated"
        if reason:
            self.reopen(reason)

    def reopen(self, reason: str) -> None:
        """Open the path again (SIGHUP from logrotate, or the file changed under us)."""
        try:
            fd = self._open()
        except OSError as exc:
            log.error("event_log_reopen_failed", path=str(self.path), error=str(exc))
            return
        with contextlib.suppress(OSError):
            if self._fsync and self._unsynced:
                os.fsync(self._fd)
        os.close(self._fd)
        self._fd = fd
        self._unsynced = False
        self._size = os.fstat(fd).st_size
        self.reopened = True
        log.warning("event_log_reopened", path=str(self.path), reason=reason)
        if self._on_reopen is not None:
            self._on_reopen(reason)

    def flush(self) -> None:
        """Write the records held in memory (whole, in one ``write``); never raises."""
        if not self._pending:
            return
        self._check_path()
        try:
            while self._pending:
                written = os.write(self._fd, self._pending)
                del self._pending[:written]
        except OSError as exc:
            if not self.failing:
                log.error("event_log_write_failed", path=str(self.path), error=str(exc),
                          waiting_records=self._pending.count(b"\n"))
            self.failing = True
            if self._on_write_error is not None:
                self._on_write_error()
            return
        finally:
            with contextlib.suppress(OSError):
                self._size = os.fstat(self._fd).st_size
        if self.failing:
            log.info("event_log_write_recovered", path=str(self.path))
        self.failing = False
        self._unsynced = True

    def commit_point(self) -> EventLogCommit:
        """Write, fsync, then describe the file; raises OSError while records wait."""
        self.flush()
        if self._pending:
            msg = f"event log {self.path}: {len(self._pending)} bytes not written yet"
            raise OSError(msg)
        if self._fsync and self._unsynced:
            os.fsync(self._fd)
            self._unsynced = False
        st = os.fstat(self._fd)
        tail_len, tail = _tail_hash(self._fd, st.st_size)
        self.reopened = False
        return EventLogCommit(st.st_dev, st.st_ino, st.st_size, str(self.path), tail, tail_len)

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.commit_point()
        os.close(self._fd)
