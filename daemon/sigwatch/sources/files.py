"""``FileSource``: every file the globs match, read fairly, as one ``Source`` of the runtime.

Identity, rotation, truncation, orphans and unseen rotations live here; the runtime owns the
detectors, the sinks and the commit. Exactly-once: the runtime commits this source's snapshot
(one record per known file) together with the event log's size; after a crash the event log is
cut back and the lines after the committed offsets are read again, which writes the same events
again. Each file stream gets a handle; a truncation closes the handle and opens a new one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat as stat_mod
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import structlog

from sigwatch.clock import Clock
from sigwatch.framing.lines import Segment
from sigwatch.sources.base import (
    JSONValue,
    ReplayNeed,
    StreamClosed,
    StreamEvent,
    StreamLines,
    StreamOpened,
)
from sigwatch.sources.copies import (
    ReadContent,
    ReadHistory,
    copy_holds,
    hash_of_head,
    originals_of,
)
from sigwatch.sources.discovery import (
    SourceSpec,
    expand_sources_counted,
    pattern_root,
)
from sigwatch.sources.file import (
    HEAD_BYTES,
    MARKER_BYTES,
    RECORD_MARKER_BYTES,
    Draining,
    FileRecord,
    FileStream,
    FileTailer,
    MakeFramer,
    Resume,
    head_fingerprint,
    start_offset_at_end,
)
from sigwatch.sources.watching import (
    SAFETY_RESCAN,
    Hints,
    InotifyHints,
    SafetyNet,
    unmatched_globs,
)
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["FileSource", "TailOptions"]

log = structlog.get_logger("sigwatch.tail")

MAX_TOMBSTONES = 4096
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")


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
    # Refuse files whose real path is outside the watched trees (a symlink out of the tree):
    # the default for a daemon running as root (``app`` decides).
    confine_to_tree: bool = False


class _Observer:
    """Turns tailer reports into log events and metrics."""

    def __init__(self, metrics: SelfMetrics | None) -> None:
        self.m = metrics

    def rotated(self, source: str, path: str) -> None:
        log.info("file_rotated", source=source, path=path)
        if self.m:
            self.m.rotations.labels(source).inc()

    def truncated(self, source: str, path: str, read_to: int, unread: int,
                  size_before: int = 0, copy_found: bool = False) -> None:
        """Count a loss only for bytes known lost: seen past our offset and not in a copy,
        or a partial line held back. Without a copy, lines appended after our last look and
        before the truncation may be lost too, unknowably: counted apart, as possible."""
        lost = unread + (0 if copy_found else max(0, size_before - read_to))
        log.warning("file_truncated", source=source, path=path, read_to=read_to,
                    size_before=size_before, partial_line_bytes_dropped=unread,
                    bytes_lost=lost, copy_found=copy_found)
        if self.m:
            self.m.truncations.labels(source).inc()
        if lost > 0:
            self.data_loss(source, "truncated", path=path, read_to=read_to, bytes_lost=lost)
        elif read_to and not copy_found:
            log.warning("data_loss_possible", source=source, reason="truncated", path=path,
                        note="no copy next to the file: lines written after our last look "
                             "and before the truncation, if any, cannot be read")
            if self.m:
                self.m.data_loss_possible.labels(source, "truncated").inc()

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


class FileSource:
    """Owns the tailers and what is known of every file; yields their lines as stream events.

    ``name`` is the key of this source's snapshot in the checkpoint; each stream's
    ``info.source`` is the configured source name its glob belongs to (the metric label).
    """

    kind = "file"

    def __init__(
        self,
        *,
        sources: list[SourceSpec],
        clock: Clock,
        options: TailOptions,
        metrics: SelfMetrics | None = None,
        hints: Hints | None = None,
        name: str = "files",
        framers: dict[str, MakeFramer] | None = None,
        exclude_paths: tuple[str, ...] = (),
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        """``framers``: configured source name -> framer factory for its files (container
        log formats); others are split into lines as they are."""
        self.name = name
        self.sources = sources
        self.clock = clock
        self.options = options
        self.metrics = metrics
        self.hints = hints
        self.framers = dict(framers or {})
        # With inotify covering the globs' folders, quiet files are looked at as a slow
        # safety net (sigwatch.sources.watching); the set changes with every rescan.
        self.safety: SafetyNet[FileTailer] | None = None
        self._version = 0
        self._globs_reported = False
        self._draining: list[FileTailer] = []
        self._draining_ids: set[int] = set()
        self._draining_version = -1
        self._progress_cache: tuple[float, dict[str, tuple[float | None, str, float | None]]] \
            | None = None
        self.observer = _Observer(metrics)
        self.tailers: dict[str, FileTailer] = {}
        self._over: dict[str, int] = {}  # files per source left out by max_files
        # id(stream) -> [handle, truncations, lines handed out]
        self._handles: dict[int, list[int]] = {}
        self._next_handle = 1
        self._records: dict[tuple[int, int], FileRecord] = {}
        self._recovered_emitted: dict[str, int] = {}
        self._first_start = False
        self._recovering = False
        self._start_at = {s.name: s.start_at for s in sources}
        self._next_poll = 0.0
        self._next_rescan = 0.0
        self._behind: list[FileTailer] = []  # read a full budget last pass: more is waiting
        self._last_records: dict[int, tuple[tuple[object, ...], FileRecord]] = {}
        self._last_rescan_wall = 0.0
        self._saved_at = 0.0
        self._followed: list[FileRecord] = []
        self._last_read: dict[str, float] = {}
        # Never followed, whatever the globs say (the event log: reading it back is a loop).
        self._excluded = frozenset(os.path.realpath(p) for p in exclude_paths) | frozenset(
            os.path.abspath(p) for p in exclude_paths)
        # Called during long work (a first scan of many files) to feed the watchdog.
        self._heartbeat = heartbeat
        self._beat_at = 0.0
        # During a rescan: open streams by identity (adoption in O(1), not a scan of all
        # streams per new file) and folder listings (one per folder, not one per new file).
        self._by_identity: dict[tuple[int, int], tuple[FileTailer, FileStream]] | None = None
        self._listings: dict[str, list[os.DirEntry[str]]] | None = None
        self._recover_since = 0.0
        # What was read of files whose content is gone (copytruncate): a copy found later is
        # not read again (sigwatch.sources.copies).
        self._history = ReadHistory()
        roots = {spec.name: tuple(sorted({os.path.realpath(pattern_root(p))
                                          for p in spec.include})) for spec in sources}
        self._allowed = roots if options.confine_to_tree else None

    # -- start-up -------------------------------------------------------------------------

    def recover(self, emitted_by_stream: dict[str, int], since: float = 0.0) -> None:
        """The checkpoint was lost: read every file from byte 0, but do not deliver again
        what the event log shows was delivered (highest detection offset per stream key).

        Files rotated away from a followed path and modified after ``since`` (about when the
        lost checkpoint was written) are read too, from byte 0 with the same rule: lines
        written to them since then would otherwise be skipped without a word."""
        self._recovering = True
        self._recovered_emitted = dict(emitted_by_stream)
        self._recover_since = since

    def start(self, saved: JSONValue | None, *, first_start: bool) -> None:
        """Take the records of the last commit; files are opened by the first ``poll``."""
        self._first_start = first_start and not self._recovering
        records = decode_records(saved)
        self._saved_at = saved.get("saved_at", 0.0) if isinstance(saved, dict) else 0.0
        self._records = {(r.dev, r.ino): r for r in records}
        self._followed = [r for r in records if not r.closed]
        if self._recovering:
            log.error("checkpoint_lost_rereading_files",
                      policy="read every file from byte 0; detections already in the event "
                             "log are not written again",
                      streams_in_event_log=len(self._recovered_emitted))
        log.info("tail_starting", files_known=len(self._records))
        self._first_look()

    def _first_look(self) -> None:
        """Open every file (the first poll): rescan, drain orphans, find unseen rotations."""
        self._rescan()
        self._drain_orphans()
        if self._saved_at:
            for record in self._followed:
                self._read_unseen_rotations(record.source, record.path, self._saved_at)
        elif self._recovering and self._recover_since:
            for path, tailer in list(self.tailers.items()):
                if not tailer.orphan:
                    self._read_unseen_rotations(tailer.source, path, self._recover_since)
        self._first_start = False
        self._followed = []

    def _resume_for(self, source: str, path: str) -> Callable[[os.stat_result, int], Resume]:
        def resume(st: os.stat_result, fd: int) -> Resume:
            record = self._records.pop((st.st_dev, st.st_ino), None)
            if record is not None:
                if self._verify(record, st, fd):
                    return Resume(record.offset, record.lineno, record.emitted,
                                  bytes.fromhex(record.marker), tuple(record.pending))
                if not record.closed:  # a file we were following changed while we were away
                    self._changed_while_down(source, path, record)
                return Resume()  # else the inode was reused by a new file: read it all
            copied = self._as_copy(path, st, fd)
            if copied is not None:
                return copied
            if self._recovering:
                fp = head_fingerprint(os.pread(fd, 64, 0))
                key = f"{st.st_dev}:{st.st_ino}:{fp[1] if fp else ''}"
                return Resume(emitted=self._recovered_emitted.get(key, -1) + 1)
            if self._first_start and self._start_at.get(source, "end") == "end":
                return Resume(offset=start_offset_at_end(fd, st.st_size), lineno=0)
            return Resume()
        return resume

    def _changed_while_down(self, source: str, path: str, record: FileRecord) -> None:
        """Truncated or rewritten while we were down. With a copy next to it that holds what
        we had read (copytruncate), the copy is read on from there: nothing is lost."""
        content = ReadContent.of_record(record)
        self._history.remember(content)
        if self.metrics:
            self.metrics.truncations.labels(source).inc()
        copy = self._find_copy(content) if content is not None else None
        if copy is not None:
            log.info("file_copytruncated_while_down", source=source, path=path, copy=copy,
                     read_to=record.emitted)
            return
        log.warning("file_changed_while_down", source=source, path=path,
                    read_to=record.emitted)
        self.observer.data_loss(source, "changed_while_down", path=path, read_to=record.emitted)

    def _find_copy(self, content: ReadContent) -> str | None:
        """A file next to ``content``'s original that holds all of it (copytruncate)."""
        folder, name = os.path.split(content.path)
        for entry in self._listing(folder) or []:
            if not entry.name.startswith(name) or entry.name == name \
                    or entry.name.endswith(COMPRESSED):
                continue
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if (stat_mod.S_ISREG(st.st_mode) and st.st_size >= content.head_len
                        and hash_of_head(fd, content.head_len) == content.head_hash
                        and copy_holds(fd, st.st_size, content) == "all"):
                    return entry.path
            except OSError:
                continue
            finally:
                os.close(fd)
        return None

    def _as_copy(self, path: str, st: os.stat_result, fd: int) -> Resume | None:
        """Where a new file starts if it may be a copy of content already read (logrotate's
        copytruncate, its name extending the original's): a copy of a followed file is
        followed at its end and never read (``Resume.copy_of``); a copy of content whose file
        lost it starts where reading stopped; a file whose head is not whole yet waits for it
        (``awaiting_head``). None: not a copy (see sigwatch.sources.copies)."""
        try:
            head = os.pread(fd, HEAD_BYTES, 0)
        except OSError:
            return None
        fingerprint = head_fingerprint(head)
        size, identity = st.st_size, (st.st_dev, st.st_ino)
        for original in originals_of(path):
            tailer = self.tailers.get(original)
            live = tailer.current if tailer is not None and not tailer.orphan else None
            if live is not None and live.identity != identity and live.offset:
                if fingerprint is None:
                    return Resume(awaiting_head=True)
                if live.fingerprint == fingerprint and self._is_copy_of_live(live, fd, size):
                    log.info("copy_of_followed_file", path=path, original=live.path)
                    return Resume(copy_of=live)
            gone = self._history.get(original)
            if gone is not None and fingerprint is not None \
                    and len(head) >= gone.head_len \
                    and hashlib.sha256(head[:gone.head_len]).hexdigest()[:16] == gone.head_hash \
                    and self._still_at(original, gone):
                held = copy_holds(fd, size, gone)
                if held:
                    resume = gone.resume if held == "all" else Resume(size, gone.resume.lineno,
                                                                      size)
                    log.info("copy_of_read_content", path=path, original=original,
                             resumes_at=resume.offset)
                    return resume
        return None

    @staticmethod
    def _is_copy_of_live(original: FileStream, fd: int, size: int) -> bool:
        """The file holds what ``original`` holds, as far as it goes: the bytes before where
        we stopped reading (kept), or, for a copy still being written, the bytes at its end
        compared with the original's own file (as long as that is not truncated)."""
        content = ReadContent.of_stream(original, 0)
        if content is not None and copy_holds(fd, size, content):
            return True
        if size > original.offset or not size:
            return False
        try:
            if original.size() < original.offset or not original.marker_intact():
                return False
            length = min(size, MARKER_BYTES)
            return os.pread(fd, length, size - length) == os.pread(
                original.fd, length, size - length)
        except OSError:
            return False

    @staticmethod
    def _still_at(path: str, content: ReadContent) -> bool:
        """The original is still at its path (truncated in place), not renamed away."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (content.dev, content.ino)

    def _copy_pending(self, stream: FileStream) -> bool:
        """True while ``stream`` must not be read: a copy of a followed file (until that
        file dealt with its truncation), or a possible one whose head is not whole yet."""
        if stream.copy_of is not None:
            if not stream.copy_done():
                stream.skip_to_end()
                return True
            return False
        if not stream.awaiting_head:
            return False
        try:
            st = os.fstat(stream.fd)
            if head_fingerprint(os.pread(stream.fd, HEAD_BYTES, 0)) is None:
                return True
            resume = self._as_copy(stream.path, st, stream.fd)
        except OSError:
            return False
        if resume is not None and resume.awaiting_head:
            return True
        stream.start_over_at(resume or Resume())
        return stream.copy_of is not None

    @staticmethod
    def _verify(record: FileRecord, st: os.stat_result, fd: int) -> bool:
        """Inode and device only found the record: the content decides (head, and the
        window of bytes before the offset, hashed)."""
        if st.st_size < max(record.emitted, record.offset, record.size_seen):
            return False
        try:
            if record.head_len and _hash_head(fd, record.head_len) != record.head_hash:
                return False
            if record.window_len:
                if record.emitted < record.window_len:
                    return False
                window = os.pread(fd, record.window_len, record.emitted - record.window_len)
                return hashlib.sha256(window).hexdigest()[:32] == record.window_hash
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
            if found is None and record.real_path:
                # A symlink's target: still where it was, though the link now points on.
                found = record.real_path
            if found is not None:
                try:
                    st = os.stat(found)
                except OSError:
                    found = None
                else:
                    if (st.st_dev, st.st_ino) != (dev, ino):
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
        known = (set(self._by_identity) if self._by_identity is not None else
                 {s.identity for t in self.tailers.values() for s in t.streams()})
        entries = self._listing(folder)
        if entries is None:
            return
        candidates = [e for e in entries if e.name.startswith(name) and e.name != name
                      and not e.name.endswith(COMPRESSED)]
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

    def _listing(self, folder: str) -> list[os.DirEntry[str]] | None:
        """A folder's entries (cached for the length of a rescan)."""
        cache = self._listings
        if cache is not None and folder in cache:
            return cache[folder]
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            return None
        if cache is not None:
            cache[folder] = entries
        return entries

    def _beat(self) -> None:
        """Feed the watchdog during long work (at most twice a second)."""
        if self._heartbeat is None:
            return
        now = time.monotonic()
        if now - self._beat_at >= 0.5:
            self._beat_at = now
            self._heartbeat()

    def _follow_orphan(self, source: str, path: str) -> FileStream | None:
        tailer = FileTailer(source, path, observer=self.observer,
                            max_line_bytes=self.options.max_line_bytes,
                            rotate_wait=0.0, adopt=lambda _t, _ident: False, orphan=True,
                            make_framer=self.framers.get(source),
                            allowed=self._allowed_for(source))
        stream = tailer.open(self._resume_for(source, path))
        if stream is None:
            return None
        tailer.current = None
        tailer.draining.append(Draining(stream, 0.0))
        self.tailers[f"{path}\0orphan{id(stream)}"] = tailer
        if self._by_identity is not None:
            self._by_identity[stream.identity] = (tailer, stream)
        self._version += 1
        log.info("draining_rotated_file", source=source, path=path, offset=stream.offset)
        return stream

    # -- the pump -----------------------------------------------------------------------------

    def _adopt(self, taker: FileTailer, identity: tuple[int, int]) -> FileStream | bool:
        """The stream already following ``identity`` if ``taker`` should take it over.

        A rotated file (draining, or no longer at its owner's path) moves to the path where
        it is now. One still at its owner's path (two globs, or a symlink and its target)
        stays where it is: True means "followed elsewhere", False "not followed at all".
        """
        index = self._by_identity
        if index is not None:  # during a rescan: one lookup
            hit = index.get(identity)
            if hit is None:
                return False
            tailer, stream = hit
            if stream.closed or stream not in tailer.streams():
                return False
            if tailer is not taker and stream is tailer.current and not tailer.orphan:
                try:
                    st = os.stat(tailer.path)
                    still_there = (st.st_dev, st.st_ino) == identity
                except OSError:
                    still_there = False
                if still_there:
                    return True
            tailer.release(stream)
            index[identity] = (taker, stream)
            return stream
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

    def _allowed_for(self, source: str) -> tuple[str, ...] | None:
        return self._allowed.get(source, ()) if self._allowed is not None else None

    def _rescan(self) -> None:
        looked, since = time.time(), self._last_rescan_wall
        self._last_rescan_wall = looked
        found, over = expand_sources_counted(self.sources, self.options.max_files)
        self._over = dict(over)
        if over:
            log.warning("max_files_reached", limit=self.options.max_files,
                        not_followed=sum(over.values()))
        if self.metrics:
            for spec in self.sources:
                self.metrics.files_not_followed.labels(spec.name).set(over.get(spec.name, 0))
        self._version += 1
        if not self._globs_reported or self.metrics is not None:
            self._report_globs(found)
        new = [(p, src) for p, src in found.items() if p not in self.tailers]
        if new and self._records:
            # Files the checkpoint knows first: an original truncated while we were down is
            # settled (and remembered) before a copy of it is looked at.
            known_paths = {r.path for r in self._records.values()}
            new.sort(key=lambda item: item[0] not in known_paths)
        if new:
            self._by_identity = {s.identity: (t, s) for t in self.tailers.values()
                                 for s in t.streams()}
            self._listings = {}
        try:
            for count, (path, source) in enumerate(new):
                if not count % 64:
                    self._beat()
                if path in self._excluded or os.path.realpath(path) in self._excluded:
                    continue
                tailer = FileTailer(source, path, observer=self.observer,
                                    max_line_bytes=self.options.max_line_bytes,
                                    rotate_wait=self.options.rotate_wait, adopt=self._adopt,
                                    allowed=self._allowed_for(source),
                                    make_framer=self.framers.get(source))
                self.tailers[path] = tailer
                stream = tailer.open(self._resume_for(source, path))
                if stream is not None and self._by_identity is not None:
                    self._by_identity[stream.identity] = (tailer, stream)
                if stream is not None and since:
                    # New at this path since the last rescan: a file may have lived here and
                    # been rotated away before we looked.
                    self._read_unseen_rotations(source, path, since)
        finally:
            self._by_identity = None
            self._listings = None
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

    def _opened(self, stream: FileStream) -> Iterator[StreamEvent]:
        """The handle of ``stream``: a new one when first read or after a truncation."""
        entry = self._handles.get(id(stream))
        if entry is not None and entry[1] == stream.truncations:
            return
        fresh = entry is None
        if entry is not None:  # truncated: the old content's stream ends here
            yield StreamClosed(entry[0], stream.info)
        handle = self._next_handle
        self._next_handle += 1
        lineno = stream.start_lineno if fresh else 0
        self._handles[id(stream)] = [handle, stream.truncations, lineno]
        yield StreamOpened(handle, stream.info, position=stream.offset, lineno=lineno,
                           replay_below=stream.emitted, pending=stream.pending, kind="file")

    def handle_of(self, stream: FileStream) -> int | None:
        entry = self._handles.get(id(stream))
        return entry[0] if entry is not None else None

    def poll(self, now: float) -> Iterator[StreamEvent]:
        """One pass: rescan if due, check paths, read what is new."""
        dirty, rescan = self.hints.take() if self.hints else (set(), False)
        if rescan or now >= self._next_rescan:
            self._rescan()
            self._next_rescan = now + self._rescan_every()
        full = now >= self._next_poll
        if full:
            self._next_poll = now + self.options.poll_interval
        if full and self.safety is None:
            tailers = list(self.tailers.values())
        else:
            tailers = [t for p in dirty if (t := self.tailers.get(p)) is not None]
            tailers += self._draining_tailers()
            tailers += [t for t in self._behind if t not in tailers]
            if full and self.safety is not None:
                chosen = {id(t) for t in tailers}
                tailers += [t for t in self.safety.due(self.tailers, self._version)
                            if id(t) not in chosen]
        if tailers:
            self._progress_cache = None
        self._behind = []
        for count, tailer in enumerate(tailers):
            if count % 64 == 63:
                self._beat()  # thousands of files in one pass: the watchdog stays fed
            changes, seen_at = tailer.changes, tailer.seen_at
            tailer.check_path(now, self._resume_for(tailer.source, tailer.path))
            if tailer.changes != changes:
                self._read_unseen_rotations(tailer.source, tailer.path, seen_at)
            idle: set[int] = set()
            for stream in tailer.streams():
                nbytes = yield from self._pump_stream(stream)
                if nbytes:
                    if nbytes >= self.options.read_budget and tailer not in self._behind:
                        self._behind.append(tailer)
                else:
                    idle.add(id(stream))
            for stream in tailer.expire_drained(now, idle):
                yield from self._close_stream(stream)
            if tailer.draining and id(tailer) not in self._draining_ids:
                self._draining.append(tailer)
                self._draining_ids.add(id(tailer))

    def _draining_tailers(self) -> list[FileTailer]:
        """Tailers with a rotated file still being drained, without a walk over all of them.

        A tailer starts draining only when a pass looks at it (noted at the end of its turn)
        or when the set of tailers changes (rescan, orphans): then the list is rebuilt.
        """
        if self._draining_version != self._version:
            self._draining_version = self._version
            self._draining = [t for t in self.tailers.values() if t.draining]
        else:
            self._draining = [t for t in self._draining if t.draining]
        self._draining_ids = {id(t) for t in self._draining}
        return list(self._draining)

    def watch_with(self, hints: InotifyHints) -> None:
        """inotify covers (some of) the globs' folders: quiet files there are only looked at
        as a safety net, and globs are expanded again on events or every minute."""
        self.hints = hints
        self.safety = SafetyNet[FileTailer](hints, poll_interval=self.options.poll_interval)

    def _rescan_every(self) -> float:
        if self.safety is not None and self.safety.hints.all_covered:
            return max(self.options.rescan_interval, SAFETY_RESCAN)
        return self.options.rescan_interval

    def _report_globs(self, found: dict[str, str]) -> None:
        """Globs matching nothing: a metric always, a log line at start."""
        for spec in self.sources:
            empty = unmatched_globs(spec.include, (p for p, s in found.items()
                                                   if s == spec.name))
            if self.metrics is not None:
                self.metrics.globs_unmatched.labels(spec.name).set(len(empty))
            if empty and not self._globs_reported:
                log.warning("glob_matches_nothing", source=spec.name, globs=empty)
        self._globs_reported = True

    def progress(self) -> dict[str, tuple[float | None, str, float | None]]:
        """Per configured source: bytes not read yet (as of the last look), unit, last read.

        Recomputed after a pass that looked at files, else at most every 30 seconds (with
        10,000 quiet files, a sum over all of them on every pass is most of the idle cost).
        """
        now = time.monotonic()
        cached = self._progress_cache
        if cached is not None and now - cached[0] < 30.0:
            return cached[1]
        result = self._progress()
        self._progress_cache = (now, result)
        return result

    def _progress(self) -> dict[str, tuple[float | None, str, float | None]]:
        behind: dict[str, float] = {spec.name: 0.0 for spec in self.sources}
        for tailer in self.tailers.values():
            cur = tailer.current
            if cur is not None and cur.last_size > cur.offset:
                behind[cur.source] = behind.get(cur.source, 0.0) + cur.last_size - cur.offset
            for drained in tailer.draining:
                stream = drained.stream
                if stream.last_size > stream.offset:
                    behind[stream.source] = (behind.get(stream.source, 0.0)
                                             + stream.last_size - stream.offset)
        return {name: (lag, "bytes", self._last_read.get(name)) for name, lag in behind.items()}

    def reading_problems(self) -> dict[str, str]:
        """Per source name, why files it should read cannot be read now (blind spots):
        files that fail to open or read (permission, fd limit, I/O), files left out by
        ``max_files``."""
        found: dict[str, list[str]] = {}
        for tailer in self.tailers.values():
            why = tailer.failing
            if why in ("permission", "fd_limit", "io"):
                found.setdefault(tailer.source, []).append(f"{tailer.path}: {why}")
        out = {}
        for source, problems in found.items():
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            out[source] = f"{sorted(problems)[0]}{more}"
        for source, count in self._over.items():
            if count:
                note = f"{count} file(s) not followed: max_files reached"
                out[source] = f"{out[source]}; {note}" if source in out else note
        return out

    def streams_by_source(self) -> dict[str, int]:
        """Files followed now, per configured source name (for start-up and status lines)."""
        counts = {spec.name: 0 for spec in self.sources}
        for tailer in self.tailers.values():
            counts[tailer.source] = counts.get(tailer.source, 0) + len(tailer.streams())
        return counts

    def _read_copy_gap(self, stream: FileStream) -> Generator[StreamEvent, None, bool]:
        """copytruncate: read what the copy holds past our offset (the lines written after
        our last read and before the truncation). Returns whether the copy was found."""
        if not stream.marker or stream.offset < len(stream.marker):
            return False
        folder, name = os.path.split(stream.path)
        entries = self._listing(folder) or []
        for entry in sorted(entries, key=lambda e: e.name):
            if not entry.name.startswith(name) or entry.name == name \
                    or entry.name.endswith(COMPRESSED):
                continue
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if (not stat_mod.S_ISREG(st.st_mode) or st.st_size < stream.offset
                        or (st.st_dev, st.st_ino) == stream.identity):
                    continue
                at = stream.offset - len(stream.marker)
                if os.pread(fd, len(stream.marker), at) != stream.marker:
                    continue
                log.info("copytruncate_gap_read", source=stream.source, path=stream.path,
                         copy=entry.path, bytes=st.st_size - stream.offset)
                own_fd, stream.fd = stream.fd, fd
                try:
                    while True:
                        segments, nbytes = stream.read(self.options.read_budget)
                        if not nbytes:
                            break
                        if self.metrics:
                            self.metrics.bytes_read.labels(stream.source).inc(nbytes)
                        yield from self._lines(stream, segments, nbytes)
                finally:
                    stream.fd = own_fd
                return True
            finally:
                os.close(fd)
        return False

    def more_waiting(self) -> bool:
        """True when a stream filled its read budget on the last pass."""
        return bool(self._behind)

    def _pump_stream(self, stream: FileStream) -> Generator[StreamEvent, None, int]:
        """Read one stream's next slice; the generator's value is the bytes read."""
        try:
            if self._copy_pending(stream):
                return 0
            if stream.rewritten():
                read_to = stream.offset
                copy_found = yield from self._read_copy_gap(stream)
                read_to = stream.offset
                entry = self._handles.get(id(stream))
                self._history.remember(ReadContent.of_stream(
                    stream, entry[2] if entry is not None else stream.start_lineno))
                unread = stream.restart_at_zero()
                self.observer.truncated(stream.source, stream.path, read_to, unread,
                                        stream.size_before, copy_found)
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
        self._last_read[stream.source] = self.clock.time()
        yield from self._lines(stream, segments, nbytes)
        return nbytes

    def _lines(self, stream: FileStream, segments: list[Segment],
               nbytes: int) -> Iterator[StreamEvent]:
        yield from self._opened(stream)
        entry = self._handles[id(stream)]
        if segments or nbytes:  # bytes held in a partial line are progress too
            entry[2] += sum(seg.data.count(b"\n") for seg in segments)
            yield StreamLines(entry[0], stream.info, tuple(segments), nbytes)

    def _close_stream(self, stream: FileStream) -> Iterator[StreamEvent]:
        tail = stream.finish()
        if tail or id(stream) in self._handles:
            yield from self._lines(stream, tail, 0)
            yield StreamClosed(self._handles[id(stream)][0], stream.info)
        self.observer.closed(stream.source, stream.path, 0)
        try:
            linked = os.fstat(stream.fd).st_nlink > 0
        except OSError:
            linked = False
        if linked:
            # Still on disk under some name: remember how far we read, so that if a glob
            # finds it later (``app.log.1``) or a writer appends to it, it resumes there.
            record = self._record(stream, ReplayNeed())
            self._records.pop((record.dev, record.ino), None)
            self._records[(record.dev, record.ino)] = dataclasses.replace(record, closed=True)
            while len(self._records) > MAX_TOMBSTONES:
                oldest = next(iter(self._records))
                del self._records[oldest]
        self._handles.pop(id(stream), None)
        self._last_records.pop(id(stream), None)
        stream.close()

    # -- snapshot, stop -------------------------------------------------------------------------

    def _record(self, stream: FileStream, need: ReplayNeed) -> FileRecord:
        committed = stream.framer.committed_offset
        entry = self._handles.get(id(stream))
        resume = committed
        lineno = entry[2] if entry is not None else stream.start_lineno
        if need.position is not None and need.lineno is not None and need.position < committed:
            resume, lineno = need.position, need.lineno - 1
        # Held detections are not delivered yet; neither are pending ones not replayed yet.
        pending = tuple(sorted(set(need.held) | {p for p in stream.pending if p >= committed}))
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
                            head_hash, resume, emitted, lineno,
                            marker[-RECORD_MARKER_BYTES:].hex(),
                            size_seen=stream.last_size, pending=pending,
                            window_len=len(marker),
                            window_hash=hashlib.sha256(marker).hexdigest()[:32]
                            if marker else "",
                            real_path=stream.real_path)
        self._last_records[id(stream)] = (key, record)
        return record

    def snapshot(self, need: Callable[[int], ReplayNeed]) -> JSONValue:
        """One record per open file, plus the files known but not open right now."""
        records: list[FileRecord] = []
        for tailer in self.tailers.values():
            for stream in tailer.streams():
                handle = self.handle_of(stream)
                records.append(self._record(stream, need(handle) if handle is not None
                                            else ReplayNeed()))
        records += list(self._records.values())
        return {"files": [dataclasses.asdict(r) for r in records], "saved_at": time.time()}

    def stop(self) -> Iterator[StreamEvent]:
        """Close every file; partial last lines stay unread (the next start reads them)."""
        for tailer in self.tailers.values():
            for stream in tailer.streams():
                stream.close()
        self.tailers.clear()
        yield from ()

    def next_wakeup(self, now: float) -> float | None:
        """The next timed poll (monotonic)."""
        _ = now
        return min(self._next_poll, self._next_rescan)


def decode_records(saved: JSONValue | None) -> list[FileRecord]:
    """The file records of a snapshot (tolerates a missing or empty one)."""
    if not isinstance(saved, dict):
        return []
    out: list[FileRecord] = []
    for raw in saved.get("files", []):
        fields = dict(raw)
        fields["pending"] = tuple(fields.get("pending", ()))
        out.append(FileRecord(**fields))
    return out
