"""``CheckpointStore``: offsets per file identity plus the event log's committed size.

Written atomically (tmp file, fsync, rename, fsync of the folder) with a CRC inside the record.
The previous generation is kept. Loading tries the current file, then a complete tmp file, then
the previous generation; what was used is reported so start-up can say what it did.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from sigwatch.sinks.eventlog import EventLogCommit

__all__ = ["Checkpoint", "CheckpointStore", "FileRecord", "LoadResult"]

log = structlog.get_logger("sigwatch.checkpoint")

VERSION = 1


@dataclass(frozen=True, slots=True)
class FileRecord:
    """Where to resume one file, and how to recognise it again.

    ``offset`` is where reading resumes (the start of the oldest open multi-step sequence, or
    the end of the last whole line); detections below ``emitted`` were already delivered.
    """

    source: str
    path: str
    dev: int
    ino: int
    head_len: int
    head_hash: str
    offset: int
    emitted: int
    lineno: int
    marker: str  # hex of up to 32 bytes ending at `emitted`
    closed: bool = False  # read to its end and let go (a tombstone: never "lost")
    size_seen: int = 0  # the file's size when we last looked: smaller at start = truncated
    pending: tuple[int, ...] = ()  # offsets of detections held (not delivered) at the commit


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Everything committed at one point in time."""

    files: tuple[FileRecord, ...]
    event_log: EventLogCommit | None
    saved_at: float = 0.0  # wall time of the commit: files modified later were written after it


@dataclass(frozen=True, slots=True)
class LoadResult:
    """A checkpoint (or None) and which generation it came from.

    ``mode`` is ``none`` (first start), ``current``, ``tmp``, ``previous`` or ``corrupt``.
    """

    checkpoint: Checkpoint | None
    mode: str
    problems: tuple[str, ...] = ()


def _encode(cp: Checkpoint) -> bytes:
    body = {
        "files": [asdict(f) for f in cp.files],
        "event_log": asdict(cp.event_log) if cp.event_log else None,
        "saved_at": cp.saved_at,
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    crc = zlib.crc32(text.encode())
    return json.dumps({"version": VERSION, "crc": crc, "body": body},
                      sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _decode(raw: bytes) -> Checkpoint:
    doc = json.loads(raw.decode("utf-8"))
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        msg = f"unsupported version {doc.get('version') if isinstance(doc, dict) else None!r}"
        raise ValueError(msg)
    body: dict[str, Any] = doc["body"]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    if zlib.crc32(text.encode()) != doc["crc"]:
        msg = "checksum mismatch"
        raise ValueError(msg)
    files = tuple(FileRecord(**f) for f in body["files"])
    ev = body.get("event_log")
    return Checkpoint(files, EventLogCommit(**ev) if ev else None,
                      float(body.get("saved_at", 0.0)))


class CheckpointStore:
    """Reads and writes ``checkpoint.json`` in the state folder."""

    def __init__(self, state_dir: Path, *, fsync: bool = True) -> None:
        self.state_dir = state_dir
        self.path = state_dir / "checkpoint.json"
        self.tmp = state_dir / "checkpoint.json.tmp"
        self.prev = state_dir / "checkpoint.json.prev"
        self._fsync = fsync

    def load(self) -> LoadResult:
        """The newest valid generation; never raises for bad content."""
        problems: list[str] = []
        existed = False
        for mode, path in (("current", self.path), ("tmp", self.tmp), ("previous", self.prev)):
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                existed = True
                problems.append(f"{path}: cannot read: {exc.strerror}")
                continue
            existed = True
            try:
                return LoadResult(_decode(raw), mode, tuple(problems))
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
                problems.append(f"{path}: unusable: {exc}")
        return LoadResult(None, "corrupt" if existed else "none", tuple(problems))

    def save(self, cp: Checkpoint) -> None:
        """Commit atomically; raises OSError (full or read-only folder) for the caller to count."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data = _encode(cp)
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
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
