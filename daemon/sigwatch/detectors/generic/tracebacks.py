"""Python tracebacks (and faulthandler stacks) read line by line, and whether they ended anything.

A ``TracebackReport`` opens on ``Traceback (most recent call last):`` wherever it sits in the
line (torchrun's failure table puts it after ``traceback :``), collects frames, and reads the
exception line: the first line indented less than the frames, whatever its class
(``AssertionError``, ``StopIteration: ...``, ``hydra.errors.InstantiationException: ...``,
``ray.exceptions.RayTaskError(ValueError): ...``). Frames printed at column 0 keep their source
lines; a traceback flattened onto one line is read by ``flattened``. Then it stays open for a
window of lines of the same rank, during which:

- another traceback (``During handling of the above exception``, ``The above exception was the
  direct cause``, ``Original Traceback``, ``concurrent.futures`` ``_RemoteTraceback``,
  torchrun's table, Ray's remote frames) joins the same report: one failure, one detection,
  named by the last exception of the chain (what ended the process);
- the lines say whether the process went on (a progress line, a retry, a passing test) or
  ended (a launcher's failure, an exit code, a kill).

It fires when the window ends, the stream ends, or ``hold`` seconds pass, unless the process
went on (and nothing said it ended), the exception is not a failure (``KeyboardInterrupt``,
``SystemExit: 0``), or the traceback was only logged (``WARNING:...`` / ``INFO`` just before
it: not a native logger's record, which names a C/C++ source, nor a progress or metrics
record that names no failure, nor before a chain whose last traceback starts at
``<module>``), ignored (``Exception ignored in:``) or printed by a test harness.

``FaultReport`` reads CPython's faulthandler dump after ``Fatal Python error: ...``: the frames
of the current thread, most recent first. ``TerminateReport`` waits one line for the
``what():`` that follows ``terminate called after throwing an instance of ...``.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sigwatch.detectors.generic._text import ISO_STAMP, Frame, clip, is_user_frame, literal_first
from sigwatch.detectors.progress import ProgressParser

__all__ = [
    "EXIT_NOTICE_SECONDS",
    "HEADER_RE",
    "Exc",
    "FaultReport",
    "LineIn",
    "Preceding",
    "Report",
    "StackDumpReport",
    "TerminateReport",
    "TracebackReport",
    "bare_exception",
    "continued",
    "ended",
    "exit_report",
    "flattened",
    "frame_line",
    "parse_exception",
    "stack_dump_start",
    "unmarked",
]

HEADER_RE = re.compile(
    # (glued to a progress bar's end: ``0/2395 [00:00<?, ?it/s]Traceback (most recent ...``)
    r"(?:^|[\s:|+\]])(?P<kind>Original |Exception Group )?Traceback \(most recent call last\):?"
    r"\s*$")
_FRAME_RE = re.compile(
    r"^(?P<ind>[ \t]*)>?[ \t]*File \"(?P<path>[^\"]{1,400})\", line (?P<line>\d{1,7})"
    r"(?:, in (?P<func>\S.{0,200}?))?\s*$"
    # a frame whose start was cut off (a pasted or truncated log): the tail must be complete
    r"|^(?P<ind2>[ \t]*)(?P<path2>[^\"\s]{0,400})\", line (?P<line2>\d{1,7}), in "
    r"(?P<func2>\S.{0,200}?)\s*$")
_FAULT_FRAME_RE = re.compile(
    r"^[ \t]*File \"(?P<path>[^\"]{1,400})\", line (?P<line>\d{1,7}) in (?P<func>\S.{0,200}?)"
    r"\s*$")
_CELL_RE = re.compile(r"^(?P<ind>[ \t]*)(?:Cell In\[\d{1,6}\]|Input In \[\d{1,6}\]), line \d")
# IPython's (and so Jupyter's and Colab's) own form: the header names the exception class
# (``RuntimeError        Traceback (most recent call last)``), frames are ``/path/x.py in
# train(self)`` (IPython 7 and older) or ``File /path/x.py:413, in train(self)`` (8 and
# newer), each followed by numbered source lines with an arrow at the one that ran
# (``--> 413     super().train(...)``) and, on Colab, ``13 frames`` where frames were folded.
_IPYTHON_HEADER_RE = re.compile(
    r"^(?P<cls>[A-Za-z_][\w.]{0,160}?)[ \t]{2,}Traceback \(most recent call last\)\s*$")
_IPYTHON_FRAME_RE = re.compile(
    r"^(?P<ind>)(?:File (?P<path>\S.{0,400}?):(?P<line>\d{1,7}), in (?P<func>\S.{0,200}?)"
    r"|(?P<path2>(?:<ipython-input-[\w-]{1,80}>|\S{1,400}\.py)) in (?P<func2>[\w.<>]{1,200})"
    r"\(.{0,400}\))\s*$")
_IPYTHON_ARROW_RE = re.compile(r"^-*> ?(\d{1,7})\b")
_IPYTHON_SOURCE_RE = re.compile(r"^(?:-*> ?|[ \t]+)\d{1,7}\b|^\d{1,4} frames?\s*$")
_CPP_FRAME_RE = re.compile(r"^\d{1,4}[ \t]{2,}(?P<func>\S.*?)\s*$")
_CPP_RULE_RE = re.compile(r"^(?:-{10,}|Error Message Summary:)\s*$")
_REPEAT_RE = re.compile(r"^\s*\[Previous line repeated \d+ more times?\]")
_CARET_RE = re.compile(r"^\s*[~^]+[\s~^]*$")
_MARGIN_RE = re.compile(r"^[ \t]*(?:[|+][-+ \t]*)+")
_EXC_RE = re.compile(
    r"^(?P<cls>[A-Za-z_]\w{0,80}(?:\.[A-Za-z_<>][\w<>]{0,80}){0,12})"
    r"(?:\((?P<inner>[A-Za-z_][\w.]{0,120})\)| \((?P<aside>[^()]{1,60})\))?"
    r"(?::(?:[ \t](?P<msg>.*)|[ \t]*))?$")
# An exception line on its own (its traceback cut off, or never printed): the class must say
# it is an exception (by its name, or by the module it lives in: ``torch._dynamo.exc.
# FailOnRecompileLimitHit``, a package's ``errors``/``exceptions`` module), and carry a message
# or its module.
_BARE_RE = re.compile(
    r"^(?:[A-Z]\w{2,80}: )?(?:(?:[A-Za-z_]\w{0,80}\.){0,12}[A-Za-z_]\w{0,80}(?:Error|Exception"
    r"|Failure|Fault|Interrupt|Exit|Timeout)|Exception"
    r"|(?:[A-Za-z_]\w{0,80}\.){1,10}(?:exc|errors?|exceptions?)\.[A-Z]\w{2,80}(?=: \S))"
    r"(?:\([A-Za-z_][\w.]{0,120}\)| \([^()]{1,60}\))?:(?: \S|\s*$)")
# A node's name as pdsh, clush and PBS's mpiexec put it before each line of output
# (``x3202c0s31b0n0: ``, ``gpu-node-07: ``): lower case, with a digit (words are not nodes).
_NODE_PREFIX_RE = re.compile(r"^(?=[a-z][\w.-]{0,62}\d)[a-z][\w.-]{1,62}: (?=\S)")
_DIGITS_RE = re.compile(r"\d")
# Markup a page or a chat wraps around a line it quotes (``**...**``, ``__...__``, a backtick
# span): the same mark on both ends.
_MARKUP_RE = re.compile(r"^(?P<mark>\*\*|__|`{1,3})(?P<inner>\S(?:.{0,2000}\S)?)(?P=mark)$")
# A traceback flattened onto one line (a page or a log shipper that lost its newlines, and
# sometimes its quotes): ``File "a.py", line 4, in f <source> RuntimeError: message``.
_FLAT_START_RE = re.compile(r"^(?:Traceback \(most recent call last\):?\s+)?File ")
_FLAT_FRAME_RE = re.compile(
    r"(?:^|\s)File \"?(?P<path>[^\",]{1,400}?)\"?, line (?P<line>\d{1,7}), in (?P<func>\S{1,200})")
_FLAT_EXC_RE = re.compile(
    r"(?:^|\s)(?=(?:[A-Za-z_]\w{0,80}\.){0,12}[A-Z]\w{0,80}(?:Error|Exception|Failure|Fault"
    r"|Exit|Timeout)(?:\([A-Za-z_][\w.]{0,120}\))?:(?:\s|$))")
# Lower-case exception classes in the standard library (module-qualified).
_LOWER_EXC = frozenset({"timeout", "gaierror", "herror", "error"})
_NOT_EXC = frozenset({"During", "The", "Traceback", "Original", "Process", "Exception",
                      "Error", "Warning", "Note", "Hint", "Caused", "Current", "Thread"})
_EMPTY_EXC = frozenset({"Exception:", "Error:", "Exception"})
_NOT_A_FAILURE = frozenset({"KeyboardInterrupt", "GeneratorExit", "BdbQuit", "bdb.BdbQuit"})

# What a traceback's next lines say about the process. Written in lowercase and matched on
# the lowercased line (``literal_first``: ``re.IGNORECASE`` would defeat its skipping); the
# lines that are only ``ok`` or dots are whole-line forms.
CONTINUED_WORDS = (
    r"\bretry(?:ing)?\b|\bwill retry\b|\battempt \d{1,4}\s*(?:/|of)\s*\d{1,4}|retries left"
    r"|\brecovered\b|\bpassed\b|\bcontinuing\b|\bskipping (?:this|the|bad)")
_CONTINUED_RE = re.compile(literal_first(CONTINUED_WORDS))
_CONTINUED_LINE_RE = re.compile(r"(?i)ok|\.{1,80}")
ENDED_WORDS = (
    r"exit(?:ed)? (?:with )?(?:code|status)[ :=]*-?[1-9]|exitcode\s*:\s*-?[1-9]"
    r"|non-zero exit|ChildFailedError|\bFAILED\b|core dumped"
    r"|srun: error|slurmstepd: error|terminate called|exited on signal|Signals\.SIG"
    r"|error: task \d|Worker group FAILED|failed \(exitcode|Fatal Python error"
    r"|ProcessExitedException|ProcessRaisedException|process \d+ terminated with")
_ENDED_RE = re.compile(literal_first(ENDED_WORDS))
_ENDED_START_RE = re.compile(r"(?:Killed|Aborted)\b")


# A launcher's, a scheduler's or a shell's report that a process of the job ended, written
# after it ended, usually by another process into another file: torchrun's worker failure, its
# failure table, ChildFailedError and its SIGTERM fan-out; srun's and slurmstepd's task failures;
# mpirun/prterun and MPICH; torch.multiprocessing; DeepSpeed's launcher; a shell's job report.
# Matched on the line as written (the words keep their case).
EXIT_REPORT_WORDS = (
    r"failed \(exitcode: ?-?\d|exitcode\s*:\s*-?[1-9]|ChildFailedError|Worker group FAILED"
    r"|closing signal SIG[A-Z]{3,6}|srun: error: .{0,200}?tasks? \d|slurmstepd: error: \*\*\*"
    r"|noticed that process rank \d|terminated normally, but \d+ process"
    r"|=   EXIT CODE: \d|process \d+ terminated with (?:exit code|signal)"
    r"|ProcessExitedException|exits with return code = -?[1-9]|returned non-zero exit status"
    r"|line \d{1,6}: +\d{1,9} (?:Killed|Aborted|Segmentation fault|Bus error)"
    r"|Terminating process \d{1,10} via signal SIG[A-Z]{3,6}|Killing subprocess \d{1,10}"
    r"|Process \d{1,7} exit with status code -?[1-9]|status failed cmd \[.{0,4000}\] code [1-9]")
_EXIT_REPORT_RE = re.compile(EXIT_REPORT_WORDS)
EXIT_NOTICE_SECONDS = 5.0
"""An exit report read up to this long before a traceback's exception line is taken as the
report of that traceback's process ending (files are read in turn: the launcher's file may be
read first in the same pass, though written after): it ends the traceback's hold, and it is not
the traceback's root cause (``detectors/rootcause.py``)."""


