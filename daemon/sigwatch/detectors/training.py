"""Detectors on training progress: step-time regressions (incident 004), stalls, bad numbers,
a diverging loss.

All read progress lines through one shared ``ProgressReader`` (each line is parsed once
whatever the number of detectors) and keep per-series state keyed by the stream's stable key,
the rank and the extractor, so ``snapshot``/``restore`` carries it across a restart:

- ``StepTimeDetector``: rolling median + MAD of seconds per step (or 1/throughput); a sample is
  *hot* when its robust z-score exceeds ``z`` AND it is ``ratio`` times the median; ``sustain``
  hot samples in a row make one ``step_time_regression`` with before/after figures. Warm-up
  samples are skipped, a single slow step (checkpoint save, evaluation, data-loader hiccup)
  never completes a run, and the baseline is frozen while hot. After ``rebaseline`` hot samples
  the new level is accepted as normal (no second alert). On a stream that showed MI300 / gfx942
  / MIOpen / ROCm 6.3.0 evidence the detection names incident 004 and carries its fix.
- ``LossTrendDetector``: the same rule on the loss with ``ratio`` 2: a loss that doubled and
  stayed makes one ``training_loss_diverged`` warning (a spike, noise or another run printing
  into the stream do not); so does a loss that climbs steeply on 4 logged lines in a row to a
  new high (``_climb_many``), with no baseline needed.
- ``StallDetector``: progress stopped for ``factor`` times the usual interval and at least
  ``floor`` seconds -> a line-less ``training_stalled`` (from ``tick``); when progress resumes,
  a second ``training_stalled`` detection with status ``resolved``. A stream closed cleanly or
  a run that printed its end-of-training line is not a stall.
- ``BadNumbersDetector``: NaN/Inf loss (or grad norm outside an fp16 overflow) on ``consecutive``
  progress lines in a row -> one ``training_nonfinite`` error; a dynamic loss scale that falls
  to its minimum -> one ``training_loss_scale_minimum`` error; the scale halved ``halvings``
  times in a row once the run is under way -> one ``training_loss_scale_collapse`` warning. The
  fp16 loss-scale search at the start of training (overflow lines, scale halving from 2^32 or
  2^16) raises nothing; a log that starts mid-run is judged by the steps and epochs it shows.

Restart rule shared by all: after ``restore``, lines of a stream at or below the offset the
snapshot had reached are not counted again (the runtime may re-read or replay them).

All work per chunk (``on_chunk``). The reader is also their prepass: it reads the chunk's
Megatron, Hugging Face and tqdm lines at once (``BulkProgress``), and the detectors take those
records as columns, per series, in blocks (``_Trend._update_many``, the bad numbers' sums
between events); the other lines the one interest pass selects are parsed one by one (cached on
the chunk). The stall detector reads a line's own timestamp only for the records whose gaps it
keeps, and all lines of one chunk arrive at one monotonic instant. ``on_line`` remains for
drivers that feed lines one by one; both give the same detections
(tests/unit/test_detector_equivalence.py).
"""

from __future__ import annotations

import math
import operator
import re
import statistics
from bisect import bisect_left, bisect_right
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import islice, repeat
from operator import itemgetter
from typing import Any, TypeVar, cast

from sigwatch.clock import Clock
from sigwatch.detectors.base import Chunk, ChunkLine, LineEvent, Part, StreamContext
from sigwatch.detectors.progress import (
    BULK_BYTES,
    BULK_WORDS,
    F_EVAL,
    F_OVERFLOW,
    F_SKIPPED,
    R_ATTEMPTED,
    R_COST,
    R_EPOCH,
    R_FLAGS,
    R_GRAD_NORM,
    R_KIND,
    R_LOSS,
    R_LOSS_SCALE,
    R_PART,
    R_RANK,
    R_START,
    R_STEP,
    R_STEP_TIME,
    R_THROUGHPUT,
    BulkProgress,
    BulkRecords,
    Extractor,
    Progress,
    ProgressParser,
    ProgressRecord,
    Shape,
    literal_interest,
    progress_of,
    record_of,
)
from sigwatch.framing.timestamps import match_timestamp
from sigwatch.model import Detection, LogLine, Match, Remediation, Severity, StreamInfo
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = [
    "INCIDENT_004_REMEDIATION",
    "BadNumbersDetector",
    "LastProgress",
    "LossTrendDetector",
    "ProgressReader",
    "StallDetector",
    "StepTimeDetector",
]

# Whose fault each detection of this module is: bad numbers come from the job's own training
# configuration; a slowdown or a stall may be the node's or the job's, so it is not known.
OWNER_OF = {"training_nonfinite": "user", "training_loss_scale_minimum": "user",
            "training_loss_scale_collapse": "user", "training_loss_diverged": "user"}

MAX_SERIES = 1000
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class LastProgress:
    """The last progress line parsed on a stream (for readers such as per-rank facts)."""

    offset: int
    lineno: int
    rank: str | None
    text: str
    progress: Progress


class ProgressReader:
    """One ``ProgressParser`` shared by the training detectors; parses each line once.

    With the built-in extractors only, the reader is also the training detectors' prepass:
    ``run`` reads a whole chunk's Megatron, Hugging Face and tqdm lines at once
    (``BulkProgress``); the detectors take those records from ``bulk_of(chunk)`` and parse the
    other lines they are given one by one (``read_part``). ``last(stream_key)`` is the last
    progress record parsed on a stream, so that other readers need no second parse.
    """

    def __init__(self, extractors: Iterable[Extractor] = (), *, builtin: bool = True) -> None:
        extractors = tuple(extractors)
        self.parser = ProgressParser(extractors, builtin=builtin)
        # The whole-chunk pass knows the built-in shapes only; a user extractor is tried before
        # them and could claim one of their lines, so then every line is parsed on its own.
        self.bulk = BulkProgress() if builtin and not extractors else None
        self._line: LogLine | None = None
        self._progress: Progress | None = None
        self._last: OrderedDict[str, LastProgress] = OrderedDict()

    @property
    def interest(self) -> re.Pattern[bytes]:
        return self.parser.interest

    # -- the prepass (detectors.base.Prepass) --------------------------------------------------

    @property
    def prepass(self) -> ProgressReader | None:
        return self if self.bulk is not None else None

    @property
    def covers(self) -> tuple[re.Pattern[bytes], ...]:
        return (self.parser.interest,)

    @property
    def vocabulary(self) -> frozenset[bytes]:
        return BULK_WORDS

    @property
    def alphabet(self) -> frozenset[int]:
        return BULK_BYTES

    def run(self, data: bytes) -> BulkRecords:
        return self.bulk.parse(data) if self.bulk is not None else BulkRecords()

    def bulk_of(self, chunk: Chunk) -> BulkRecords | None:
        found = chunk.prepassed.get(self)
        return found if isinstance(found, BulkRecords) else None

    # -- per line ------------------------------------------------------------------------------

    def last(self, stream_key: str) -> LastProgress | None:
        return self._last.get(stream_key)

    def _remember(self, key: str, record: LastProgress) -> None:
        self._last[key] = record
        self._last.move_to_end(key)
        while len(self._last) > MAX_SERIES:
            self._last.popitem(last=False)

    def read(self, line: LogLine) -> Progress | None:
        if line is not self._line:
            self._line = line
            self._progress = self.parser.parse(line.text)
            if self._progress is not None:
                self._remember(line.stream.key, LastProgress(
                    line.offset, line.lineno, line.rank, line.text, self._progress))
        return self._progress

    def read_part(self, chunk: Chunk, line: ChunkLine, part: int, text: str) -> Progress | None:
        """The progress one part of a chunk's line reports, parsed once per chunk."""
        parsed = chunk.cache.get(self)
        if not isinstance(parsed, _Parsed):
            parsed = chunk.cache[self] = _Parsed()
        key = (line.start, part)
        cache = parsed.records
        if key in cache:
            return cache[key]
        found = cache[key] = self.parser.parse(text)
        if found is not None and (parsed.last is None or parsed.last[0] <= key):
            parsed.last = (key, line, part, text, found)
        return found

    def record_part(self, chunk: Chunk, line: ChunkLine, part: int, text: str, rank: str | None,
                    ) -> ProgressRecord | None:
        """``read_part`` as a record (with its skipped-iterations flag), made once per chunk."""
        parsed = chunk.cache.get(self)
        if not isinstance(parsed, _Parsed):
            parsed = chunk.cache[self] = _Parsed()
        key = (line.start, part)
        found = parsed.as_records.get(key, _MISSING)
        if found is not _MISSING:
            return cast("ProgressRecord | None", found)
        progress = self.read_part(chunk, line, part, text)
        rec = None if progress is None else record_of(line.start, part, rank, progress,
                                                       _skipped(text))
        parsed.as_records[key] = rec
        return rec

    def chunk_done(self, chunk: Chunk) -> None:
        """Remember the chunk's last progress record for its stream (idempotent)."""
        parsed = chunk.cache.get(self)
        last = parsed.last if isinstance(parsed, _Parsed) else None
        bulk = self.bulk_of(chunk)
        tail = _last_bulk(bulk) if bulk is not None else None
        if tail is not None and (last is None or last[0] < (tail[R_START], tail[R_PART])):
            line = chunk.line_at(tail[R_START])
            part = chunk.parts(line)[tail[R_PART]]
            self._remember(chunk.stream.info.key, LastProgress(
                line.offset, line.lineno, part.rank, part.text, progress_of(tail)))
            return
        if last is None:
            return
        _key, line, k, text, progress = last
        rank = chunk.parts(line)[k].rank
        self._remember(chunk.stream.info.key,
                       LastProgress(line.offset, line.lineno, rank, text, progress))


def _last_bulk(bulk: BulkRecords) -> ProgressRecord | None:
    best: ProgressRecord | None = None
    for shape in bulk.shapes:
        if len(shape):
            rec = shape.record(len(shape) - 1)
            if best is None or (rec[R_START], rec[R_PART]) > (best[R_START], best[R_PART]):
                best = rec
    return best


@dataclass(slots=True)
class _Parsed:
    """What a reader parsed in one chunk: (line start, part) -> progress, and the last one."""

    records: dict[tuple[int, int], Progress | None] = field(default_factory=dict)
    last: tuple[tuple[int, int], ChunkLine, int, str, Progress] | None = None
    as_records: dict[tuple[int, int], object] = field(default_factory=dict)


_MISSING = object()


def _delivered(chunk: Chunk, mask: int,
               confirm: tuple[int, re.Pattern[bytes]] | None = None,
               ) -> list[tuple[ChunkLine, int, Part]]:
    """The parts a per-line detector with interests ``mask`` would have been given, in order:
    every part of a line its interests select, the matched parts of the other lines (made
    once per chunk for each ``mask``: detectors with the same interests share it).

    ``confirm`` (bits, exact pattern): a line selected by those bits alone (a cheap literal
    gate) counts as selected only if the exact pattern finds it too. Lines the prepass
    covered come too (for their matches); their progress is in the prepass result.
    """
    key = ("delivered", mask, confirm)
    found = chunk.cache.get(key)
    if found is not None:
        return cast("list[tuple[ChunkLine, int, Part]]", found)
    out: list[tuple[ChunkLine, int, Part]] = []
    for line in chunk.select(mask):
        parts = chunk.parts(line)
        wanted = line.interests & mask
        if wanted and confirm is not None and not wanted & ~confirm[0]:
            data = chunk.data
            if confirm[1].search(data, line.start, line.end + 1) is None:
                wanted = 0
        if wanted:
            out.extend((line, k, part) for k, part in enumerate(parts))
        else:
            out.extend((line, k, parts[k]) for k in sorted(line.matches) if k < len(parts))
    chunk.cache[key] = out
    return out


# A record's place in its chunk as one int: (line start, part) in order.
_PART_BITS = 20


def _pos(start: int, part: int) -> int:
    return (start << _PART_BITS) | part


@dataclass(slots=True)
class _Fresh:
    """The bulk records of a chunk a detector still has to count: per shape, from ``first``."""

    shapes: list[tuple[Shape, int]]
    last_line: int  # start of the last covered line counted (-1: none)

    @classmethod
    def of(cls, bulk: BulkRecords | None, floor: int | None) -> _Fresh:
        """``floor``: chunk positions at or below it were counted before a restart."""
        if bulk is None:
            return cls([], -1)
        shapes = []
        for shape in bulk.shapes:
            first = 0 if floor is None else bisect_right(shape.starts, floor)
            if first < len(shape):
                shapes.append((shape, first))
        last = bulk.lines[-1][0] if bulk.lines else -1
        if floor is not None and last <= floor:
            last = -1
        return cls(shapes, last)

    def by_rank(self) -> list[tuple[str | None, Shape, list[int]]]:
        """(rank, shape, record indices) for each rank of each shape, in line order."""
        out: list[tuple[str | None, Shape, list[int]]] = []
        for shape, first in self.shapes:
            ranks = shape.ranks
            n = len(shape)
            if ranks[first] == ranks[-1] and len(set(ranks[first:])) == 1:
                out.append((ranks[first], shape, list(range(first, n))))
                continue
            groups: dict[str | None, list[int]] = {}
            for i in range(first, n):
                r = ranks[i]
                g = groups.get(r)
                if g is None:
                    groups[r] = [i]
                else:
                    g.append(i)
            out.extend((r, shape, g) for r, g in groups.items())
        return out


class _Base:
    """Shared plumbing: no holds, no replay floor, the restart offset guard, metrics."""

    name = ""

    def __init__(self, clock: Clock, reader: ProgressReader | None, host: str,
                 metrics: SelfMetrics | None, status: str) -> None:
        self.clock = clock
        self.reader = reader if reader is not None else ProgressReader()
        self.host = host
        self.metrics = metrics
        self.status = status
        self._done_to: dict[str, int] = {}  # stream key -> last offset counted
        self._resume: dict[str, int] = {}  # after restore: offsets <= this were counted

    @property
    def interest(self) -> re.Pattern[bytes] | None:
        return self.reader.interest

    @property
    def interests(self) -> tuple[re.Pattern[bytes], ...]:
        return (self.reader.interest,)

    @property
    def prepass(self) -> ProgressReader | None:
        return self.reader.prepass

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        return None

    def held(self, handle: int) -> tuple[int, ...]:
        return ()

    def _fresh(self, event: LineEvent) -> bool:
        """False for a line this detector already counted before a restart."""
        return self._fresh_at(event.stream.info.key, event.line.offset)

    def _fresh_at(self, key: str, offset: int) -> bool:
        floor = self._resume.get(key)
        if floor is not None:
            if offset <= floor:
                return False
            del self._resume[key]
        self._done_to[key] = offset
        return True

    def _floor(self, chunk: Chunk) -> int | None:
        """Chunk positions at or below this were counted before a restart (None: none)."""
        floor = self._resume.get(chunk.stream.info.key)
        return None if floor is None else floor - chunk.base

    def _counted(self, chunk: Chunk, last_start: int) -> None:
        """The chunk's lines up to the one starting at ``last_start`` (-1: none) are counted:
        what ``_fresh_at`` does for each line it accepts, once for the chunk."""
        if last_start < 0:
            return
        key = chunk.stream.info.key
        self._resume.pop(key, None)
        self._done_to[key] = chunk.base + last_start

    def _offsets_state(self) -> dict[str, int]:
        return dict(self._done_to)

    def _restore_offsets(self, state: dict[str, Any]) -> None:
        self._resume = {str(k): int(v) for k, v in dict(state.get("offsets", {})).items()}
        self._done_to = dict(self._resume)

    def _detection(self, info: StreamInfo, line: LogLine | None, *, signature: str, title: str,
                   severity: Severity, remediation: Remediation, about: str,
                   facts: Sequence[tuple[str, str]], key: str = "", status: str | None = None,
                   labels: tuple[tuple[str, str], ...] = (),
                   context: tuple[str, ...] = ()) -> Detection:
        return Detection(
            signature=signature, title=title, severity=severity,
            status=status or self.status, source=info.source, path=info.path,
            stream_key=info.key, line=line.lineno if line else None,
            offset=line.offset if line else None, text=line.text if line else None,
            time=self.clock.time(), remediation=remediation, context=context,
            rank=line.rank if line else None, labels=labels, host=self.host, about=about,
            key=key, facts=tuple(facts), owner=OWNER_OF.get(signature, "unknown"))


