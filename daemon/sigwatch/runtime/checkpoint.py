"""``CheckpointStore``: every source's position, detector state and the event log's size.

One record, committed atomically (tmp file, fsync, rename, fsync of the folder) with a CRC
inside. The previous generation is kept. Loading tries the current file, then a complete tmp
file, then the previous generation; what was used is reported so start-up can say what it did.

Format v2 maps each source's stable name to its opaque position blob and each stateful
detector's name to its snapshot. A v1 checkpoint (file records only) is migrated on load: its
records become the blob of the file source, so nothing is re-read and nothing skipped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from sigwatch.sinks.eventlog import EventLogCommit

__all__ = ["FILE_SOURCE_KEY", "Checkpoint", "CheckpointStore", "LoadResult"]

log = structlog.get_logger("sigwatch.checkpoint")

VERSION = 2
FILE_SOURCE_KEY = "files"
"""The key of the file source's blob (and where a v1 checkpoint's records go)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Everything committed at one point in time."""

    sources: dict[str, object]
    event_log: EventLogCommit | None
    saved_at: float = 0.0  # wall time of the commit: files modified later were written after it
    detectors: dict[str, object] = field(default_factory=dict)
    migrated_from: int = 0  # 1 when this was read from a v1 file


@dataclass(frozen=True, slots=True)
class LoadResult:
    """A checkpoint (or None) and which generation it came from.

    ``mode`` is ``none`` (first start), ``current``, ``tmp``, ``previous`` or ``corrupt``.
    """

    checkpoint: Checkpoint | None
    mode: str
    problems: tuple[str, ...] = ()


def _canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _encode(cp: Checkpoint) -> bytes:
    body = {
        "sources": cp.sources,
        "detectors": cp.detectors,
        "event_log": dataclasses.asdict(cp.event_log) if cp.event_log else None,
        "saved_at": cp.saved_at,
    }
    crc = zlib.crc32(_canonical(body).encode())
    return json.dumps({"version": VERSION, "crc": crc, "body": body},
                      sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _decode(raw: bytes) -> Checkpoint:
    doc = json.loads(raw.decode("utf-8"))
    version = doc.get("version") if isinstance(doc, dict) else None
    if version not in (1, VERSION):
        msg = f"unsupported version {version!r}"
        raise ValueError(msg)
    body: dict[str, Any] = doc["body"]
    if zlib.crc32(_canonical(body).encode()) != doc["crc"]:
        msg = "checksum mismatch"
        raise ValueError(msg)
    ev = body.get("event_log")
    event_log = EventLogCommit(**ev) if ev else None
    saved_at = float(body.get("saved_at", 0.0))
    if version == 1:
        blob = {"files": list(body["files"]), "saved_at": saved_at}
        return Checkpoint({FILE_SOURCE_KEY: blob}, event_log, saved_at, migrated_from=1)
    sources = body["sources"]
    detectors = body.get("detectors") or {}
    if not isinstance(sources, dict) or not isinstance(detectors, dict):
        msg = "sources and detectors must be objects"
        raise TypeError(msg)
    return Checkpoint(sources, event_log, saved_at, detectors)


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