def exit_report(text: str) -> bool:
    """True when ``text`` is a launcher's, a scheduler's or a shell's report that a process
    ended with a failure (evidence that a held traceback of the same job ended its process)."""
    return _EXIT_REPORT_RE.search(text) is not None


def ended(text: str) -> bool:
    """True when ``text`` says the process ended: an exit status, a kill, a launcher's
    failure (what a pending record or a held traceback waits for)."""
    return _ENDED_RE.search(text) is not None or _ENDED_START_RE.match(text) is not None


def continued(text: str) -> bool:
    """True when ``text`` says the process went on after a traceback (a retry, a test that
    passed, ``ok``; progress lines are read by the caller)."""
    return (_CONTINUED_RE.search(text.lower()) is not None
            or _CONTINUED_LINE_RE.fullmatch(text) is not None)


# What joins the next traceback to this failure: Python's chain messages, a remote traceback
# quoted in triple quotes, torch.multiprocessing's and torchrun's framing of a child's failure.
_CHAIN_RE = re.compile(
    r"^During handling of the above exception|^The above exception was the direct cause"
    r"|^\"\"\"$|terminated with the following error|^Root Cause \(first observed failure\)"
    r"|^Caused by:")
_TABLE_RE = re.compile(r"traceback\s*:")
# Exceptions that wrap a failure reported elsewhere (the next traceback is its cause).
_WRAPPERS = frozenset({
    "ChildFailedError", "ProcessRaisedException", "_RemoteTraceback", "RemoteTraceback",
    "BrokenProcessPool", "RayTaskError", "RayActorError", "ActorDiedError",
    "WorkerCrashedError", "BackendCompilerFailed", "InstantiationException",
})
# Lines that only come before a traceback nobody had to act on.
_IGNORED_RE = re.compile(
    r"^Exception ignored\b|^Error in atexit\._run_exitfuncs|^--- Logging error ---"
    r"|^Error in sys\.excepthook")