def _bulk_line(chunk: Chunk, rec: ProgressRecord) -> Callable[[], LogLine]:
    """Builds the ``LogLine`` of a prepass record when a detection needs it."""
    return partial(_log_line, chunk, rec[R_START], rec[R_PART])


def _part_line(info: StreamInfo, line: ChunkLine, part: Part) -> Callable[[], LogLine]:
    """Builds the ``LogLine`` of one part of a selected line when a detection needs it."""
    return partial(LogLine, info, line.offset, line.lineno, part.text, part.rank)


def _log_line(chunk: Chunk, start: int, part: int) -> LogLine:
    """The ``LogLine`` of one part of any line of the chunk (for a detection)."""
    line = chunk.line_at(start)
    p = chunk.parts(line)[part]
    return LogLine(chunk.stream.info, line.offset, line.lineno, p.text, p.rank)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _fmt_scale(x: float) -> str:
    return f"{x:.6g}"  # a loss scale: 65536, not 6.554e+04


# -- step time -----------------------------------------------------------------------------------

_PLATFORM_RE = re.compile(
    r"(?P<gfx>gfx94[012])|(?P<mi300>\bMI300[AX]?\b)|(?P<miopen>\bMIOpen\b)"
    r"|(?:\bROCm|\brocm)(?:[ -]?version)?[ :=-]*v?(?P<rocm>\d+\.\d+(?:\.\d+)?)"
    r"|/opt/rocm-(?P<rocm2>\d+\.\d+\.\d+)|\+rocm(?P<rocm3>\d+\.\d+(?:\.\d+)?)")
_PLATFORM_INTEREST = rb"gfx94[012]|MI300|MIOpen|ROCm|rocm"
_PLATFORM_INTEREST_RE = re.compile(_PLATFORM_INTEREST)
# The words _note_platform looks for (in the raw bytes: normalisation only removes bytes).
_PLATFORM_WORDS_RE = re.compile(rb"gfx94|MI300|MIOpen|ROCm|rocm")
_PLATFORM_SIGNATURE = "rocm_mi300_miopen_platform"

INCIDENT_004_REMEDIATION = Remediation(
    summary="Step time rose on AMD Instinct MI300 (gfx942) with MIOpen on ROCm 6.3.0: incident "
            "004, MIOpen picks slow solvers for backward-weight convolutions (FP16/FP32) for "
            "some shapes. There is no error line; only the step time shows it.",
    steps=(
        ("Set MIOPEN_FIND_MODE=3 and MIOPEN_FIND_ENFORCE=3 for the job: MIOpen tunes each new "
        "shape once and stores the result in its user database (keep MIOPEN_USER_DB_PATH on a "
        "writable, persistent local path)."),
        ("Fix: upgrade to ROCm 6.3.1 or newer, where the backward-weights convolution "
        "performance issue is fixed."),
    ),
    runbook="https://github.com/ROCm/legacy-rocm-build/issues/4080",
    action="fix_job_config",
)
_REGRESSION_REMEDIATION = Remediation(
    summary="Training step time rose and stayed up: the job is running slower than it did.",
    steps=(
        ("Compare with the previous release/run: library or driver versions, kernel choice "
        "(cuDNN/MIOpen find mode), batch shapes."),
        ("Check the node: other processes on the GPUs, thermal or power throttling "
        "(nvidia-smi -q -d PERFORMANCE / amd-smi metric), PCIe/NVLink errors."),
        "Check input: data-loader workers, storage latency.",
    ),
    action="investigate",
)


@dataclass(slots=True)
class _StepSeries:
    metric: str  # "step_time" or "throughput"
    baseline: deque[float]
    seen: int = 0
    run: list[float] = field(default_factory=list)
    run_step: int | None = None
    regressed: bool = False
    hot_since_alert: int = 0
    cool: int = 0
    stats: tuple[float, float] | None = None  # cached (median, scale) of the baseline
    stale: int = 0  # samples appended since ``stats`` was computed
    # the steep climb (losses only): every recent value, the current rising run (its values
    # and steps, capped), whether it fired, and the (max, median) of the values before it
    recent: deque[float] = field(default_factory=deque)
    climb_vals: list[float] = field(default_factory=list)
    climb_steps: list[int | None] = field(default_factory=list)
    climb_fired: bool = False
    climb_prior: tuple[float, float] | None = None
    # a jump that stays (losses only): the level it jumped from (None: no jump open), its
    # losses (capped), its first step, the halvings of the scale counted when it opened (and
    # the scale its line printed), and whether it fired
    jump_base: float | None = None
    jump_vals: list[float] = field(default_factory=list)
    jump_len: int = 0
    jump_step: int | None = None
    jump_halved: int = 0
    jump_scale: float | None = None
    jump_fired: bool = False

    def robust(self, refresh_every: int) -> tuple[float, float]:
        """(median, robust scale) of the baseline, recomputed every few appends (it moves
        slowly; a full median and MAD of 200 values on every line would cost ~60 us)."""
        if self.stats is None or self.stale >= refresh_every:
            # statistics.median twice, with one sort: the distances to the median of the
            # values below it and of those above it are two sorted runs (merged in one pass).
            vals = sorted(self.baseline)
            n = len(vals)
            h = n // 2
            med = vals[h] if n % 2 else (vals[h - 1] + vals[h]) / 2
            k = bisect_left(vals, med)
            devs = [med - v for v in vals[k - 1::-1]] if k else []
            devs += [v - med for v in vals[k:]]
            devs.sort()
            mad = devs[h] if n % 2 else (devs[h - 1] + devs[h]) / 2
            self.stats = (med, max(1.4826 * mad, 0.01 * med, 1e-12))
            self.stale = 0
        return self.stats

    def keep(self, x: float) -> None:
        self.baseline.append(x)
        self.stale += 1

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "baseline": list(self.baseline), "seen": self.seen,
                "run": self.run, "run_step": self.run_step, "regressed": self.regressed,
                "hot_since_alert": self.hot_since_alert, "cool": self.cool,
                "recent": list(self.recent), "climb_vals": self.climb_vals,
                "climb_steps": self.climb_steps, "climb_fired": self.climb_fired,
                "climb_prior": list(self.climb_prior) if self.climb_prior else None,
                "jump": [self.jump_base, self.jump_vals, self.jump_len, self.jump_step,
                         self.jump_halved, self.jump_scale, self.jump_fired]}


@dataclass(frozen=True, slots=True)
class _Fired:
    """What a regression reports of its series, taken when it fired."""

    metric: str
    run_len: int
    run_step: int | None

    @classmethod
    def of(cls, s: _StepSeries) -> _Fired:
        return cls(s.metric, len(s.run), s.run_step)


@dataclass(frozen=True, slots=True)
class _Climb:
    """A steep climb of the loss, taken when it fired: its figures and their steps."""

    losses: tuple[float, ...]  # from the start of the climb to the line that fired (capped)
    first_step: int | None
    last_step: int | None
    rises: int  # rises in a row up to the line that fired


_CLIMB_CAP = 32  # values of a rising run kept (its first and the last ones)
_JUMP_GIVE_UP = 20  # lines into a jump after which its halvings are no longer looked for
_JUMP_NEAR = 8  # a jump is above this many losses before it (the cheap test, in C)


@dataclass(frozen=True, slots=True)
class _Jump:
    """A loss that jumped and stayed up while the loss scale halved, taken when it fired."""

    base: float  # the median of the losses before the jump
    losses: tuple[float, ...]  # from the jump to the line that fired (capped)
    first_step: int | None
    last_step: int | None
    halvings: int
# No single rise makes more than this share of a climb: one jump is no climb (a jump that
# stays is the doubled-and-stayed rule's case, one that does not is a spike).
_CLIMB_SPREAD = 2 / 3
_RISES: dict[int, re.Pattern[bytes]] = {}


@dataclass(slots=True)
class _Evidence:
    gfx942: bool = False
    mi300: bool = False
    miopen: bool = False
    rocm: set[str] = field(default_factory=set)

    def add(self, m: re.Match[str]) -> None:
        if m.group("gfx"):
            self.gfx942 = True
        if m.group("mi300"):
            self.mi300 = True
        if m.group("miopen"):
            self.miopen = True
        version = m.group("rocm") or m.group("rocm2") or m.group("rocm3")
        if version and len(self.rocm) < 8:
            self.rocm.add(version)

    @property
    def mi300_class(self) -> bool:
        return self.gfx942 or self.mi300

    def incident_004(self) -> str:
        """"match" (MI300 + ROCm 6.3.0), "possible" (MI300 + MIOpen, no version), or ""."""
        if not self.mi300_class:
            return ""
        if "6.3.0" in self.rocm:
            return "match"
        # "+rocm6.3" (a wheel tag) names no patch release; no version at all is unknown too
        if self.rocm <= {"6.3"} and (self.miopen or self.rocm):
            return "possible"
        return ""

    def describe(self) -> str:
        parts = [name for name, on in (("gfx942", self.gfx942), ("MI300", self.mi300),
                                       ("MIOpen", self.miopen)) if on]
        parts += [f"ROCm {v}" for v in sorted(self.rocm)]
        return ", ".join(parts)

    def to_json(self) -> list[Any]:
        return [self.gfx942, self.mi300, self.miopen, sorted(self.rocm)]

    @classmethod
    def from_json(cls, raw: Any) -> _Evidence:
        gfx, mi, mio, rocm = raw
        return cls(bool(gfx), bool(mi), bool(mio), {str(v) for v in rocm})


def _made(make: Callable[[], LogLine], rec: ProgressRecord) -> tuple[LogLine, Progress]:
    return make(), progress_of(rec)


def _tally(counts: dict[str, list[Any]], kind: str, n: int, step_time: float | None,
           st_pos: int, throughput: float | None, tp_pos: int) -> None:
    """Add ``n`` records of ``kind`` to the chunk's progress metrics: their number, and the
    last step time and throughput of the chunk (the ones at the highest position)."""
    seen = counts.get(kind)
    if seen is None:
        seen = counts[kind] = [0, None, -1, None, -1]
    seen[0] += n
    if step_time is not None and st_pos > seen[2]:
        seen[1], seen[2] = step_time, st_pos
    if throughput is not None and tp_pos > seen[4]:
        seen[3], seen[4] = throughput, tp_pos


class _Trend(_Base):
    """A sustained rise of a figure over its own rolling median (robust z-score and ratio),
    per series: what step-time regressions and diverging losses have in common."""

    refresh = 16  # baseline statistics recomputed every this many samples

    def __init__(self, clock: Clock, reader: ProgressReader | None, host: str,
                 metrics: SelfMetrics | None, status: str, *, window: int, warmup: int,
                 min_baseline: int, z: float, ratio: float, sustain: int,
                 rebaseline: int) -> None:
        super().__init__(clock, reader, host, metrics, status)
        self.window = window
        self.warmup = warmup
        self.min_baseline = min_baseline
        self.z = z
        self.ratio = ratio
        self.sustain = sustain
        self.rebaseline = rebaseline
        self._series: OrderedDict[str, _StepSeries] = OrderedDict()

    def _update(self, s: _StepSeries, x: float, step: int | None) -> tuple[float, float] | None:
        s.seen += 1
        if s.seen <= self.warmup:
            return None
        if len(s.baseline) < self.min_baseline:
            s.keep(x)
            return None
        med, scale = s.robust(self.refresh)
        hot = (x - med) / scale > self.z and x > self.ratio * med
        if s.regressed:
            if hot:
                s.cool = 0
                s.hot_since_alert += 1
                s.run.append(x)
                del s.run[:-self.window]
                if s.hot_since_alert >= self.rebaseline:  # the new level is the new normal
                    s.baseline = deque(s.run[-self.window:], maxlen=self.window)
                    s.regressed, s.run, s.hot_since_alert, s.stats = False, [], 0, None
            else:
                s.cool += 1
                s.keep(x)
                if s.cool >= self.sustain:  # back to normal: a later slowdown alerts again
                    s.regressed, s.run, s.hot_since_alert, s.cool = False, [], 0, 0
            return None
        if not hot:
            s.run.clear()
            s.run_step = None
            s.keep(x)
            return None
        if not s.run:
            s.run_step = step
        s.run.append(x)
        if len(s.run) < self.sustain:
            return None
        s.regressed = True
        s.hot_since_alert = 0
        return statistics.median(s.baseline), statistics.median(s.run)

    def _update_many(self, s: _StepSeries, xs: list[float], step_of: Callable[[int], int | None],
                     ) -> list[tuple[int, float, float, _Fired]]:
        """``_update`` for each of ``xs`` in order; (index, before, after) of each that fired.

        A stretch of ordinary samples (not hot, nothing open) is taken in one block up to the
        next baseline refresh: each is counted and kept, exactly as ``_update`` would; a hot
        sample, an open run and a regression go through ``_update`` itself.
        """
        fired: list[tuple[int, float, float, _Fired]] = []
        n = len(xs)
        i = 0
        warmup, min_baseline, z, ratio = self.warmup, self.min_baseline, self.z, self.ratio
        while i < n:
            if s.seen < warmup:
                take = min(warmup - s.seen, n - i)
                s.seen += take
                i += take
                continue
            if len(s.baseline) < min_baseline:
                take = min(min_baseline - len(s.baseline), n - i)
                s.seen += take
                s.baseline.extend(xs[i:i + take])
                s.stale += take
                i += take
                continue
            if s.regressed or s.run:
                got = self._update(s, xs[i], step_of(i))
                if got is not None:
                    fired.append((i, got[0], got[1], _Fired.of(s)))
                i += 1
                continue
            med, scale = s.robust(self.refresh)
            end = min(n, i + max(self.refresh - s.stale, 1))
            # Hot is monotonic in x: when the block's largest sample is not hot, none is
            # (one C-level max instead of a test per sample, the usual case). A NaN first
            # would hide the largest from max: such a block is tested sample by sample.
            top = max(xs[i:end])
            if not math.isnan(top) and not ((top - med) / scale > z and top > ratio * med):
                j = end
            else:
                j = i
                while j < end:
                    x = xs[j]
                    if (x - med) / scale > z and x > ratio * med:
                        break
                    j += 1
            if j > i:  # not hot: counted, kept, the (empty) run cleared
                s.seen += j - i
                s.baseline.extend(xs[i:j])
                s.stale += j - i
                s.run_step = None
                i = j
            if j < end:
                got = self._update(s, xs[j], step_of(j))
                if got is not None:
                    fired.append((j, got[0], got[1], _Fired.of(s)))
                i = j + 1
        return fired


