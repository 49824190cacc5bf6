"""``GenericDetector``: failures caught by their shape, whatever their wording.

One per-chunk detector reads five shapes (see the package docstring). Its interests join the
runtime's single interest pass; a line none of them selects costs nothing here. A multi-line
shape (a traceback, a faulthandler dump, an nccl-tests table) is read line by line from the
chunk's bytes once its first line was selected, across chunks (``following``), and only for as
long as it lasts.

Detections are ranked below the signature library by the root-cause correlator
(``detectors/rootcause.py``): a signature on the same line folds a crash, record or check
detection away, and makes a traceback's detection its fallout (it still names the user's frame);
a specific signature earlier on the stream becomes the root cause and lowers the generic
detection to a warning.
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sigwatch.clock import Clock
from sigwatch.detectors.base import (
    Chunk,
    ChunkLine,
    LineEvent,
    Part,
    RecentLines,
    StreamContext,
)
from sigwatch.detectors.generic._text import Frame, clip, literal_first, mask, signal_name
from sigwatch.detectors.generic.checks import FailedCheck, NcclTable, match_check
from sigwatch.detectors.generic.codes import Code, CodeTable
from sigwatch.detectors.generic.native import (
    BacktraceReport,
    Crash,
    backtrace_start,
    match_crash,
    raised_from,
)
from sigwatch.detectors.generic.records import Record, classify, level_of, parse_any
from sigwatch.detectors.generic.tracebacks import (
    EXIT_NOTICE_SECONDS,
    HEADER_RE,
    FaultReport,
    LineIn,
    Outcome,
    Preceding,
    Report,
    StackDumpReport,
    TerminateReport,
    TracebackReport,
    bare_exception,
    ended,
    exit_report,
    flattened,
    frame_line,
    stack_dump_start,
)
from sigwatch.detectors.templates import ERROR_INTEREST, strip_header
from sigwatch.framing.normalize import normalize, parse_prefix
from sigwatch.model import Detection, Remediation, Severity, StreamInfo
from sigwatch.patterns.kinds import content_of

__all__ = [
    "GENERIC_SIGNATURES",
    "SHAPES",
    "GenericDetector",
]

TRACEBACK = "generic_traceback"
NATIVE_CRASH = "generic_native_crash"
ERROR_RECORD = "generic_error_record"
FAILED_CHECK = "generic_failed_check"
BLOCKED_STACK = "generic_blocked_stack"
GENERIC_SIGNATURES = (TRACEBACK, NATIVE_CRASH, ERROR_RECORD, FAILED_CHECK, BLOCKED_STACK)
"""The ``signature`` values the generic layer emits (a closed set)."""

SHAPES = {"traceback": "fallout", "exception": "fold", "cut_traceback": "fold",
          "faulthandler": "fallout",
          "native_crash": "fold", "error_record": "fold", "failed_check": "fold",
          "blocked_stack": "fold"}
"""Each shape (the ``shape`` label) and what a signature detected on the same line does to it:
``fold`` drops the generic detection, ``fallout`` keeps it as fallout naming the signature (a
traceback or a faulthandler dump that names the user's frame says more than the line; an
exception without a frame of the user's code does not)."""

# Lines a shape can start on: those the error-word trie selects (its words and the shapes'
# own, ``templates.SHAPE_LITERALS``: one alternation shared with the novel-error detector) and
# one-letter levels of glog/absl/c10 (``E1120 12:00:00``, ``[E321 02:07:08``), TensorFlow
# (``E path/file.cc:12]``), c10 (``[E socket.cpp:610]``), TensorRT (``[E] ``), ``[ERR]`` and
# Ray's spdlog (``E 4567 89]``, ``C`` for critical), logrus's terminal ``ERRO[`` and ``FATA[``,
# health labels' values (``=ERR_...``,
# ``=EVICT``, ``=UNHEALTHY``), libfabric's ``<warn>`` (its highest level: its errors are
# logged there), Horovod's ``Process 3 exit with status code 250``, DeepSpeed's ``Killing
# subprocess N`` fan-out, a gdb frame in ``raise ()`` (``__GI_raise (sig=6)``) and the head of a
# thread's stack in py-spy's and faulthandler's dumps (``Thread 835995 (active)``) and the
# kernel's warning splat (``WARNING: CPU: 25 PID: 550 at ...``). Every branch
# but ``<warn>`` starts with a byte the trie already starts on, so the pass has no more
# candidate positions than the trie alone, and ``<`` only adds tqdm's ``[08:56<02:05`` (one
# byte tried, then given up).
# The same patterns gate ``_shapes`` on each line's text, in both drivers: a line no interest
# selects never starts a shape, so the per-chunk driver (which never sees it) and the per-line
# one agree by construction, and lines read while following a traceback skip the shapes at once.
_INTEREST = re.compile(
    rb"E(?:[0-9]{3,4} [0-9][0-9]:| [\w./-]+:[0-9]|\] |RR\]| [0-9]+ [0-9]+\]|RR_|VICT|RRO\[)"
    rb"|F(?:[0-9]{3,4} [0-9][0-9]:| [\w./-]+:[0-9]|ATA\[)|C [0-9]+ [0-9]+\]|U(?:NHEALTHY|nhealthy)"
    rb"|<warn> |exit with status code|Killing subprocess [0-9]|raise \("
    rb"|Thread (?:0x)?[0-9a-fA-F]{1,16} \((?:active|idle|most recent call first)"
    rb"|WARNING: CPU: [0-9]")
_EVERY_LINE = re.compile(rb"^(?!\Z)", re.M)
# A failure word inside the name of a figure is a metric or a setting, not an event: a
# snake_case metric with a fractional value (``val_error=0.1930``, ``mean_absolute_error:
# 0.12``, ``pixel_error=0.3``), a timeout or an environment variable set to a number
# (``timeout for collective set to 1800 seconds``, ``NCCL_IB_TIMEOUT set by environment to
# 22``). Integer values stay (``ecc_errors=2`` is a count, a check may read it). A line whose
# every interest lies in such names starts no shape (progress lines of trainers that name a
# metric ``*_error`` would each be read as a possible error otherwise).
_NAMED_FIGURE_RE = re.compile(
    r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\s*[=:]\s*[-+]?[0-9]*\.[0-9]"
    r"|\b(?:timeout|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b[\w ]{0,40}?\bset (?:by environment )?to "
    r"[0-9]")

_HARNESS_RE = re.compile(r"={3,} test session starts ={3,}|^-{3,} Captured (?:stdout|stderr|log) "
                         r"(?:call|setup|teardown) -{3,}")
_FAULT_RE = re.compile(r"^Fatal Python error: (?P<reason>\S.{0,200})$")
# The three below are written in lowercase and matched on the lowercased message
# (``literal_first``: ``re.IGNORECASE`` would defeat its skipping).
EXIT_WORDS = (r"exit(?:ed)? (?:with )?(?:code|status)[ :=]*-?[1-9]|exitcode\s*[:=]\s*"
              r"-?[1-9]|non-zero (?:exit|status)|returned non-zero"
              r"|\breturn(?:ed)? (?:with )?(?:code|status)[ :=]*-?[1-9]")
# A program that could not start, or stopped on an error, in its own words ("Failed to start
# model server: ...", "Could not create backend", "Application shutdown with error: ..."): the
# end of a process (a server, a worker, a backend), as much as an exit status is.
STOPPED_WORDS = (
    r"\b(?:failed to|could not|couldn't|unable to|cannot) (?:start|launch|initiali[sz]e|create"
    r"|spawn|bring up) (?:the |a |an )?(?:[\w.-]{1,40} ){0,3}?(?:server|service|backend|engine"
    r"|worker|runtime|daemon|executor|scheduler|replica|process)\b"
    r"|\b(?:application|server|worker|process|engine|service|runtime|daemon) (?:shut ?down"
    r"|exited|terminated|stopped|died) with (?:an? )?(?:error|exception|failure)\b")
# Words that make an unclassified error record a failure: the process ran out of a resource,
# crashed, or hit a fault it cannot recover from.
STRONG_WORDS = (
    r"out of (?:host |device )?memory|\boom\b|cannot allocate memory|too many open files"
    r"|no space left|bus error|segmentation fault|core dumped|\bkilled\b|illegal (?:memory "
    r"access|instruction|address)|unrecoverable|uncorrectable|fallen off the bus|device lost"
    r"|\bdeadlock|resource exhausted|显存不足|内存不足|空间不足")
# Records that report no failure: retries, deprecations, counters at zero, known start-up noise.
BENIGN_WORDS = (
    r"\bwill (?:be )?retr(?:y|ied)\b|\bretrying\b|\bretry(?:ing)? (?:in|after|#?\d)"
    r"|\battempt \d{1,4}\s*(?:/|of)\s*\d|deprecat|\b(?:no|0|zero) (?:errors|failures)\b"
    r"|\b(?:errors?|failures?|failed)\s*[:=]\s*0\b|(?:can|may) (?:be )?(?:safely )?ignored"
    r"|\bsucce(?:ss|ssfully|eded)\b|unable to register cu(?:dnn|fft|blas) factory"
    r"|delay kernel timed out|grpc_wait_for_shutdown|\bnot an error\b"
    # a query the tool or device does not support (rocm-smi's RSMI_STATUS_NOT_SUPPORTED), a
    # monitoring client without its library (its only loss is metrics), PMIx's shared-memory
    # key store missing a key (documented noise of every job on some systems)
    r"|not supported in the current environment|metrics (?:may|will) not be (?:reported|collected)"
    r"|in file dstore_base\.c|in file \S{0,120}/gds/ds\d\d/|due to job requeue"
    # a fallback the message names ("couldn't chdir to X: ...: going to /tmp instead"), and
    # Slurm's notice that a step touched its memory limit and was swapped, not killed
    r"|\b(?:going to|using|falling back to) \S{1,120} instead\b"
    r"|exceeded (?:step|job) memory limit at some point"
    # slurmstepd reading a process that has just exited (its /proc entry is gone)
    r"|_is_a_lwp: open\(\) /proc/"
    # a Go error that is nil ("device-plugin server stopped serving: <nil>", err=<nil>):
    # nothing failed
    r"|: <nil>\s*$|\berr(?:or)?=<nil>")
_EXIT_RE = re.compile(literal_first(EXIT_WORDS))
_STRONG_RE = re.compile(literal_first(STRONG_WORDS))
_STOPPED_RE = re.compile(literal_first(STOPPED_WORDS))
_BENIGN_RECORD_RE = re.compile(literal_first(BENIGN_WORDS))
# Sources whose error-level records are notices: XLA's slow_operation_alarm ("Constant folding an
# instruction is taking > 1s", "The operation took 2.2s": it says itself that this "isn't
# necessarily a bug"; compilation goes on), and XLA's GPU autotuner, which logs at E level the
# device, the cuDNN version and every "Difference at N" between two algorithms' results when
# they disagree, then picks one and goes on (its failures are signatures: xla_conv_autotune_failed).
_BENIGN_SOURCES = frozenset({"slow_operation_alarm.cc", "conv_algorithm_picker.cc",
                             "gpu_conv_algorithm_picker.cc", "buffer_comparator.cc"})
# "retrying... (attempt 60/60)": the last attempt failed, the retries ran out (not benign).
_LAST_ATTEMPT_RE = re.compile(r"\battempt (\d{1,4})\s*(?:/|of)\s*\1\b")

# Exceptions of the language itself: raised from the user's own frame they are the job's bug
# (a framework's or runtime's exception may be the node's or the fabric's: owner unknown).
_BUILTIN_EXCEPTIONS = frozenset({
    "ValueError", "KeyError", "TypeError", "AssertionError", "IndexError", "AttributeError",
    "NameError", "ZeroDivisionError", "StopIteration", "FileNotFoundError", "ImportError",
    "ModuleNotFoundError", "NotImplementedError", "RecursionError", "SyntaxError",
    "IndentationError", "UnboundLocalError", "LookupError", "ArithmeticError",
    "IsADirectoryError", "NotADirectoryError", "UnicodeDecodeError", "UnicodeEncodeError",
    "JSONDecodeError",
})
MAX_KEYS = 1024
MAX_INFO_PER_HOUR = 20
MAX_PENDING = 8
MAX_EXIT_GROUPS = 256  # (source, job) pairs whose latest exit report is remembered
RECORD_WINDOW = 50  # lines after an information-only record in which the process may end
# Shapes whose detection says the process (or a check) ended: records just before are raised.
_ENDINGS = frozenset({"traceback", "exception", "faulthandler", "native_crash"})


@dataclass(slots=True)
class _StreamState:
    """What the detector keeps per stream handle."""

    info: StreamInfo
    content: str = "mixed"  # kernel | job | mixed (see sigwatch.patterns.kinds)
    reports: dict[str | None, Report] = field(default_factory=dict)
    table: NcclTable | None = None
    harness: bool = False
    fired: OrderedDict[str, float] = field(default_factory=OrderedDict)
    crash_until: int = -1  # crash lines up to this line number are part of one crash
    info_times: list[float] = field(default_factory=list)
    # Records that are information only unless the process ends right after them.
    pending: list[_Pending] = field(default_factory=list)
    # The last launcher's exit report on this stream (line number, text): an error record
    # just after it is that launcher's account of the end.
    exit_seen: tuple[int, str] | None = None

    def following(self) -> bool:
        return bool(self.reports) or self.table is not None or bool(self.pending)

    @property
    def group(self) -> tuple[str, str]:
        """The streams whose launcher reports speak for this one: its source and job (with no
        job, every stream of its source)."""
        return (self.info.source, self.info.job)


@dataclass(slots=True)
class _Pending:
    """An information-only record waiting a few lines: is it followed by the process ending?"""

    found: _Found
    deadline: float
    lines: int = 0


@dataclass(frozen=True, slots=True)
class _Found:
    """A detection in the making (turned into a ``Detection`` with the stream's identity)."""

    signature: str
    title: str
    severity: Severity
    line: LineIn
    shape: str
    key: str
    remediation: Remediation
    captures: tuple[tuple[str, str], ...] = ()
    facts: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    owner: str = "unknown"
    context: tuple[str, ...] = ()
    wait: bool = False  # wait a few lines: raised to a warning if the process ends after it


_CUT_REMEDY = Remediation(
    summary=("A Python traceback's output stopped before its exception line: the process was "
             "killed or hung while printing it, or its output was cut."),
    steps=(
        ("Look for what ended the process at that time: the kernel log (the OOM killer), the "
         "launcher's and the scheduler's reports."),
        "Read the innermost frame: the exception was raised there.",
    ),
    action="investigate")
_TB_REMEDY = Remediation(
    summary="A Python process (or thread) ended on an uncaught exception.",
    steps=(
        ("Read the exception and the innermost frame of your code it names; the frames above "
         "it in the log show how it got there."),
        "If a specific signature is named as the root cause, follow its fix first.",
        ("A chained exception names its cause first: the first exception of the chain is often "
         "the real error."),
    ),
    action="investigate")
_CRASH_REMEDY = Remediation(
    summary="A process died of a fatal signal or aborted.",
    steps=(
        ("SIGKILL (Killed, exit 137, -9) is most often the kernel's or the scheduler's OOM "
         "killer: look for an OOM line before it and for the job's memory limit."),
        ("SIGSEGV/SIGBUS/SIGABRT: a native library crashed; rerun with PYTHONFAULTHANDLER=1 "
         "for the Python stack and with core dumps for the native one."),
        ("If it repeats at random steps on one node only, suspect the node (memory errors) and "
         "drain it."),
    ),
    action="investigate")
_RECORD_REMEDY = Remediation(
    summary="A component logged an error record.",
    steps=(
        "Read the record and the lines around it: is the job affected?",
        ("A documented vendor code is named with its meaning; look it up in the vendor's "
         "error reference for the fix."),
        "If it is a recurring failure mode, write a signature for it (patterns/AUTHORING.md).",
    ),
    action="investigate")
_BLOCKED_REMEDY = Remediation(
    summary=("A dump of a live process's stacks shows it blocked waiting on its peers (a "
             "collective) or its children: the job hangs there, or did when the dump was "
             "taken."),
    steps=(
        ("Dump every rank the same way (py-spy dump --pid PID): the rank that is not in the "
         "collective, or is in a different one, is the one the others wait for."),
        ("Look on that rank's node for what stopped it: an Xid, a NCCL or fabric error, a "
         "process killed by the OOM killer, a full disk."),
        ("If every rank waits in the same collective, set NCCL_DEBUG=INFO and "
         "TORCH_NCCL_TRACE_BUFFER_SIZE for the collective's sequence numbers."),
    ),
    action="investigate")
_CHECK_REMEDY = Remediation(
    summary="A diagnostic reported a failed check.",
    steps=(
        "Read the diagnostic's output for the failed item and the device it names.",
        ("Pending row remapping or page retirement, ERR! fields and failed health checks need "
         "the GPU/NPU reset or the node drained; rerun the diagnostic after the reset."),
        ("A non-zero #wrong in nccl-tests means corrupted collective results: test the node "
         "pair by pair to find the bad link or GPU."),
    ),
    action="investigate")


class GenericDetector:
    """The generic layer as one per-chunk detector (see the module docstring)."""

    name = "generic"
    held_gives_way = True  # see ``Detector.held``: below every other detection on its line

    def __init__(self, clock: Clock, *, codes: CodeTable | None = None, host: str = "",
                 status: str = "stable", record_status: str = "test",
                 hold_seconds: float = 10.0, window_lines: int = 25,
                 dedupe_seconds: float = 600.0, crash_lines: int = 60) -> None:
        """``status``: of the detections of a process or a check that failed (they page like
        any stable signature); ``record_status``: of error records, the shape with the highest
        false-alarm risk (``test``: sent to Alertmanager's non-paging route).
        ``hold_seconds``: how long a finished traceback waits for the lines that say
        whether the process went on, when nothing says its process ended (a launcher's exit
        report of its job, its stream closing, its window of lines, end the wait at once;
        docs/signatures.md "The generic layer" says why 10 s); ``window_lines``: how many
        lines of its rank it reads for that; ``dedupe_seconds``: a finding with the same key
        on a stream is reported once in this time; ``crash_lines``: later crash lines this
        close belong to the same crash."""
        self.clock = clock
        self.codes = codes if codes is not None else CodeTable()
        self.host = host
        self.status = status
        self.record_status = record_status
        self.hold = hold_seconds
        self.window = window_lines
        self.dedupe = dedupe_seconds
        self.crash_lines = crash_lines
        self._streams: dict[int, _StreamState] = {}
        # The latest exit report read per (source, job): monotonic time and its line.
        self._exits: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()
        self._groups: dict[tuple[str, str], set[int]] = {}  # (source, job) -> stream handles
        # When a process of each (source, job) was last reported ended (a traceback, a crash).
        self._ends: OrderedDict[tuple[str, str], float] = OrderedDict()

    # -- the protocol ---------------------------------------------------------------------------

    @property
    def interest(self) -> re.Pattern[bytes] | None:
        """Every line, for the per-line driver (a traceback's lines carry no literal)."""
        return _EVERY_LINE

    @property
    def interests(self) -> tuple[re.Pattern[bytes], ...]:
        return (ERROR_INTEREST, _INTEREST)

    def following(self, handle: int) -> bool:
        """True while a multi-line shape of this stream is being read."""
        st = self._streams.get(handle)
        return st is not None and st.following()

    def on_open(self, stream: StreamContext) -> None:
        self._add(stream)

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        _ = clean
        st = self._streams.pop(stream.handle, None)
        if st is None:
            return ()
        members = self._groups.get(st.group)
        if members is not None:
            members.discard(stream.handle)
            if not members:
                del self._groups[st.group]
        out: list[Detection] = []
        for report in list(st.reports.values()):
            out.extend(self._finish(st, report, ended=True))
        st.reports.clear()
        out.extend(self._settle(st, "close"))
        return out

    def tick(self, now: float) -> Sequence[Detection]:
        out: list[Detection] = []
        for st in self._streams.values():
            for rank, report in list(st.reports.items()):
                if report.deadline is not None and report.deadline <= now:
                    del st.reports[rank]
                    out.extend(self._finish(st, report, ended=True))
            out.extend(self._settle(st, "time", now=now))
        return out

    def next_deadline(self) -> float | None:
        deadlines = [r.deadline for st in self._streams.values() for r in st.reports.values()
                     if r.deadline is not None]
        deadlines += [p.deadline for st in self._streams.values() for p in st.pending]
        return min(deadlines) if deadlines else None

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        st = self._streams.get(handle)
        if st is None:
            return None
        starts = [r.start for r in st.reports.values()]
        starts += [(p.found.line.offset, p.found.line.lineno) for p in st.pending]
        return min(starts) if starts else None

    def held(self, handle: int) -> tuple[int, ...]:
        st = self._streams.get(handle)
        if st is None:
            return ()
        held = {o for r in st.reports.values() if (o := r.held()) is not None}
        held.update(p.found.line.offset for p in st.pending)
        return tuple(sorted(held))

    def snapshot(self) -> object:
        return None  # open readings are rebuilt by replaying from ``replay_floor``

    def restore(self, state: object) -> None:
        _ = state

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        st = self._state(event.stream)
        line = LineIn(event.line.text, event.line.rank, event.line.lineno, event.line.offset,
                      self.clock.time())
        return self._take(st, line, _Before(event.recent, line.rank))

    def on_chunk(self, chunk: Chunk, mask_bits: int) -> Sequence[Detection]:
        st = self._state(chunk.stream)
        out: list[Detection] = []
        data = chunk.data
        size = len(data)
        lines = chunk.select(mask_bits)
        by_start = {ln.start: ln for ln in lines}
        pos, lineno, idx = 0, chunk.base_lineno, 0
        while True:
            if st.following():
                if pos >= size:
                    break
                end = data.find(b"\n", pos)
                end = size if end == -1 else end
                lineno += 1
                known = by_start.get(pos)
                out.extend(self._chunk_line(st, chunk, pos, end, lineno, known))
                pos = end + 1
                continue
            while idx < len(lines) and lines[idx].start < pos:
                idx += 1
            if idx >= len(lines):
                break
            known = lines[idx]
            idx += 1
            out.extend(self._chunk_line(st, chunk, known.start, known.end, known.lineno, known))
            pos, lineno = known.end + 1, known.lineno
        return out

    def _chunk_line(self, st: _StreamState, chunk: Chunk, start: int, end: int, lineno: int,
                    known: ChunkLine | None) -> list[Detection]:
        if known is not None:
            parts = chunk.parts(known)
        else:
            raw = chunk.data[start:end].decode("utf-8", "replace")
            parts = [Part(rank, text) for rank, text in normalize(raw)]
        recent = chunk.before(start)
        out: list[Detection] = []
        read = self.clock.time()
        for part in parts:
            line = LineIn(part.text, part.rank, lineno, chunk.base + start, read)
            out.extend(self._take(st, line, _Before(recent, part.rank)))
        return out

    # -- one part of one line ------------------------------------------------------------------

    def _state(self, stream: StreamContext) -> _StreamState:
        st = self._streams.get(stream.handle)
        return st if st is not None else self._add(stream)

    def _add(self, stream: StreamContext) -> _StreamState:
        st = self._streams[stream.handle] = _StreamState(stream.info, content_of(stream.kind))
        self._groups.setdefault(st.group, set()).add(stream.handle)
        return st

    def _take(self, st: _StreamState, line: LineIn,
              before: Callable[[int], list[str]]) -> list[Detection]:
        now = self.clock.monotonic()
        if exit_report(line.text) and _selected(line.text):
            self._exit_reported(st, line.text, now)
            st.exit_seen = (line.lineno, clip(line.text, 160))
        out = self._read(st, line, before, now)
        if self._exits and st.reports:
            seen = self._exits.get(st.group)
            report = st.reports.get(line.rank)
            if (seen is not None and now - seen[0] <= EXIT_NOTICE_SECONDS
                    and isinstance(report, TracebackReport)):
                report.exit_reported(now, seen[1])  # read after its job's launcher reported
        return out

    def _exit_reported(self, st: _StreamState, text: str, now: float) -> None:
        """A launcher reported that a process of ``st``'s job ended: every finished traceback
        of the job (on any of its streams) stops waiting; they are delivered by ``tick``, which
        the runtime runs at once, through their own streams. Remembered for a traceback whose
        last lines are read just after (files are read in turn)."""
        group = st.group
        self._exits[group] = (now, text)
        self._exits.move_to_end(group)
        while len(self._exits) > MAX_EXIT_GROUPS:
            self._exits.popitem(last=False)
        for handle in self._groups.get(group, ()):
            for report in self._streams[handle].reports.values():
                if isinstance(report, TracebackReport):
                    report.exit_reported(now, text)

    def _read(self, st: _StreamState, line: LineIn, before: Callable[[int], list[str]],
              now: float) -> list[Detection]:
        out: list[Detection] = []
        if st.pending:
            if ended(line.text):
                out.extend(self._settle(st, "ended", clip(line.text, 160)))
            else:
                out.extend(self._settle(st, "line"))
        for rank, other in list(st.reports.items()):
            if rank != line.rank:
                other.observe(line)
                if other.finished:
                    del st.reports[rank]
                    out.extend(self._finish(st, other))
        report = st.reports.get(line.rank)
        if report is not None:
            report.others = 0
            consumed = report.feed(line, now)
            if report.finished:
                del st.reports[line.rank]
                out.extend(self._finish(st, report))
            if consumed:
                return out
        if st.table is not None:
            row = st.table.row(line.text)
            if row is None:
                return out
            if isinstance(row, FailedCheck):
                out.extend(self._emit(st, self._check(row, line)))
                return out
            if not line.text.startswith("#"):
                st.table = None
        out.extend(self._shapes(st, line, before, now))
        return out

    def _shapes(self, st: _StreamState, line: LineIn, before: Callable[[int], list[str]],
                now: float) -> list[Detection]:
        text = line.text
        if not _may_start_shape(text):
            return []  # no shape starts on a line none of the interests selects
        if _HARNESS_RE.search(text):
            st.harness = True
            return []
        in_traceback = isinstance(st.reports.get(line.rank), TracebackReport)
        header = HEADER_RE.search(text)
        if header is not None and not in_traceback:
            out = self._close_rank(st, line.rank)
            if st.pending:  # a record just before a traceback is its account (even if cut)
                out.extend(self._settle_reported(st, line))
            st.reports[line.rank] = TracebackReport(
                line, self._preceding(st, before), window=self.window, hold=self.hold, now=now,
                group=header.group("kind") == "Exception Group ")
            return out
        fault = _FAULT_RE.match(text.strip())
        if fault is not None:
            out = self._close_rank(st, line.rank)
            st.reports[line.rank] = FaultReport(line, fault.group("reason"), hold=self.hold,
                                                now=now)
            return out
        if NcclTable.header(text):
            st.table = NcclTable(text)
            return []
        if stack_dump_start(text):
            out = self._close_rank(st, line.rank)
            st.reports[line.rank] = StackDumpReport(line, hold=self.hold, now=now)
            return out
        if backtrace_start(text):
            out = self._close_rank(st, line.rank)
            st.reports[line.rank] = BacktraceReport(line, hold=self.hold, now=now)
            return out
        raised = raised_from(text) if not in_traceback else None
        if raised is not None:  # a native exception thrown, its message on the line before
            message = strip_header(next((b for b in reversed(before(3)) if b.strip()),
                                        "")).strip()
            thrown = Crash("exception", None, clip(f"{message} (raised from {raised})", 200))
            return self._emit(st, self._crash(st, thrown, line, what=clip(message, 200),
                                              frame=raised))
        crash = match_crash(text)
        if crash is not None and crash.kind == "exit" and self._explained(st, now):
            crash = None  # the exit report of a failure already read: its evidence, not news
        if crash is not None:
            if crash.quiet or (crash.kernel and st.content == "job"):
                return []  # Ctrl-C; a kernel message quoted in a job's output
            if crash.kind == "abort" and text.lstrip().startswith("terminate called"):
                out = self._close_rank(st, line.rank)
                if line.lineno > st.crash_until:
                    st.reports[line.rank] = TerminateReport(line, hold=self.hold, now=now)
                return out
            return self._emit(st, self._crash(st, crash, line))
        check = match_check(text, (before(1) or [""])[-1] if text.startswith(" ") else "")
        if check is not None:
            return self._emit(st, self._check(check, line))
        bare = strip_header(text)
        stripped = text.strip()
        if not in_traceback:  # else: the traceback's message, or its own output
            flat = flattened(bare.strip())
            frames, exc = flat if flat is not None else (None, bare_exception(bare.strip()))
            if exc is not None or frame_line(bare):
                out = self._close_rank(st, line.rank)
                st.reports[line.rank] = TracebackReport(
                    line, self._preceding(st, before), window=self.window, hold=self.hold,
                    now=now, exc=exc, frames=frames)
                return out
        record = parse_any(text)
        if record is not None:
            if record.level in ("error", "fatal"):
                return self._emit(st, self._record(st, record, line, now))
            return []
        codes = [c for c in self.codes.find(text) if c.strong]
        if codes:
            record = Record("error", "code", codes[0].family, stripped)
            return self._emit(st, self._record(st, record, line, now, codes))
        return []

    def _explained(self, st: _StreamState, now: float) -> bool:
        """True when a process of ``st``'s job was just seen failing (a traceback being read
        or reported, a crash): a launcher's report of a failure status is then its end."""
        ended_at = self._ends.get(st.group)
        if ended_at is not None and now - ended_at <= self.hold + EXIT_NOTICE_SECONDS:
            return True
        return any(isinstance(report, TracebackReport)
                   for handle in self._groups.get(st.group, ())
                   for report in self._streams[handle].reports.values())

    def _close_rank(self, st: _StreamState, rank: str | None) -> list[Detection]:
        """Finish what is open on ``rank`` before another reading starts there."""
        report = st.reports.pop(rank, None)
        return self._finish(st, report) if report is not None else []

    def _preceding(self, st: _StreamState, before: Callable[[int], list[str]]) -> Preceding:
        return Preceding(quiet="test harness") if st.harness else Preceding.of(before(2),
                                                                                level_of)

    # -- findings -------------------------------------------------------------------------------

    def _finish(self, st: _StreamState, report: Report, *, ended: bool = False,
                ) -> list[Detection]:
        """``ended``: the rank's output stopped there (its stream closed, or the hold passed
        with the report still open), not another reading taking its place."""
        if isinstance(report, TracebackReport):
            outcome = report.outcome()
            if outcome.exc is None:
                cut = report.cut() if ended else None
                return self._emit(st, self._cut_traceback(report, *cut)) if cut else []
            return self._emit(st, self._traceback(outcome))
        if isinstance(report, FaultReport):
            st.crash_until = report.line.lineno + self.crash_lines
            return self._emit(st, self._faulthandler(report))
        if isinstance(report, TerminateReport):
            if report.line.lineno <= st.crash_until:
                return []
            st.crash_until = report.line.lineno + self.crash_lines
            what = report.what
            summary = clip(report.line.text.strip() + (f": {what}" if what else ""), 300)
            crash = Crash("abort", 6, summary)
            return self._emit(st, self._crash(st, crash, report.line, fold_window=False,
                                              what=what))
        if isinstance(report, BacktraceReport):
            return self._emit(st, self._crash(st, report.crash(), report.line,
                                              frame=report.culprit()))
        if isinstance(report, StackDumpReport):
            blocked = report.blocked()
            return self._emit(st, self._blocked(report, *blocked)) if blocked else []
        return []

    def _blocked(self, report: StackDumpReport, thread: str, frame: Frame) -> _Found:
        """A stack dump with a thread blocked in a collective or a wait (see the report)."""
        captures: list[tuple[str, str]] = [("frame", frame.describe())]
        if thread:
            captures.append(("thread", thread))
        key = "|".join(("blocked", frame.func, frame.path.rsplit("/", 1)[-1]))
        summary = clip(f"a stack dump shows {thread or 'a thread'} blocked in {frame.func} "
                       f"({frame.path}:{frame.line})", 300)
        return _Found(BLOCKED_STACK, "Process Stack Dump Shows It Blocked Waiting",
                      Severity.WARNING, report.line, "stack_dump", key,
                      _with_summary(_BLOCKED_REMEDY, summary), captures=tuple(captures),
                      facts=tuple(captures), owner="unknown",
                      labels=(("layer", "generic"), ("shape", "blocked_stack")))

    def _traceback(self, outcome: Outcome) -> _Found:
        exc = outcome.exc
        assert exc is not None
        thread = outcome.context == "thread"
        title = ("Python Thread Died On An Uncaught Exception" if thread
                 else "Python Process Ended On An Uncaught Exception")
        captures: list[tuple[str, str]] = [("exception", exc.cls)]
        if exc.message:
            captures.append(("message", exc.message))
        if outcome.frame is not None:
            captures.append(("frame", outcome.frame.describe()))
        if outcome.cause is not None:
            captures.append(("cause", clip(outcome.cause.describe, 200)))
        facts = [*captures, ("chain", str(outcome.chain))]
        if exc.inner:
            facts.append(("wrapped", exc.inner))
        if outcome.evidence:
            facts.append(("ended", outcome.evidence))
        facts.extend(self._code_facts(exc.message))
        where = f" at {outcome.frame.describe()}" if outcome.frame is not None else ""
        summary = clip(f"{exc.describe}{where}", 300)
        key = "|".join(("tb", exc.cls, mask(exc.message, quoted=True),
                        _frame_key(outcome.frame)))
        shape = "traceback" if outcome.frame is not None else "exception"
        owner = ("user" if outcome.frame is not None
                 and exc.cls.rsplit(".", 1)[-1] in _BUILTIN_EXCEPTIONS else "unknown")
        return _Found(TRACEBACK, title, Severity.WARNING if thread else Severity.ERROR, exc.line,
                      "traceback", key, _with_summary(_TB_REMEDY, summary),
                      captures=tuple(captures), facts=tuple(facts), owner=owner,
                      labels=(("layer", "generic"), ("shape", shape)),
                      context=outcome.lines)

    def _cut_traceback(self, report: TracebackReport, innermost: Frame,
                       user: Frame | None) -> _Found:
        """A traceback whose output stopped before its exception line: the process died or
        hung while printing it (a kill, a full pipe), or the log was cut there."""
        frame = user or innermost
        captures: list[tuple[str, str]] = [("frame", frame.describe())]
        if user is not None and user is not innermost:
            captures.append(("innermost", innermost.describe()))
        if report.ipython:  # IPython's header named the class its cut-off last line held
            captures.append(("exception", report.ipython))
        key = "|".join(("cut", _frame_key(frame)))
        which = f"a traceback ({report.ipython})" if report.ipython else "a traceback"
        summary = clip(f"{which} stopped at {innermost.describe()} before its exception "
                       "line", 300)
        return _Found(TRACEBACK, "Python Traceback Cut Off Before Its Exception",
                      Severity.WARNING, report.last_read, "traceback", key,
                      _with_summary(_CUT_REMEDY, summary), captures=tuple(captures),
                      facts=tuple(captures), owner="unknown",
                      labels=(("layer", "generic"), ("shape", "cut_traceback")),
                      context=tuple(report.lines))

    def _faulthandler(self, report: FaultReport) -> _Found:
        frame = report.frame()
        captures: list[tuple[str, str]] = [("reason", report.reason)]
        if frame is not None:
            captures.append(("frame", frame.describe()))
        where = f" at {frame.describe()}" if frame is not None else ""
        summary = clip(f"Fatal Python error: {report.reason}{where}", 300)
        key = "|".join(("fault", mask(report.reason), _frame_key(frame)))
        return _Found(NATIVE_CRASH, "Python Interpreter Crashed (Fatal Python Error)",
                      Severity.ERROR, report.line, "faulthandler", key,
                      _with_summary(_CRASH_REMEDY, summary), captures=tuple(captures),
                      facts=tuple(captures),
                      labels=(("layer", "generic"),
                              ("shape", "faulthandler" if frame is not None else "native_crash")))

    def _crash(self, st: _StreamState, crash: Crash, line: LineIn, *, fold_window: bool = True,
               what: str = "", frame: str = "") -> _Found | None:
        if fold_window:
            if line.lineno <= st.crash_until:
                return None
            st.crash_until = line.lineno + self.crash_lines
        captures: list[tuple[str, str]] = [("kind", crash.kind)]
        if crash.signal is not None:
            captures.append(("signal", signal_name(crash.signal)))
        if crash.status is not None:
            captures.append(("status", str(crash.status)))
        if what:
            captures.append(("what", what))
        if frame:
            captures.append(("frame", frame))
        if crash.kind == "exit":
            severity, title = Severity.WARNING, "Process Exited With A Failure Status"
        elif crash.kind == "exception":
            severity, title = Severity.WARNING, "Native Exception Thrown"
        elif crash.kind == "signalled":
            severity, title = Severity.WARNING, "Launcher Signalled From Outside, Job Stopped"
        elif crash.fatal:
            severity, title = Severity.ERROR, "Process Crashed (Fatal Signal Or Abort)"
        else:
            severity, title = Severity.INFO, "Process Stopped By A Signal"
        facts = [*captures, *self._code_facts(what or line.text)]
        key = "|".join(("crash", crash.kind, str(crash.signal),
                        mask(what or frame or crash.summary)))
        return _Found(NATIVE_CRASH, title, severity, line, "native_crash", key,
                      _with_summary(_CRASH_REMEDY, crash.summary), captures=tuple(captures),
                      facts=tuple(facts),
                      labels=(("layer", "generic"), ("shape", "native_crash")))

    def _record(self, st: _StreamState, record: Record, line: LineIn, now: float,
                codes: list[Code] | None = None) -> _Found | None:
        message = record.message
        lowered = message.lower()
        exhausted = "attempt" in lowered and _LAST_ATTEMPT_RE.search(lowered) is not None
        if not exhausted and _BENIGN_RECORD_RE.search(lowered):
            return None
        if record.source.rsplit("/", 1)[-1] in _BENIGN_SOURCES:
            return None
        component = classify(record)
        if codes is None:
            codes = self.codes.find(message)
        if codes and component == "other":
            component = codes[0].component
        if st.harness:
            severity = Severity.INFO  # a test harness's captured log: the test's, not the node's
        elif record.level == "fatal":
            severity = Severity.ERROR
        elif (component != "other" or codes or exhausted or _EXIT_RE.search(lowered)
              or _STRONG_RE.search(lowered) or _STOPPED_RE.search(lowered)):
            severity = Severity.WARNING
        else:
            severity = Severity.INFO
            st.info_times = [t for t in st.info_times if now - t < 3600.0]
            if len(st.info_times) >= MAX_INFO_PER_HOUR:
                return None
            st.info_times.append(now)
        template = mask(message, quoted=True)
        captures: list[tuple[str, str]] = [("component", component), ("level", record.level),
                                           ("template", template)]
        if record.source:
            captures.append(("source", clip(record.source, 120)))
        facts = [*captures, ("format", record.form), *self._code_facts(message, codes)]
        if codes:
            captures.extend((("code", codes[0].name), ("meaning", codes[0].meaning)))
        what = f"{codes[0].name} ({codes[0].meaning}): " if codes else ""
        summary = clip(f"{record.level.upper()} from {component.replace('_', ' ')}: {what}"
                       f"{message}", 300)
        title = ("Fatal Log Record" if record.level == "fatal" else "Error Log Record") + \
            f" ({_COMPONENT_TITLES[component]})"
        key = "|".join(("record", component, record.level, template))
        found = _Found(ERROR_RECORD, title, severity, line, "error_record", key,
                       _with_summary(_RECORD_REMEDY, summary), captures=tuple(captures),
                       facts=tuple(facts),
                       labels=(("layer", "generic"), ("shape", "error_record"),
                               ("component", component)))
        if severity == Severity.INFO and not st.harness:
            return dataclasses.replace(found, wait=True)
        return found

    def _check(self, check: FailedCheck, line: LineIn) -> _Found:
        captures = (("tool", check.tool), ("check", check.check))
        owner = "node" if check.tool in ("nvidia-smi", "npu-smi", "ascend-dmi", "gpu-burn",
                                         "health check", "device health",
                                         "health label") else "unknown"
        severity = Severity.ERROR if check.severity == "error" else Severity.WARNING
        key = "|".join(("check", check.tool, mask(check.check)))
        return _Found(FAILED_CHECK, "Diagnostic Reports A Failed Check", severity, line,
                      "failed_check", key,
                      _with_summary(_CHECK_REMEDY, f"{check.tool}: {check.check}"),
                      captures=captures, facts=captures, owner=owner,
                      labels=(("layer", "generic"), ("shape", "failed_check")))

    def _code_facts(self, text: str,
                    codes: list[Code] | None = None) -> list[tuple[str, str]]:
        found = codes if codes is not None else self.codes.find(text)
        return [(f"code {c.name}", f"{c.family}: {c.meaning}") for c in found[:3]]

    def _emit(self, st: _StreamState, found: _Found | None) -> list[Detection]:
        if found is None or not self._fresh(st, found.key):
            return []
        out: list[Detection] = []
        seen = st.exit_seen
        if found.wait and seen is not None and 0 <= found.line.lineno - seen[0] <= RECORD_WINDOW:
            # just after a launcher reported a child's end (or began killing the rest): the
            # record is its account of that end
            found = dataclasses.replace(found, severity=Severity.WARNING, wait=False,
                                        facts=(*found.facts, ("ended", seen[1])))
        if found.wait:  # information only, unless the process ends right after it
            if len(st.pending) >= MAX_PENDING:
                out.extend(self._settle(st, "overflow"))
            st.pending.append(_Pending(found, self.clock.monotonic() + self.hold))
            return out
        if found.severity >= Severity.WARNING and found.shape in _ENDINGS:
            self._ends[st.group] = self.clock.monotonic()
            self._ends.move_to_end(st.group)
            while len(self._ends) > MAX_EXIT_GROUPS:
                self._ends.popitem(last=False)
        if st.pending and found.severity >= Severity.WARNING and found.shape in _ENDINGS:
            out.extend(self._settle(st, "ended", clip(found.line.text, 160)))  # they came first
        out.append(self._detection(st, found))
        return out

    def _fresh(self, st: _StreamState, key: str) -> bool:
        """True (and remembered) unless the same finding was reported on this stream lately."""
        now = self.clock.monotonic()
        seen = st.fired.get(key)
        if seen is not None and now - seen < self.dedupe:
            return False
        st.fired[key] = now
        st.fired.move_to_end(key)
        while len(st.fired) > MAX_KEYS:
            st.fired.popitem(last=False)
        return True

    def _settle_reported(self, st: _StreamState, line: LineIn) -> list[Detection]:
        """A traceback starts on ``line``: the record waiting on the line just before it (of
        the same rank) reported the failure the traceback shows; it is a warning now, whether
        or not the traceback is read to its end (an excerpt, a log cut mid-report)."""
        out: list[Detection] = []
        keep: list[_Pending] = []
        for waiting in st.pending:
            found = waiting.found
            if found.line.lineno == line.lineno - 1 and found.line.rank == line.rank:
                out.append(self._detection(st, dataclasses.replace(
                    found, severity=Severity.WARNING, wait=False,
                    facts=(*found.facts, ("followed by", clip(line.text, 160))))))
            else:
                keep.append(waiting)
        st.pending = keep
        return out

    def _settle(self, st: _StreamState, why: str, ended: str = "",
                now: float = 0.0) -> list[Detection]:
        """Decide the records waiting on ``st``: each becomes a warning naming ``ended`` when
        the process ended (``why`` = "ended"), or information when its window is over ("line":
        one more line passed; "time": ``now`` reached; "close": the stream ended; "overflow":
        the oldest makes room)."""
        out: list[Detection] = []
        keep: list[_Pending] = []
        for i, waiting in enumerate(st.pending):
            found = waiting.found
            if why == "line":
                waiting.lines += 1
            if why == "ended":
                out.append(self._detection(st, _Found(
                    found.signature, found.title, Severity.WARNING, found.line, found.shape,
                    found.key, found.remediation, found.captures,
                    (*found.facts, ("ended", ended)), found.labels, found.owner)))
            elif (why == "close" or (why == "overflow" and i == 0)
                  or (why == "line" and waiting.lines >= RECORD_WINDOW)
                  or (why == "time" and waiting.deadline <= now)):
                out.append(self._detection(st, found))
            else:
                keep.append(waiting)
        st.pending = keep
        return out

    def _detection(self, st: _StreamState, found: _Found) -> Detection:
        """``found`` as a detection of ``st``: its time is when its line was read (a held
        traceback is delivered later), its ``line_time`` the line's own timestamp if any."""
        info = st.info
        line = found.line
        return Detection(
            signature=found.signature, title=found.title, severity=found.severity,
            status=self.record_status if found.signature == ERROR_RECORD else self.status,
            source=info.source, path=info.path, stream_key=info.key,
            line=line.lineno, offset=line.offset, text=line.text,
            time=line.read or self.clock.time(), remediation=found.remediation,
            context=found.context, rank=line.rank, captures=found.captures, labels=found.labels,
            host=self.host, facts=found.facts, owner=found.owner,
            line_time=parse_prefix(line.text, want_time=True, now=self.clock.time()).time)


_COMPONENT_TITLES = {
    "accelerator_runtime": "Accelerator Runtime", "collective": "Collective Library",
    "interconnect": "Interconnect", "storage": "Storage", "scheduler": "Scheduler",
    "container_runtime": "Container Runtime", "other": "Other Component",
}


def _selected(text: str) -> bool:
    """True for a line the detector's interests select (the per-line driver, which is handed
    every line, tests this to agree with the per-chunk one)."""
    encoded = text.encode("utf-8", "replace")
    return _INTEREST.search(encoded) is not None or ERROR_INTEREST.search(encoded) is not None


def _may_start_shape(text: str) -> bool:
    """``_selected``, and not only for failure words inside names of figures."""
    if not _selected(text):
        return False
    if _NAMED_FIGURE_RE.search(text) is None:
        return True
    return _selected(_NAMED_FIGURE_RE.sub(" ", text))


class _Before:
    """The lines before the current one, of its rank (read only when a shape asks)."""

    __slots__ = ("_rank", "_recent")

    def __init__(self, recent: RecentLines, rank: str | None) -> None:
        self._recent, self._rank = recent, rank

    def __call__(self, count: int) -> list[str]:
        return self._recent.before(count, self._rank)


def _frame_key(frame: Frame | None) -> str:
    return f"{frame.path}:{frame.func}" if frame is not None else "-"


def _with_summary(base: Remediation, summary: str) -> Remediation:
    return Remediation(summary=f"{base.summary} {summary}", steps=base.steps,
                       runbook=base.runbook, action=base.action)