_THREAD_RE = re.compile(r"^Exception in thread (?!\")\S.{0,120}:\s*$")
_DASHES_RE = re.compile(r"^(?:-{40,}|={40,})\s*$")
_UNITTEST_RE = re.compile(r"^(?:ERROR|FAIL): \w")
# A record a native logger wrote (c10's ``[W compiler_depend.ts:51]``, glog's ``W0719 ...
# socket.cpp:432]``): it names a C/C++ source, so it cannot be the Python logger that printed
# the traceback after it.
_NATIVE_RECORD_RE = re.compile(r"[\w.-]\.(?:c|cc|cpp|cxx|cu|h|hpp|ts|rs|go):\d{1,6}\]")
# A record that reports numbers (``total_loss=25.7 reg_loss=6.9``, ``loss: 0.12 | acc: 0.91``)
# and no failure is a progress or metrics line, not the message of a logged exception: the
# traceback after it was printed by the interpreter, not by that record's ``exc_info``.
_METRIC_RE = re.compile(r"\b[A-Za-z_][\w.]{0,40} ?[=:] ?[-+]?\.?\d")
_FAILURE_WORD_RE = re.compile(literal_first(
    r"error|fail|exception|traceback|could not|unable|cannot|can't|abort|crash|warn"))

# The file a record names as its writer (``spawn.py:169]``, ``(trainer:436)`` has none).
_RECORD_SOURCE_RE = re.compile(r"(?:^|[\s\[(/\\])(?P<file>[\w.-]{1,80}\.py):\d{1,6}\b")
# Words of a record that hands an exception on without calling it a failure (a retry, a
# fallback, a connection closed or lost: dask's ``Batched Comm Closed <UCX ...>``).
_CLAIM_WORD_RE = re.compile(
    r"retry|skipp|ignor|giving up|fall(?:ing)? ?back|recover|trying|attempt"
    r"|closed|lost|disconnect|timed out|timeout|interrupt|cancel|shutting down|stopp")

_PROGRESS = ProgressParser()
MAX_FRAMES = 200
MAX_CONTEXT = 40
MAX_OTHER_LINES = 100  # lines of other ranks a reading waits through before it ends


@dataclass(frozen=True, slots=True)
class LineIn:
    """One part of a line as the readers see it."""

    text: str
    rank: str | None
    lineno: int
    offset: int
    read: float = 0.0  # wall-clock time it was read (a held detection's own time)


@dataclass(frozen=True, slots=True)
class Exc:
    """An exception line: class, message, and where it was."""

    cls: str
    message: str
    line: LineIn
    inner: str = ""

    @property
    def describe(self) -> str:
        return f"{self.cls}: {self.message}" if self.message else self.cls

    @property
    def failure(self) -> bool:
        """False for an exception that ends nothing by failing (Ctrl-C, exit status 0)."""
        short = self.cls.rsplit(".", 1)[-1]
        if self.cls in _NOT_A_FAILURE or short in _NOT_A_FAILURE:
            return False
        if short in ("SystemExit", "Exit"):
            return self.message.strip().strip("'\"") not in ("", "0", "None")
        return True


