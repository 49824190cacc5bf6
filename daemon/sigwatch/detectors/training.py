"""Detectors on training progress: step-time regressions (incident 004), stalls, bad numbers.

All three read progress lines through one shared ``ProgressReader`` (each line is parsed once
whatever the number of detectors) and keep per-series state keyed by the stream's stable key,
the rank and the extractor, so ``snapshot``/``restore`` carries it across a restart:

- ``StepTimeDetector``: rolling median + MAD of seconds per step (or 1/throughput); a sample is
  *hot* when its robust z-score exceeds ``z`` AND it is ``ratio`` times the median; ``sustain``
  hot samples in a row make one ``step_time_regression`` with before/after figures. Warm-up
  samples are skipped, a single slow step (checkpoint save, evaluation, data-loader hiccup)
  never completes a run, and the baseline is frozen while hot. After ``rebaseline`` hot samples
  the new level is accepted as normal (no second alert). On a stream that showed MI300 / gfx942
  / MIOpen / ROCm 6.3.0 evidence the detection names incident 004 and carries its fix.
- ``StallDetector``: progress stopped for ``factor`` times the usual interval and at least
  ``floor`` seconds -> a line-less ``training_stalled`` (from ``tick``); when progress resumes,
  a second ``training_stalled`` detection with status ``resolved``. A stream closed cleanly or
  a run that printed its end-of-training line is not a stall.
- ``BadNumbersDetector``: NaN/Inf loss (or grad norm outside an fp16 overflow) on ``consecutive``
  progress lines in a row -> one ``training_nonfinite`` error; a dynamic loss scale that falls
  to its minimum -> one ``training_loss_scale_minimum`` error. The fp16 loss-scale search at
  the start of training (overflow lines, scale halving from 2^32 or 2^16) raises nothing.

Restart rule shared by all: after ``restore``, lines of a stream at or below the offset the
snapshot had reached are not counted again (the runtime may re-read or replay them).

All three work per chunk (``on_chunk``): the runtime's one interest pass selects the chunk's
progress lines, the shared reader parses each once (cached on the chunk), and each detector
walks the parsed records with no line or event objects. The stall detector reads a line's own
timestamp only for the records whose intervals it keeps (the last ones of the chunk), and all
lines of one chunk arrive at one monotonic instant. ``on_line`` remains for drivers that feed
lines one by one; both give the same detections (tests/unit/test_detector_equivalence.py).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sigwatch.clock import Clock
from sigwatch.detectors.base import Chunk, ChunkLine, LineEvent, Part, StreamContext
from sigwatch.detectors.progress import Extractor, Progress, ProgressParser, literal_interest
from sigwatch.model import Detection, LogLine, Match, Remediation, Severity, StreamInfo
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = [
    "INCIDENT_004_REMEDIATION",
    "BadNumbersDetector",
    "LastProgress",
    "ProgressReader",
    "StallDetector",
    "StepTimeDetector",
]

# Whose fault each detection of this module is: bad numbers come from the job's own training
# configuration; a slowdown or a stall may be the node's or the job's, so it is not known.
OWNER_OF = {"training_nonfinite": "user", "training_loss_scale_minimum": "user"}

MAX_SERIES = 1000


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

    ``last(stream_key)`` is the last progress record parsed on a stream, so that other readers
    need no second parse.
    """

    def __init__(self, extractors: Iterable[Extractor] = (), *, builtin: bool = True) -> None:
        self.parser = ProgressParser(extractors, builtin=builtin)
        self._line: LogLine | None = None
        self._progress: Progress | None = None
        self._last: OrderedDict[str, LastProgress] = OrderedDict()

    @property
    def interest(self) -> re.Pattern[bytes]:
        return self.parser.interest

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

    def chunk_done(self, chunk: Chunk) -> None:
        """Remember the chunk's last parsed record for its stream (idempotent)."""
        parsed = chunk.cache.get(self)
        if not isinstance(parsed, _Parsed) or parsed.last is None:
            return
        _key, line, part, text, progress = parsed.last
        rank = chunk.parts(line)[part].rank
        self._remember(chunk.stream.info.key,
                       LastProgress(line.offset, line.lineno, rank, text, progress))