class StepTimeDetector(_Trend):
    """``step_time_regression``: a sustained rise of step time over its own rolling median."""

    name = "step_time"

    def __init__(
        self,
        clock: Clock,
        *,
        reader: ProgressReader | None = None,
        window: int = 200,
        warmup: int = 10,
        min_baseline: int = 20,
        z: float = 3.5,
        ratio: float = 1.2,
        sustain: int = 5,
        rebaseline: int = 200,
        host: str = "",
        status: str = "stable",
        metrics: SelfMetrics | None = None,
    ) -> None:
        super().__init__(clock, reader, host, metrics, status, window=window, warmup=warmup,
                         min_baseline=min_baseline, z=z, ratio=ratio, sustain=sustain,
                         rebaseline=rebaseline)
        self._evidence: dict[str, _Evidence] = {}
        self._interest = re.compile(self.reader.interest.pattern + b"|" + _PLATFORM_INTEREST)
        self._interests = (self.reader.interest, _PLATFORM_INTEREST_RE)

    @property
    def interest(self) -> re.Pattern[bytes] | None:
        return self._interest

    @property
    def interests(self) -> tuple[re.Pattern[bytes], ...]:
        return self._interests

    def on_open(self, stream: StreamContext) -> None:
        return None

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        return ()

    def tick(self, now: float) -> Sequence[Detection]:
        return ()

    def next_deadline(self) -> float | None:
        return None

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        line = event.line
        info = event.stream.info
        if not self._fresh(event):
            return ()
        self._note_platform(info.key, event.line.text, event.matches)
        progress = self.reader.read(line)
        if progress is None or progress.eval or progress.overflow:
            return ()
        counts: dict[str, list[Any]] = {}
        fired = self._sample(info, line.rank, progress, counts)
        self._count(info, counts)
        if fired is None or event.replaying:
            return ()
        series, before, after = fired
        return (self._regression(info, line, progress, _Fired.of(series), before, after),)

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        """As ``on_line`` for each delivered part, in order, with the prepass's records taken
        per series in blocks (``_update_many``)."""
        info = chunk.stream.info
        key = info.key
        reader = self.reader
        floor = self._floor(chunk)
        data = chunk.data
        # Platform words anywhere in the chunk? If not, only a matched line can add evidence.
        # (Removing ANSI codes or NULs can join a word: then every line is looked at.)
        platform = (_PLATFORM_WORDS_RE.search(data) is not None or b"\x1b" in data
                    or b"\x00" in data)
        evidence: list[tuple[int, str, tuple[Match, ...]]] = []  # (pos, text, matches)
        fallback: list[tuple[ProgressRecord, ChunkLine, Part]] = []
        last = -1
        for line, k, part in _delivered(chunk, mask):
            if floor is not None and line.start <= floor:
                continue
            last = line.start
            if platform or line.matches:
                evidence.append((_pos(line.start, k), part.text, line.matches.get(k, ())))
            if line.covered:
                continue  # its progress is in the prepass's records
            rec = reader.record_part(chunk, line, k, part.text, part.rank)
            if rec is None or rec[R_FLAGS] & (F_EVAL | F_OVERFLOW) or rec[R_COST] is None:
                continue
            fallback.append((rec, line, part))
        fresh = _Fresh.of(reader.bulk_of(chunk), floor)
        self._counted(chunk, max(last, fresh.last_line))
        # series -> its records: bulk (shape, indices) and per-line ones
        groups: dict[tuple[str | None, str], tuple[list[tuple[Shape, list[int]]],
                                                  list[tuple[ProgressRecord, ChunkLine, Part]]]]
        groups = {}
        for rank, shape, all_idx in fresh.by_rank():
            times = shape.step_times
            idx = [i for i in all_idx if (t := times[i]) is not None and t > 0]
            if idx:
                groups.setdefault((rank, shape.kind), ([], []))[0].append((shape, idx))
        for item in fallback:
            rec = item[0]
            groups.setdefault((rec[R_RANK], rec[R_KIND]), ([], []))[1].append(item)
        if not groups:
            reader.chunk_done(chunk)
            return self._evidence_only(key, evidence)
        prefix = f"{info.key}\x1f"
        new = sum(1 for rank, kind in groups
                  if f"{prefix}{rank or '-'}\x1f{kind}" not in self._series)
        if len(self._series) + new > MAX_SERIES:
            return self._chunk_in_order(chunk, groups, evidence)  # eviction order matters
        fired: list[tuple[int, _StepSeries, float, float, Callable[[], tuple[LogLine,
                                                                           Progress]]]] = []
        touched: list[tuple[int, str]] = []
        counts: dict[str, list[Any]] = {}
        for (rank, kind), (blocks, lines) in groups.items():
            skey = f"{prefix}{rank or '-'}\x1f{kind}"
            if lines or len(blocks) > 1:
                last_pos = self._series_in_order(chunk, skey, blocks, lines, fired, counts)
            else:
                shape, idx = blocks[0]
                last_pos = self._series_block(chunk, skey, shape, idx, fired, counts)
            touched.append((last_pos, skey))
        for _last, skey in sorted(touched):
            self._series.move_to_end(skey)
        self._count(info, counts)
        out = self._fire(chunk, evidence, fired)
        reader.chunk_done(chunk)
        return out

    def _series_block(self, chunk: Chunk, skey: str, shape: Shape, idx: list[int],
                      fired: list[Any], counts: dict[str, list[Any]]) -> int:
        """One series read only by the prepass: its costs in one block."""
        times = shape.step_times
        xs = [t for i in idx if (t := times[i]) is not None]  # all of them: idx has costs
        series = self._series.get(skey)
        if series is None or series.metric != "step_time":
            series = _StepSeries("step_time", deque(maxlen=self.window))
            self._series[skey] = series
        steps = shape.steps
        for j, before, after, state in self._update_many(series, xs, lambda j: steps[idx[j]]):
            i = idx[j]
            start, part = shape.key(i)

            def made(i: int = i, start: int = start, part: int = part,
                     ) -> tuple[LogLine, Progress]:
                return _log_line(chunk, start, part), progress_of(shape.record(i))

            fired.append((_pos(start, part), state, before, after, made))
        last_pos = _pos(*shape.key(idx[-1]))
        _tally(counts, shape.kind, len(idx), times[idx[-1]], last_pos, None, -1)
        return last_pos

    def _series_in_order(self, chunk: Chunk, skey: str, blocks: list[tuple[Shape, list[int]]],
                         lines: list[tuple[ProgressRecord, ChunkLine, Part]], fired: list[Any],
                         counts: dict[str, list[Any]]) -> int:
        """One series with records read line by line too: the records in line order, the
        prepass's between two per-line ones as one block."""
        info = chunk.stream.info
        last = -1
        for run_shape, what in _interleave(blocks, lines, _start_of_line_item):
            if run_shape is not None:
                shape, run = run_shape, cast("list[int]", what)
                series = self._series.get(skey)
                if series is None or series.metric != "step_time":
                    series = _StepSeries("step_time", deque(maxlen=self.window))
                    self._series[skey] = series
                times = shape.step_times
                xs = [t for i in run if (t := times[i]) is not None]
                for j, before, after, state in self._update_many(
                        series, xs, partial(_step_at, shape.steps, run)):
                    i = run[j]
                    fired.append((_pos(*shape.key(i)), state, before, after,
                                  partial(_made, _bulk_line(chunk, shape.record(i)),
                                          shape.record(i))))
                last = _pos(*shape.key(run[-1]))
                _tally(counts, shape.kind, len(run), xs[-1], last, None, -1)
                continue
            rec, line, part = what
            pos = _pos(line.start, rec[R_PART])
            _tally(counts, rec[R_KIND], 1, rec[R_STEP_TIME], pos, rec[R_THROUGHPUT], pos)
            metric = "step_time" if rec[R_STEP_TIME] else "throughput"
            series = self._series.get(skey)
            if series is None or series.metric != metric:
                series = _StepSeries(metric, deque(maxlen=self.window))
                self._series[skey] = series
            cost = rec[R_COST]
            assert cost is not None
            got = self._update(series, cost, rec[R_STEP])
            if got is not None:
                fired.append((pos, _Fired.of(series), got[0], got[1],
                              partial(_made, _part_line(info, line, part), rec)))
            last = pos
        return last

    def _chunk_in_order(self, chunk: Chunk, groups: dict[Any, Any],
                        evidence: list[tuple[int, str, tuple[Match, ...]]]) -> list[Detection]:
        """Every record of the chunk in line order, one at a time (when new series would evict
        old ones: which ones depends on the order)."""
        info = chunk.stream.info
        items: list[tuple[int, ProgressRecord, Callable[[], LogLine]]] = []
        for blocks, lines in groups.values():
            for shape, idx in blocks:
                for i in idx:
                    rec = shape.record(i)
                    items.append((_pos(rec[R_START], rec[R_PART]), rec,
                                  _bulk_line(chunk, rec)))
            for rec, line, part in lines:
                items.append((_pos(line.start, rec[R_PART]), rec,
                              _part_line(info, line, part)))
        items.sort(key=itemgetter(0))
        counts: dict[str, list[Any]] = {}
        fired: list[Any] = []
        for pos, rec, make in items:
            got = self._sample(info, rec[R_RANK], progress_of(rec), counts)
            if got is not None:
                series, before, after = got
                fired.append((pos, _Fired.of(series), before, after,
                              lambda make=make, rec=rec: (make(), progress_of(rec))))
        self._count(info, counts)
        out = self._fire(chunk, evidence, fired)
        self.reader.chunk_done(chunk)
        return out

    def _evidence_only(self, key: str,
                       evidence: list[tuple[int, str, tuple[Match, ...]]]) -> list[Detection]:
        for _at, text, matches in evidence:
            self._note_platform(key, text, matches)
        return []

    def _fire(self, chunk: Chunk, evidence: list[tuple[int, str, tuple[Match, ...]]],
              fired: list[Any]) -> list[Detection]:
        """Platform evidence and regressions in line order: a regression names the evidence
        of the lines before it (as ``on_line`` would)."""
        key = chunk.stream.info.key
        out: list[Detection] = []
        e = 0
        replay_below = chunk.replay_below - chunk.base
        for pos, series, before, after, made in sorted(fired, key=itemgetter(0)):
            while e < len(evidence) and evidence[e][0] <= pos:
                self._note_platform(key, evidence[e][1], evidence[e][2])
                e += 1
            if (pos >> _PART_BITS) < replay_below:
                continue
            line, progress = made()
            out.append(self._regression(chunk.stream.info, line, progress, series, before,
                                        after))
        for _at, text, matches in evidence[e:]:
            self._note_platform(key, text, matches)
        return out

    def _sample(self, info: StreamInfo, rank: str | None, progress: Progress,
                counts: dict[str, list[Any]],
                ) -> tuple[_StepSeries, float, float] | None:
        """Add one progress record's cost to its series; (series, before, after) if it fired."""
        cost = progress.cost
        if cost is None:
            return None
        metric = "step_time" if progress.step_time else "throughput"
        if self.metrics is not None:
            seen = counts.get(progress.kind)
            if seen is None:
                seen = counts[progress.kind] = [0, None, -1, None, -1]
            seen[0] += 1  # records come in line order here: the last value is the last one's
            if progress.step_time is not None:
                seen[1] = progress.step_time
            if progress.throughput is not None:
                seen[3] = progress.throughput
        key = f"{info.key}\x1f{rank or '-'}\x1f{progress.kind}"
        series = self._series.get(key)
        if series is None or series.metric != metric:
            series = _StepSeries(metric, deque(maxlen=self.window))
            self._series[key] = series
            while len(self._series) > MAX_SERIES:
                self._series.popitem(last=False)
        self._series.move_to_end(key)
        fired = self._update(series, cost, progress.step)
        if fired is None:
            return None
        return series, fired[0], fired[1]

    def _count(self, info: StreamInfo, counts: dict[str, list[Any]]) -> None:
        """Progress metrics for the records of one chunk: counts added, last values set."""
        metrics = self.metrics
        if metrics is None:
            return
        for kind, (n, step_time, _st_pos, throughput, _tp_pos) in counts.items():
            metrics.progress_lines.labels(info.source, kind).inc(n)
            if step_time is not None:
                metrics.step_seconds.labels(info.source, kind).set(step_time)
            if throughput is not None:
                metrics.throughput.labels(info.source, kind).set(throughput)

    def _note_platform(self, key: str, text: str, matches: Sequence[Match]) -> None:
        ev = self._evidence.get(key)
        for match in matches:
            if match.signature == _PLATFORM_SIGNATURE:
                ev = ev or self._evidence.setdefault(key, _Evidence())
        if any(word in text for word in ("gfx94", "MI300", "MIOpen", "ROCm", "rocm")):
            for m in _PLATFORM_RE.finditer(text):
                ev = ev or self._evidence.setdefault(key, _Evidence())
                ev.add(m)

    def _regression(self, info: StreamInfo, line: LogLine, progress: Progress,
                    series: _Fired, before: float, after: float) -> Detection:
        ratio = after / before if before > 0 else math.inf
        facts: list[tuple[str, str]] = [("series", progress.kind), ("ratio", f"{ratio:.2f}"),
                                        ("sustained_steps", str(series.run_len))]
        if series.metric == "step_time":
            facts += [("before_step_seconds", _fmt(before)), ("after_step_seconds", _fmt(after))]
            about = (f"step time {_fmt(before)} s -> {_fmt(after)} s ({ratio:.1f}x) for "
                     f"{series.run_len} progress lines")
        else:
            facts += [("before_throughput", _fmt(1 / before)),
                      ("after_throughput", _fmt(1 / after))]
            about = (f"throughput {_fmt(1 / before)} -> {_fmt(1 / after)} per second "
                     f"({ratio:.1f}x slower) for {series.run_len} progress lines")
        if series.run_step is not None:
            facts.append(("since_step", str(series.run_step)))
        if progress.step is not None:
            facts.append(("step", str(progress.step)))
        ev = self._evidence.get(info.key)
        verdict = ev.incident_004() if ev else ""
        if ev is not None and ev.describe():
            facts.append(("platform", ev.describe()))
        title = "Training Step Time Regression"
        severity = Severity.WARNING
        remediation = _REGRESSION_REMEDIATION
        labels: tuple[tuple[str, str], ...] = ()
        if verdict:
            facts.append(("incident", "004" if verdict == "match" else "004 (possible)"))
            remediation = INCIDENT_004_REMEDIATION
            labels = (("incident", "004"),)
            if verdict == "match":
                title = "Training Slowdown On MI300 With ROCm 6.3.0 (Incident 004)"
                severity = Severity.ERROR
                about += "; MI300 + MIOpen on ROCm 6.3.0: incident 004"
            else:
                title = "Training Slowdown On MI300 With MIOpen (Possibly Incident 004)"
                about += "; MI300 + MIOpen, ROCm version not in the log: possibly incident 004"
        return self._detection(info, line, signature="step_time_regression", title=title,
                               severity=severity, remediation=remediation, about=about,
                               facts=facts, labels=labels)

    def snapshot(self) -> object:
        return {
            "version": 1,
            "offsets": self._offsets_state(),
            "series": {k: s.to_json() for k, s in self._series.items()},
            "evidence": {k: e.to_json() for k, e in self._evidence.items()},
        }

    def restore(self, state: object) -> None:
        if not isinstance(state, dict) or state.get("version") != 1:
            return
        self._restore_offsets(state)
        self._series.clear()
        for key, raw in dict(state.get("series", {})).items():
            s = _StepSeries(str(raw["metric"]),
                            deque((float(v) for v in raw["baseline"]), maxlen=self.window),
                            int(raw["seen"]), [float(v) for v in raw["run"]],
                            raw.get("run_step"), bool(raw["regressed"]),
                            int(raw["hot_since_alert"]), int(raw["cool"]))
            self._series[str(key)] = s
        self._evidence = {str(k): _Evidence.from_json(v)
                          for k, v in dict(state.get("evidence", {})).items()}


# -- loss trend ----------------------------------------------------------------------------------

_DIVERGED_REMEDIATION = Remediation(
    summary="The training loss doubled over its recent level and stayed there: the run "
            "diverged (a learning-rate spike, bad data, an optimizer state gone wrong) and "
            "further steps are likely wasted.",
    steps=(
        "Stop the run or roll back to the last checkpoint from before the jump.",
        ("Look at what changed at that step: learning-rate schedule (warm-up end, restart), "
         "a new data shard, a resumed optimizer state."),
        "Lower the learning rate or enable gradient clipping before resuming.",
    ),
    action="fix_job_config",
)


_CLIMB_REMEDIATION = Remediation(
    summary="The training loss rose steeply on several logged steps in a row, to a new high: "
            "the run is diverging (a learning-rate spike, bad data, an optimizer state gone "
            "wrong) unless it turns back at once.",
    steps=(
        ("Watch the next logged steps; if the loss keeps rising, stop the run or roll back "
         "to the last checkpoint from before the climb."),
        ("Look at what changed where it began: learning-rate schedule (warm-up end, restart), "
         "a new data shard, a resumed optimizer state."),
        "Lower the learning rate or enable gradient clipping before resuming.",
    ),
    action="fix_job_config",
)