_ENVELOPE_RE = re.compile(
    # (or a time stamp alone, and one blank: Docker's --timestamps, a log viewer's export)
    # (the envelope ends at one blank: the traceback's own indentation is not part of it)
    # (or a bare process tag, ``[1] `` before every line: a launcher's, DeePMD's under Horovod)
    rf"^(?P<env>.{{8,160}}?[\])][ \t]|\[\d{{1,5}}\][ \t]|{ISO_STAMP} )"
    r"(?=\s*Traceback \(most recent call last\)"
    r"|\s*File \"|"
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)\b)")


_ERROR_LEVEL_RE = re.compile(r"\b(?:ERROR|CRITICAL|FATAL)\b")


def _envelope(text: str) -> str:
    """The digit-masked envelope a first line carries before its traceback text ("" if none)."""
    m = _ENVELOPE_RE.match(text)
    return _DIGITS_RE.sub("0", m.group("env")) if m is not None else ""


def _frame(m: re.Match[str]) -> Frame | None:
    groups = m.groupdict()
    path = groups.get("path") or groups.get("path2")
    number = groups.get("line") or groups.get("line2")
    if path is None:
        return None  # a notebook cell
    # IPython 7's frames name no line: the arrow in their source lines does (``_read``)
    return Frame(path, int(number or 0),
                 (groups.get("func") or groups.get("func2") or "").strip())


def frame_line(text: str) -> bool:
    """True for a line that is a frame of a Python traceback (a headless traceback starts),
    also behind an envelope the report then learns (a logger's ``ERROR 04-21 20:40:51
    [engine.py:140]`` before every line of a traceback whose header was cut off)."""
    if _FRAME_RE.match(text) is not None:
        return True
    m = _ENVELOPE_RE.match(text)
    return m is not None and _FRAME_RE.match(text[m.end("env"):]) is not None


def unmarked(text: str) -> str:
    """``text`` without the markup a page wraps around a quoted line (``**...**``, a backtick
    span), or ``text`` as it is."""
    m = _MARKUP_RE.match(text)
    return m.group("inner") if m is not None else text


def bare_exception(text: str) -> Exc | None:
    """The exception a line names on its own (no traceback before it), or None.

    A wrapper's prefix (``UnfilteredStackTrace: RuntimeError: ...``) is kept in the message;
    markup around the line (``**pkg.FooError: message**``) is not part of it, nor is the name
    of the node a parallel shell put before it (``x3202c0s31b0n0: AssertionError: ...``).
    """
    text = unmarked(text)
    if _BARE_RE.match(text) is None:
        node = _NODE_PREFIX_RE.match(text)
        if node is None or _BARE_RE.match(text[node.end():]) is None:
            return None
        text = text[node.end():]
    return parse_exception(text)


def flattened(text: str) -> tuple[list[Frame], Exc] | None:
    """The frames and the exception of a traceback flattened onto one stripped line, or None.

    The line must start as a traceback does (its header or its first frame), name at least
    one frame, and end on an exception line after its last frame.
    """
    if _FLAT_START_RE.match(text) is None:
        return None
    found = list(_FLAT_FRAME_RE.finditer(text))
    if not found:
        return None
    start = _FLAT_EXC_RE.search(text, found[-1].end())
    if start is None:
        return None
    frames = [Frame(m.group("path").strip(), int(m.group("line")), m.group("func"))
              for m in found]
    exc = parse_exception(text[start.end():].strip())
    return (frames, exc) if exc is not None else None


def parse_exception(text: str) -> Exc | None:
    """The exception a stripped line names, or None (``line`` is filled by the caller)."""
    m = _EXC_RE.match(text)
    if m is None:
        return None
    cls = m.group("cls")
    last = cls.rsplit(".", 1)[-1]
    if last in _NOT_EXC and m.group("msg") is None and "." not in cls:
        return None
    # (a private class keeps its capital after the underscore: numpy's _ArrayMemoryError,
    # torch._C._LinAlgError)
    if not (last.lstrip("_")[:1].isupper() or ("." in cls and last in _LOWER_EXC)):
        return None
    if last in ("During", "The") or (m.group("msg") is None and last in _NOT_EXC):
        return None
    return Exc(cls, clip(m.group("msg") or "", 300), LineIn("", None, 0, 0),
               m.group("inner") or "")


@dataclass(slots=True)
class _Tb:
    frames: list[Frame] = field(default_factory=list)
    exception: Exc | None = None
    frame_indent: int | None = None
    top: Frame | None = None  # its outermost frame (``frames`` keeps the innermost)


@dataclass(frozen=True, slots=True)
class Preceding:
    """What the lines before a traceback header say (see ``Preceding.of``)."""

    quiet: str = ""  # why it can never fire ("" when it may)
    context: str = "process"  # process | thread
    source: str = ""  # the Python file the record before names as its writer ("" if none)

    @classmethod
    def of(cls, before: list[str], level_of: Callable[[str], str | None]) -> Preceding:
        """``before``: the lines just before the header, oldest first, same rank."""
        prev = before[-1].strip() if before else ""
        if not prev:
            return cls()
        if _IGNORED_RE.search(prev):
            return cls(quiet="ignored")
        if _THREAD_RE.match(prev):
            return cls(context="thread")
        if _DASHES_RE.match(prev) and len(before) > 1 and _UNITTEST_RE.match(before[-2]):
            return cls(quiet="test harness")
        level = level_of(prev)
        if (level in ("debug", "info", "warning") and _NATIVE_RECORD_RE.search(prev) is None
                and not _metrics(prev) and (level == "warning" or _may_log_exception(prev))):
            writer = _RECORD_SOURCE_RE.search(prev)
            return cls(quiet=f"logged at {level}",
                       source=writer.group("file") if writer is not None else "")
        return cls()


