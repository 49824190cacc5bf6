"""The kernel log, read from ``/dev/kmsg``: where NVIDIA Xid, amdgpu, xe and EDAC faults land.

Each record is ``pri,seq,usec,flags;message`` followed by ``\\x20KEY=value`` dictionary lines
(metadata, never text). Positions are the kernel's sequence numbers, so:

* a restart in the same boot (same ``/proc/sys/kernel/random/boot_id``) re-opens the device,
  which starts at the oldest buffered record, and skips what was already read: no replay of
  the ring buffer (Fluent Bit's ``in_kmsg`` replays it every time);
* a new boot starts fresh: sequence numbers restart, everything in the buffer is new;
* a jump in sequence numbers is loss (the ring buffer overwrote records before we read them,
  which ``read()`` reports with ``EPIPE`` on the real device) and is counted, never silent;
* the record's time is the boot time plus its microseconds since boot.

The device is opened ``O_NONBLOCK``: every ``read()`` returns one record or ``EAGAIN``. A
recorded file or a pipe in the same format (tests) is read in chunks and split on newlines.
Where the device cannot be opened (no ``CAP_SYSLOG``, a container), the source hands over to
a fallback (the journal's kernel messages, ``journalctl -k``) and says so.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections import deque
from collections.abc import Callable, Iterator

from sigwatch.framing.records import TimedSegment, one_line
from sigwatch.model import StreamInfo
from sigwatch.sources.base import (
    JSONValue,
    ReplayNeed,
    Source,
    StreamClosed,
    StreamEvent,
    StreamLines,
    StreamOpened,
)
from sigwatch.sources.progress import Progress, ResumePoint

__all__ = ["KmsgRecord", "KmsgSource", "parse_record", "unescape"]

DEVICE = "/dev/kmsg"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
READ_SIZE = 16384  # the device needs a buffer that holds a whole record (EINVAL otherwise)
HANDLE = 1
_ESCAPE_RE = re.compile(rb"\\x([0-9a-fA-F]{2})")
LossCallback = Callable[[str, int], None]


class KmsgRecord:
    """One parsed record (``level`` is the syslog level 0-7, ``facility`` 0 is the kernel)."""

    __slots__ = ("facility", "flags", "level", "seq", "text", "usec")

    def __init__(self, seq: int, usec: int, level: int, facility: int, flags: str,
                 text: bytes) -> None:
        self.seq = seq
        self.usec = usec
        self.level = level
        self.facility = facility
        self.flags = flags
        self.text = text


def unescape(text: bytes) -> bytes:
    """Undo the device's ``\\xNN`` escaping for bytes that are not control characters.

    The kernel escapes every byte below 0x20 or above 0x7e and the backslash itself; UTF-8
    text comes back whole, while a newline stays visible as ``\\x0a`` so one record is one line.
    """
    if b"\\x" not in text:
        return text

    def repl(m: re.Match[bytes]) -> bytes:
        value = int(m.group(1), 16)
        if value < 0x20 or value == 0x7F:
            return m.group(0)
        return bytes((value,))

    return _ESCAPE_RE.sub(repl, text)


def parse_record(line: bytes) -> KmsgRecord | None:
    """Parse one header line (without its newline); None when it is not a record header."""
    header, sep, message = line.partition(b";")
    if not sep:
        return None
    fields = header.split(b",")
    if len(fields) < 3:
        return None
    try:
        pri = int(fields[0])
        seq = int(fields[1])
        usec = int(fields[2])
    except ValueError:
        return None
    flags = fields[3].decode("ascii", "replace") if len(fields) > 3 else "-"
    return KmsgRecord(seq, usec, pri & 7, pri >> 3, flags, unescape(message))


def read_boot_id(path: str) -> str:
    """The running kernel's boot id ("" when it cannot be read: every start is then fresh)."""
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