_VANISHED_REMEDIATION = Remediation(
    summary="The loss dropped out of the trainer's progress line while the iterations go on: "
            "Megatron-style trainers print a loss only when it is a positive number, so the "
            "loss became NaN or infinite (the run diverged or read bad data).",
    steps=(
        "Stop the run or roll back to the last checkpoint from before that step.",
        ("Lower the learning rate or add warm-up, enable gradient clipping, or switch fp16 to "
         "bf16."),
        ("Check the batches around that step for bad samples (NaN/Inf inputs, empty "
         "sequences, labels out of range)."),
    ),
    action="fix_job_config",
)
# Progress shapes whose trainer leaves a NaN/Inf loss out of the line rather than printing it
# (Megatron-LM's ``training_log`` prints a loss only when its average is > 0: NaN is not).
_DROPS_NONFINITE_LOSS = frozenset({"megatron"})


@dataclass(frozen=True, slots=True)
class _Vanished:
    """A loss that dropped out of its series' progress lines, taken when it fired."""

    step: int | None


_JUMP_REMEDIATION = Remediation(
    summary="The training loss jumped (1.5x or more) and stayed up while fp16 overflows "
            "skipped steps and halved the loss scale: the run diverged, and the skipped steps "
            "will not bring it back.",
    steps=(
        "Stop the run or roll back to the last checkpoint from before the jump.",
        ("Look at the batches and the learning rate at that step; resume with a lower "
         "learning rate, gradient clipping, or bf16 instead of fp16."),
        ("For embedding-driven spikes, an embedding LayerNorm or a smaller initial scale of "
         "the embeddings helps (BLOOM's fix)."),
    ),
    action="fix_job_config",
)