def _may_log_exception(record: str) -> bool:
    """True for an info or debug record that could be the message of an exception it logs
    (``logger.info("Upload failed, retrying:", exc_info=True)``): it names a failure, a retry
    or a fallback, or hands on to what follows with a colon. A plain statement ("an evaluation
    is run every 2000 iterations", "statistics will be calculated...", "Exiting with a
    successfully compiled graph") is the run's last record before the interpreter printed the
    traceback that ended it.
    A warning claims the traceback after it whatever it says: its writer chose a level that
    says the run goes on."""
    lowered = record.lower()
    return (_FAILURE_WORD_RE.search(lowered) is not None
            or _CLAIM_WORD_RE.search(lowered) is not None
            or record.rstrip().endswith(":"))


def _metrics(record: str) -> bool:
    """True for a progress or metrics record (two numbers by name, or what the progress
    reader reads) that names no failure: it reports no exception, so claims no traceback."""
    if _FAILURE_WORD_RE.search(record.lower()) is not None:
        return False
    return (_PROGRESS.parse(record) is not None
            or len(_METRIC_RE.findall(record)) >= 2)


@dataclass(slots=True)
class Outcome:
    """What a finished report found: fire it (``exc`` set) or not (``why``)."""

    exc: Exc | None
    why: str = ""
    cause: Exc | None = None
    frame: Frame | None = None
    chain: int = 1
    context: str = "process"
    evidence: str = ""
    lines: tuple[str, ...] = ()


class Report:
    """An open multi-line reading on one rank of one stream."""

    kind = ""

    def __init__(self, first: LineIn, hold_until: float | None) -> None:
        self.rank = first.rank
        self.start = (first.offset, first.lineno)
        self.deadline = hold_until
        self.finished = False
        self.others = 0  # lines of other ranks since this rank's last line was consumed

    def feed(self, line: LineIn, now: float) -> bool:
        """Take a line of the same rank; True when the report consumed it (part of it)."""
        raise NotImplementedError

    def observe(self, line: LineIn) -> None:
        """A line of another rank (a launcher's summary may say the process ended). Other
        ranks' lines bound the reading too: a rank that stopped printing has ended."""
        _ = line
        self.others += 1
        if self.others > MAX_OTHER_LINES:
            self.finished = True

    def held(self) -> int | None:
        """The offset of the line a detection would be on, while one is pending."""
        return None


