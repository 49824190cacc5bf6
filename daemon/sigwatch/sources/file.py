"""Tailing files: ``FileStream`` reads one open file, ``FileTailer`` follows one path.

Identity is (device, inode) plus a fingerprint of the file's head (its first line, at most 64
bytes), so a reused inode is not mistaken for the old file. A stream remembers the last bytes
it consumed (the offset marker): if they are no longer there, the file was truncated or
rewritten in place, even when it has grown past the old offset. On rotation the old file is
drained to its end (and kept open ``rotate_wait`` seconds for a writer that still holds it)
while the new file is read from byte 0.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat as stat_mod
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sigwatch.framing.lines import LineFramer, Segment
from sigwatch.model import StreamInfo

__all__ = [
    "HEAD_BYTES",
    "Draining",
    "FileRecord",
    "FileStream",
    "FileTailer",
    "Framer",
    "MakeFramer",
    "RefusedError",
    "Resume",
    "TailObserver",
    "head_fingerprint",
]

HEAD_BYTES = 64
# The bytes before the offset that must still be there for the file to be the one we read: a
# job that reopens its log with mode ``w`` and writes the same start-up text is told apart by
# any difference in the last KiB it wrote. The checkpoint keeps the last 32 bytes (as before)
# and a hash of the whole window.
MARKER_BYTES = 1024
RECORD_MARKER_BYTES = 32


def head_fingerprint(head: bytes) -> tuple[int, str] | None:
    """(length, hash) of a file's head: its first line or first 64 bytes; None if incomplete."""
    nl = head.find(b"\n", 0, HEAD_BYTES)
    if nl != -1:
        cut = head[: nl + 1]
    elif len(head) >= HEAD_BYTES:
        cut = head[:HEAD_BYTES]
    else:
        return None
    return len(cut), hashlib.sha256(cut).hexdigest()[:16]


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
    window_len: int = 0  # bytes ending at `emitted` whose hash is `window_hash` (0: none)
    window_hash: str = ""
    real_path: str = ""  # where the file really was (a symlink's target), to find it again


class Framer(Protocol):
    """Bytes of a file in, whole lines out: ``LineFramer`` or a ``ContainerFramer``."""

    @property
    def committed_offset(self) -> int: ...
    @property
    def pending_bytes(self) -> int: ...
    def feed(self, data: bytes) -> Sequence[Segment]: ...
    def finish(self) -> Sequence[Segment]: ...
    def reset(self, offset: int) -> None: ...


MakeFramer = Callable[[int], Framer]
"""Builds the framer of a stream that starts at a byte offset (container log formats)."""


class TailObserver(Protocol):
    """What a tailer reports; the app turns each call into a log event and a metric."""

    def rotated(self, source: str, path: str) -> None: ...
    def truncated(self, source: str, path: str, read_to: int, unread: int,
                  size_before: int = 0) -> None: ...
    def file_error(self, source: str, path: str, reason: str, error: str) -> None: ...
    def opened(self, source: str, path: str, offset: int) -> None: ...
    def closed(self, source: str, path: str, unread: int) -> None: ...


@dataclass(slots=True)
class Resume:
    """Where a stream starts: byte offset, line number there, and the replay threshold."""

    offset: int = 0
    lineno: int = 0
    emitted: int = -1
    marker: bytes = b""
    pending: tuple[int, ...] = ()  # detections below `emitted` that were held, not delivered
    # A copy of this followed file's content (copytruncate): follow its end, read nothing,
    # until the original has dealt with its truncation (sigwatch.sources.copies).
    copy_of: FileStream | None = None
    awaiting_head: bool = False  # may be such a copy: not read before its head is whole