class LossTrendDetector(_Trend):
    """``training_loss_diverged``: the loss at least doubled over its own rolling median and
    stayed there for ``sustain`` progress lines in a row (a single spike, noise around a
    falling loss, and the early fall of the loss raise nothing); or it climbed steeply: it rose
    on ``climb`` progress lines in a row to at least ``climb_ratio`` times where the climb
    began, and above the recent losses by at least their own spread (see ``_climb_many``).

    One series per stream, rank and progress shape (a Megatron line's loss and a tqdm bar's
    are different figures); the same rolling median, robust z-score and sustain rule as the
    step time (``_Trend``), with ``ratio`` 2: hot means at least twice the median and far
    outside its spread. After ``rebaseline`` hot lines the new level is the new normal.
    """

    name = "loss_trend"
    refresh = 50  # a loss baseline moves slowly: its median is recomputed every 50 lines

    def __init__(
        self,
        clock: Clock,
        *,
        reader: ProgressReader | None = None,
        window: int = 100,
        warmup: int = 20,
        min_baseline: int = 30,
        z: float = 3.5,
        ratio: float = 2.0,
        sustain: int = 8,
        rebaseline: int = 100,
        climb: int = 4,
        climb_ratio: float = 1.5,
        jump_ratio: float = 1.5,
        jump_stay: int = 4,
        jump_halvings: int = 2,
        host: str = "",
        status: str = "stable",
        metrics: SelfMetrics | None = None,
    ) -> None:
        super().__init__(clock, reader, host, metrics, status, window=window, warmup=warmup,
                         min_baseline=min_baseline, z=z, ratio=ratio, sustain=sustain,
                         rebaseline=rebaseline)
        self.climb = climb
        self.climb_ratio = climb_ratio
        self._rises = _RISES.setdefault(climb, re.compile(b"\x01{%d,}" % climb))
        self._steps: dict[str, int] = {}  # series -> the last step it printed
        self._vanished: set[str] = set()  # series whose loss dropped out (fired once)
        self.jump_ratio = jump_ratio
        self.jump_stay = jump_stay
        self.jump_halvings = jump_halvings
        # per stream and rank: halvings of the loss scale seen (overflow lines that lowered it)
        # and the scale the last one lowered it to (the same halving printed twice counts once)
        self._halved: dict[str, int] = {}
        self._lowered: dict[str, float] = {}

    def _new_series(self) -> _StepSeries:
        return _StepSeries("loss", deque(maxlen=self.window),
                           recent=deque(maxlen=self.window + self.climb + 1))

    def _climb_many(self, s: _StepSeries, xs: list[float],
                    step_of: Callable[[int], int | None]) -> list[tuple[int, _Climb]]:
        """The steep-climb rule over ``xs`` in order (the run carried from earlier values
        included); (index, climb) of each value that fired.

        A climb is a run of losses each above the one before. It fires once, at the first
        value that is ``climb`` rises or more into it, at least ``climb_ratio`` times its first
        value, with no single rise more than ``_CLIMB_SPREAD`` of the whole (a steady climb,
        not one jump), and at least as far above the largest of the ``window`` losses before
        the climb as that largest is above their median (a new high by the window's own
        spread: not a rebound within the noise). With no loss before it (a log that starts
        there) the last condition holds. The rises are found in bulk (one comparison per value
        in C, one regex over the flags); only runs long enough are looked at in Python.
        """
        vals = s.climb_vals
        carried = len(vals)
        if len(xs) == 1:  # one line: what the loop below does, without building anything
            x = xs[0]
            if not vals or x <= vals[-1]:  # a new run starts at x
                s.climb_vals, s.climb_steps = [x], [step_of(0)]
                s.climb_prior, s.climb_fired = None, False
                s.recent.append(x)
                return []
            if carried < self.climb or s.climb_fired:  # too short to fire, or fired already
                vals.append(x)
                s.climb_steps.append(step_of(0))
                if len(vals) > _CLIMB_CAP:
                    del vals[1], s.climb_steps[1]
                s.recent.append(x)
                return []
        ext = vals + xs
        k = self.climb
        fired: list[tuple[int, _Climb]] = []
        recent = s.recent
        base = len(recent) - carried  # index in ``recent + xs`` of ``ext[0]`` (uncapped)

        def step_at(t: int) -> int | None:
            return s.climb_steps[t] if t < carried else step_of(t - carried)

        flags = bytes(map(operator.gt, ext[1:], ext[:-1]))  # flags[j]: ext[j+1] > ext[j]
        end = len(ext) - 1
        last_prior: tuple[float, float] | None = None
        last_fired = False
        for m in self._rises.finditer(flags):
            a, b = m.start(), m.end()  # ext[a..b] rises all the way
            carry_run = a == 0 and carried > 0
            done = carry_run and s.climb_fired
            prior = s.climb_prior if carry_run else None
            for t in range(a + k, b + 1):
                if prior is None:  # (max, median) of the losses before the climb
                    seq = [*recent, *xs]
                    at = max(base + a, 0)
                    window = seq[max(at - self.window, 0):at]
                    prior = ((max(window), statistics.median(window)) if window
                             else (-math.inf, -math.inf))
                if done or t < carried:
                    continue
                x, x0 = ext[t], ext[a]
                high, mid = prior
                if x0 > 0 and x >= self.climb_ratio * x0 and (
                        high == -math.inf or x >= 2 * high - mid) and max(
                        map(operator.sub, ext[a + 1:t + 1], ext[a:t])) <= _CLIMB_SPREAD * (x - x0):
                    shown = ext[a:t + 1]
                    if len(shown) > _CLIMB_CAP:
                        shown = [shown[0], *shown[-_CLIMB_CAP + 1:]]
                    fired.append((t - carried, _Climb(tuple(shown), step_at(a), step_at(t),
                                                      t - a)))
                    done = True
            if b == end:  # the run goes on into the next values
                last_prior, last_fired = prior, done
        begin = flags.rfind(b"\x00") + 1  # the last rising run: ext[begin:]
        run = list(range(begin, len(ext)))
        if len(run) > _CLIMB_CAP:
            run = [run[0], *run[-_CLIMB_CAP + 1:]]
        s.climb_steps = [step_at(t) for t in run]
        s.climb_vals = [ext[t] for t in run]
        s.climb_prior, s.climb_fired = last_prior, last_fired
        recent.extend(xs)
        return fired

    def _jump_many(self, s: _StepSeries, xs: list[float], step_of: Callable[[int], int | None],
                   scale_of: Callable[[int], float | None],
                   halved_at: Callable[[int], int]) -> list[tuple[int, _Jump]]:
        """The jump-with-overflows rule over ``xs`` in order (called before ``_climb_many``:
        ``s.recent`` holds the losses before ``xs``); (index, jump) of each value that fired.

        A jump opens at a loss at least ``jump_ratio`` times the median of the (up to
        ``window``) losses before it and above all of them (at least 2; training under way:
        step 200 or later when the step is printed); it stays while every loss is at least
        ``jump_ratio`` times that median. It fires once, ``jump_stay`` lines or more after it
        opened, when the loss scale halved ``jump_halvings`` times since it opened (overflow
        lines of its stream and rank that lowered the scale, or the scale its own lines print);
        after ``_JUMP_GIVE_UP`` lines it no longer looks. Nothing is done in Python for a block
        with no jump open and no value ``jump_ratio`` times above the lowest recent loss.
        """
        ratio = self.jump_ratio
        recent = s.recent
        if s.jump_base is None:
            if len(xs) == 1 and (len(recent) < 2 or xs[0] <= recent[-1]
                                 or xs[0] <= recent[-2]):
                return []  # one line, not above the losses just before it
            if recent and len(xs) < self.window and max(xs) <= max(
                    islice(reversed(recent), self.window - len(xs))):
                return []  # none above the losses before them that are in all their windows
            lo = min(xs)
            if recent:
                lo = min(lo, *recent)
            if lo <= 0 or max(xs) < ratio * lo:
                return []
        prior = list(recent)
        off = len(prior)
        n = len(xs)
        # a jump is above every loss of its window, so above the _JUMP_NEAR before it: the
        # values that are (found in C) are the only ones looked at while no jump is open
        pad = [-math.inf] * _JUMP_NEAR + prior[-_JUMP_NEAR:] + xs
        at = len(pad) - n - _JUMP_NEAR
        near = bytes(map(operator.gt, xs, map(max, *(
            pad[at + i:at + i + n] for i in range(_JUMP_NEAR)))))
        fired: list[tuple[int, _Jump]] = []
        j = 0
        while j < n:
            base = s.jump_base
            if base is None:
                j = near.find(1, j)
                if j < 0:
                    break
            elif s.jump_fired or s.jump_len >= _JUMP_GIVE_UP:  # only its end is looked for
                thr = ratio * base
                stays = bytes(map(operator.ge, xs[j:], repeat(thr))).find(0)
                upto = n if stays < 0 else j + stays
                s.jump_len += upto - j
                j = upto
                if j == n:
                    break
            x = xs[j]
            if base is not None:
                if x >= ratio * base:
                    s.jump_len += 1
                    s.jump_vals.append(x)
                    if len(s.jump_vals) > _CLIMB_CAP:
                        del s.jump_vals[1]
                    if not s.jump_fired and self.jump_stay < s.jump_len:
                        halvings = halved_at(j) - s.jump_halved
                        scale, was = scale_of(j), s.jump_scale
                        if scale is not None and was is not None and 0 < scale < was:
                            halvings = max(halvings, round(math.log2(was / scale)))
                        if halvings >= self.jump_halvings:
                            s.jump_fired = True
                            fired.append((j, _Jump(base, tuple(s.jump_vals), s.jump_step,
                                                   step_of(j), halvings)))
                    j += 1
                    continue
                s.jump_base, s.jump_vals, s.jump_len = None, [], 0
                if not near[j]:
                    j += 1
                    continue
            e = off + j
            window = [*prior[max(e - self.window, 0):off], *xs[max(j - self.window, 0):j]][
                -self.window:]
            if (len(window) >= 2 and x > max(window) and x >= ratio * min(window)
                    and ((step := step_of(j)) is None or step >= UNDER_WAY_STEP)):
                med = statistics.median(window)
                if x >= ratio * med:
                    s.jump_base, s.jump_vals, s.jump_len, s.jump_step = med, [x], 1, step
                    s.jump_halved, s.jump_scale, s.jump_fired = halved_at(j), scale_of(j), False
            j += 1
        return fired

    def _halving(self, hkey: str, scale: float | None, attempted: float | None) -> bool:
        """Count an overflow line of stream and rank ``hkey`` that lowered the loss scale
        (the same lowered scale again right after is the same halving printed twice)."""
        if scale is None or (attempted is not None and scale >= attempted):
            return False
        if self._lowered.get(hkey) == scale:
            return False
        self._lowered[hkey] = scale
        self._halved[hkey] = self._halved.get(hkey, 0) + 1
        if len(self._halved) > MAX_SERIES:
            gone = next(iter(self._halved))
            del self._halved[gone]
            self._lowered.pop(gone, None)
        return True

    def on_open(self, stream: StreamContext) -> None:
        return None

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        return ()

    def tick(self, now: float) -> Sequence[Detection]:
        return ()

    def next_deadline(self) -> float | None:
        return None

    def _series_of(self, skey: str, step: int | None = None) -> _StepSeries:
        """The series of ``skey``; started afresh when ``step`` goes back (a restarted or
        another run printing in the same stream: its losses are not this one's)."""
        series = self._series.get(skey)
        last = self._steps.get(skey)
        if series is None or (step is not None and last is not None and step < last):
            old = series
            series = self._series[skey] = self._new_series()
            self._vanished.discard(skey)
            if old is not None:  # the figure's recent level and noise: the climb's yardstick
                series.recent.extend(old.recent)
            while len(self._series) > MAX_SERIES:
                gone, _s = self._series.popitem(last=False)
                self._steps.pop(gone, None)
                self._vanished.discard(gone)
        if step is not None:
            self._steps[skey] = step
        self._series.move_to_end(skey)
        return series

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        line = event.line
        info = event.stream.info
        if not self._fresh(event):
            return ()
        progress = self.reader.read(line)
        loss = _loss_of(progress)
        if progress is None:
            return ()
        hkey = f"{info.key}\x1f{line.rank or '-'}"
        skey = f"{hkey}\x1f{progress.kind}"
        if loss is None:
            if progress.overflow:
                self._halving(hkey, progress.loss_scale, progress.attempted_scale)
            if (_loss_dropped(progress.kind, progress.loss, progress.eval or progress.overflow,
                              lambda: _skipped(line.text))
                    and self._vanish(skey) and not event.replaying):
                return [self._lost(info, line, progress)]
            return ()
        series = self._series_of(skey, progress.step)
        got = self._update(series, loss, progress.step)
        halved = self._halved.get(hkey, 0)
        jumps = self._jump_many(series, [loss], partial(_always, progress.step),
                                partial(_const, progress.loss_scale), partial(_const, halved))
        climbs = self._climb_many(series, [loss], partial(_always, progress.step))
        if event.replaying:
            return ()
        out: list[Detection] = [self._jumped(info, line, progress, c) for _j, c in jumps]
        out += [self._climbed(info, line, progress, c) for _j, c in climbs]
        if got is not None:
            out.append(self._diverged(info, line, progress, _Fired.of(series), got[0], got[1]))
        return out

    def _segment(self, skey: str, shape: Shape, seg: list[int], chunk: Chunk,
                 halved: Callable[[str, int], int],
                 fired: list[tuple[int, _Fired | _Climb | _Jump | _Vanished, float, float,
                                   Callable[[], tuple[LogLine, Progress]]]]) -> None:
        """One run of prepass records of series ``skey`` whose steps do not go back: the step
        time, jump and climb rules over its losses as one block, what fires appended to
        ``fired``, and the series' last step kept."""
        losses, steps = shape.losses, shape.steps
        xs = [x for i in seg if (x := losses[i]) is not None]
        series = self._series_of(skey, steps[seg[0]])
        step_fn = partial(_step_at, steps, seg)

        def made(i: int) -> Callable[[], tuple[LogLine, Progress]]:
            return partial(_made, _bulk_line(chunk, shape.record(i)), shape.record(i))

        for j, before, after, state in self._update_many(series, xs, step_fn):
            fired.append((_pos(*shape.key(seg[j])), state, before, after, made(seg[j])))
        for j, jump in self._jump_many(series, xs, step_fn,
                                       partial(_scale_at, shape.loss_scales, seg),
                                       partial(_halved_in, halved, skey, shape, seg)):
            fired.append((_pos(*shape.key(seg[j])), jump, 0.0, 0.0, made(seg[j])))
        for j, climb in self._climb_many(series, xs, step_fn):
            fired.append((_pos(*shape.key(seg[j])), climb, 0.0, 0.0, made(seg[j])))
        last_step = next((st for i in reversed(seg) if (st := steps[i]) is not None), None)
        if last_step is not None:
            self._steps[skey] = last_step

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        """As ``on_line`` for each delivered part, in order; a series read only by the
        prepass in blocks (``_update_many``)."""
        info = chunk.stream.info
        reader = self.reader
        floor = self._floor(chunk)
        lines: list[tuple[int, ProgressRecord, ChunkLine, Part]] = []
        dropped: list[tuple[int, str | None, str, Callable[[], tuple[LogLine, Progress]]]] = []
        halvings: dict[str, tuple[int, list[int]]] = {}  # stream+rank: (count before, where)
        halved = partial(_halved_at, halvings, self._halved)
        last = -1
        for line, k, part in _delivered(chunk, mask):
            if floor is not None and line.start <= floor:
                continue
            last = line.start
            if line.covered:
                continue
            rec = reader.record_part(chunk, line, k, part.text, part.rank)
            if rec is not None:
                if _record_loss(rec) is not None:
                    lines.append((_pos(line.start, k), rec, line, part))
                    continue
                if rec[R_FLAGS] & F_OVERFLOW:
                    hkey = f"{info.key}\x1f{rec[R_RANK] or '-'}"
                    if hkey not in halvings:
                        halvings[hkey] = (self._halved.get(hkey, 0), [])
                    if self._halving(hkey, rec[R_LOSS_SCALE], rec[R_ATTEMPTED]):
                        halvings[hkey][1].append(_pos(line.start, k))
                if rec[R_KIND] in _DROPS_NONFINITE_LOSS and _loss_dropped(
                        rec[R_KIND], rec[R_LOSS], rec[R_FLAGS] & (F_EVAL | F_OVERFLOW),
                        partial(bool, rec[R_FLAGS] & F_SKIPPED)):
                    dropped.append((_pos(line.start, k), rec[R_RANK], rec[R_KIND],
                                    partial(_made, _part_line(info, line, part), rec)))
        fresh = _Fresh.of(reader.bulk_of(chunk), floor)
        self._counted(chunk, max(last, fresh.last_line))
        reader.chunk_done(chunk)
        groups: dict[tuple[str | None, str], tuple[list[tuple[Shape, list[int]]],
                                                  list[tuple[int, ProgressRecord, ChunkLine,
                                                             Part]]]] = {}
        for rank, shape, all_idx in fresh.by_rank():
            losses = shape.losses
            idx = [i for i in all_idx if losses[i] is not None]
            if idx:
                groups.setdefault((rank, shape.kind), ([], []))[0].append((shape, idx))
            if len(idx) < len(all_idx) and shape.kind in _DROPS_NONFINITE_LOSS:
                skipped = shape.skipped
                dropped.extend(
                    (_pos(*shape.key(i)), rank, shape.kind,
                     partial(_made, _bulk_line(chunk, shape.record(i)), shape.record(i)))
                    for i in all_idx if losses[i] is None and not (skipped and skipped[i]))
        for item in lines:
            rec = item[1]
            groups.setdefault((rec[R_RANK], rec[R_KIND]), ([], []))[1].append(item)
        if not groups and not dropped:
            return []
        prefix = f"{info.key}\x1f"
        # where each series' first loss of this chunk is: a loss that drops out after it (or
        # after the losses of earlier chunks) is one that became non-finite
        first_loss: dict[str, int] = {}
        had: set[str] = set()
        if dropped:
            for (rank, kind), (blocks, recs) in groups.items():
                at = [_pos(*shape.key(idx[0])) for shape, idx in blocks]
                at += [recs[0][0]] if recs else []
                first_loss[f"{prefix}{rank or '-'}\x1f{kind}"] = min(at)
            had = {skey for _p, rank, kind, _m in dropped
                   if (skey := f"{prefix}{rank or '-'}\x1f{kind}") in self._series}
        new = sum(1 for rank, kind in groups
                  if f"{prefix}{rank or '-'}\x1f{kind}" not in self._series)
        in_order = len(self._series) + new > MAX_SERIES  # eviction order: line by line
        items: list[tuple[int, str, float, int | None, float | None,
                          Callable[[], tuple[LogLine, Progress]]]] = []
        fired: list[tuple[int, _Fired | _Climb | _Jump | _Vanished, float, float,
                          Callable[[], tuple[LogLine, Progress]]]] = []
        touched: list[tuple[int, str]] = []
        for (rank, kind), (blocks, recs) in groups.items():
            skey = f"{prefix}{rank or '-'}\x1f{kind}"
            if not recs and len(blocks) == 1 and not in_order:
                shape, idx = blocks[0]
                # split where steps go back
                for seg in _runs(shape.steps, idx, self._steps.get(skey)):
                    self._segment(skey, shape, seg, chunk, halved, fired)
                touched.append((_pos(*shape.key(idx[-1])), skey))
                continue
            if in_order:  # every record of the chunk in line order (eviction order)
                for shape, idx in blocks:
                    for i in idx:
                        rec = shape.record(i)
                        loss = rec[R_LOSS]
                        assert loss is not None
                        items.append((_pos(rec[R_START], rec[R_PART]), skey, loss,
                                      rec[R_STEP], rec[R_LOSS_SCALE],
                                      partial(_made, _bulk_line(chunk, rec), rec)))
                for pos, rec, line, part in recs:
                    loss = rec[R_LOSS]
                    assert loss is not None
                    items.append((pos, skey, loss, rec[R_STEP], rec[R_LOSS_SCALE],
                                  partial(_made, _part_line(info, line, part), rec)))
                continue
            last_pos = -1
            for run_shape, what in _interleave(blocks, recs, _start_of_item):
                if run_shape is not None:  # a run of prepass records
                    shape, run = run_shape, cast("list[int]", what)
                    for part_seg in _runs(shape.steps, run, self._steps.get(skey)):
                        self._segment(skey, shape, part_seg, chunk, halved, fired)
                    last_pos = _pos(*shape.key(run[-1]))
                    continue
                pos, rec, line, part = what
                loss = rec[R_LOSS]
                assert loss is not None
                series = self._series_of(skey, rec[R_STEP])
                got = self._update(series, loss, rec[R_STEP])
                made_part = partial(_made, _part_line(info, line, part), rec)
                if got is not None:
                    fired.append((pos, _Fired.of(series), got[0], got[1], made_part))
                for _j, jump in self._jump_many(
                        series, [loss], partial(_always, rec[R_STEP]),
                        partial(_const, rec[R_LOSS_SCALE]),
                        partial(_const, halved(skey.rpartition("\x1f")[0], pos))):
                    fired.append((pos, jump, 0.0, 0.0, made_part))
                for _j, climb in self._climb_many(series, [loss], partial(_always, rec[R_STEP])):
                    fired.append((pos, climb, 0.0, 0.0, made_part))
                last_pos = pos
            touched.append((last_pos, skey))
        items.sort(key=itemgetter(0))
        for pos, skey, loss, step, scale, made in items:
            series = self._series_of(skey, step)
            got = self._update(series, loss, step)
            if got is not None:
                fired.append((pos, _Fired.of(series), got[0], got[1], made))
            for _j, jump in self._jump_many(
                    series, [loss], partial(_always, step), partial(_const, scale),
                    partial(_const, halved(skey.rpartition("\x1f")[0], pos))):
                fired.append((pos, jump, 0.0, 0.0, made))
            for _j, climb in self._climb_many(series, [loss], partial(_always, step)):
                fired.append((pos, climb, 0.0, 0.0, made))
            touched.append((pos, skey))
        for _at, skey in sorted(touched):
            if skey in self._series:
                self._series.move_to_end(skey)
        for pos, rank, kind, made in sorted(dropped, key=itemgetter(0)):
            skey = f"{prefix}{rank or '-'}\x1f{kind}"
            if (skey in had or first_loss.get(skey, pos) < pos) and self._vanish(skey):
                fired.append((pos, _Vanished(None), 0.0, 0.0, made))
        out: list[Detection] = []
        replay_below = chunk.replay_below - chunk.base
        for pos, what, before, after, make in sorted(fired, key=itemgetter(0)):
            if (pos >> _PART_BITS) < replay_below:
                continue
            log_line, progress = make()
            if isinstance(what, _Climb):
                out.append(self._climbed(info, log_line, progress, what))
            elif isinstance(what, _Vanished):
                out.append(self._lost(info, log_line, progress))
            elif isinstance(what, _Jump):
                out.append(self._jumped(info, log_line, progress, what))
            else:
                out.append(self._diverged(info, log_line, progress, what, before, after))
        return out

    def _climbed(self, info: StreamInfo, line: LogLine, progress: Progress,
                 climb: _Climb) -> Detection:
        first, last = climb.losses[0], climb.losses[-1]
        ratio = last / first
        figures = " -> ".join(_fmt(x) for x in climb.losses)
        facts: list[tuple[str, str]] = [
            ("series", progress.kind), ("rule", "climb"), ("before_loss", _fmt(first)),
            ("after_loss", _fmt(last)), ("ratio", f"{ratio:.2f}"),
            ("rises", str(climb.rises)), ("losses", figures)]
        if climb.first_step is not None:
            facts.append(("since_step", str(climb.first_step)))
        if climb.last_step is not None:
            facts.append(("step", str(climb.last_step)))
        where = (f" over steps {climb.first_step}-{climb.last_step}"
                 if climb.first_step is not None and climb.last_step is not None else "")
        return self._detection(
            info, line, signature="training_loss_diverged",
            title="Training Loss Climbing Steeply", severity=Severity.WARNING,
            remediation=_CLIMB_REMEDIATION, facts=facts,
            about=(f"loss rose on {climb.rises} progress lines in a row{where}: {figures} "
                   f"({ratio:.1f}x)"))

    def _jumped(self, info: StreamInfo, line: LogLine, progress: Progress,
                jump: _Jump) -> Detection:
        last = jump.losses[-1]
        ratio = last / jump.base
        figures = " -> ".join(_fmt(x) for x in jump.losses)
        facts: list[tuple[str, str]] = [
            ("series", progress.kind), ("rule", "jump_overflow"),
            ("before_loss", _fmt(jump.base)), ("after_loss", _fmt(last)),
            ("ratio", f"{ratio:.2f}"), ("halvings", str(jump.halvings)), ("losses", figures)]
        if jump.first_step is not None:
            facts.append(("since_step", str(jump.first_step)))
        if jump.last_step is not None:
            facts.append(("step", str(jump.last_step)))
        if progress.loss_scale is not None:
            facts.append(("loss_scale", _fmt_scale(progress.loss_scale)))
        since = f" from step {jump.first_step}" if jump.first_step is not None else ""
        return self._detection(
            info, line, signature="training_loss_diverged",
            title="Training Loss Jumped And Stayed Up As The Loss Scale Halved",
            severity=Severity.WARNING, remediation=_JUMP_REMEDIATION, facts=facts,
            about=(f"loss {_fmt(jump.base)} -> {figures}{since} ({ratio:.1f}x), and the fp16 "
                   f"loss scale halved {jump.halvings} times meanwhile"))

    def _vanish(self, skey: str) -> bool:
        """True (once) when the series ``skey`` had a finite loss and its loss now dropped
        out of its progress lines."""
        if skey not in self._series or skey in self._vanished:
            return False
        self._vanished.add(skey)
        return True

    def _lost(self, info: StreamInfo, line: LogLine, progress: Progress) -> Detection:
        facts: list[tuple[str, str]] = [("series", progress.kind), ("rule", "vanished")]
        if progress.step is not None:
            facts.append(("step", str(progress.step)))
        at = f" at step {progress.step}" if progress.step is not None else ""
        return self._detection(
            info, line, signature="training_nonfinite",
            title="Training Loss Dropped Out Of The Progress Line", severity=Severity.WARNING,
            remediation=_VANISHED_REMEDIATION, facts=facts,
            about=(f"the {progress.kind} progress line{at} no longer carries the loss it "
                   f"carried before, and no iteration was skipped: the loss became NaN/Inf"))

    def _diverged(self, info: StreamInfo, line: LogLine, progress: Progress, series: _Fired,
                  before: float, after: float) -> Detection:
        ratio = after / before if before > 0 else math.inf
        facts: list[tuple[str, str]] = [
            ("series", progress.kind), ("before_loss", _fmt(before)), ("after_loss", _fmt(after)),
            ("ratio", f"{ratio:.2f}"), ("sustained_lines", str(series.run_len))]
        if series.run_step is not None:
            facts.append(("since_step", str(series.run_step)))
        if progress.step is not None:
            facts.append(("step", str(progress.step)))
        since = f" from step {series.run_step}" if series.run_step is not None else ""
        return self._detection(
            info, line, signature="training_loss_diverged",
            title="Training Loss Doubled And Stayed Up", severity=Severity.WARNING,
            remediation=_DIVERGED_REMEDIATION, facts=facts,
            about=(f"loss {_fmt(before)} -> {_fmt(after)} ({ratio:.1f}x){since}, for "
                   f"{series.run_len} progress lines"))

    def snapshot(self) -> object:
        return {"version": 1, "offsets": self._offsets_state(),
                "series": {k: s.to_json() for k, s in self._series.items()},
                "steps": dict(self._steps), "vanished": sorted(self._vanished),
                "halved": dict(self._halved), "lowered": dict(self._lowered)}

    def restore(self, state: object) -> None:
        if not isinstance(state, dict) or state.get("version") != 1:
            return
        self._restore_offsets(state)
        self._series.clear()
        for key, raw in dict(state.get("series", {})).items():
            self._series[str(key)] = _StepSeries(
                str(raw["metric"]), deque((float(v) for v in raw["baseline"]),
                                          maxlen=self.window),
                seen=int(raw["seen"]), run=[float(v) for v in raw["run"]],
                run_step=raw.get("run_step"), regressed=bool(raw["regressed"]),
                hot_since_alert=int(raw["hot_since_alert"]), cool=int(raw["cool"]),
                recent=deque((float(v) for v in raw.get("recent", ())),
                             maxlen=self.window + self.climb + 1),
                climb_vals=[float(v) for v in raw.get("climb_vals", ())],
                climb_steps=list(raw.get("climb_steps", ())),
                climb_fired=bool(raw.get("climb_fired", False)),
                climb_prior=(float(raw["climb_prior"][0]), float(raw["climb_prior"][1]))
                if raw.get("climb_prior") else None)
            jump = raw.get("jump")
            if jump:
                got = self._series[str(key)]
                got.jump_base = float(jump[0]) if jump[0] is not None else None
                got.jump_vals = [float(v) for v in jump[1]]
                got.jump_len, got.jump_step, got.jump_halved = int(jump[2]), jump[3], int(jump[4])
                got.jump_scale = float(jump[5]) if jump[5] is not None else None
                got.jump_fired = bool(jump[6])
        self._steps = {str(k): int(v) for k, v in dict(state.get("steps", {})).items()}
        self._vanished = {str(k) for k in state.get("vanished", ())}
        self._halved = {str(k): int(v) for k, v in dict(state.get("halved", {})).items()}
        self._lowered = {str(k): float(v) for k, v in dict(state.get("lowered", {})).items()}