class TracebackReport(Report):
    """One traceback, or a chain of them, on one rank (see the module docstring)."""

    kind = "traceback"

    def __init__(self, first: LineIn, preceding: Preceding, *, window: int, hold: float,
                 now: float, group: bool = False, exc: Exc | None = None,
                 frames: list[Frame] | None = None) -> None:
        """``first`` is the header, or the first frame of a traceback whose header was cut
        off (it is read as a frame), or ``exc``'s line for an exception printed alone (with
        ``frames``: a traceback flattened onto that one line)."""
        super().__init__(first, now + hold)
        self.preceding = preceding
        self.window = window
        self.hold = hold
        self.group = group
        # An envelope the launcher-prefix parser does not know ("2023-.. [job (pid 1)] [id] "
        # before every line): learnt from the first line, cut from the lines that carry the
        # same envelope (same characters, digits aside).
        self.envelope = _envelope(first.text)
        # A logger that re-logs the traceback at error level on every line says itself that
        # it reports a failure: its frames are not a native stack printed the Python way.
        self.logged_as_error = _ERROR_LEVEL_RE.search(self.envelope) is not None
        self.lines: deque[str] = deque(maxlen=MAX_CONTEXT)  # what the detection quotes
        self.tbs: list[_Tb] = [_Tb()]
        self.state = "frames"
        self.noise = 0
        self.after = 0
        self.continued = ""
        self.ended = ""
        self.linked = False  # a chain marker was read since the last exception line
        self.after_frame = False  # the last line read was a frame (its source line may follow)
        self.last_read = first  # the last line of the traceback read (a cut one ends there)
        self.trailing = 0  # lines of its rank read since then that were not the traceback's
        self.headed = exc is None and HEADER_RE.search(first.text) is not None
        # Paddle's report of an error raised in its C++ core (``C++ Traceback (most recent call
        # last):``, numbered frames, then ``Error Message Summary:`` and the error)
        self.cpp = self.headed and "C++ Traceback" in first.text
        ipython = _IPYTHON_HEADER_RE.match(first.text) if self.headed else None
        # the exception class an IPython header names (its line at the end may be cut off)
        self.ipython = ipython.group("cls") if ipython is not None else ""
        if exc is not None:
            self.tbs[0].exception = Exc(exc.cls, exc.message, first, exc.inner)
            if frames:
                self.tbs[0].frames = frames[-MAX_FRAMES:]
                self.tbs[0].top = frames[0]
            self.state = "after"
        elif not self.headed:
            self.feed(first, now)
        else:
            self.lines.append(first.text)

    # -- reading ---------------------------------------------------------------------------

    def feed(self, line: LineIn, now: float) -> bool:
        was_frame, self.after_frame = self.after_frame, False
        consumed = self._read(line, now, after_frame=was_frame)
        if consumed and self.state == "frames":
            self.lines.append(line.text)
            self.last_read, self.trailing = line, 0
            self.deadline = now + self.hold  # "no line for the hold" counts from the last one
        elif not consumed:
            self.trailing += 1
        return consumed

    def _read(self, line: LineIn, now: float, *, after_frame: bool = False) -> bool:
        text = line.text
        if self.envelope and _DIGITS_RE.sub("0", text[:len(self.envelope)]) == self.envelope:
            text = text[len(self.envelope):]
            line = LineIn(text, line.rank, line.lineno, line.offset, line.read)
        if self.group:
            margin = _MARGIN_RE.match(text)
            if margin is not None:
                text = " " * len(margin.group()) + text[margin.end():]
        header = HEADER_RE.search(text)
        if (header is not None and not self.headed and self.state == "frames"
                and self.tbs[-1].frames):
            # frames read without a header (``traceback.print_stack()``, a stack a library
            # printed as a warning) end where a traceback with its header starts: that one is
            # read on its own (it may be cut, or end in its exception)
            self.finished = True
            return False
        if header is not None and (self.state == "after" or not self.tbs[-1].frames):
            if self.state == "after" and not self._joins(text, header):
                self.finished = True  # another failure starts: this one is complete
                return False
            if self.tbs[-1].frames or self.tbs[-1].exception:
                self.tbs.append(_Tb())
            self.state = "frames"
            self.noise = 0
            self.linked = False
            return True
        if self.cpp and self.state == "frames":
            cpp = _CPP_FRAME_RE.match(text)
            if cpp is not None:
                if len(self.tbs[-1].frames) < MAX_FRAMES:  # outermost first, as Python's
                    self.tbs[-1].frames.append(Frame("", 0, clip(cpp.group("func"), 200)))
                return True
            if _CPP_RULE_RE.match(text):
                return True
        frame = _FRAME_RE.match(text) or _CELL_RE.match(text)
        if frame is None and self.ipython:
            frame = _IPYTHON_FRAME_RE.match(text)
            source = _IPYTHON_SOURCE_RE.match(text) if frame is None else None
            if source is not None or (frame is None and not text.strip()):
                arrow = _IPYTHON_ARROW_RE.match(text)
                last = self.tbs[-1].frames[-1] if self.tbs[-1].frames else None
                if arrow is not None and last is not None and last.line == 0:
                    self.tbs[-1].frames[-1] = Frame(last.path, int(arrow.group(1)), last.func)
                return self.state == "frames"  # a numbered source line, a fold, a blank
        tb = self.tbs[-1]
        if frame is not None:
            indent = len((frame.group("ind") or frame.groupdict().get("ind2") or "")
                         .expandtabs(4))
            if self.state == "after":
                if indent == 0:
                    return self._after(line, now)  # a frame of someone else's output
                self.tbs.append(_Tb())  # Ray: the remote task's frames follow its wrapper
                tb = self.tbs[-1]
                self.state = "frames"
            if tb.frame_indent is None:
                tb.frame_indent = indent
            found = _frame(frame)
            if found is not None:
                if tb.top is None:
                    tb.top = found
                self.after_frame = True
                tb.frames.append(found)
                if len(tb.frames) > MAX_FRAMES:
                    del tb.frames[: len(tb.frames) - MAX_FRAMES]
            return True
        if self.state == "after":
            return self._after(line, now)
        stripped = text.strip()
        indent = len(text) - len(text.lstrip(" \t"))
        if tb.frame_indent is not None and stripped and indent > tb.frame_indent:
            return True  # the source line under a frame, carets, locals
        if _REPEAT_RE.match(text) or _CARET_RE.match(text) or (not stripped and not tb.frames):
            return True
        exc = parse_exception(stripped) if stripped else None
        if exc is None and tb.frames and stripped in _EMPTY_EXC:
            # ``raise Exception(msg)`` with an empty message, right under its frames (torch's
            # spawn when a child died without a traceback), or ``raise Exception`` with none
            # (AutoAWQ's scale search): alone, ``Exception:`` is a heading
            exc = Exc(stripped.rstrip(":"), "", line)
        if exc is not None and (tb.frame_indent is None or indent <= tb.frame_indent
                                or not tb.frames):
            tb.exception = Exc(exc.cls, exc.message, line, exc.inner)
            self.state = "after"
            self.after = 0
            self.deadline = now + self.hold
            return True
        if after_frame and tb.frame_indent == 0 and stripped:
            return True  # frames printed without their indentation: the frame's source line
        self.noise += 1
        if self.noise > 8:
            self.finished = True  # not a traceback after all (or hopelessly interleaved)
        return False

    def _joins(self, text: str, header: re.Match[str]) -> bool:
        """True when a traceback starting now belongs to this failure's chain."""
        if self.linked or header.group("kind") == "Original " or _TABLE_RE.search(
                text, 0, header.start() + 1):
            return True
        last = self._last()
        return last is not None and last.cls.rsplit(".", 1)[-1] in _WRAPPERS

    def _after(self, line: LineIn, now: float) -> bool:
        _ = now
        text = line.text.strip()
        if _CHAIN_RE.search(text):
            self.linked = True
        self._evidence(text, same_rank=True)
        self.after += 1
        if self.after >= self.window:
            self.finished = True
        return False

    def exit_reported(self, now: float, evidence: str) -> None:
        """A launcher (or a scheduler, a shell) reported that a process of this job ended: a
        finished traceback stops waiting for lines that will not come; the report is the
        evidence, unless its own rank already said it went on."""
        if self.state != "after":
            return  # its frames are still being read: it is not finished
        if self.deadline is None or self.deadline > now:
            self.deadline = now
        if not self.ended and not self.continued:
            self.ended = clip(evidence.strip(), 160)

    def observe(self, line: LineIn) -> None:
        if self.state == "after":
            self._evidence(line.text.strip(), same_rank=False)
        super().observe(line)

    def _evidence(self, text: str, *, same_rank: bool) -> None:
        if not text:
            return
        if not self.ended and ended(text):
            self.ended = clip(text, 160)
        if same_rank and not self.continued and (
                continued(text) or _PROGRESS.parse(text) is not None):
            self.continued = clip(text, 160)

    def held(self) -> int | None:
        exc = self._last()
        return exc.line.offset if exc is not None and not self._quiet() else None

    def _quiet(self) -> str:
        """Why the lines before the header say this traceback ended nothing ("" if they do
        not). A logger's record before it does not hold for a chain whose last traceback
        starts at ``<module>``: a logger prints the frames from where the exception was caught,
        so the chain's last exception was raised while handling the first and caught by
        nothing below the top of the program; the record before it was about something else
        (a single traceback from ``<module>`` may be a module-level ``except`` that logged it,
        and stays quiet)."""
        quiet = self.preceding.quiet
        if quiet.startswith("logged at ") and len(self.tbs) > 1:
            top = self.tbs[-1].top
            if top is not None and top.func == "<module>":
                return ""
        source = self.preceding.source
        if quiet.startswith("logged at ") and source:
            # A record written from another file than the script the traceback starts in
            # (torch's ``spawn.py:169] Terminating process 114472 via signal SIGTERM`` before
            # the script's own traceback) cannot be a module-level ``except`` that logged it.
            top = self.tbs[0].top
            if (top is not None and top.func == "<module>"
                    and top.path.replace("\\", "/").rsplit("/", 1)[-1] != source):
                return ""
        return quiet

    # -- the verdict -------------------------------------------------------------------------

    def _last(self) -> Exc | None:
        for tb in reversed(self.tbs):
            if tb.exception is not None:
                return tb.exception
        return None

    def cut(self) -> tuple[Frame, Frame | None] | None:
        """A traceback whose output ended inside its frames (its stream closed, or no line
        came for the hold): (its innermost frame, the innermost frame of the user's code).
        None when it has an exception line, no header (frames alone may be a native stack
        printed the Python way; unless a logger's error-level envelope is on them), no frame,
        a line of its rank after it (the output went on: nothing ended there), or is quiet
        for another reason."""
        if (not (self.headed or self.logged_as_error) or self.state != "frames"
                or self._last() is not None or self.continued or self.trailing):
            return None
        innermost = next((tb.frames[-1] for tb in reversed(self.tbs) if tb.frames), None)
        if (innermost is None or self._quiet() or self._printing_caller()
                or self.ipython.rsplit(".", 1)[-1] in _NOT_A_FAILURE):
            return None
        return innermost, self._user_frame()

    def _printing_caller(self) -> str:
        """The standard-library caller that printed this traceback and went on ("" if none)."""
        top = self.tbs[0].top if len(self.tbs) == 1 else None
        if top is not None and top.func in _PRINTING_CALLERS and top.path.endswith(
                _PRINTING_CALLERS[top.func]):
            return top.func
        return ""

    def _user_frame(self) -> Frame | None:
        """The innermost frame of the user's code, in the last traceback that has one."""
        for tb in reversed(self.tbs):
            users = [f for f in tb.frames if is_user_frame(f.path)]
            if users:
                return users[-1]
        return None

    def outcome(self) -> Outcome:
        """Whether to fire, on which exception, with which user frame."""
        last = self._last()
        if last is None:
            return Outcome(None, "no exception line")
        quiet = self._quiet()
        if quiet:
            return Outcome(None, quiet)
        caller = self._printing_caller()
        if caller:
            return Outcome(None, f"printed and passed over by {caller}")
        if not last.failure:
            return Outcome(None, f"{last.cls} is not a failure")
        if self.continued and not self.ended:
            return Outcome(None, f"the process went on: {self.continued}")
        excs = [tb.exception for tb in self.tbs if tb.exception is not None]
        first = excs[0]
        frame = self._user_frame()
        cause = first if first is not last and first.describe != last.describe else None
        return Outcome(last, cause=cause, frame=frame, chain=len(excs),
                       context=self.preceding.context, evidence=self.ended,
                       lines=tuple(self.lines))


