"""The systemd journal, followed through ``journalctl -o json --follow``.

A subprocess (the choice of Vector and Filebeat: version-robust, no libsystemd binding) whose
stdout is a non-blocking pipe, so the daemon never waits on it. Each entry's ``__CURSOR`` is
kept: the snapshot stores the cursor of the last entry handed to the runtime, and a restart
runs ``journalctl --after-cursor=<it>``, which resumes exactly after it (no replay, no gap;
when the entry itself was vacuumed meanwhile, journalctl seeks to where it was and skips
nothing). ``--all`` keeps fields over 4 KiB (the JSON output otherwise nulls them).

Positions are a counter of lines that grows across restarts. A ``MESSAGE`` with newlines is
several lines (a traceback logged as one entry), so the counter moves per line, and for the
last ``replay_entries`` entries the cursor *before* each one is kept: when the runtime asks
to resume from an older position (a detector still needs it), the snapshot names the cursor
to re-read from and how many lines of that entry to skip. A ``MESSAGE`` that is not valid
UTF-8 arrives as a list of byte values and is decoded with replacement.

The time of each line is the journal's own ``__REALTIME_TIMESTAMP`` (when journald received
it), not the time we read it. If journalctl exits, it is started again after ``backoff``
seconds from the last cursor; its last error lines are kept for the report.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sigwatch.framing.records import TimedSegment
from sigwatch.model import StreamInfo
from sigwatch.sources.base import (
    JSONValue,
    ReplayNeed,
    StreamClosed,
    StreamEvent,
    StreamLines,
    StreamOpened,
)
from sigwatch.sources.progress import Progress, ResumePoint

__all__ = ["JournalEntry", "JournalSource", "build_command", "entry_lines"]

HANDLE = 1
READ_SIZE = 1 << 16
SUPPRESSED_RE = re.compile(r"^Suppressed (\d+) messages from (\S+)")


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal entry as lines: its cursor, the cursor before it, and its lines."""

    cursor: str
    before: str | None  # the cursor to pass to --after-cursor to read this entry again
    lines: tuple[TimedSegment, ...]


@dataclass(slots=True)
class _Span:
    """The positions one entry's lines took, and the cursor that re-reads it."""

    first: int
    end: int
    before: str | None


def build_command(base: Sequence[str], *, units: Sequence[str] = (),
                  identifiers: Sequence[str] = (), kernel: bool = False,
                  directory: str | None = None, after_cursor: str | None = None,
                  since: float | None = None) -> list[str]:
    """The journalctl argument vector (``base`` is the program, e.g. ``["journalctl"]``).

    ``-u`` and ``-t`` each OR among themselves; given together they AND (journalctl's rule).
    ``kernel`` matches ``_TRANSPORT=kernel`` rather than ``-k``, which would imply ``-b`` and
    lose the end of the previous boot after a reboot. Without a cursor, ``since`` (epoch
    seconds) starts that far back; without either, only new entries are read.
    """
    argv = [*base, "--output=json", "--follow", "--all", "--no-pager", "--quiet"]
    if directory:
        argv.append(f"--directory={directory}")
    for unit in units:
        argv.append(f"--unit={unit}")
    for ident in identifiers:
        argv.append(f"--identifier={ident}")
    if after_cursor:
        argv.append(f"--after-cursor={after_cursor}")
    elif since is not None:
        argv.append(f"--since=@{since:.6f}")
    else:
        argv.append("--lines=0")
    if kernel:
        argv.append("_TRANSPORT=kernel")
    return argv


def _field_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) for b in value):
        return bytes(b & 0xFF for b in value).decode("utf-8", "replace")
    return None


def entry_lines(entry: dict[str, object], first_position: int) -> list[TimedSegment]:
    """The lines of one parsed JSON entry, numbered from ``first_position``.

    A message ending in a newline does not make an empty last line; an empty message is no
    line at all (positions stay dense).
    """
    text = _field_text(entry.get("MESSAGE"))
    if not text:
        return []
    stamp: float | None = None
    raw_time = entry.get("__REALTIME_TIMESTAMP")
    if isinstance(raw_time, str) and raw_time.isdigit():
        stamp = int(raw_time) / 1e6
    tag = _field_text(entry.get("_SYSTEMD_UNIT")) or _field_text(
        entry.get("SYSLOG_IDENTIFIER")) or ""
    parts = text.split("\n")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    out: list[TimedSegment] = []
    for i, part in enumerate(parts):
        pos = first_position + i
        out.append(TimedSegment(part.encode("utf-8", "surrogateescape") + b"\n", pos, pos + 1,
                                time=stamp, tag=tag))
    return out