def _start_of_item(item: tuple[int, ProgressRecord, ChunkLine, Part]) -> int:
    return item[2].start


def _start_of_line_item(item: tuple[ProgressRecord, ChunkLine, Part]) -> int:
    return item[1].start


def _record_loss(rec: ProgressRecord) -> float | None:
    """``_loss_of`` for a record."""
    loss = rec[R_LOSS]
    if rec[R_FLAGS] & (F_EVAL | F_OVERFLOW) or loss is None or not math.isfinite(loss):
        return None
    return loss


def _halved_at(halvings: dict[str, tuple[int, list[int]]], counts: dict[str, int], hkey: str,
               pos: int) -> int:
    """Halvings of the loss scale of stream and rank ``hkey`` before chunk position ``pos``
    (``halvings``: this chunk's, with the count before it; ``counts``: earlier chunks')."""
    got = halvings.get(hkey)
    if got is None:
        return counts.get(hkey, 0)
    return got[0] + bisect_left(got[1], pos)


def _halved_in(halved: Callable[[str, int], int], skey: str, shape: Shape, idx: list[int],
               j: int) -> int:
    """``_halved_at`` for record ``idx[j]`` of a prepass shape in series ``skey``."""
    return halved(skey.rpartition("\x1f")[0], _pos(*shape.key(idx[j])))


def _loss_dropped(kind: str, loss: float | None, eval_or_overflow: object,
                  skipped: Callable[[], bool]) -> bool:
    """A progress record of a shape that leaves a NaN/Inf loss out of its line, with no loss,
    of a training step that was not skipped (an fp16 overflow's skipped step has no loss)."""
    return (kind in _DROPS_NONFINITE_LOSS and loss is None and not eval_or_overflow
            and not skipped())


def _loss_of(progress: Progress | None) -> float | None:
    """The finite training loss a progress record holds (not an evaluation bar, not an
    overflow line), or None."""
    if progress is None or progress.eval or progress.overflow or progress.loss is None:
        return None
    return progress.loss if math.isfinite(progress.loss) else None


def _interleave(blocks: list[tuple[Shape, list[int]]], others: list[Any],
                start_of: Callable[[Any], int]) -> list[tuple[Shape | None, Any]]:
    """The prepass records of one series (one shape: a series is of one kind) and its other
    records in line order, as (shape, slice of its indices) runs and (None, record) items."""
    if not blocks:
        return [(None, o) for o in sorted(others, key=start_of)]
    (shape, idx), = blocks  # one kind, one shape
    starts = shape.starts
    out: list[tuple[Shape | None, Any]] = []
    b = 0
    for o in sorted(others, key=start_of):
        upto = bisect_left(idx, start_of(o), lo=b, key=starts.__getitem__)
        if upto > b:
            out.append((shape, idx[b:upto]))
            b = upto
        out.append((None, o))
    if b < len(idx):
        out.append((shape, idx[b:]))
    return out


def _always(step: int | None, _j: int) -> int | None:
    return step


def _const(value: _T, _j: int) -> _T:
    return value


def _scale_at(scales: list[float | None], idx: list[int], j: int) -> float | None:
    return scales[idx[j]]


def _step_at(steps: list[int | None], idx: list[int], j: int) -> int | None:
    return steps[idx[j]]


def _runs(steps: list[int | None], idx: list[int], last: int | None) -> list[list[int]]:
    """``idx`` cut where the step goes back (below ``last`` or the step before)."""
    out: list[list[int]] = []
    begin = 0
    for j, i in enumerate(idx):
        step = steps[i]
        if step is None:
            continue
        if last is not None and step < last and j > begin:
            out.append(idx[begin:j])
            begin = j
        last = step
    out.append(idx[begin:])
    return out


# -- stalls --------------------------------------------------------------------------------------

_END_INTEREST_RE: re.Pattern[bytes]  # set below from _END_RE
_END_RE = re.compile(
    r"(?i:'train_runtime'|training (?:is )?(?:done|complete|completed|finished)"
    r"|finished training|after training is done|`?Trainer\.fit`? stopped"
    r"|max_(?:steps|epochs)=\d+` reached|training ended|end of training|exiting training)")
_END_INTEREST_RE = re.compile(_END_RE.pattern.encode())
# Literals every line _END_RE finds holds (any case), as a literal-led trie: the cheap gate of
# the one interest pass; a line it alone selects is confirmed by _END_INTEREST_RE.
_END_GATE = re.compile(literal_interest([b"train_runtime", b"training", b"trainer.fit",
                                         b"` reached"]))
_STALL_REMEDIATION = Remediation(
    summary="The training job stopped printing progress: it may be hung (a collective waiting "
            "on a dead or slow rank, a deadlocked data loader, a stuck filesystem).",
    steps=(
        ("Check that the processes are alive and what they wait on (py-spy dump --pid PID, "
        "or the NCCL/RCCL debug output with NCCL_DEBUG=INFO)."),
        "Look for a failed or slow rank on other nodes (Xid, ECC, link errors, OOM kills).",
        ("If it is hung, restart from the last checkpoint; set a collective timeout "
        "(TORCH_NCCL_ASYNC_ERROR_HANDLING=1, a shorter timeout) so it fails instead of hangs."),
    ),
    action="investigate",
)


def _plain_ascii(chunk: Chunk, line: ChunkLine) -> bool:
    """The line's bytes are ASCII without ESC or NUL: its text is a part of them as they are."""
    key = ("plain", line.start)
    found = chunk.cache.get(key)
    if found is None:
        raw = chunk.data[line.start:line.end]
        found = chunk.cache[key] = raw.isascii() and b"\x1b" not in raw and b"\x00" not in raw
    return bool(found)


class _Records:
    """Every progress record of a chunk a detector counts: the prepass's (by shape) and the
    per-line ones, placed by ``_pos``; what the stall detector asks of them in order."""

    def __init__(self, chunk: Chunk, fresh: _Fresh,
                 lines: list[tuple[int, ProgressRecord, ChunkLine, Part]]) -> None:
        self.chunk = chunk
        self.fresh = fresh
        self.lines = lines
        self._by_pos = {pos: (line, part) for pos, _rec, line, part in lines}
        self._line_pos = [pos for pos, _rec, _line, _part in lines]
        self._bulk: dict[int, tuple[Shape, int]] = {}  # prepass records looked up
        self._pos_cache: dict[int, list[int]] = {}
        self._stamps: dict[bytes, float | None] = {}

    def __bool__(self) -> bool:
        return bool(self.lines or self.fresh.shapes)

    def first(self) -> int:
        cands = [_pos(*shape.key(first)) for shape, first in self.fresh.shapes]
        if self.lines:
            cands.append(self.lines[0][0])
        return min(cands)

    def last(self) -> int:
        cands = [_pos(*shape.key(len(shape) - 1)) for shape, _first in self.fresh.shapes]
        if self.lines:
            cands.append(self.lines[-1][0])
        return max(cands)

    def last_step(self) -> int | None:
        """The step of the last record that has one."""
        best: tuple[int, int | None] | None = None
        for shape, first in self.fresh.shapes:
            steps = shape.steps
            for i in range(len(shape) - 1, first - 1, -1):
                if steps[i] is not None:
                    pos = _pos(*shape.key(i))
                    if best is None or pos > best[0]:
                        best = (pos, steps[i])
                    break
        for pos, rec, _line, _part in reversed(self.lines):
            if rec[R_STEP] is not None:
                if best is None or pos > best[0]:
                    best = (pos, rec[R_STEP])
                break
        return best[1] if best is not None else None

    def _positions(self, shape: Shape) -> list[int]:
        found = self._pos_cache.get(id(shape))
        if found is None:
            parts = shape.parts
            if parts is None:
                found = [start << _PART_BITS for start in shape.starts]
            else:
                found = [(start << _PART_BITS) | k
                         for start, k in zip(shape.starts, parts, strict=True)]
            self._pos_cache[id(shape)] = found
        return found

    def maybe_timed(self) -> list[int]:
        """Positions of the records whose line may have a time of its own, last first (all
        of them when the segment gives every line its time)."""
        out: list[int] = [pos for pos, _rec, _line, _part in self.lines]
        seg = self.chunk.seg_time is not None
        for shape, first in self.fresh.shapes:
            stamps = shape.stamps
            if not seg and stamps is None:
                continue
            positions = self._positions(shape)
            out.extend(positions[i] for i in range(first, len(shape))
                       if seg or (stamps is not None and stamps[i] is not None))
        out.sort(reverse=True)
        return out

    def before(self, pos: int) -> int:
        """The position of the record just before ``pos`` (there is one: not the first)."""
        best = -1
        for shape, first in self.fresh.shapes:
            positions = self._positions(shape)
            i = bisect_left(positions, pos) - 1
            if i >= first and positions[i] > best:
                best = positions[i]
                self._bulk[best] = (shape, i)
        i = bisect_left(self._line_pos, pos) - 1
        if i >= 0 and self._line_pos[i] > best:
            best = self._line_pos[i]
        return best

    def untimed(self, pos: int) -> bool:
        """True when the record's line surely has no time of its own: a prepass record of a
        Hugging Face dict or a tqdm bar (they never start with a timestamp), of a Megatron
        line without its stamp."""
        if self.chunk.seg_time is not None:
            return False  # the segment's time is every line's
        found = self._bulk_at(pos)
        if found is None:
            return False
        shape, i = found
        return shape.stamps is None or shape.stamps[i] is None

    def _bulk_at(self, pos: int) -> tuple[Shape, int] | None:
        found = self._bulk.get(pos)
        if found is None and pos not in self._by_pos:
            for shape, first in self.fresh.shapes:
                positions = self._positions(shape)
                i = bisect_left(positions, pos)
                if i >= first and i < len(positions) and positions[i] == pos:
                    found = self._bulk[pos] = (shape, i)
                    break
        return found

    def time(self, pos: int) -> float | None:
        """The log's own time of the record at ``pos`` (as ``Chunk.time``)."""
        found = self._bulk_at(pos)
        if found is None or self.chunk.seg_time is not None:
            line, k, _text, _rank = self.where(pos, numbered=False)
            return self.chunk.time(line, k)
        shape, i = found
        stamp = shape.stamps[i] if shape.stamps is not None else None
        if stamp is None:
            return None
        if stamp not in self._stamps:
            # what the line's prefix gives: the ISO stamp inside "[...]" (parse_prefix)
            got = match_timestamp(stamp.decode() + "]", now=self.chunk.now)
            self._stamps[stamp] = got.time if got is not None else None
        return self._stamps[stamp]

    def where(self, pos: int, *, numbered: bool = True,
              ) -> tuple[ChunkLine, int, str, str | None]:
        """(line, part, text, rank) of the record at ``pos``."""
        found = self._by_pos.get(pos)
        if found is not None:
            line, part = found
            return line, pos & ((1 << _PART_BITS) - 1), part.text, part.rank
        k = pos & ((1 << _PART_BITS) - 1)
        line = self.chunk.line_at(pos >> _PART_BITS, numbered=numbered)
        p = self.chunk.parts(line)[k]
        return line, k, p.text, p.rank


@dataclass(slots=True)
class _StallStream:
    info: StreamInfo
    last_mono: float
    last_log_time: float | None = None
    last_offset: int = -1
    last_lineno: int = 0
    last_text: str = ""
    last_step: int | None = None
    intervals: deque[float] = field(default_factory=lambda: deque(maxlen=50))
    stalled_since: float | None = None
    stall_key: str = ""
    finished: bool = False
    open: bool = True