# Standard library functions that catch what their callbacks raise, print its traceback and go
# on: a traceback whose outermost frame is one of them ended nothing (multiprocessing's
# finalizers at exit unlinking a semaphore that is already gone, for instance).
_PRINTING_CALLERS = {"_run_finalizers": "multiprocessing/util.py"}

_THREAD_HEAD_RE = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]{1,16}"
                             r"(?: \[[^\]]{0,60}\])? \(most recent call first\):|^Stack \(most "
                             r"recent call first\):")
_FAULT_OTHER_RE = re.compile(
    r"^\s*(?:<no Python frame>|Garbage-collecting|\.\.\.)\s*$|^Extension modules: "
    r"|^Python runtime state: |^\s*$|^\s*<")


class FaultReport(Report):
    """CPython faulthandler's dump after ``Fatal Python error: <reason>``."""

    kind = "faulthandler"

    def __init__(self, first: LineIn, reason: str, *, hold: float, now: float) -> None:
        super().__init__(first, now + hold)
        self.line = first
        self.reason = reason
        self.frames: list[Frame] = []
        self.threads = 0
        self.other = 0

    def feed(self, line: LineIn, now: float) -> bool:
        _ = now
        text = line.text
        if _THREAD_HEAD_RE.match(text):
            self.threads += 1
            return True
        frame = _FAULT_FRAME_RE.match(text)
        if frame is not None:
            if self.threads <= 1:
                self.frames.append(Frame(frame.group("path"), int(frame.group("line")),
                                         frame.group("func")))
            return True
        if _FAULT_OTHER_RE.match(text):
            return True
        self.other += 1
        if self.threads or self.other > 2:
            self.finished = True
        return False

    def held(self) -> int | None:
        return self.line.offset

    def frame(self) -> Frame | None:
        """The innermost frame of the user's code (faulthandler lists the newest first)."""
        return next((f for f in self.frames if is_user_frame(f.path)), None)


