"""``TailService``: every watched file, read fairly, fed through the pipeline, checkpointed.

This is the daemon's pump minus process concerns (signals, HTTP, systemd), so tests can drive
it step by step with ``run_once``. Exactly-once: offsets and the event log's size are committed
together; after a crash the event log is cut back to the committed size and the lines after the
committed offsets are read again, which writes the same events again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat as stat_mod
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from sigwatch.clock import Clock
from sigwatch.pipeline import Engine, Pipeline, StreamState
from sigwatch.sinks.eventlog import EventLogSink
from sigwatch.sources.checkpoint import Checkpoint, CheckpointStore, FileRecord

MAX_TOMBSTONES = 4096
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")
from sigwatch.sources.discovery import ChangeHints, SourceSpec, expand_sources
from sigwatch.sources.file import (
    Draining,
    FileStream,
    FileTailer,
    Resume,
    head_fingerprint,
    start_offset_at_end,
)
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["TailOptions", "TailService"]

log = structlog.get_logger("sigwatch.tail")


@dataclass(frozen=True, slots=True)
class TailOptions:
    """Timing and size limits of the pump."""

    poll_interval: float = 1.0
    rescan_interval: float = 5.0
    checkpoint_interval: float = 1.0
    read_budget: int = 4 << 20
    max_line_bytes: int = 64 * 1024
    rotate_wait: float = 5.0
    max_files: int = 20_000


class _Observer:
    """Turns tailer reports into log events and metrics."""

    def __init__(self, metrics: SelfMetrics | None) -> None:
        self.m = metrics

    def rotated(self, source: str, path: str) -> None:
        log.info("file_rotated", source=source, path=path)
        if self.m:
            self.m.rotations.labels(source).inc()

    def truncated(self, source: str, path: str, read_to: int, unread: int,
                  size_before: int = 0) -> None:
        log.warning("file_truncated", source=source, path=path, read_to=read_to,
                    size_before=size_before, partial_line_bytes_dropped=unread)
        if self.m:
            self.m.truncations.labels(source).inc()
        if read_to or size_before:
            # Whatever was appended after our last read and before the truncation (the
            # copytruncate gap) is gone; we cannot tell how much, so say that it may be.
            self.data_loss(source, "truncated", path=path, read_to=read_to,
                           note="lines written after the last read and before the "
                                "truncation cannot be read")

    def file_error(self, source: str, path: str, reason: str, error: str) -> None:
        log.warning("file_unreadable", source=source, path=path, reason=reason, error=error)
        if self.m:
            self.m.file_errors.labels(source, reason).inc()

    def opened(self, source: str, path: str, offset: int) -> None:
        log.debug("file_opened", source=source, path=path, offset=offset)

    def closed(self, source: str, path: str, unread: int) -> None:
        log.debug("file_closed", source=source, path=path, unread=unread)

    def data_loss(self, source: str, reason: str, **kw: object) -> None:
        log.warning("data_loss", source=source, reason=reason, **kw)
        if self.m:
            self.m.data_loss.labels(source, reason).inc()


def _hash_head(fd: int, length: int) -> str:
    return hashlib.sha256(os.pread(fd, length, 0)).hexdigest()[:16]


class TailService:
    """Owns the tailers, their stream states, the checkpoint and the commit cycle."""

    def __init__(
        self,
        *,
        sources: list[SourceSpec],
        pipeline: Pipeline,
        clock: Clock,
        options: TailOptions,
        store: CheckpointStore | None,
        eventlog: EventLogSink | None = None,
        metrics: SelfMetrics | None = None,
        hints: ChangeHints | None = None,
        engine_loader: Callable[[], Engine] | None = None,
    ) -> None:
        self.sources = sources
        self.pipeline = pipeline
        self.clock = clock
        self.options = options
        self.store = store
        self.eventlog = eventlog
        self.metrics = metrics
        self.hints = hints
        self.engine_loader = engine_loader
        self.observer = _Observer(metrics)
        self.tailers: dict[str, FileTailer] = {}
        self._states: dict[int, tuple[StreamState, int]] = {}
        self._records: dict[tuple[int, int], FileRecord] = {}
        self._recovered_emitted: dict[str, int] = {}
        self._first_start = False
        self._recovering = False
        self._start_at = {s.name: s.start_at for s in sources}
        self._next_poll = 0.0
        self._next_rescan = 0.0
        self._next_commit = 0.0
        self._dirty_commit = False
        self._checkpoint_failing = False
        self._behind: list[FileTailer] = []  # read a full budget last pass: more is waiting
        self._last_records: dict[int, tuple[tuple[object, ...], FileRecord]] = {}
        self._last_rescan_wall = 0.0
        self.reload_requested = threading.Event()
        self.start_mode = "none"

    # -- start-up -------------------------------------------------------------------------

    def start(self) -> None:
        """Load the checkpoint, roll the event log back to it, open every file."""
        cp: Checkpoint | None = None
        if self.store is not None:
            result = self.store.load()
            cp, self.start_mode = result.checkpoint, result.mode
            for problem in result.problems:
                log.error("checkpoint_unusable", problem=problem)
            if result.mode in ("tmp", "previous", "corrupt") and self.metrics:
                self.metrics.checkpoint_recoveries.labels(result.mode).inc()
        self._first_start = cp is None and self.start_mode == "none"
        self._recovering = self.start_mode == "corrupt"
        if self.eventlog is not None and cp is not None:
            removed = self.eventlog.roll_back_to(cp.event_log)
            if removed and self.metrics:
                self.metrics.events_rolled_back.inc(removed)
        if self._recovering:
            self._recovered_emitted = self._emitted_from_event_log()
            log.error("checkpoint_lost_rereading_files",
                      policy="read every file from byte 0; detections already in the event "
                             "log are not written again",
                      streams_in_event_log=len(self._recovered_emitted))
        followed: list[FileRecord] = []
        if cp is not None:
            self._records = {(r.dev, r.ino): r for r in cp.files}
            followed = [r for r in cp.files if not r.closed]
        log.info("tail_starting", checkpoint=self.start_mode, files_known=len(self._records))
        self._rescan()
        self._drain_orphans()
        if cp is not None and cp.saved_at:
            for record in followed:
                self._read_unseen_rotations(record.source, record.path, cp.saved_at)
        self._first_start = False
        self.commit(force=True)

    def _emitted_from_event_log(self) -> dict[str, int]:
        """Highest detection offset per stream in the event log (rebuilds a lost checkpoint)."""
        if self.eventlog is None:
            return {}
        emitted: dict[str, int] = {}
        try:
            with open(self.eventlog.path, "rb") as fh:
                for raw in fh:
                    try:
                        doc = json.loads(raw)
                        key, off = doc["stream"], int(doc["offset"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    emitted[key] = max(emitted.get(key, -1), off)
        except OSError:
            return {}
        return emitted

    def _resume_for(self, source: str, path: str) -> Callable[[os.stat_result, int], Resume]:
        def resume(st: os.stat_result, fd: int) -> Resume:
            record = self._records.pop((st.st_dev, st.st_ino), None)
            if record is not None:
                if self._verify(record, st, fd):
                    return Resume(record.offset, record.lineno, record.emitted,
                                  bytes.fromhex(record.marker), tuple(record.pending))
                if not record.closed:  # a file we were following changed while we were away
                    log.warning("file_changed_while_down", source=source, path=path,
                                read_to=record.emitted)
                    if self.metrics:
                        self.metrics.truncations.labels(source).inc()
                    self.observer.data_loss(source, "changed_while_down", path=path,
                                            read_to=record.emitted)
                return Resume()  # else the inode was reused by a new file: read it all
            if self._recovering:
                fp = head_fingerprint(os.pread(fd, 64, 0))
                key = f"{st.st_dev}:{st.st_ino}:{fp[1] if fp else ''}"
                return Resume(emitted=self._recovered_emitted.get(key, -1) + 1)
            if self._first_start and self._start_at.get(source, "end") == "end":
                return Resume(offset=start_offset_at_end(fd, st.st_size), lineno=0)
            return Resume()
        return resume

    @staticmethod
    def _verify(record: FileRecord, st: os.stat_result, fd: int) -> bool:
        if st.st_size < max(record.emitted, record.offset, record.size_seen):
            return False
        try:
            if record.head_len and _hash_head(fd, record.head_len) != record.head_hash:
                return False
            marker = bytes.fromhex(record.marker)
            if marker and (record.emitted < len(marker) or os.pread(
                    fd, len(marker), record.emitted - len(marker)) != marker):
                return False
        except OSError:
            return False
        return True

    def _drain_orphans(self) -> None:
        """Files known to the checkpoint but no longer at their path: find and finish them.

        A file rotated away while we were down is looked for by inode in its old folder (one
        directory listing per folder). Found: read from the checkpoint to its end. Gone: what
        was written after the checkpoint is lost, which is counted and logged. Files we had
        already read to the end and closed (``closed``) are only forgotten when gone.
        """
        by_folder: dict[str, dict[int, str]] = {}
        for (dev, ino), record in list(self._records.items()):
            folder = os.path.dirname(record.path)
            if folder not in by_folder:
                inodes: dict[int, str] = {}
                try:
                    with os.scandir(folder) as entries:
                        for entry in entries:
                            try:
                                if entry.is_file(follow_symlinks=False):
                                    inodes[entry.inode()] = entry.path
                            except OSError:
                                continue
                except OSError as exc:
                    log.warning("orphan_folder_unreadable", folder=folder, error=str(exc))
                by_folder[folder] = inodes
            found = by_folder[folder].get(ino)
            if found is not None:
                try:
                    st = os.stat(found)
                except OSError:
                    found = None
                else:
                    if st.st_dev != dev:
                        found = None
            if found is None:
                del self._records[(dev, ino)]
                if not record.closed:
                    self.observer.data_loss(record.source, "rotated_away", path=record.path,
                                            offset=record.emitted)
                continue
            if record.closed and st.st_size <= record.offset:
                continue  # read to the end before; keep remembering it
            self._follow_orphan(record.source, found)

    def _read_unseen_rotations(self, source: str, path: str, since: float) -> None:
        """Read files rotated away from ``path`` before we ever opened them.

        A file created at ``path`` and renamed to ``path.1`` between two of our looks (or
        while we were down) was never opened. Unknown files named ``<name>*`` next to it that
        were modified after we last saw ``path`` are such files: read them from byte 0.
        Compressed rotations are skipped (logrotate compresses a copy; the original was read).
        """
        folder, name = os.path.split(path)
        # Open files are known. A checkpoint record is not proof: its inode may have been
        # reused by a new file; opening it verifies (fingerprint, marker) and resumes.
        known = {s.identity for t in self.tailers.values() for s in t.streams()}
        try:
            with os.scandir(folder) as entries:
                candidates = [e for e in entries if e.name.startswith(name) and e.name != name
                              and not e.name.endswith(COMPRESSED)]
        except OSError:
            return
        for entry in sorted(candidates, key=lambda e: e.name, reverse=True):  # oldest first
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat_mod.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in known:
                continue
            if st.st_mtime < since - 1.0 or st.st_size == 0:
                continue
            record = self._records.get((st.st_dev, st.st_ino))
            if self._follow_orphan(source, entry.path) is not None:
                known.add((st.st_dev, st.st_ino))
                if record is not None and record.closed:
                    continue
                log.warning("reading_unseen_rotated_file", source=source, path=entry.path,
                            rotated_from=path)

    def _follow_orphan(self, source: str, path: str) -> FileStream | None:
        tailer = FileTailer(source, path, observer=self.observer,
                            max_line_bytes=self.options.max_line_bytes,
                            rotate_wait=0.0, adopt=lambda _t, _ident: False, orphan=True)
        stream = tailer.open(self._resume_for(source, path))
        if stream is None:
            return None
        tailer.current = None
        tailer.draining.append(Draining(stream, 0.0))
        self.tailers[f"{path}\0orphan{id(stream)}"] = tailer
        log.info("draining_rotated_file", source=source, path=path, offset=stream.offset)
        return stream

    # -- the pump -----------------------------------------------------------------------------

    def _adopt(self, taker: FileTailer, identity: tuple[int, int]) -> FileStream | bool:
        """The stream already following ``identity`` if ``taker`` should take it over.

        A rotated file (draining, or no longer at its owner's path) moves to the path where
        it is now. One still at its owner's path (two globs, or a symlink and its target)
        stays where it is: True means "followed elsewhere", False "not followed at all".
        """
        for tailer in self.tailers.values():
            for stream in tailer.streams():
                if stream.identity != identity or stream.closed:
                    continue
                if tailer is not taker and stream is tailer.current and not tailer.orphan:
                    try:
                        st = os.stat(tailer.path)
                        still_there = (st.st_dev, st.st_ino) == identity
                    except OSError:
                        still_there = False
                    if still_there:
                        return True
                tailer.release(stream)
                return stream
        return False

    def _rescan(self) -> None:
        looked, since = time.time(), self._last_rescan_wall
        self._last_rescan_wall = looked
        found, capped = expand_sources(self.sources, self.options.max_files)
        if capped:
            log.warning("max_files_reached", limit=self.options.max_files)
        for path, source in found.items():
            if path in self.tailers:
                continue
            tailer = FileTailer(source, path, observer=self.observer,
                                max_line_bytes=self.options.max_line_bytes,
                                rotate_wait=self.options.rotate_wait, adopt=self._adopt)
            self.tailers[path] = tailer
            if tailer.open(self._resume_for(source, path)) is not None and since:
                # New at this path since the last rescan: a file may have lived here and
                # been rotated away before we looked.
                self._read_unseen_rotations(source, path, since)
        for path in [p for p in self.tailers if p not in found]:
            tailer = self.tailers[path]
            if tailer.current is not None:
                tailer.check_path(self.clock.monotonic(), self._resume_for(tailer.source, path))
            if tailer.current is None and not tailer.draining:
                del self.tailers[path]
        self._update_gauges()

    def _update_gauges(self) -> None:
        if self.metrics is None:
            return
        counts: dict[str, int] = {s.name: 0 for s in self.sources}
        for tailer in self.tailers.values():
            counts[tailer.source] = counts.get(tailer.source, 0) + len(tailer.streams())
        for source, count in counts.items():
            self.metrics.files_watched.labels(source).set(count)

    def _state(self, stream: FileStream) -> StreamState:
        entry = self._states.get(id(stream))
        if entry is None or entry[1] != stream.truncations:
            state = StreamState(stream.info, lineno=stream.start_lineno if entry is None else 0,
                                suppress_below=stream.emitted, pending=stream.pending)
            self._states[id(stream)] = (state, stream.truncations)
            return state
        return entry[0]

    def run_once(self) -> bool:
        """One pass: rescan if due, check paths, read what is new. True if anything was read."""
        now = self.clock.monotonic()
        if self.reload_requested.is_set():
            self.reload_requested.clear()
            self.reload()
        dirty, rescan = self.hints.take() if self.hints else (set(), False)
        if rescan or now >= self._next_rescan:
            self._rescan()
            self._next_rescan = now + self.options.rescan_interval
        full = now >= self._next_poll
        if full:
            self._next_poll = now + self.options.poll_interval
            tailers = list(self.tailers.values())
        else:
            tailers = [t for p in dirty if (t := self.tailers.get(p)) is not None]
            tailers += [t for t in self.tailers.values() if t.draining]
            tailers += [t for t in self._behind if t not in tailers]
        self._behind = []
        progressed = False
        for tailer in tailers:
            changes, seen_at = tailer.changes, tailer.seen_at
            tailer.check_path(now, self._resume_for(tailer.source, tailer.path))
            if tailer.changes != changes:
                self._read_unseen_rotations(tailer.source, tailer.path, seen_at)
            idle: set[int] = set()
            for stream in tailer.streams():
                nbytes = self._pump_stream(stream)
                if nbytes:
                    progressed = True
                    if nbytes >= self.options.read_budget and tailer not in self._behind:
                        self._behind.append(tailer)
                else:
                    idle.add(id(stream))
            for stream in tailer.expire_drained(now, idle):
                self._close_stream(stream)
        if full:  # quiet streams: release generic detections held past their hold time
            for state, _truncations in list(self._states.values()):
                if self.pipeline.tick(state):
                    self._dirty_commit = True
        if progressed or self._dirty_commit:
            self._dirty_commit = True
            self.pipeline.flush()
        if self._dirty_commit and now >= self._next_commit:
            self.commit()
        return progressed

    def _pump_stream(self, stream: FileStream) -> int:
        try:
            if stream.rewritten():
                read_to = stream.offset
                unread = stream.restart_at_zero()
                self.observer.truncated(stream.source, stream.path, read_to, unread,
                                        stream.size_before)
            segments, nbytes = stream.read(self.options.read_budget)
            if stream.replaced_before_read:
                stream.replaced_before_read = False
                self.observer.truncated(stream.source, stream.path, 0, 0, stream.last_size)
        except OSError as exc:
            self.observer.file_error(stream.source, stream.path, "io", str(exc))
            return 0
        if not nbytes:
            return 0
        if self.metrics:
            self.metrics.bytes_read.labels(stream.source).inc(nbytes)
        if segments:
            self.pipeline.process(self._state(stream), segments)
        return nbytes

    def _close_stream(self, stream: FileStream) -> None:
        tail = stream.finish()
        if tail:
            self.pipeline.process(self._state(stream), tail)
        self.pipeline.finish(self._state(stream))
        self.observer.closed(stream.source, stream.path, 0)
        try:
            linked = os.fstat(stream.fd).st_nlink > 0
        except OSError:
            linked = False
        if linked:
            # Still on disk under some name: remember how far we read, so that if a glob
            # finds it later (``app.log.1``) or a writer appends to it, it resumes there.
            record = self._record(stream)
            self._records.pop((record.dev, record.ino), None)
            self._records[(record.dev, record.ino)] = dataclasses.replace(record, closed=True)
            while len(self._records) > MAX_TOMBSTONES:
                oldest = next(iter(self._records))
                del self._records[oldest]
        self._states.pop(id(stream), None)
        self._last_records.pop(id(stream), None)
        stream.close()
        self._dirty_commit = True

    # -- commit, reload, stop -----------------------------------------------------------------

    def _record(self, stream: FileStream) -> FileRecord:
        entry = self._states.get(id(stream))
        committed = stream.framer.committed_offset
        resume, lineno = committed, (entry[0].lineno if entry else stream.start_lineno)
        held: tuple[int, ...] = ()
        if entry is not None:
            opened = entry[0].tracker.earliest_open()
            if opened is not None and opened[0] < committed:
                resume, lineno = opened[0], opened[1] - 1
            held = entry[0].tracker.held_offsets()
        # Held detections are not delivered yet; neither are pending ones not replayed yet.
        pending = tuple(sorted(set(held) | {p for p in stream.pending if p >= committed}))
        if committed >= stream.emitted:
            emitted, marker = committed, stream.committed_marker
        else:  # still replaying below what was already delivered
            emitted, marker = stream.emitted, stream.emitted_marker
        key = (emitted, resume, lineno, stream.path, stream.truncations, stream.fingerprint,
               stream.last_size, pending)
        cached = self._last_records.get(id(stream))
        if cached and cached[0] == key:
            return cached[1]
        head_len, head_hash = stream.fingerprint or (0, "")
        if not head_len:  # no whole head yet: the bytes we read, or else what we saw at open
            seen = stream.head or stream.open_head
            if seen:
                head_len, head_hash = len(seen), hashlib.sha256(seen).hexdigest()[:16]
        record = FileRecord(stream.source, stream.path, stream.dev, stream.ino, head_len,
                            head_hash, resume, emitted, lineno, marker.hex(),
                            size_seen=stream.last_size, pending=pending)
        self._last_records[id(stream)] = (key, record)
        return record

    def commit(self, *, force: bool = False) -> None:
        """Make sinks durable, then write offsets and the event log size in one record."""
        if self.store is None:
            return
        self.pipeline.flush()
        try:
            event_commit = self.eventlog.commit_point() if self.eventlog else None
            records = [self._record(s) for t in self.tailers.values() for s in t.streams()]
            records += list(self._records.values())  # known files not readable right now
            self.store.save(Checkpoint(tuple(records), event_commit, time.time()))
        except OSError as exc:
            if self.metrics:
                self.metrics.checkpoint_errors.inc()
            if not self._checkpoint_failing:
                log.error("checkpoint_write_failed", error=str(exc), state_dir=str(
                    self.store.state_dir))
            self._checkpoint_failing = True
            self._next_commit = self.clock.monotonic() + max(self.options.checkpoint_interval,
                                                              1.0)
            return
        if self._checkpoint_failing:
            log.info("checkpoint_write_recovered")
        self._checkpoint_failing = False
        self._dirty_commit = False
        self._next_commit = self.clock.monotonic() + self.options.checkpoint_interval
        if self.metrics:
            self.metrics.checkpoint_writes.inc()
        _ = force

    def reload(self) -> bool:
        """Swap in a freshly loaded pattern set, or keep the old one if it has errors."""
        if self.engine_loader is None:
            return False
        if self.metrics:
            self.metrics.reload_timestamp.set(self.clock.time())
        try:
            engine = self.engine_loader()
        except Exception as exc:  # noqa: BLE001 - any failure keeps the old set
            log.error("pattern_reload_failed", error=str(exc))
            if self.metrics:
                self.metrics.reload_success.set(0)
                self.metrics.reload_failures.inc()
            return False
        self.pipeline.swap(engine)
        log.info("patterns_reloaded", signatures=len(engine.patterns))
        if self.metrics:
            self.metrics.reload_success.set(1)
            self.metrics.patterns_loaded.set(len(engine.patterns))
        return True

    def stop(self) -> None:
        """Final commit, then close every file."""
        self.commit(force=True)
        for tailer in self.tailers.values():
            for stream in tailer.streams():
                stream.close()
        self.tailers.clear()

    def next_wakeup(self) -> float:
        """Seconds until the next timed poll."""
        return max(0.0, self._next_poll - self.clock.monotonic())