class FileStream:
    """One open file. Reads with ``pread`` so the file position never matters."""

    def __init__(self, source: str, path: str, fd: int, st: os.stat_result,
                 resume: Resume, max_line_bytes: int,
                 make_framer: MakeFramer | None = None) -> None:
        self.source = source
        self.path = path
        self.fd = fd
        self.dev = st.st_dev
        self.ino = st.st_ino
        self.offset = resume.offset          # next byte to read
        self.start_lineno = resume.lineno
        self.emitted = resume.emitted
        self.pending = resume.pending
        self.framer: Framer = (make_framer(resume.offset) if make_framer is not None
                               else LineFramer(max_line_bytes, resume.offset))
        # The bytes ending at ``emitted`` that the checkpoint verified (kept while replaying
        # below it), the last bytes read (ending at ``offset``: a rewrite in place shows up
        # as a mismatch), and the last bytes of the last whole line (ending at the committed
        # offset: what the next checkpoint stores). Taken from what was read, never re-read
        # at commit time, so a rewrite between read and commit cannot fake a match.
        self.emitted_marker = resume.marker
        self.marker = b""
        if resume.offset:
            start = max(0, resume.offset - MARKER_BYTES)
            try:
                self.marker = os.pread(fd, resume.offset - start, start)
            except OSError:
                self.marker = b""
        self.committed_marker = self.marker
        self.last_size = st.st_size
        self.size_before = st.st_size  # the size before the latest check (for loss reports)
        self.head = b""
        self.fingerprint: tuple[int, str] | None = None
        self.truncations = 0
        self._info: StreamInfo | None = None
        self.closed = False
        if resume.offset:  # verified against the checkpoint's fingerprint before we got here
            self._load_head()
        # What the file held when we opened it, to notice content replaced before our first
        # read (which nothing else can see: we had read nothing to compare with).
        self.open_head = b""
        if resume.offset == 0 and st.st_size:
            try:
                self.open_head = os.pread(fd, min(st.st_size, HEAD_BYTES), 0)
            except OSError:
                self.open_head = b""
        self.replaced_before_read = False
        self.copy_of: FileStream | None = None
        self.copy_until = 0  # the original's truncations when the copy was recognised
        self.awaiting_head = resume.awaiting_head
        if resume.copy_of is not None:
            self.follow_copy_of(resume.copy_of)
        try:  # the file's real name: a symlink switched while we are down leaves it there
            self.real_path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            self.real_path = ""

    def _load_head(self) -> None:
        try:
            head = os.pread(self.fd, HEAD_BYTES, 0)
        except OSError:
            return
        self.head = head
        self.fingerprint = head_fingerprint(head)

    def _note_head(self, start: int, data: bytes) -> None:
        """The fingerprint comes from the bytes we read, not from what the file holds now."""
        if start > len(self.head):
            return
        self.head = (self.head[:start] + data[:HEAD_BYTES])[:HEAD_BYTES]
        if self.fingerprint is None:
            self.fingerprint = head_fingerprint(self.head)

    @property
    def identity(self) -> tuple[int, int]:
        return (self.dev, self.ino)

    @property
    def info(self) -> StreamInfo:
        """Stable once the head is complete (always the case once a line was read)."""
        if self._info is None or self._info.key.endswith(":"):
            fp = self.fingerprint[1] if self.fingerprint else ""
            self._info = StreamInfo(self.source, self.path, f"{self.dev}:{self.ino}:{fp}")
        return self._info

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def marker_intact(self) -> bool:
        """False when the bytes before our offset are not the ones we read (rewritten)."""
        if not self.marker or self.offset < len(self.marker):
            return True
        try:
            now = os.pread(self.fd, len(self.marker), self.offset - len(self.marker))
        except OSError:
            return True
        return now == self.marker

    def rewritten(self) -> bool:
        """True when the file shrank, or the last bytes we read are no longer there."""
        size = self.size()
        seen, self.last_size = self.last_size, size
        self.size_before = max(seen, self.offset)
        return size < self.size_before or not self.marker_intact()

    def restart_at_zero(self) -> int:
        """Truncation or rewrite: read the file again from byte 0; returns the bytes of the
        old content that were never turned into lines (a partial line we held back)."""
        unread = self.framer.pending_bytes
        self.offset = 0
        self.emitted = -1
        self.pending = ()
        self.marker = b""
        self.committed_marker = b""
        self.emitted_marker = b""
        self.open_head = b""
        self.framer.reset(0)
        self.truncations += 1
        self.head = b""
        self.fingerprint = None
        self._info = None
        return unread

    def follow_copy_of(self, original: FileStream) -> None:
        """This file is a copy of ``original``'s content: read none of it (``original`` does,
        or reads it from a copy once it sees its truncation)."""
        self.copy_of = original
        self.copy_until = original.truncations
        self.skip_to_end()

    def skip_to_end(self) -> None:
        """Move to the end of the file without reading (a copy's content is not ours)."""
        size = self.size()
        self.last_size = size
        if size == self.offset:
            return
        self.offset = size
        self.framer.reset(size)
        self.emitted = max(self.emitted, size)
        self.pending = ()
        start = max(0, size - MARKER_BYTES)
        self.marker = self.committed_marker = self.emitted_marker = os.pread(
            self.fd, size - start, start)
        self.open_head = b""
        if self.fingerprint is None:
            self._load_head()

    def copy_done(self) -> bool:
        """True once the original dealt with its truncation (or is gone): the copy is now
        a file of its own, read from where it ends."""
        original = self.copy_of
        if original is None:
            return True
        if original.closed or original.truncations != self.copy_until:
            self.skip_to_end()
            self.copy_of = None
            return True
        return False

    def start_over_at(self, resume: Resume) -> None:
        """Reposition a stream that has read nothing yet (a possible copy whose head just
        became whole)."""
        self.awaiting_head = False
        if resume.copy_of is not None:
            self.follow_copy_of(resume.copy_of)
            return
        if not resume.offset:
            return
        self.offset = resume.offset
        self.start_lineno = resume.lineno
        self.emitted = resume.emitted
        self.pending = resume.pending
        self.emitted_marker = resume.marker
        self.framer.reset(resume.offset)
        start = max(0, resume.offset - MARKER_BYTES)
        self.marker = self.committed_marker = os.pread(self.fd, resume.offset - start, start)
        self.open_head = b""
        self._load_head()

    def read(self, budget: int) -> tuple[list[Segment], int]:
        """Read up to ``budget`` bytes; returns the completed segments and the bytes read."""
        data = os.pread(self.fd, budget, self.offset)
        if not data:
            return [], 0
        start, before = self.offset, self.marker
        if start < HEAD_BYTES:
            self._note_head(start, data)
        if self.open_head and start == 0:
            if not data.startswith(self.open_head[:len(data)]):
                self.replaced_before_read = True
            self.open_head = b""
        self.offset += len(data)
        self.marker = (before + data[-MARKER_BYTES:])[-MARKER_BYTES:]
        segments = list(self.framer.feed(data))
        upto = self.framer.committed_offset - start
        if upto > 0:
            self.committed_marker = (before + data[max(0, upto - MARKER_BYTES):upto])[
                -MARKER_BYTES:]
        return segments, len(data)

    def finish(self) -> list[Segment]:
        """The file is gone for good: hand out a last line that never got its newline."""
        out = list(self.framer.finish())
        if out:
            self.committed_marker = self.marker
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