# A thread's stack as py-spy dumps it (``Thread 835995 (active): "MainThread"``, then frames
# ``    broadcast (torch/distributed/distributed_c10d.py:1191)``), or as faulthandler dumps a
# live process (``Thread 0x00007f... (most recent call first):``, frames ``  File "...", line N
# in f``) when asked by a signal, a ``dump_traceback_later`` watchdog or a hang detector.
_PYSPY_THREAD_RE = re.compile(r'^\s*Thread (?:0x)?[0-9a-fA-F]{1,16} \((?:active|idle)(?:\+gil)?\)'
                              r'(?:: "(?P<name>[^"]{0,80})")?\s*$')
_PYSPY_FRAME_RE = re.compile(r"^\s+(?P<func>[^\s()]{1,200}) \((?P<path>[^()]{1,400}):"
                             r"(?P<line>\d{1,7})\)\s*$")
# Calls a process blocks in until its peers or its children answer: the collectives and
# point-to-point calls of torch.distributed and its peers (DeepSpeed, vLLM, Horovod), in a file
# of a distributed library (``send``, ``recv`` and ``gather`` elsewhere are a socket's, a
# queue's, asyncio's: an idle helper thread sits in them); a device synchronisation, a wait on a
# child process or a thread.
_COLLECTIVE_CALLS = frozenset((
    "all_reduce", "allreduce", "broadcast", "barrier", "monitored_barrier", "all_gather",
    "allgather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all",
    "all_to_all_single", "alltoall", "broadcast_object_list", "gather", "scatter", "recv",
    "send", "batch_isend_irecv", "reduce"))
_DISTRIBUTED_PATH_RE = re.compile(r"distributed|c10d|collective|comm|nccl|deepspeed|horovod"
                                  r"|parallel_state|megatron")
_WAIT_CALLS = frozenset(("wait", "join", "poll", "synchronize", "_wait_for_tstate_lock",
                         "current_stream_synchronize"))
_INNERMOST = 4  # frames from the innermost that decide what a thread is blocked in


def stack_dump_start(text: str) -> bool:
    """True for the head of one thread's stack in a dump of a live process."""
    return (_PYSPY_THREAD_RE.match(text) is not None
            or (_THREAD_HEAD_RE.match(text) is not None and "Stack (" not in text))


class StackDumpReport(Report):
    """A dump of a live process's thread stacks (py-spy's, faulthandler's): read until a line
    that is neither a thread's head nor a frame. Nobody dumps the stacks of a process that
    works: the dump is read as a hang when a thread is blocked in a collective (or the main
    thread in a wait on its peers or children)."""

    kind = "stack_dump"

    def __init__(self, first: LineIn, *, hold: float, now: float) -> None:
        super().__init__(first, now + hold)
        self.line = first
        self.threads: list[tuple[str, list[Frame]]] = []
        self.blanks = 0
        self.feed(first, now)

    def feed(self, line: LineIn, now: float) -> bool:
        _ = now
        text = line.text
        head = _PYSPY_THREAD_RE.match(text)
        if head is not None or _THREAD_HEAD_RE.match(text):
            name = (head.group("name") or "") if head is not None else (
                "current thread" if text.startswith("Current thread") else "")
            self.threads.append((name, []))
            self.blanks = 0
            return True
        frame = _PYSPY_FRAME_RE.match(text) or _FAULT_FRAME_RE.match(text)
        if frame is not None and self.threads:
            frames = self.threads[-1][1]
            if len(frames) < 64:
                frames.append(Frame(frame.group("path"), int(frame.group("line")),
                                    frame.group("func")))
            self.blanks = 0
            return True
        if not text.strip() and self.blanks < 1:
            self.blanks += 1
            return True
        self.finished = True
        return False

    def held(self) -> int | None:
        return self.line.offset

    def blocked(self) -> tuple[str, Frame] | None:
        """(thread name, the frame it waits in) of the first thread blocked in a collective,
        else of py-spy's main thread waiting on others; None when no thread is (faulthandler
        does not say which thread is the main one)."""
        for name, frames in self.threads:
            for f in frames[:_INNERMOST]:
                if f.func in _COLLECTIVE_CALLS and _DISTRIBUTED_PATH_RE.search(f.path):
                    return name, f
        for name, frames in self.threads:
            if name == "MainThread":
                for f in frames[:_INNERMOST]:
                    if f.func in _WAIT_CALLS:
                        return name, f
        return None


_WHAT_RE = re.compile(r"^\s*what\(\):\s+(?P<what>\S.*)$")


class TerminateReport(Report):
    """``terminate called after throwing ...``: the next line says ``what()``."""

    kind = "terminate"

    def __init__(self, first: LineIn, *, hold: float, now: float) -> None:
        super().__init__(first, now + hold)
        self.line = first
        self.what = ""

    def feed(self, line: LineIn, now: float) -> bool:
        _ = now
        m = _WHAT_RE.match(line.text)
        self.finished = True
        if m is not None:
            self.what = clip(m.group("what"), 200)
            return True
        return False

    def held(self) -> int | None:
        return self.line.offset