class StallDetector(_Base):
    """``training_stalled``: no progress line for many times the usual interval."""

    name = "stall"

    def __init__(
        self,
        clock: Clock,
        *,
        reader: ProgressReader | None = None,
        factor: float = 10.0,
        floor: float = 300.0,
        min_intervals: int = 5,
        host: str = "",
        status: str = "stable",
        metrics: SelfMetrics | None = None,
    ) -> None:
        super().__init__(clock, reader, host, metrics, status)
        self.factor = factor
        self.floor = floor
        self.min_intervals = min_intervals
        self._streams: OrderedDict[str, _StallStream] = OrderedDict()
        self._interest = re.compile(self.reader.interest.pattern + b"|" + _END_RE.pattern.encode())
        self._interests = (self.reader.interest, _END_GATE)

    @property
    def interest(self) -> re.Pattern[bytes] | None:
        return self._interest

    @property
    def interests(self) -> tuple[re.Pattern[bytes], ...]:
        return self._interests

    def on_open(self, stream: StreamContext) -> None:
        st = self._streams.get(stream.info.key)
        if st is not None:
            st.open = True
            st.info = stream.info

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        # A stream that ended (cleanly or not) is judged no further: no stall on a file let go.
        st = self._streams.pop(stream.info.key, None)
        if st is None or st.stalled_since is None:
            return ()
        return (self._resolved(st, reason="stream closed"),)

    def _deadline(self, st: _StallStream) -> float | None:
        if (st.finished or not st.open or st.stalled_since is not None
                or len(st.intervals) < self.min_intervals):
            return None
        usual = statistics.median(st.intervals)
        return st.last_mono + max(self.floor, self.factor * usual)

    def next_deadline(self) -> float | None:
        deadlines = [d for st in self._streams.values() if (d := self._deadline(st)) is not None]
        return min(deadlines, default=None)

    def tick(self, now: float) -> Sequence[Detection]:
        out: list[Detection] = []
        for st in self._streams.values():
            deadline = self._deadline(st)
            if deadline is None or now < deadline:
                continue
            st.stalled_since = st.last_mono
            st.stall_key = f"stall@{st.last_offset}"
            usual = statistics.median(st.intervals)
            silent = now - st.last_mono
            out.append(self._detection(
                st.info, None, signature="training_stalled", title="Training Progress Stalled",
                severity=Severity.ERROR, remediation=_STALL_REMEDIATION, key=st.stall_key,
                about=(f"no training progress for {silent:.0f} s (usual interval "
                       f"{usual:.1f} s); last progress at line {st.last_lineno}"),
                facts=[("silent_seconds", f"{silent:.0f}"),
                       ("usual_interval_seconds", f"{usual:.3g}"),
                       ("last_line", str(st.last_lineno)),
                       *([("last_step", str(st.last_step))] if st.last_step is not None else [])],
                context=(st.last_text,)))
        return out

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        line = event.line
        info = event.stream.info
        if not self._fresh(event):
            return ()
        st = self._streams.get(info.key)
        text = line.text
        if ("rain" in text or "reached" in text or "RAIN" in text) and _END_RE.search(text):
            if st is not None:
                st.finished = True
            return ()
        progress = self.reader.read(line)
        if progress is None:
            return ()
        now = self.clock.monotonic()
        if st is None:
            st = _StallStream(info, now)
            self._streams[info.key] = st
            while len(self._streams) > MAX_SERIES:
                self._streams.popitem(last=False)
        else:
            if line.time is not None and st.last_log_time is not None:
                gap = line.time - st.last_log_time
            else:
                gap = now - st.last_mono
            if gap > 0 and not event.replaying:
                st.intervals.append(gap)
        out: list[Detection] = []
        if st.stalled_since is not None and not event.replaying:
            out.append(self._resolved(st, reason="progress resumed"))
        st.stalled_since = None
        st.finished = False
        st.open = True
        st.info = info
        st.last_mono = now
        st.last_log_time = line.time
        st.last_offset, st.last_lineno, st.last_text = line.offset, line.lineno, line.text
        st.last_step = progress.step if progress.step is not None else st.last_step
        return out

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        """The chunk's lines in order, as ``on_line`` would take them, except that the
        state a progress line leaves (last line, step, time) is taken from the chunk's last
        one, and the intervals between progress lines only for the last ones kept."""
        info = chunk.stream.info
        key = info.key
        reader = self.reader
        floor = self._floor(chunk)
        st = self._streams.get(key)
        before_mono = st.last_mono if st is not None else 0.0
        before_time = st.last_log_time if st is not None else None
        existed = st is not None
        # per-line records (pos, record, line, part) and end-of-training lines (pos)
        lines: list[tuple[int, ProgressRecord, ChunkLine, Part]] = []
        ends: list[int] = []
        last = -1
        gate_bit = chunk.mask((_END_GATE,))
        confirm = (gate_bit, _END_INTEREST_RE)
        for line, k, part in _delivered(chunk, mask, confirm):
            if floor is not None and line.start <= floor:
                continue
            last = line.start
            if line.covered:
                continue  # a prepass line: progress, never an end-of-training line
            text = part.text
            # Every end-of-training wording holds a literal of the gate: a line the gate did
            # not select is no end line, unless removing ANSI codes or NULs joined one, or
            # Unicode case folding (the str regex) finds one the bytes gate cannot.
            if (line.interests & gate_bit or not _plain_ascii(chunk, line)) and (
                    "rain" in text or "reached" in text or "RAIN" in text) and \
                    _END_RE.search(text):
                ends.append(_pos(line.start, k))
                continue
            rec = reader.record_part(chunk, line, k, text, part.rank)
            if rec is not None:
                lines.append((_pos(line.start, k), rec, line, part))
        fresh = _Fresh.of(reader.bulk_of(chunk), floor)
        self._counted(chunk, max(last, fresh.last_line))
        reader.chunk_done(chunk)
        records = _Records(chunk, fresh, lines)
        out: list[Detection] = []
        if not records:
            if ends and st is not None:
                st.finished = True
            return out
        first = records.first()
        now = self.clock.monotonic()  # every line of a chunk arrives at one instant
        if st is None:
            st = _StallStream(info, now)
            self._streams[key] = st
            while len(self._streams) > MAX_SERIES:
                self._streams.popitem(last=False)
        if st.stalled_since is not None and (first >> _PART_BITS) + chunk.base >= \
                chunk.replay_below:
            out.append(self._resolved(st, reason="progress resumed"))
        st.stalled_since = None
        tail = records.last()
        st.finished = bool(ends) and ends[-1] > tail  # an end line after the last progress
        st.open = True
        st.info = info
        st.last_mono = now
        line, k, text, _rank = records.where(tail)
        st.last_log_time = chunk.time(line, k)
        st.last_offset, st.last_lineno = line.offset, line.lineno
        st.last_text = text
        step = records.last_step()
        if step is not None:
            st.last_step = step
        self._intervals(st, chunk, records, existed=existed, before_mono=before_mono,
                        before_time=before_time, now=now)
        return out

    def _intervals(self, st: _StallStream, chunk: Chunk, records: _Records, *, existed: bool,
                   before_mono: float, before_time: float | None, now: float) -> None:
        """Append the gaps between the chunk's progress records, as ``on_line`` would, but
        reading timestamps only back from the last record until the deque is full.

        A gap needs the times of two consecutive records; a record whose line surely has no
        time of its own (a Hugging Face dict, a tqdm bar) makes none, so only the records that
        may have one are visited, from the last, each with the record before it.
        """
        keep = st.intervals.maxlen or 50
        replay_below = chunk.replay_below - chunk.base
        gaps: list[float] = []
        times: dict[int, float | None] = {}

        def time_of(pos: int) -> float | None:
            if pos not in times:
                times[pos] = records.time(pos)
            return times[pos]

        first = records.first()
        for pos in records.maybe_timed():
            if len(gaps) >= keep:
                break
            if pos == first or (pos >> _PART_BITS) < replay_below:
                continue
            prev = records.before(pos)
            if records.untimed(prev):
                continue
            t, p = time_of(pos), time_of(prev)
            gap = t - p if t is not None and p is not None else 0.0
            if gap > 0:
                gaps.append(gap)
        if len(gaps) < keep and existed and (first >> _PART_BITS) >= replay_below:
            t = time_of(first)  # the chunk's first record: the gap since the last one before
            gap = t - before_time if t is not None and before_time is not None \
                else now - before_mono
            if gap > 0:
                gaps.append(gap)
        st.intervals.extend(reversed(gaps))

    def _resolved(self, st: _StallStream, *, reason: str) -> Detection:
        stalled_for = self.clock.monotonic() - (st.stalled_since or st.last_mono)
        return self._detection(
            st.info, None, signature="training_stalled", title="Training Progress Stalled",
            severity=Severity.ERROR, remediation=_STALL_REMEDIATION, status="resolved",
            key=f"{st.stall_key}:resolved",
            about=f"{reason} after {stalled_for:.0f} s without progress",
            facts=[("stalled_seconds", f"{stalled_for:.0f}"), ("resolution", reason)])

    def snapshot(self) -> object:
        now = self.clock.monotonic()
        return {
            "version": 1,
            "offsets": self._offsets_state(),
            "streams": {
                k: {"source": st.info.source, "path": st.info.path,
                    "ago": now - st.last_mono, "log_time": st.last_log_time,
                    "offset": st.last_offset, "lineno": st.last_lineno, "text": st.last_text,
                    "step": st.last_step, "intervals": list(st.intervals),
                    "stalled_ago": (now - st.stalled_since
                                    if st.stalled_since is not None else None),
                    "stall_key": st.stall_key, "finished": st.finished}
                for k, st in self._streams.items()},
        }

    def restore(self, state: object) -> None:
        if not isinstance(state, dict) or state.get("version") != 1:
            return
        self._restore_offsets(state)
        now = self.clock.monotonic()
        self._streams.clear()
        for key, raw in dict(state.get("streams", {})).items():
            st = _StallStream(StreamInfo(str(raw["source"]), str(raw["path"]), str(key)),
                              now - float(raw["ago"]), raw.get("log_time"), int(raw["offset"]),
                              int(raw["lineno"]), str(raw["text"]), raw.get("step"),
                              deque((float(v) for v in raw["intervals"]), maxlen=50))
            ago = raw.get("stalled_ago")
            st.stalled_since = now - float(ago) if ago is not None else None
            st.stall_key = str(raw.get("stall_key", ""))
            st.finished = bool(raw.get("finished", False))
            st.open = False  # judged again only once the runtime reopens the stream
            self._streams[str(key)] = st


# -- bad numbers ---------------------------------------------------------------------------------

_SKIPPED_RE = re.compile(r"skipped iterations:\s*[1-9]|[Ss]kipping step|overflow", re.IGNORECASE)
_NONFINITE_REMEDIATION = Remediation(
    summary="The loss (or gradient norm) has been NaN/Inf for several steps in a row: the run "
            "diverged or is fed bad data, and every further step is wasted.",
    steps=(
        "Stop the run or roll back to the last good checkpoint.",
        ("Lower the learning rate or add warm-up, enable gradient clipping, or switch fp16 to "
        "bf16."),
        ("Check the batches around the first bad step for bad samples (NaN/Inf inputs, empty "
        "sequences, labels out of range)."),
    ),
    action="fix_job_config",
)
_QUIET_ENDS_RUN = 10  # progress records without a halving that end a run of halvings
# Training is under way (past any start-up search of the loss scale) once a progress record
# shows this many optimiser steps, or a whole epoch done (Hugging Face's ``'epoch': x``).
UNDER_WAY_STEP = 200
UNDER_WAY_EPOCH = 1.0
# Every common dynamic loss scaler starts its search at 2^16 (DeepSpeed, apex, torch) or above
# (Megatron: 2^32): a run of halvings from below 2^15 is no fresh start-up search.
SEARCH_FLOOR = 2.0 ** 15
# Halvings in a row, from below ``SEARCH_FLOOR``, that are a collapse even where nothing shows
# training under way (apex's and fairseq's overflow lines between epochs that print no step):
# the scale lost a factor of 256 where a start-up search, had one been caught mid-way, would
# have settled.
DEEP_RUN = 8
_COLLAPSE_REMEDIATION = Remediation(
    summary="The fp16 dynamic loss scale is halved record after record mid-run: the gradients "
            "overflow at almost every step, so the optimiser skips them (no training happens) "
            "and the scale is on its way to its minimum.",
    steps=(
        "Roll back to a checkpoint from before the overflows started.",
        ("Lower the learning rate or add warm-up, clip gradients, or train in bf16 instead of "
         "fp16 (no loss scaling at all)."),
        ("Check the batches where it started for bad samples (NaN/Inf inputs, extreme "
         "values)."),
    ),
    action="fix_job_config",
)
_SCALE_REMEDIATION = Remediation(
    summary="The fp16 dynamic loss scale fell to its minimum: gradients overflow at every "
            "scale, so the optimiser keeps skipping steps (the run is diverging).",
    steps=(
        "Roll back to a checkpoint before the loss scale started falling.",
        "Lower the learning rate, clip gradients, or train in bf16 instead of fp16.",
    ),
    action="fix_job_config",
)


def _under_way(rec: ProgressRecord) -> bool:
    """The record shows training well past its first steps (``UNDER_WAY_STEP``, an epoch)."""
    step, epoch = rec[R_STEP], rec[R_EPOCH]
    return ((step is not None and step >= UNDER_WAY_STEP)
            or (epoch is not None and epoch >= UNDER_WAY_EPOCH))


def _first_under_way(shape: Shape, idx: list[int]) -> int | None:
    """The first of ``idx`` whose record shows training under way, or None."""
    steps, epochs = shape.steps, shape.epochs
    for i in idx:
        step = steps[i]
        if step is not None and step >= UNDER_WAY_STEP:
            return i
        if epochs is not None and (e := epochs[i]) is not None and e >= UNDER_WAY_EPOCH:
            return i
    return None


def _skipped(text: str) -> bool:
    """The line reports skipped iterations or an overflow (fp16 loss scaling)."""
    return ("kip" in text or "verflow" in text or "VERFLOW" in text) and \
        _SKIPPED_RE.search(text) is not None


class _Sums:
    """Sums over one rank's records of one prepass shape between two positions: how many,
    whether any has a loss or grad norm, and the last loss (with its position)."""

    def __init__(self, shape: Shape, idx: list[int]) -> None:
        self.shape = shape
        self.idx = idx
        self._pos: list[int] | None = None
        losses, norms = shape.losses, shape.grad_norms
        # indices (into idx) of the records with a loss, with a loss or a grad norm
        self._loss = [j for j, i in enumerate(idx) if losses[i] is not None]
        self._figure = self._loss if shape.kind != "megatron" else [
            j for j, i in enumerate(idx) if losses[i] is not None or norms[i] is not None]
        scales = shape.loss_scales
        self._scaled = [j for j, i in enumerate(idx) if scales[i] is not None] \
            if shape.scaled else []

    def between(self, lo: int, hi: int) -> tuple[int, bool, tuple[int, float] | None, bool]:
        shape, idx = self.shape, self.idx
        if lo < 0 and hi >= 1 << 62:
            a, b = 0, len(idx)
        else:
            if self._pos is None:
                starts, parts = shape.starts, shape.parts
                self._pos = ([starts[i] << _PART_BITS for i in idx] if parts is None else
                             [(starts[i] << _PART_BITS) | parts[i] for i in idx])
            a = bisect_right(self._pos, lo)
            b = bisect_left(self._pos, hi)
        if a >= b:
            return 0, False, None, False
        k = bisect_left(self._loss, b) - 1
        last: tuple[int, float] | None = None
        if k >= 0 and self._loss[k] >= a:
            i = idx[self._loss[k]]
            value = shape.losses[i]
            assert value is not None
            last = (_pos(*shape.key(i)), value)
        f = bisect_left(self._figure, a)
        figures = f < len(self._figure) and self._figure[f] < b
        g = bisect_left(self._scaled, a)
        return b - a, figures, last, g < len(self._scaled) and self._scaled[g] < b


@dataclass(slots=True)
class _Numbers:
    bad: int = 0
    first_bad_step: int | None = None
    which: set[str] = field(default_factory=set)
    fired: bool = False
    since_overflow: int = 1_000_000
    scale: float | None = None
    max_scale: float | None = None
    scale_fired: bool = False
    last_finite_loss: float | None = None
    # the loss scale halved record after record (an overflow, or a lower scale)
    good: int = 0  # progress records that were no halving (capped)
    settled: bool = False  # the scale held or grew once: past the start-up search
    halvings: int = 0  # halvings in a row
    halving_from: float | None = None  # the scale before the first of them
    halving_step: int | None = None  # the step of the first of them
    collapse_fired: bool = False
    quiet: int = 0  # records without a halving since the last one
    # every halving of the current run, settled or not (the position rule)
    under_way: bool = False  # a record showed training under way (``_under_way``)
    run_all: int = 0
    run_from: float | None = None  # the scale before the run's first halving (or after it,
    run_from_known: bool = False  # when no earlier scale was printed: then this is False)
    run_step: int | None = None
    bare_last: bool = False  # the last halving was an overflow line without its scale

    def held(self) -> None:
        """The scale held or grew: training is under way, a run of halvings ends."""
        self.settled = True
        self.end_run()

    def end_run(self) -> None:
        self.halvings, self.halving_from, self.halving_step = 0, None, None
        self.run_all, self.run_from, self.run_step = 0, None, None
        self.run_from_known = False
        self.collapse_fired = False