class RefusedError(OSError):
    """A file we will not read: not a regular file, or outside the watched tree."""

    def __init__(self, reason: str, message: str, path: str) -> None:
        super().__init__(errno.EPERM, message, path)
        self.reason = reason


def _open_readonly(path: str, allowed: tuple[str, ...] | None = None,
                   ) -> tuple[int, os.stat_result]:
    """Open without ever blocking: a FIFO with no writer (or a device) would hang ``open``
    forever with a plain O_RDONLY. Anything but a regular file is refused, and so is a file
    whose real path is outside ``allowed`` (the watched trees; None: anywhere)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a UNIX socket
            raise RefusedError("not_regular", "not a regular file (socket)", path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise RefusedError("not_regular", "not a regular file", path)
        if allowed is not None:
            real = os.readlink(f"/proc/self/fd/{fd}")
            if not any(real == root or real.startswith(root.rstrip("/") + "/")
                       for root in allowed):
                raise RefusedError("outside_tree",
                                   f"links out of the watched tree (to {real})", path)
    except OSError:
        os.close(fd)
        raise
    return fd, st


def start_offset_at_end(fd: int, size: int) -> int:
    """End of the file, moved back to the start of an unfinished last line."""
    if size == 0:
        return 0
    back = min(size, 1 << 16)
    tail = os.pread(fd, back, size - back)
    nl = tail.rfind(b"\n")
    if nl == -1:
        return size - back if back < size else 0
    return size - back + nl + 1


@dataclass(slots=True)
class Draining:
    """A retired file still read until its end and its rotate_wait have passed."""

    stream: FileStream
    deadline: float


class FileTailer:
    """Follows one path: opens it, notices rotation, truncation and deletion, drains old files."""

    def __init__(
        self,
        source: str,
        path: str,
        *,
        observer: TailObserver,
        max_line_bytes: int,
        rotate_wait: float,
        adopt: Callable[[FileTailer, tuple[int, int]], FileStream | bool],
        orphan: bool = False,
        make_framer: MakeFramer | None = None,
        allowed: tuple[str, ...] | None = None,
    ) -> None:
        self.source = source
        self._make_framer = make_framer
        self.path = path
        self.current: FileStream | None = None
        self.draining: list[Draining] = []
        self._observer = observer
        self._max_line_bytes = max_line_bytes
        self._rotate_wait = rotate_wait
        self._adopt = adopt
        self._failing: str | None = None
        # An orphan tailer only drains files found at start-up under a rotated name; it never
        # opens its path again.
        self.orphan = orphan
        self._allowed = allowed  # real folders a file may be in (None: anywhere)
        # Times the file at our path changed (removed, replaced, or a new one opened), and
        # the wall time we last looked at the path and found it as we left it. A file that
        # lived at the path only between those two looks was never opened by us.
        self.changes = 0
        self.seen_at = time.time()

    def streams(self) -> list[FileStream]:
        """Every open stream: draining ones first, then the current one."""
        out = [d.stream for d in self.draining]
        if self.current is not None:
            out.append(self.current)
        return out

    def open(self, resume: Callable[[os.stat_result, int], Resume]) -> FileStream | None:
        """Open the path now; ``resume`` decides where to start from its stat and fd."""
        try:
            fd, st = _open_readonly(self.path, self._allowed)
        except OSError as exc:
            self._error(exc)
            return None
        adopted = self._adopt(self, (st.st_dev, st.st_ino))
        if adopted is not False:  # the same file is already followed under another name
            os.close(fd)
            self._failing = None
            if adopted is True:  # another path (a symlink, say) follows it: leave it there
                return None
            assert isinstance(adopted, FileStream)
            adopted.path = self.path
            self.current = adopted
            return adopted
        stream = FileStream(self.source, self.path, fd, st, resume(st, fd), self._max_line_bytes,
                            self._make_framer)
        self.current = stream
        self._failing = None
        self._observer.opened(self.source, self.path, stream.offset)
        return stream

    def _error(self, exc: OSError) -> None:
        reason = exc.reason if isinstance(exc, RefusedError) else {
            errno.ENOENT: "missing", errno.EACCES: "permission",
            errno.EPERM: "permission", errno.EMFILE: "fd_limit",
            errno.ENFILE: "fd_limit", errno.EISDIR: "not_regular"}.get(exc.errno or 0, "io")
        if reason not in ("missing", self._failing):
            self._observer.file_error(self.source, self.path, reason, str(exc))
        self._failing = reason

    @property
    def failing(self) -> str | None:
        """Why the path cannot be opened now (a ``file_errors`` reason), None when it can."""
        return self._failing

    def release(self, stream: FileStream) -> None:
        """Stop following ``stream`` under this path (another tailer adopted it)."""
        self.draining = [d for d in self.draining if d.stream is not stream]
        if self.current is stream:
            self.current = None

    def check_path(self, now: float, new_resume: Callable[[os.stat_result, int], Resume]) -> None:
        """Compare the path with the open file: rotation, deletion, truncation, reappearance."""
        if self.orphan:
            return
        cur = self.current
        looked = time.time()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if cur is not None:
                self._retire(cur, now)
            else:
                self.seen_at = looked
            return
        except OSError as exc:
            self._error(exc)  # unknown is not deleted: keep what we have
            return
        if cur is None:
            if self.open(new_resume) is not None:
                self.changes += 1
            return
        if (st.st_dev, st.st_ino) == cur.identity:
            self.seen_at = looked
        else:
            self._observer.rotated(self.source, self.path)
            self._retire(cur, now)
            self.open(new_resume)
        # A truncation or rewrite in place is found when the stream is read next: the
        # source first reads what a copytruncate copy holds past our offset.

    def _retire(self, stream: FileStream, now: float) -> None:
        self.changes += 1
        self.current = None
        self.draining.append(Draining(stream, now + self._rotate_wait))

    def expire_drained(self, now: float, idle: set[int]) -> list[FileStream]:
        """Close draining files that are at their end and past their wait; returns them."""
        done: list[FileStream] = []
        keep: list[Draining] = []
        for d in self.draining:
            if now >= d.deadline and id(d.stream) in idle:
                done.append(d.stream)
            else:
                keep.append(d)
        self.draining = keep
        return done