@dataclass(slots=True)
class _Parsed:
    """What a reader parsed in one chunk: (line start, part) -> progress, and the last one."""

    records: dict[tuple[int, int], Progress | None] = field(default_factory=dict)
    last: tuple[tuple[int, int], ChunkLine, int, str, Progress] | None = None


def _delivered(chunk: Chunk, mask: int,
               confirm: tuple[int, re.Pattern[bytes]] | None = None,
               ) -> Iterator[tuple[ChunkLine, int, Part]]:
    """The parts a per-line detector with interests ``mask`` would have been given, in order:
    every part of a line its interests select, the matched parts of the other lines.

    ``confirm`` (bits, exact pattern): a line selected by those bits alone (a cheap literal
    gate) counts as selected only if the exact pattern finds it too.
    """
    for line in chunk.select(mask):
        parts = chunk.parts(line)
        wanted = line.interests & mask
        if wanted and confirm is not None and not wanted & ~confirm[0]:
            data = chunk.data
            if confirm[1].search(data, line.start, line.end + 1) is None:
                wanted = 0
        if wanted:
            for k, part in enumerate(parts):
                yield line, k, part
        else:
            for k in sorted(line.matches):
                if k < len(parts):
                    yield line, k, parts[k]


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


def _line_maker(info: StreamInfo, line: ChunkLine, part: Part) -> Callable[[], LogLine]:
    return lambda: LogLine(info, line.offset, line.lineno, part.text, part.rank)


def _series_key(info: StreamInfo, line: LogLine, kind: str) -> str:
    return f"{info.key}\x1f{line.rank or '-'}\x1f{kind}"


def _fmt(x: float) -> str:
    return f"{x:.4g}"


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

    def robust(self, refresh_every: int) -> tuple[float, float]:
        """(median, robust scale) of the baseline, recomputed every few appends (it moves
        slowly; a full median and MAD of 200 values on every line would cost ~60 us)."""
        if self.stats is None or self.stale >= refresh_every:
            med = statistics.median(self.baseline)
            mad = statistics.median(abs(v - med) for v in self.baseline)
            self.stats = (med, max(1.4826 * mad, 0.01 * med, 1e-12))
            self.stale = 0
        return self.stats

    def keep(self, x: float) -> None:
        self.baseline.append(x)
        self.stale += 1

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "baseline": list(self.baseline), "seen": self.seen,
                "run": self.run, "run_step": self.run_step, "regressed": self.regressed,
                "hot_since_alert": self.hot_since_alert, "cool": self.cool}


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