class BadNumbersDetector(_Base):
    """``training_nonfinite`` and ``training_loss_scale_minimum``: numbers that went wrong."""

    name = "bad_numbers"

    def __init__(
        self,
        clock: Clock,
        *,
        reader: ProgressReader | None = None,
        consecutive: int = 3,
        min_loss_scale: float = 1.0,
        overflow_grace: int = 2,
        halvings: int = 5,
        settled_records: int = 20,
        host: str = "",
        status: str = "stable",
        metrics: SelfMetrics | None = None,
    ) -> None:
        """``halvings``: halvings of the loss scale in a row that make a collapse, once the
        run is past its start-up search (``settled_records`` progress records without one,
        or the scale held or grew once)."""
        super().__init__(clock, reader, host, metrics, status)
        self.consecutive = consecutive
        self.min_loss_scale = min_loss_scale
        self.overflow_grace = overflow_grace
        self.halvings = halvings
        self.settled_records = settled_records
        self._series: OrderedDict[str, _Numbers] = OrderedDict()

    def on_open(self, stream: StreamContext) -> None:
        return None

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        return ()

    def tick(self, now: float) -> Sequence[Detection]:
        return ()

    def next_deadline(self) -> float | None:
        return None

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        line = event.line
        info = event.stream.info
        if not self._fresh(event):
            return ()
        progress = self.reader.read(line)
        if progress is None or progress.eval:
            return ()
        rec = record_of(line.offset, 0, line.rank, progress, _skipped(line.text))
        return self._take(info, self._state(info, line.rank), rec, event.replaying,
                          lambda: line)

    def _stream_under_way(self, info: StreamInfo) -> bool:
        """True when a rank of this stream showed training under way: its own halvings are
        then judged by the position rule (a second logger's copy of them, under another
        rank tag, must not fire again by depth)."""
        prefix = f"{info.key}\x1f"
        return any(s.under_way for k, s in self._series.items() if k.startswith(prefix))

    def _state(self, info: StreamInfo, rank: str | None) -> _Numbers:
        key = f"{info.key}\x1f{rank or '-'}\x1fnumbers"  # one state per stream and rank
        st = self._series.get(key)
        if st is None:
            st = self._series[key] = _Numbers()
            while len(self._series) > MAX_SERIES:
                self._series.popitem(last=False)
        return st

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        """As ``on_line`` for each delivered part, in order; the prepass's records (finite,
        never an overflow line) are taken per rank in blocks between the records that can
        change anything (a new loss scale, skipped iterations, a line read on its own)."""
        info = chunk.stream.info
        reader = self.reader
        floor = self._floor(chunk)
        lines: list[tuple[int, ProgressRecord, ChunkLine, Part]] = []
        last = -1
        for line, k, part in _delivered(chunk, mask):
            if floor is not None and line.start <= floor:
                continue
            last = line.start
            if line.covered:
                continue
            rec = reader.record_part(chunk, line, k, part.text, part.rank)
            if rec is None or rec[R_FLAGS] & F_EVAL:
                continue
            lines.append((_pos(line.start, k), rec, line, part))
        fresh = _Fresh.of(reader.bulk_of(chunk), floor)
        self._counted(chunk, max(last, fresh.last_line))
        reader.chunk_done(chunk)
        by_rank: dict[str | None, tuple[list[tuple[Shape, list[int]]],
                                        list[tuple[int, ProgressRecord, ChunkLine, Part]]]]
        by_rank = {}
        for rank, shape, idx in fresh.by_rank():
            by_rank.setdefault(rank, ([], []))[0].append((shape, idx))
        for item in lines:
            by_rank.setdefault(item[1][R_RANK], ([], []))[1].append(item)
        if not by_rank:
            return []

        def first_pos(rank: str | None) -> int:
            blocks, items = by_rank[rank]
            cands = [_pos(*shape.key(idx[0])) for shape, idx in blocks]
            if items:
                cands.append(items[0][0])
            return min(cands)

        ranks = sorted(by_rank, key=first_pos)  # series are created in line order
        prefix = f"{info.key}\x1f"
        new = sum(1 for r in ranks if f"{prefix}{r or '-'}\x1fnumbers" not in self._series)
        if len(self._series) + new > MAX_SERIES:
            return self._chunk_in_order(chunk, by_rank)  # which series are evicted: in order
        out: list[Detection] = []
        for rank in ranks:
            blocks, items = by_rank[rank]
            out.extend(self._rank_chunk(chunk, self._state(info, rank), blocks, items))
        out.sort(key=lambda d: d.offset if d.offset is not None else -1)
        return out

    def _rank_chunk(self, chunk: Chunk, st: _Numbers, blocks: list[tuple[Shape, list[int]]],
                    items: list[tuple[int, ProgressRecord, ChunkLine, Part]]) -> list[Detection]:
        """One rank's records of a chunk: the events one by one (``_take``), the ordinary
        prepass records between them as one sum each."""
        info = chunk.stream.info
        replay_below = chunk.replay_below - chunk.base
        events: list[tuple[int, ProgressRecord, Callable[[], LogLine]]] = [
            (pos, rec, _part_line(info, line, part))
            for pos, rec, line, part in items]
        # the loss scales of the per-line records, by position (they move the running scale)
        scales_at = [(pos, sc) for pos, rec, _l, _p in items
                     if (sc := rec[R_LOSS_SCALE]) is not None and math.isfinite(sc)]
        for shape, idx in blocks:
            if not st.under_way and (i := _first_under_way(shape, idx)) is not None:
                rec = shape.record(i)  # the record that shows training under way: taken alone
                events.append((_pos(shape.starts[i], rec[R_PART]), rec, _bulk_line(chunk, rec)))
            scales, skipped = shape.loss_scales, shape.skipped
            if skipped is None and not shape.scaled:
                continue
            cur = st.scale
            starts = shape.starts
            nxt = 0
            for i in idx:
                if nxt < len(scales_at):
                    here = _pos(*shape.key(i))
                    while nxt < len(scales_at) and scales_at[nxt][0] < here:
                        cur = scales_at[nxt][1]
                        nxt += 1
                sc = scales[i]
                if (skipped is not None and skipped[i]) or (sc is not None and sc != cur):
                    rec = shape.record(i)
                    events.append((_pos(starts[i], rec[R_PART]), rec,
                                   _bulk_line(chunk, rec)))
                if sc is not None:
                    cur = sc
        sums = [_Sums(shape, idx) for shape, idx in blocks]
        out: list[Detection] = []
        if not events:
            self._add(st, sums, -1, 1 << 62)
            return out
        events.sort(key=itemgetter(0))
        if len(events) > 1:  # a record may be an event twice (under way and a new scale)
            events = [e for k, e in enumerate(events) if k == 0 or e[0] != events[k - 1][0]]
        prev = -1
        for pos, rec, make in events:
            self._add(st, sums, prev, pos)
            out.extend(self._take(info, st, rec, (pos >> _PART_BITS) < replay_below, make))
            prev = pos
        self._add(st, sums, prev, 1 << 62)
        return out

    def _add(self, st: _Numbers, sums: list[_Sums], lo: int, hi: int) -> None:
        """The ordinary prepass records strictly between positions ``lo`` and ``hi``: what
        ``_take`` does for each (count it since the last overflow; a finite loss or grad norm
        ends any run of bad numbers; the loss is the last finite one)."""
        count = 0
        figures = False
        scaled = False
        loss: tuple[int, float] | None = None
        for s in sums:
            n, any_figure, last_loss, any_scale = s.between(lo, hi)
            count += n
            figures = figures or any_figure
            scaled = scaled or any_scale
            if last_loss is not None and (loss is None or last_loss[0] > loss[0]):
                loss = last_loss
        if not count:
            return
        # no halving among them (those are events); one that shows the scale held
        self._steady(st, count, held=scaled)
        st.since_overflow += count
        if figures:
            st.bad, st.which, st.first_bad_step, st.fired = 0, set(), None, False
        if loss is not None:
            st.last_finite_loss = loss[1]

    def _chunk_in_order(self, chunk: Chunk, by_rank: dict[Any, Any]) -> list[Detection]:
        """Every record of the chunk in line order, one at a time."""
        info = chunk.stream.info
        replay_below = chunk.replay_below - chunk.base
        items: list[tuple[int, ProgressRecord, Callable[[], LogLine]]] = []
        for blocks, lines in by_rank.values():
            for shape, idx in blocks:
                for i in idx:
                    rec = shape.record(i)
                    items.append((_pos(rec[R_START], rec[R_PART]), rec,
                                  _bulk_line(chunk, rec)))
            for pos, rec, line, part in lines:
                items.append((pos, rec, _part_line(info, line, part)))
        items.sort(key=itemgetter(0))
        out: list[Detection] = []
        for pos, rec, make in items:
            out.extend(self._take(info, self._state(info, rec[R_RANK]), rec,
                                  (pos >> _PART_BITS) < replay_below, make))
        return out

    def _take(self, info: StreamInfo, st: _Numbers, rec: ProgressRecord, replaying: bool,
              make_line: Callable[[], LogLine]) -> list[Detection]:
        """One progress record of a stream and rank; ``make_line`` builds the detection's
        line only when there is a detection."""
        out: list[Detection] = []
        overflow = bool(rec[R_FLAGS] & (F_OVERFLOW | F_SKIPPED))
        collapse = self._collapse(info, st, rec, overflow, replaying, make_line)
        if collapse is not None:
            out.append(collapse)
        st.since_overflow = 0 if overflow else st.since_overflow + 1
        scale = rec[R_LOSS_SCALE]
        if scale is not None and math.isfinite(scale):
            if st.scale is not None and scale < st.scale:
                st.since_overflow = 0  # the scaler just halved: this step overflowed
            st.scale = scale
            st.max_scale = scale if st.max_scale is None else max(st.max_scale, scale)
            if (scale <= self.min_loss_scale and st.max_scale > self.min_loss_scale
                    and not st.scale_fired):
                st.scale_fired = True
                if not replaying:
                    out.append(self._detection(
                        info, make_line(), signature="training_loss_scale_minimum",
                        title="Loss Scale Fell To Its Minimum", severity=Severity.ERROR,
                        remediation=_SCALE_REMEDIATION,
                        about=f"fp16 loss scale fell from {_fmt(st.max_scale)} to {_fmt(scale)}",
                        facts=[("loss_scale", _fmt(scale)),
                               ("max_loss_scale", _fmt(st.max_scale)),
                               ("min_loss_scale", _fmt(self.min_loss_scale))]))
            elif scale > self.min_loss_scale:
                st.scale_fired = False
        loss, grad_norm = rec[R_LOSS], rec[R_GRAD_NORM]
        if loss is None and grad_norm is None:
            return out
        nonfinite = {name for name, value in (("loss", loss), ("grad_norm", grad_norm))
                     if value is not None and not math.isfinite(value)}
        if "loss" not in nonfinite and st.since_overflow <= self.overflow_grace:
            nonfinite.discard("grad_norm")  # fp16: an overflowing step reports inf/nan norm
        if not nonfinite:
            st.bad, st.which, st.first_bad_step, st.fired = 0, set(), None, False
            if loss is not None:
                st.last_finite_loss = loss
            return out
        if st.bad == 0:
            st.first_bad_step = rec[R_STEP]
        st.bad += 1
        st.which |= nonfinite
        if st.bad >= self.consecutive and not st.fired:
            st.fired = True
            if not replaying:
                what = " and ".join(sorted(st.which))
                facts = [("nonfinite", what), ("consecutive_lines", str(st.bad))]
                if st.first_bad_step is not None:
                    facts.append(("first_bad_step", str(st.first_bad_step)))
                if st.last_finite_loss is not None:
                    facts.append(("last_finite_loss", _fmt(st.last_finite_loss)))
                out.append(self._detection(
                    info, make_line(), signature="training_nonfinite",
                    title="Training Loss Or Gradient Is NaN/Inf", severity=Severity.ERROR,
                    remediation=_NONFINITE_REMEDIATION,
                    about=f"{what} NaN/Inf on {st.bad} progress lines in a row", facts=facts))
        return out

    def _collapse(self, info: StreamInfo, st: _Numbers, rec: ProgressRecord, overflow: bool,
                  replaying: bool, make_line: Callable[[], LogLine]) -> Detection | None:
        """The loss scale halved record after record mid-run (before ``_take`` moves the
        scale): ``training_loss_scale_collapse`` once per run of halvings.

        A halving is an overflow line or a lower scale. Not one: the same lowered scale
        reported again right after (another rank without a prefix, a second logger line of
        the same optimiser), an overflow whose scale is printed on another line or that the
        scaler absorbed (hysteresis: the scale did not move). Mid-run means past the start-up
        search: the scale held or grew once, or ``settled_records`` progress records without
        a halving came first (the halvings since count), or training was shown under way (an
        optimiser step of ``UNDER_WAY_STEP`` or a whole epoch, before or during the run) and
        the run began below ``SEARCH_FLOOR`` (every halving of the run counts), or the run
        began below ``SEARCH_FLOOR`` and is ``DEEP_RUN`` halvings long.
        """
        scale, before = rec[R_LOSS_SCALE], st.scale
        if scale is not None and not math.isfinite(scale):
            scale = None
        attempted = rec[R_ATTEMPTED]
        if _under_way(rec):
            st.under_way = True
        if overflow and scale is None and (attempted is not None or before is not None):
            if attempted is not None and before is not None and attempted > before:
                st.held()  # the scale grew since it was last seen
            return None  # the scaler kept its scale (hysteresis), or it is on another line
        if (overflow and scale is not None and scale == before
                and (attempted is None or attempted <= scale or st.quiet == 0)):
            return None  # the same halving reported again, or the scale kept
        if attempted is not None and before is not None and attempted > before:
            st.held()  # the scale grew since it was last seen
        halved = overflow or (scale is not None and before is not None and scale < before)
        if not halved:
            self._steady(st, 1, held=scale is not None and before is not None)
            return None
        bare = scale is None and attempted is None
        known = attempted if attempted is not None else before
        start = known if known is not None else scale
        if st.bare_last and st.quiet == 0:  # right after an overflow line without a scale
            if not bare:  # its scale: the same halving
                st.bare_last = False
                if st.run_from is None:
                    st.run_from, st.run_from_known = start, known is not None
            return None  # or the same overflow line again (another rank)
        st.bare_last = bare
        st.quiet = 0
        if st.run_all == 0:
            st.run_step = rec[R_STEP]
        if st.run_from is None:
            st.run_from, st.run_from_known = start, known is not None
        st.run_all += 1
        settled = st.settled or st.good >= self.settled_records
        if not settled:  # the start-up search: halving at the first steps is normal
            st.halvings, st.halving_from, st.halving_step = 0, None, None
        else:
            if st.halvings == 0:
                st.halving_from, st.halving_step = start, rec[R_STEP]
            st.halvings += 1
        by_settled = settled and st.halvings >= self.halvings
        below_search = st.run_from is not None and st.run_from < SEARCH_FLOOR
        by_position = below_search and (
            (st.under_way and st.run_all >= self.halvings)
            or (st.run_all >= DEEP_RUN and not self._stream_under_way(info)))
        if st.collapse_fired or not (by_settled or by_position):
            return None
        st.collapse_fired = True
        if replaying:
            return None
        count, since_from, since_step = (
            (st.halvings, st.halving_from, st.halving_step) if by_settled
            else (st.run_all, st.run_from, st.run_step))
        first_only = not by_settled and not st.run_from_known  # "reducing to 512" came first
        now = scale if scale is not None else before
        facts = [("halvings", str(count))]
        if since_from is not None:
            facts.append(("loss_scale_after_first" if first_only else "loss_scale_from",
                          _fmt_scale(since_from)))
        if now is not None:
            facts.append(("loss_scale", _fmt_scale(now)))
        if since_step is not None:
            facts.append(("since_step", str(since_step)))
        if rec[R_STEP] is not None:
            facts.append(("step", str(rec[R_STEP])))
        fell = ""
        if since_from is not None and now is not None:
            fell = (f": down to {_fmt_scale(now)} ({_fmt_scale(since_from)} after the first)"
                    if first_only else f": {_fmt_scale(since_from)} -> {_fmt_scale(now)}")
        return self._detection(
            info, make_line(), signature="training_loss_scale_collapse",
            title="Loss Scale Halved On Every Step", severity=Severity.WARNING,
            remediation=_COLLAPSE_REMEDIATION, facts=facts,
            about=(f"fp16 loss scale halved {count} times in a row mid-run{fell}: the "
                   "optimiser skips the steps"))

    def _steady(self, st: _Numbers, count: int, *, held: bool) -> None:
        """``count`` progress records without a halving; ``held``: one of them shows the
        scale held. Many in a row end a run of halvings too: not "on every step"."""
        st.good = min(st.good + count, 1_000_000)
        st.quiet = min(st.quiet + count, 1_000_000)
        if held:
            st.held()
        elif st.quiet >= _QUIET_ENDS_RUN:
            st.end_run()

    def snapshot(self) -> object:
        return {
            "version": 1,
            "offsets": self._offsets_state(),
            "series": {k: [s.bad, s.first_bad_step, sorted(s.which), s.fired,
                           s.since_overflow, s.scale, s.max_scale, s.scale_fired,
                           s.last_finite_loss, s.good, s.settled, s.halvings, s.halving_from,
                           s.halving_step, s.collapse_fired, s.quiet, s.under_way, s.run_all,
                           s.run_from, s.run_from_known, s.run_step, s.bare_last]
                       for k, s in self._series.items()},
        }

    def restore(self, state: object) -> None:
        if not isinstance(state, dict) or state.get("version") != 1:
            return
        self._restore_offsets(state)
        self._series.clear()
        for key, raw in dict(state.get("series", {})).items():
            bad, first, which, fired, since, scale, max_scale, scale_fired, last = raw[:9]
            st = _Numbers(int(bad), first, set(which), bool(fired), int(since), scale,
                          max_scale, bool(scale_fired), last)
            if len(raw) >= 16:  # the collapse state (absent from older checkpoints)
                good, settled, halvings, since_from, since_step, collapse_fired, quiet = \
                    raw[9:16]
                st.good, st.settled, st.halvings = int(good), bool(settled), int(halvings)
                st.halving_from, st.halving_step = since_from, since_step
                st.collapse_fired, st.quiet = bool(collapse_fired), int(quiet)
            if len(raw) >= 22:  # the position rule's state (absent from older checkpoints)
                under_way, run_all, run_from, run_from_known, run_step, bare_last = raw[16:22]
                st.under_way, st.run_all, st.run_from = bool(under_way), int(run_all), run_from
                st.run_from_known, st.run_step = bool(run_from_known), run_step
                st.bare_last = bool(bare_last)
            self._series[str(key)] = st