class JournalSource:
    """The journal (filtered by unit/identifier, or its kernel messages) as one stream.

    ``command`` is the program to run (default ``["journalctl"]``; tests give a recorded-stream
    player that takes the same arguments). ``lookback``: on the very first start, read that
    many seconds back (None: only new entries). ``on_suppressed(source, count)`` is told about
    journald's "Suppressed N messages" entries (rate-limited lines nobody can read).
    """

    kind = "journal"

    def __init__(self, name: str = "journal", *, units: Sequence[str] = (),
                 identifiers: Sequence[str] = (), kernel: bool = False,
                 directory: str | None = None, command: Sequence[str] = ("journalctl",),
                 lookback: float | None = None, replay_entries: int = 4096,
                 max_bytes_per_poll: int = 4 << 20, batch_lines: int = 512,
                 backoff: float = 5.0, poll_interval: float = 1.0,
                 on_suppressed: Callable[[str, int], None] | None = None,
                 on_error: Callable[[str, str], None] | None = None,
                 wall_clock: Callable[[], float] | None = None) -> None:
        import time

        self.name = name
        self.units = tuple(units)
        self.identifiers = tuple(identifiers)
        self.kernel = kernel
        self.directory = directory
        self.command = tuple(command)
        self.lookback = lookback
        self.replay_entries = replay_entries
        self.max_bytes = max_bytes_per_poll
        self.batch_lines = batch_lines
        self.backoff = backoff
        self.poll_interval = poll_interval
        self.on_suppressed = on_suppressed
        self.on_error = on_error
        self.wall_clock = wall_clock or time.time
        # What the stream holds, for sigwatch.patterns.kinds: the kernel's messages, some
        # units' or programs' output, or everything.
        self.content = "kernel" if kernel else ("job" if units or identifiers else "mixed")
        what = ",".join(self.units + self.identifiers) or ("kernel" if kernel else "all")
        self.info = StreamInfo(name, f"journal:{what}", f"journal:{name}:{what}")
        self.reading = Progress()
        # The cursor after which the next unread entry follows, and the position of that
        # entry's first line (lines of it below ``progress.read_to`` were handed out).
        self.cursor: str | None = None
        self._cursor_entry = 0
        self._last_cursor_seen: str | None = None  # of the last entry journalctl printed
        self.proc: subprocess.Popen[bytes] | None = None
        self.argv: list[str] = []
        self.restart_at: float | None = 0.0
        self.restarts = 0
        self.errors: deque[str] = deque(maxlen=20)
        self.entries = 0
        self.malformed = 0
        self.suppressed = 0
        self.last_read: float | None = None
        self.last_entry_time: float | None = None
        self._skip_below = 0
        self._next_position = 0
        self._spans: deque[_Span] = deque(maxlen=replay_entries)
        self._ready: deque[JournalEntry] = deque()
        self._buf = b""
        self._err_buf = b""
        self._since: float | None = None
        self._announced = False
        self._more = False
        self._resume_lineno = 0
        self._replay_below = -1
        self._pending: tuple[int, ...] = ()
        self._start_position = 0

    # -- start ----------------------------------------------------------------------------

    def start(self, saved: JSONValue | None, *, first_start: bool) -> None:
        """Take the saved cursor; the process itself starts on the first poll."""
        _ = first_start  # nothing to skip: the position is the saved one
        state = saved if isinstance(saved, dict) else {}
        resume = state.get("resume")
        point = ResumePoint.load(resume)
        cursor = resume.get("cursor") if isinstance(resume, dict) else None
        if point is not None and isinstance(resume, dict) and isinstance(cursor, str):
            entry_first = resume.get("entry_position", point.position)
            first = entry_first if isinstance(entry_first, int) else point.position
            self.cursor = self._last_cursor_seen = cursor
            self._cursor_entry = self._next_position = first
            self._skip_below = self._start_position = point.position
            self._resume_lineno = point.lineno
            self._replay_below = point.replay_below
            self._pending = point.pending
            self.reading = Progress.resumed(point)
        elif isinstance(state.get("since"), (int, float)):
            # Stopped before the first entry arrived: start where that lifetime started.
            self._since = float(state["since"])
        else:
            # Never a bare "--lines=0": entries written before the first one arrives, while
            # the daemon restarts, would be skipped. A start time persists until a cursor does.
            self._since = self.wall_clock() - (self.lookback or 0.0)

    def _spawn(self, now: float) -> None:
        since = self._since if self.cursor is None else None
        self.argv = build_command(self.command, units=self.units, identifiers=self.identifiers,
                                  kernel=self.kernel, directory=self.directory,
                                  after_cursor=self.cursor, since=since)
        try:
            proc = subprocess.Popen(  # argv built from config, no shell
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, close_fds=True)
        except OSError as exc:
            self._error(f"cannot run {self.argv[0]}: {exc.strerror}")
            self.restart_at = now + self.backoff
            return
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            flags = fcntl.fcntl(stream.fileno(), fcntl.F_GETFL)
            fcntl.fcntl(stream.fileno(), fcntl.F_SETFL, flags | os.O_NONBLOCK)
        self.proc = proc
        self.restart_at = None
        self._buf = b""

    def _error(self, text: str) -> None:
        self.errors.append(text)
        if self.on_error is not None:
            self.on_error(self.name, text)

    # -- reading --------------------------------------------------------------------------

    def _read(self, now: float) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        self._more = False
        got = 0
        fd = self.proc.stdout.fileno()
        eof = False
        while got < self.max_bytes:
            try:
                chunk = os.read(fd, READ_SIZE)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            got += len(chunk)
            self.last_read = self.wall_clock()
            self._take(chunk)
        else:
            self._more = True
        self._drain_stderr()
        if eof:
            self._exited(now)

    def _take(self, chunk: bytes) -> None:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                self.malformed += 1
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("__CURSOR"), str):
                self.malformed += 1
                continue
            self._entry(entry)

    def _entry(self, entry: dict[str, object]) -> None:
        self.entries += 1
        cursor = str(entry["__CURSOR"])
        before = self._last_cursor_seen
        lines = entry_lines(entry, self._next_position)
        self._last_cursor_seen = cursor
        if lines:
            self._next_position = lines[-1].next_offset
            self.last_entry_time = lines[-1].time
        kept = tuple(s for s in lines if s.offset >= self._skip_below)
        self._ready.append(JournalEntry(cursor, before, kept))
        if lines:
            self._spans.append(_Span(lines[0].offset, lines[-1].next_offset, before))
        text = _field_text(entry.get("MESSAGE")) or ""
        if entry.get("_COMM") == "systemd-journal" or entry.get(
                "SYSLOG_IDENTIFIER") == "systemd-journald":
            m = SUPPRESSED_RE.match(text)
            if m:
                self.suppressed += int(m.group(1))
                if self.on_suppressed is not None:
                    self.on_suppressed(self.name, int(m.group(1)))

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with contextlib.suppress(BlockingIOError, ValueError):
            data = os.read(self.proc.stderr.fileno(), READ_SIZE)
            self._err_buf += data
        *lines, self._err_buf = self._err_buf.split(b"\n")
        for line in lines:
            if line.strip():
                self._error(line.decode("utf-8", "replace"))

    def _exited(self, now: float) -> None:
        assert self.proc is not None
        code = self.proc.wait()
        self._drain_stderr()
        if self._err_buf.strip():
            self._error(self._err_buf.decode("utf-8", "replace"))
        self._err_buf = b""
        self._close_proc()
        self._error(f"{self.argv[0]} exited with status {code}")
        self.restarts += 1
        self.restart_at = now + self.backoff
        # Entries read but not handed out yet are re-read from the last handed-out cursor.
        self._ready.clear()
        self._next_position = self._cursor_entry
        self._skip_below = self.reading.read_to
        self._last_cursor_seen = self.cursor

    def _close_proc(self) -> None:
        if self.proc is None:
            return
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self.proc = None

    # -- Source ---------------------------------------------------------------------------

    def poll(self, now: float) -> Iterator[StreamEvent]:
        """Announce the stream once, (re)start journalctl when due, hand out whole entries."""
        if self.proc is None and self.restart_at is not None and now >= self.restart_at:
            self._spawn(now)
        if not self._announced:
            self._announced = True
            yield StreamOpened(HANDLE, self.info, self._start_position, self._resume_lineno,
                               self._replay_below, self._pending, kind=self.kind)
        if not self._ready and self.proc is not None:
            self._read(now)
        while self._ready:
            batch: list[TimedSegment] = []
            while self._ready and (not batch or len(batch) < self.batch_lines):
                entry = self._ready.popleft()
                batch.extend(entry.lines)
                self.cursor = entry.cursor
                if entry.lines:
                    self._cursor_entry = entry.lines[-1].next_offset
            if batch:
                self.reading.advance(batch[-1].next_offset, len(batch))
                yield StreamLines(HANDLE, self.info, tuple(batch),
                                  sum(len(s.data) for s in batch))

    def more_waiting(self) -> bool:
        return self._more or bool(self._ready)

    def snapshot(self, need: Callable[[int], ReplayNeed]) -> JSONValue:
        """The last cursor, and where to resume (an older entry when a detector needs it)."""
        record = self.reading.record(need(HANDLE))
        position = int(str(record["position"]))
        record["cursor"] = self.cursor
        record["entry_position"] = self._cursor_entry
        if position < self.reading.read_to:
            span = next((s for s in self._spans if s.first <= position < s.end), None)
            if span is None or span.before is None:
                # Older than the replay window: resume at the end; the state is not rebuilt.
                record["position"] = self.reading.read_to
                record["lineno"] = self.reading.lineno
            else:
                record["cursor"] = span.before
                record["entry_position"] = span.first
        return {"cursor": self.cursor, "resume": record, "since": self._since,
                "restarts": self.restarts}

    def next_wakeup(self, now: float) -> float | None:
        if self.proc is None and self.restart_at is not None:
            return self.restart_at
        return now + self.poll_interval

    def reading_problems(self) -> dict[str, str]:
        """journalctl is not running (it could not start, or it exited): the last error."""
        if self.proc is None and self.restart_at is not None and self.errors:
            return {self.name: self.errors[-1].strip().splitlines()[-1][:300]}
        return {}

    def fds(self) -> tuple[int, ...]:
        """journalctl's stdout: readable when entries arrive (or at its exit)."""
        if self.proc is not None and self.proc.stdout is not None:
            return (self.proc.stdout.fileno(),)
        return ()

    def progress(self) -> dict[str, tuple[float | None, str, float | None]]:
        """Liveness for the runtime: seconds behind the journal, and the last read time.

        Behind means entries are waiting (read and not handed out, or unread in journalctl's
        pipe); then the lag is the age of the newest entry handed out. Caught up is 0, even
        when the journal has been quiet for an hour.
        """
        waiting = bool(self._ready) or self._more or _unread_bytes(self.fds()) > 0
        lag = self.lag_seconds() if waiting else (0.0 if self._announced else None)
        return {self.name: (lag, "seconds", self.last_read)}

    def lag_seconds(self) -> float | None:
        """How far behind the newest entry handed out is, by the journal's clock."""
        if self.last_entry_time is None:
            return None
        return max(0.0, self.wall_clock() - self.last_entry_time)

    def stop(self) -> Iterator[StreamEvent]:
        """Stop journalctl; entries read but not handed out are read again next time."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._close_proc()
        self._ready.clear()
        if self._announced:
            yield StreamClosed(HANDLE, self.info)


def _unread_bytes(fds: tuple[int, ...]) -> int:
    """Bytes waiting in the pipes ``fds`` (FIONREAD), 0 when it cannot be told."""
    import termios

    total = 0
    for fd in fds:
        try:
            buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            continue
        total += int.from_bytes(buf, "little", signed=True)
    return total