class StepTimeDetector(_Base):
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
        super().__init__(clock, reader, host, metrics, status)
        self.window = window
        self.warmup = warmup
        self.min_baseline = min_baseline
        self.z = z
        self.ratio = ratio
        self.sustain = sustain
        self.rebaseline = rebaseline
        self._series: OrderedDict[str, _StepSeries] = OrderedDict()
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
        return (self._regression(info, line, progress, series, before, after),)

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        info = chunk.stream.info
        key = info.key
        out: list[Detection] = []
        counts: dict[str, list[Any]] = {}
        reader = self.reader
        replay_below = chunk.replay_below
        # Platform words anywhere in the chunk? If not, only a matched line can add evidence.
        # (Removing ANSI codes or NULs can join a word: then every line is looked at.)
        data = chunk.data
        platform = (_PLATFORM_WORDS_RE.search(data) is not None or b"\x1b" in data
                    or b"\x00" in data)
        for line, k, part in _delivered(chunk, mask):
            if not self._fresh_at(key, line.offset):
                continue
            text = part.text
            if platform or line.matches:
                self._note_platform(key, text, line.matches.get(k, ()))
            progress = reader.read_part(chunk, line, k, text)
            if progress is None or progress.eval or progress.overflow:
                continue
            fired = self._sample(info, part.rank, progress, counts)
            if fired is None or line.offset < replay_below:
                continue
            series, before, after = fired
            out.append(self._regression(
                info, LogLine(info, line.offset, line.lineno, text, part.rank), progress,
                series, before, after))
        self._count(info, counts)
        reader.chunk_done(chunk)
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
                seen = counts[progress.kind] = [0, None, None]
            seen[0] += 1
            if progress.step_time is not None:
                seen[1] = progress.step_time
            if progress.throughput is not None:
                seen[2] = progress.throughput
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
        for kind, (n, step_time, throughput) in counts.items():
            metrics.progress_lines.labels(info.source, kind).inc(n)
            if step_time is not None:
                metrics.step_seconds.labels(info.source, kind).set(step_time)
            if throughput is not None:
                metrics.throughput.labels(info.source, kind).set(throughput)

    def _update(self, s: _StepSeries, x: float, step: int | None) -> tuple[float, float] | None:
        s.seen += 1
        if s.seen <= self.warmup:
            return None
        if len(s.baseline) < self.min_baseline:
            s.keep(x)
            return None
        med, scale = s.robust(16)
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
                    series: _StepSeries, before: float, after: float) -> Detection:
        ratio = after / before if before > 0 else math.inf
        facts: list[tuple[str, str]] = [("series", progress.kind), ("ratio", f"{ratio:.2f}"),
                                        ("sustained_steps", str(len(series.run)))]
        if series.metric == "step_time":
            facts += [("before_step_seconds", _fmt(before)), ("after_step_seconds", _fmt(after))]
            about = (f"step time {_fmt(before)} s -> {_fmt(after)} s ({ratio:.1f}x) for "
                     f"{len(series.run)} progress lines")
        else:
            facts += [("before_throughput", _fmt(1 / before)),
                      ("after_throughput", _fmt(1 / after))]
            about = (f"throughput {_fmt(1 / before)} -> {_fmt(1 / after)} per second "
                     f"({ratio:.1f}x slower) for {len(series.run)} progress lines")
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
        replay_below = chunk.replay_below
        st = self._streams.get(key)
        before_mono = st.last_mono if st is not None else 0.0
        before_time = st.last_log_time if st is not None else None
        existed = st is not None
        now = self.clock.monotonic()
        records: list[tuple[ChunkLine, int, Part, Progress]] = []
        out: list[Detection] = []
        confirm = (chunk.mask((_END_GATE,)), _END_INTEREST_RE)
        for line, k, part in _delivered(chunk, mask, confirm):
            if not self._fresh_at(key, line.offset):
                continue
            text = part.text
            if ("rain" in text or "reached" in text or "RAIN" in text) and _END_RE.search(text):
                if st is not None:
                    st.finished = True
                continue
            progress = reader.read_part(chunk, line, k, text)
            if progress is None:
                continue
            if st is None:
                st = _StallStream(info, now)
                self._streams[key] = st
                while len(self._streams) > MAX_SERIES:
                    self._streams.popitem(last=False)
            replaying = line.offset < replay_below
            if st.stalled_since is not None and not replaying:
                out.append(self._resolved(st, reason="progress resumed"))
            st.stalled_since = None
            st.finished = False
            records.append((line, k, part, progress))
        reader.chunk_done(chunk)
        if not records or st is None:
            return out
        st.open = True
        st.info = info
        st.last_mono = now
        last_line, last_k, last_part, _last = records[-1]
        st.last_log_time = chunk.time(last_line, last_k)
        st.last_offset, st.last_lineno = last_line.offset, last_line.lineno
        st.last_text = last_part.text
        for _line, _k, _part, progress in reversed(records):
            if progress.step is not None:
                st.last_step = progress.step
                break
        self._intervals(st, chunk, records, existed=existed, before_mono=before_mono,
                        before_time=before_time, now=now)
        return out

    def _intervals(self, st: _StallStream, chunk: Chunk,
                   records: list[tuple[ChunkLine, int, Part, Progress]], *, existed: bool,
                   before_mono: float, before_time: float | None, now: float) -> None:
        """Append the gaps between the chunk's progress records, as ``on_line`` would, but
        reading timestamps only back from the last record until the deque is full."""
        keep = st.intervals.maxlen or len(records)
        replay_below = chunk.replay_below
        gaps: list[float] = []
        times: dict[int, float | None] = {}

        def time_of(i: int) -> float | None:
            if i not in times:
                line, k, _part, _p = records[i]
                times[i] = chunk.time(line, k)
            return times[i]

        for i in range(len(records) - 1, -1, -1):
            if len(gaps) >= keep:
                break
            line = records[i][0]
            if line.offset < replay_below:
                continue
            t = time_of(i)
            if i > 0:
                prev = time_of(i - 1)
                gap = t - prev if t is not None and prev is not None else 0.0  # same instant
            elif not existed:
                continue  # the record that created the state has no gap before it
            elif t is not None and before_time is not None:
                gap = t - before_time
            else:
                gap = now - before_mono
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
_SCALE_REMEDIATION = Remediation(
    summary="The fp16 dynamic loss scale fell to its minimum: gradients overflow at every "
            "scale, so the optimiser keeps skipping steps (the run is diverging).",
    steps=(
        "Roll back to a checkpoint before the loss scale started falling.",
        "Lower the learning rate, clip gradients, or train in bf16 instead of fp16.",
    ),
    action="fix_job_config",
)


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
        host: str = "",
        status: str = "stable",
        metrics: SelfMetrics | None = None,
    ) -> None:
        super().__init__(clock, reader, host, metrics, status)
        self.consecutive = consecutive
        self.min_loss_scale = min_loss_scale
        self.overflow_grace = overflow_grace
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
        return self._take(info, line.rank, line.text, progress, event.replaying,
                          lambda: line)

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        info = chunk.stream.info
        key = info.key
        reader = self.reader
        replay_below = chunk.replay_below
        out: list[Detection] = []
        for line, k, part in _delivered(chunk, mask):
            if not self._fresh_at(key, line.offset):
                continue
            progress = reader.read_part(chunk, line, k, part.text)
            if progress is None or progress.eval:
                continue
            found = self._take(
                info, part.rank, part.text, progress, line.offset < replay_below,
                _line_maker(info, line, part))
            if found:
                out.extend(found)
        reader.chunk_done(chunk)
        return out

    def _take(self, info: StreamInfo, rank: str | None, text: str, progress: Progress,
              replaying: bool, make_line: Callable[[], LogLine]) -> list[Detection]:
        """One progress record of a stream and rank; ``make_line`` builds the detection's
        line only when there is a detection."""
        key = f"{info.key}\x1f{rank or '-'}\x1fnumbers"  # one state per stream and rank
        st = self._series.get(key)
        if st is None:
            st = self._series[key] = _Numbers()
            while len(self._series) > MAX_SERIES:
                self._series.popitem(last=False)
        out: list[Detection] = []
        overflow = progress.overflow or (
            ("kip" in text or "verflow" in text or "VERFLOW" in text)
            and _SKIPPED_RE.search(text) is not None)
        st.since_overflow = 0 if overflow else st.since_overflow + 1
        scale = progress.loss_scale
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
        if progress.loss is None and progress.grad_norm is None:
            return out
        nonfinite = set(progress.nonfinite)
        if "loss" not in nonfinite and st.since_overflow <= self.overflow_grace:
            nonfinite.discard("grad_norm")  # fp16: an overflowing step reports inf/nan norm
        if not nonfinite:
            st.bad, st.which, st.first_bad_step, st.fired = 0, set(), None, False
            if progress.loss is not None:
                st.last_finite_loss = progress.loss
            return out
        if st.bad == 0:
            st.first_bad_step = progress.step
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

    def snapshot(self) -> object:
        return {
            "version": 1,
            "offsets": self._offsets_state(),
            "series": {k: [s.bad, s.first_bad_step, sorted(s.which), s.fired,
                           s.since_overflow, s.scale, s.max_scale, s.scale_fired,
                           s.last_finite_loss] for k, s in self._series.items()},
        }

    def restore(self, state: object) -> None:
        if not isinstance(state, dict) or state.get("version") != 1:
            return
        self._restore_offsets(state)
        self._series.clear()
        for key, raw in dict(state.get("series", {})).items():
            bad, first, which, fired, since, scale, max_scale, scale_fired, last = raw
            self._series[str(key)] = _Numbers(int(bad), first, set(which), bool(fired),
                                              int(since), scale, max_scale, bool(scale_fired),
                                              last)
