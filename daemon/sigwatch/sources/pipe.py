"""Named pipes (FIFOs) and other non-seekable streams: stdin, a child's stdout or stderr.

Nothing here may block the daemon. A FIFO is opened ``O_RDONLY | O_NONBLOCK`` (a plain open
waits for a writer), and then the daemon also opens its write end: without a writer, a FIFO
reads as end-of-file on every poll and is always "readable" for ``select``, a busy loop;
holding a write end makes it wait quietly for the next writer, and one job after another can
write to it. Reads are non-blocking, in bounded slices.

Positions are bytes read from the stream, counted across restarts (so a line's identity
stays unique), but a pipe cannot be re-read: after a restart reading continues with what is
in the pipe now. What is lost is only what the writers put in while the daemon was down
(a writer blocks or gets ``EPIPE`` then, it is not silently dropped by us), plus a partial last
line; the snapshot says so. A stream given as a descriptor (stdin, a child's output) ends at
end-of-file: its unterminated last line is emitted, then the stream is closed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import termios
import time
from collections.abc import Callable, Iterator

from sigwatch.framing.lines import DEFAULT_MAX_LINE_BYTES, LineFramer, Segment
from sigwatch.model import StreamInfo
from sigwatch.sources.base import (
    JSONValue,
    ReplayNeed,
    StreamClosed,
    StreamEvent,
    StreamLines,
    StreamOpened,
)

__all__ = ["PipeSource"]

HANDLE = 1
READ_SIZE = 1 << 16


class PipeSource:
    """One FIFO (``path``) or one already open descriptor (``fd``) as a single stream.

    ``label`` names a descriptor stream (``stdin``, ``stderr``), used as its path. A FIFO that
    does not exist yet is opened when it appears. ``on_error(source, text)`` hears about a
    path that is not a FIFO and other open errors (retried every ``poll_interval``).
    """

    kind = "pipe"

    def __init__(self, name: str, *, path: str | None = None, fd: int | None = None,
                 label: str | None = None, kind: str = "pipe",
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 max_bytes_per_poll: int = 4 << 20, poll_interval: float = 1.0,
                 on_error: Callable[[str, str], None] | None = None,
                 tee: Callable[[bytes], None] | None = None) -> None:
        if (path is None) == (fd is None):
            msg = "give exactly one of path or fd"
            raise ValueError(msg)
        self.name = name
        self.path = path
        self.kind = kind
        self.content = "job"  # for sigwatch.patterns.kinds.content_of
        self.max_line_bytes = max_line_bytes
        self.max_bytes = max_bytes_per_poll
        self.poll_interval = poll_interval
        self.on_error = on_error
        self.tee = tee  # sees every chunk as read, before framing (``sigwatch exec``)
        where = path if path is not None else (label or f"fd:{fd}")
        self.info = StreamInfo(name, where, f"{kind}:{where}")
        self.fd: int | None = fd
        self._write_fd: int | None = None
        self._given_fd = fd is not None
        # A descriptor we were given may share its open file with a terminal or a parent:
        # its blocking mode is put back when we are done with it.
        self._was_blocking = os.get_blocking(fd) if fd is not None else False
        if fd is not None:
            os.set_blocking(fd, False)
        self.start_position = 0
        self.start_lineno = 0
        self.lineno = 0
        self.framer = LineFramer(max_line_bytes, 0)
        self.bytes_read = 0
        self.last_read: float | None = None
        self.last_read_wall: float | None = None  # Unix time, for the liveness gauge
        self.error = ""
        self.lost_partial = 0  # bytes of a partial line a restart dropped
        self._announced = False
        self._closed = False
        self._more = False
        self._eof = False

    def start(self, saved: JSONValue | None, *, first_start: bool) -> None:
        """Continue the byte count of the last lifetime (nothing can be re-read)."""
        _ = first_start  # nothing to skip: the position is the saved one
        state = saved if isinstance(saved, dict) else {}
        position = state.get("position", 0)
        lineno = state.get("lineno", 0)
        if isinstance(position, int) and isinstance(lineno, int) and not self._given_fd:
            self.start_position, self.start_lineno = position, lineno
        self.lineno = self.start_lineno
        self.framer = LineFramer(self.max_line_bytes, self.start_position)
        self.bytes_read = self.start_position
        if self.path is not None:
            self._open()

    def _open(self) -> None:
        assert self.path is not None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                self._report(f"cannot open {self.path}: {exc.strerror}")
            return
        mode = os.fstat(fd).st_mode
        if not stat.S_ISFIFO(mode):
            os.close(fd)
            self._report(f"{self.path} is not a named pipe (use a file source for files)")
            return
        try:
            # Our own write end: the FIFO never reads as end-of-file between writers.
            self._write_fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            self._report(f"cannot hold {self.path} open for writing: {exc.strerror}")
        self.fd = fd
        self.error = ""

    def _report(self, text: str) -> None:
        if text != self.error and self.on_error is not None:
            self.on_error(self.name, text)
        self.error = text

    def reading_problems(self) -> dict[str, str]:
        """Why the pipe cannot be read now (not a FIFO, cannot be opened), if so."""
        return {self.name: self.error} if self.error else {}

    def poll(self, now: float) -> Iterator[StreamEvent]:
        """Read what the pipe holds now (never waits), hand out its whole lines."""
        if self._closed:
            return
        if self.fd is None and self.path is not None:
            self._open()
        if self.fd is None:
            return
        if not self._announced:
            self._announced = True
            yield StreamOpened(HANDLE, self.info, self.start_position, self.start_lineno,
                               kind=self.kind)
        self._more = False
        got = 0
        while got < self.max_bytes:
            try:
                chunk = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                if exc.errno == errno.EIO and os.isatty(self.fd):
                    self._eof = True  # a pseudo-terminal whose other side closed: the end
                    break
                self._report(f"read failed: {exc.strerror}")
                self._eof = True
                break
            if not chunk:
                self._eof = True
                break
            if self.tee is not None:
                self.tee(chunk)
            got += len(chunk)
            self.bytes_read += len(chunk)
            self.last_read = now
            self.last_read_wall = time.time()
            segments = self.framer.feed(chunk)
            if segments:
                yield self._lines(segments, len(chunk))
        else:
            self._more = True
        if self._eof and self._write_fd is None:
            yield from self._finish(clean=not self.error)

    def _lines(self, segments: list[Segment], nbytes: int) -> StreamLines:
        self.lineno += sum(s.data.count(b"\n") for s in segments)
        return StreamLines(HANDLE, self.info, tuple(segments), nbytes)

    def _finish(self, *, clean: bool) -> Iterator[StreamEvent]:
        tail = self.framer.finish()
        if tail:
            yield self._lines(tail, 0)
        self._close_fds()
        self._closed = True
        if self._announced:
            yield StreamClosed(HANDLE, self.info, clean=clean)

    def _close_fds(self) -> None:
        if self._given_fd and self.fd is not None and self._was_blocking:
            with contextlib.suppress(OSError):
                os.set_blocking(self.fd, True)
        for fd in (self.fd, self._write_fd):
            if fd is not None and not (fd == self.fd and self._given_fd and fd <= 2):
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self._write_fd = None

    def more_waiting(self) -> bool:
        return self._more

    def snapshot(self, need: Callable[[int], ReplayNeed]) -> JSONValue:
        """The byte count so far; a pipe cannot replay, so held detections cannot be rebuilt."""
        wanted = need(HANDLE)
        return {
            "position": self.framer.committed_offset,
            "lineno": self.lineno,
            "resumable": False,
            "note": "a pipe cannot be re-read: lines written while the daemon was down "
                    "and a partial last line are all that a restart loses",
            "unreplayable_held": sorted(wanted.held),
        }

    def next_wakeup(self, now: float) -> float | None:
        """Only while waiting for a FIFO to appear; otherwise wait on ``fds()``."""
        if self.fd is None and not self._closed:
            return now + self.poll_interval
        return None

    def progress(self) -> dict[str, tuple[float | None, str, float | None]]:
        """Liveness for the runtime: bytes waiting in the pipe (FIONREAD), last read time."""
        lag: float | None = None
        if self.fd is not None and not self._closed:
            try:
                buf = fcntl.ioctl(self.fd, termios.FIONREAD, b"\0\0\0\0")
                lag = float(int.from_bytes(buf, "little", signed=True))
            except OSError:
                lag = None
        wall = self.last_read_wall
        return {self.name: (lag, "bytes", wall)}

    def fds(self) -> tuple[int, ...]:
        return (self.fd,) if self.fd is not None and not self._closed else ()

    @property
    def ended(self) -> bool:
        """True once a descriptor stream reached end-of-file and was closed."""
        return self._closed

    def stop(self) -> Iterator[StreamEvent]:
        """Close the pipe; a partial last line is dropped (the writer may still finish it)."""
        if self._closed:
            return
        self.lost_partial = self.framer.pending_bytes
        self._close_fds()
        self._closed = True
        if self._announced:
            yield StreamClosed(HANDLE, self.info, clean=True)