class KmsgSource:
    """``/dev/kmsg`` as a ``Source`` with one stream whose positions are sequence numbers.

    ``path`` and ``boot_id_path`` are injectable (tests feed a recorded file); ``boot_time``
    (epoch seconds at boot) places the records in time (default: now minus the monotonic
    clock, the clock the kernel stamps records with). ``on_loss(source, count)`` is called for
    every gap; ``lookback`` limits how far back the very first start reads (None: the whole
    buffer; a new boot always reads the whole buffer, which is all unseen). ``fallback``
    builds the source used when the device cannot be opened.
    """

    kind = "kmsg"
    content = "kernel"  # for sigwatch.patterns.kinds.content_of (the fallback is kernel too)

    def __init__(self, name: str = "kernel", *, path: str = DEVICE,
                 boot_id_path: str = BOOT_ID, boot_time: float | None = None,
                 on_loss: LossCallback | None = None, lookback: float | None = None,
                 fallback: Callable[[], Source] | None = None,
                 max_records_per_poll: int = 5000, batch_lines: int = 512,
                 poll_interval: float = 1.0,
                 wall_clock: Callable[[], float] = time.time,
                 read: Callable[[int, int], bytes] = os.read) -> None:
        self.name = name
        self.path = path
        self.boot_id_path = boot_id_path
        self.boot_time = boot_time if boot_time is not None else time.time() - time.monotonic()
        self.on_loss = on_loss
        self.lookback = lookback
        self.fallback_factory = fallback
        self.max_records = max_records_per_poll
        self.batch_lines = batch_lines
        self.poll_interval = poll_interval
        self.wall_clock = wall_clock
        self._read = read  # injectable: tests make the device report EPIPE
        self.fallback: Source | None = None
        self.fallback_reason = ""
        self.boot_id = ""
        self.fd: int | None = None
        self.device = False  # a character device: one record per read()
        self.info = StreamInfo(name, path, f"kmsg:{path}")
        self.reading = Progress()
        self.resume = ResumePoint(0, 0)
        self.skip_below = 0  # records below this sequence number were read before
        self.min_time: float | None = None
        self.expected: int | None = None  # the next sequence number we should see
        self.lost = 0
        self.records = 0
        self.malformed = 0
        self.overruns = 0  # EPIPE from the device: it overwrote records we had not read
        self.last_read: float | None = None
        self._buf = b""
        self._ready: deque[TimedSegment] = deque()
        self._announced = False
        self._more = False
        self._held: KmsgRecord | None = None  # a record flagged "c" waiting for its "+" parts
        self._eof = False

    # -- start ----------------------------------------------------------------------------

    def start(self, saved: JSONValue | None, *, first_start: bool) -> None:
        """Open the device (or the fallback) and decide where reading resumes."""
        state = saved if isinstance(saved, dict) else {}
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if self.fallback_factory is None:
                raise
            self.fallback_reason = f"{self.path}: {exc.strerror}"
            self.fallback = self.fallback_factory()
            self.fallback.start(state.get("fallback"), first_start=first_start)
            return
        self.fd = fd
        self.device = _is_char_device(fd)
        self.boot_id = read_boot_id(self.boot_id_path)
        self.info = StreamInfo(self.name, self.path, f"kmsg:{self.boot_id or 'unknown'}")
        resume = ResumePoint.load(state.get("resume"))
        same_boot = bool(self.boot_id) and state.get("boot_id") == self.boot_id
        if same_boot and resume is not None:
            self.resume = resume
            self.skip_below = resume.position
            self.expected = resume.replay_below if resume.replay_below >= 0 else None
            self.reading = Progress.resumed(resume)
        elif state.get("boot_id"):
            # A new boot: sequence numbers restart at 0, and all of them are unseen, so a
            # first record above 0 means the ring buffer overwrote the start of this boot.
            self.expected = 0
        elif saved is None and self.lookback is not None:
            # Very first start: old history of a long-running node is not news.
            self.min_time = self.wall_clock() - self.lookback

    # -- reading --------------------------------------------------------------------------

    def _read_records(self, budget: int) -> None:
        """Read up to ``budget`` records into ``_ready``; sets ``_more`` when stopped early."""
        assert self.fd is not None
        self._more = False
        count = 0
        while count < budget:
            try:
                chunk = self._read(self.fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    # Overwritten before we read them: the next record's sequence number
                    # tells how many; the gap is counted when it arrives.
                    self.overruns += 1
                    continue
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not chunk:
                self._eof = True
                break
            self.last_read = self.wall_clock()
            count += self._take(chunk)
        else:
            self._more = True
        if not self._more and self._held is not None:
            self._emit(self._held)
            self._held = None

    def _take(self, chunk: bytes) -> int:
        """Split a chunk into lines and handle each header; returns the records seen."""
        if self.device:
            lines = chunk.split(b"\n")
        else:
            self._buf += chunk
            *lines, self._buf = self._buf.split(b"\n")
        seen = 0
        for line in lines:
            if not line or line[:1] == b" ":
                continue  # dictionary lines (" SUBSYSTEM=pci") are metadata
            record = parse_record(line)
            if record is None:
                self.malformed += 1
                continue
            seen += 1
            self._record(record)
        return seen

    def _record(self, record: KmsgRecord) -> None:
        self.records += 1
        if record.seq < self.skip_below:
            return
        if self.expected is not None and record.seq > self.expected:
            self._loss(record.seq - self.expected)
        if self.expected is None or record.seq >= self.expected:
            self.expected = record.seq + 1
        if self.min_time is not None:
            if self.boot_time + record.usec / 1e6 < self.min_time:
                self.skip_below = record.seq + 1
                self.reading = Progress(record.seq + 1, 0)
                return
            self.min_time = None
        # Old kernels print continuation fragments as records flagged "c" then "+".
        if "+" in record.flags and self._held is not None:
            self._held.text += record.text
            return
        if self._held is not None:
            self._emit(self._held)
            self._held = None
        if "c" in record.flags:
            self._held = record
            return
        self._emit(record)

    def _emit(self, record: KmsgRecord) -> None:
        stamp = self.boot_time + record.usec / 1e6
        self._ready.append(one_line(record.text, record.seq, record.seq + 1, stamp))

    def _loss(self, count: int) -> None:
        self.lost += count
        if self.on_loss is not None:
            self.on_loss(self.name, count)

    # -- Source ---------------------------------------------------------------------------

    def poll(self, now: float) -> Iterator[StreamEvent]:
        """Announce the stream once, then hand out what the device has now."""
        if self.fallback is not None:
            yield from self.fallback.poll(now)
            return
        if self.fd is None:
            return
        if not self._announced:
            self._announced = True
            r = self.resume
            yield StreamOpened(HANDLE, self.info, r.position, r.lineno, r.replay_below,
                               r.pending, kind=self.kind)
        if not self._ready:
            self._read_records(self.max_records)
        while self._ready:
            batch: list[TimedSegment] = []
            while self._ready and len(batch) < self.batch_lines:
                batch.append(self._ready.popleft())
            self.reading.advance(batch[-1].next_offset, len(batch))
            yield StreamLines(HANDLE, self.info, tuple(batch),
                              sum(len(s.data) for s in batch))

    def more_waiting(self) -> bool:
        if self.fallback is not None:
            return self.fallback.more_waiting()
        return self._more or bool(self._ready)

    def snapshot(self, need: Callable[[int], ReplayNeed]) -> JSONValue:
        """Boot id and the resume record; the fallback's own snapshot when it is in use."""
        if self.fallback is not None:
            return {"fallback": self.fallback.snapshot(need), "reason": self.fallback_reason}
        return {"boot_id": self.boot_id, "resume": self.reading.record(need(HANDLE)),
                "lost": self.lost}

    def next_wakeup(self, now: float) -> float | None:
        """The device has no change notification the runtime uses: poll on a timer."""
        if self.fallback is not None:
            return self.fallback.next_wakeup(now)
        return now + self.poll_interval

    def reading_problems(self) -> dict[str, str]:
        """The device cannot be read: the fallback's problems, or why it is not open."""
        if self.fallback is not None:
            report = getattr(self.fallback, "reading_problems", None)
            return report() if report is not None else {}
        if self.fd is None and not self._eof:
            return {self.name: f"{self.path} is not open"}
        return {}

    def progress(self) -> dict[str, tuple[float | None, str, float | None]]:
        """Liveness for the runtime: records read but not handed out yet, last read time.

        Records the ring buffer overwrote before we read them are loss, not lag: they are
        counted through ``on_loss`` (``sigwatch_data_loss_events_total{reason="kmsg_overrun"}``).
        """
        if self.fallback is not None:
            report = getattr(self.fallback, "progress", None)
            return report() if report is not None else {}
        return {self.name: (float(len(self._ready)), "records", self.last_read)}

    def fds(self) -> tuple[int, ...]:
        """Descriptors a selector can wait on for readability (the device supports poll())."""
        return (self.fd,) if self.fd is not None and self.device else ()

    def stop(self) -> Iterator[StreamEvent]:
        """Close the device; the stream ends cleanly (nothing is ever half a record)."""
        if self.fallback is not None:
            yield from self.fallback.stop()
            return
        if self.fd is None:
            return
        if self._held is not None:
            self._emit(self._held)
            self._held = None
        while self._ready:
            seg = self._ready.popleft()
            self.reading.advance(seg.next_offset, 1)
            yield StreamLines(HANDLE, self.info, (seg,), len(seg.data))
        os.close(self.fd)
        self.fd = None
        if self._announced:
            yield StreamClosed(HANDLE, self.info)


def _is_char_device(fd: int) -> bool:
    return stat.S_ISCHR(os.fstat(fd).st_mode)
