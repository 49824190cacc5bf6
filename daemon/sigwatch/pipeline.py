"""The pump's core: segments of lines in, detections out to every sink.

Used unchanged by ``sigwatch scan``, the daemon and the self-test, so all three run the same
engine. Work per chunk is: count the lines, let the prefilter jump from candidate to candidate,
and run Python code only on those lines.
"""

from __future__ import annotations

import codecs
import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Sequence

import structlog

from sigwatch.clock import Clock
from sigwatch.detectors.sequence import Fired, SequenceTracker
from sigwatch.engine.matcher import DEFAULT_REGEX_TIMEOUT, Matcher
from sigwatch.framing.lines import Segment
from sigwatch.framing.normalize import normalize
from sigwatch.model import Detection, LogLine, RootCause, StreamInfo
from sigwatch.patterns.compiled import CompiledSignature, PatternSet
from sigwatch.sinks.base import Sink
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["Engine", "Pipeline", "StreamState"]

log = structlog.get_logger("sigwatch.pipeline")


class Engine:
    """A pattern set compiled for matching; replaced whole on reload."""

    def __init__(
        self,
        patterns: PatternSet,
        *,
        regex_timeout: float = DEFAULT_REGEX_TIMEOUT,
        on_timeout: Callable[[str], None] | None = None,
        prefilter: str | None = None,
    ) -> None:
        """``prefilter``: "auto" (Hyperscan when installed), "python", "hyperscan", or "none"
        (every regex on every line: the reference the others are tested against). Default:
        ``$SIGWATCH_PREFILTER`` or "auto"."""
        self.patterns = patterns
        self.matcher = Matcher(patterns, timeout=regex_timeout,
                               on_timeout=on_timeout or (lambda _sig: None),
                               prefilter=prefilter)
        self.prefilter = self.matcher.prefilter
        self.max_context = max((s.context_before for s in patterns.signatures), default=0)


HOLD_SECONDS = 5.0
"""How long a generic detection waits for a specific multi-step signature that may supersede it."""


class StreamState:
    """Per-stream state the pipeline keeps: line count, open sequences, recent lines.

    After a restart, detections below ``suppress_below`` were already delivered and are not
    emitted again, except those at ``pending`` offsets: they were held when the checkpoint was
    written, so they were never delivered.
    """

    def __init__(self, stream: StreamInfo, *, lineno: int = 0, suppress_below: int = -1,
                 pending: Iterable[int] = ()) -> None:
        self.stream = stream
        self.lineno = lineno
        self.suppress_below = suppress_below
        self.pending = frozenset(pending)
        self.tracker = SequenceTracker()
        self.tail: deque[bytes] = deque(maxlen=1)
        self.generation = -1



class Pipeline:
    """Framing output → normalise → match → sequence → correlate → sinks."""

    def __init__(
        self,
        engine: Engine,
        sinks: Sequence[Sink],
        *,
        clock: Clock,
        metrics: SelfMetrics | None = None,
        host: str = "",
    ) -> None:
        self.engine = engine
        self.sinks = list(sinks)
        self.clock = clock
        self.metrics = metrics
        self.host = host
        self.generation = 0
        self._recent: dict[tuple[str, str], Detection] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def swap(self, engine: Engine) -> None:
        """Use a new pattern set from the next line on; open sequences are dropped."""
        self.engine = engine
        self.generation += 1

    def flush(self) -> None:
        """Make every sink durable (before a checkpoint)."""
        for sink in self.sinks:
            try:
                sink.flush()
            except OSError as exc:
                self._sink_failed(sink, exc)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except OSError as exc:
                self._sink_failed(sink, exc)

    # -- processing --------------------------------------------------------------------------

    def process(self, state: StreamState, segments: Iterable[Segment]) -> list[Detection]:
        """Run whole-line segments of one stream through the engine; returns what was emitted."""
        engine = self.engine
        if state.generation != self.generation:
            state.tracker.clear()
            state.generation = self.generation
            if state.tail.maxlen != max(engine.max_context, 1):
                state.tail = deque(state.tail, maxlen=max(engine.max_context, 1))
        emitted: list[Detection] = []
        for seg in segments:
            emitted.extend(self._segment(engine, state, seg))
        emitted.extend(self.tick(state))
        return emitted

    def tick(self, state: StreamState) -> list[Detection]:
        """Release held detections whose line window or hold time has passed."""
        released = state.tracker.expire(state.lineno, self.clock.monotonic(), HOLD_SECONDS)
        return self._emit_fired(self.engine, state, released)

    def finish(self, state: StreamState) -> list[Detection]:
        """The stream ended (end of a scan, a file let go): release everything held."""
        return self._emit_fired(self.engine, state, state.tracker.release_all())

    def _segment(self, engine: Engine, state: StreamState, seg: Segment) -> list[Detection]:
        data = seg.data
        count = data.count(b"\n")
        source = state.stream.source
        m = self.metrics
        if m is not None:
            m.lines.labels(source).inc(count)
            if seg.truncated:
                m.lines_truncated.labels(source).inc()
            if b"\x00" in data:
                m.nul_bytes_skipped.labels(source).inc(data.count(b"\x00"))
            if not data.isascii():
                bad = _invalid_utf8_lines(data)
                if bad:
                    m.invalid_utf8.labels(source).inc(bad)
        emitted: list[Detection] = []
        prefilter = engine.prefilter
        base_lineno = state.lineno
        if prefilter.filters_everything:
            counted_to, lineno = 0, base_lineno
            for start, end, steps in prefilter.candidates(data):
                lineno += data.count(b"\n", counted_to, start) + 1
                counted_to = end + 1
                emitted.extend(
                    self._line(engine, state, data, seg.offset, start, end, lineno, steps))
        else:
            candidates = {start: steps for start, _end, steps in prefilter.candidates(data)}
            forced = frozenset(prefilter.forced)
            start, lineno = 0, base_lineno
            while start < len(data):
                end = data.find(b"\n", start)
                lineno += 1
                extra = candidates.get(start)
                steps = tuple(sorted(forced.union(extra))) if extra else prefilter.forced
                emitted.extend(
                    self._line(engine, state, data, seg.offset, start, end, lineno, steps))
                start = end + 1
        state.lineno = base_lineno + count
        if engine.max_context:
            _remember_tail(state.tail, data, engine.max_context)
        return emitted

    def _line(self, engine: Engine, state: StreamState, data: bytes, base: int,
              start: int, end: int, lineno: int,
              steps: Sequence[tuple[int, int]]) -> list[Detection]:
        raw = data[start:end].decode("utf-8", "replace")
        emitted: list[Detection] = []
        for rank, text in normalize(raw):
            line = LogLine(state.stream, base + start, lineno, text, rank)
            matches = engine.matcher.match(line, steps)
            if not matches:
                continue
            patterns = engine.patterns
            context_of: dict[str, tuple[str, ...]] = {}
            for match in matches:
                sig = patterns.get(match.signature)
                if match.step == 0 and sig is not None and sig.context_before:
                    context_of[sig.id] = self._context(engine, state, data, start, sig,
                                                       rank)
            fired = state.tracker.feed(patterns, matches, context_of, self.clock.monotonic())
            emitted.extend(self._emit_fired(engine, state, fired))
        return emitted

    def _emit_fired(self, engine: Engine, state: StreamState,
                    fired: list[Fired]) -> list[Detection]:
        if not fired:
            return []
        patterns = engine.patterns
        ids = {f.signature for f in fired}
        superseded: set[str] = set()
        for sig_id in ids:
            sig = patterns.get(sig_id)
            if sig is not None:
                superseded |= sig.supersedes & (ids - {sig_id})
        now = self.clock.time()
        out: list[Detection] = []
        for f in fired:
            sig = patterns.get(f.signature)
            if sig is None or f.signature in superseded:
                continue
            detection = self._detection(sig, state, f, now)
            source = state.stream.source
            detection = self._with_root_cause(sig, detection, now)
            self._recent[(source, sig.id)] = detection
            if detection.offset < state.suppress_below and detection.offset not in state.pending:
                continue  # emitted before a crash; the replay only rebuilds state
            for sink in self.sinks:
                try:
                    sink.emit(detection)
                except OSError as exc:
                    self._sink_failed(sink, exc)
            out.append(detection)
        return out

    def _detection(self, sig: CompiledSignature, state: StreamState, f: Fired,
                   now: float) -> Detection:
        line = f.last.line
        return Detection(
            signature=sig.id, title=sig.title, severity=sig.severity, status=sig.status,
            source=state.stream.source, path=state.stream.path, stream_key=state.stream.key,
            line=line.lineno, offset=line.offset, text=line.text, time=now,
            remediation=sig.remediation, context=f.context, rank=line.rank,
            captures=f.captures, labels=sig.labels, host=self.host,
            first_offset=f.first.line.offset,
        )

    def _with_root_cause(self, sig: CompiledSignature, d: Detection, now: float) -> Detection:
        if not sig.caused_by:
            return d
        best: Detection | None = None
        for cause in sig.caused_by:
            prior = self._recent.get((d.source, cause))
            if prior is None or now - prior.time > sig.collateral_window:
                continue
            if best is None or prior.time >= best.time:
                best = prior
        if best is None:
            return d
        root = RootCause(best.signature, best.title, best.text, best.path, best.offset)
        return dataclasses.replace(d, root_cause=root,
                                   severity=sig.collateral_severity or d.severity)

    def _context(self, engine: Engine, state: StreamState, data: bytes, start: int,
                 sig: CompiledSignature, rank: str | None) -> tuple[str, ...]:
        """The ``before`` lines preceding the trigger, filtered by ``include``.

        With interleaved ranks, lines of other ranks are left out: rank 0's crash is quoted
        with rank 0's lines (and lines that carry no rank at all).
        """
        wanted = sig.context_before
        raw_lines: list[bytes] = []
        pos = start
        while len(raw_lines) < wanted and pos > 0:
            prev = data.rfind(b"\n", 0, pos - 1) + 1
            raw_lines.append(data[prev:pos - 1])
            pos = prev
        if len(raw_lines) < wanted:
            for older in reversed(state.tail):
                if len(raw_lines) >= wanted:
                    break
                raw_lines.append(older)
        out: list[str] = []
        for raw in reversed(raw_lines):
            for line_rank, text in normalize(raw.decode("utf-8", "replace")):
                if rank is not None and line_rank is not None and line_rank != rank:
                    continue
                if sig.context_include and not any(
                        _safe_search(p, text, engine.matcher.timeout)
                        for p in sig.context_include):
                    continue
                out.append(text)
        return tuple(out)

    def _sink_failed(self, sink: Sink, exc: OSError) -> None:
        if self.metrics is not None:
            self.metrics.sink_errors.labels(sink.name).inc()
        log.error("sink_write_failed", sink=sink.name, error=str(exc))


def _safe_search(pattern: object, text: str, timeout: float) -> bool:
    try:
        return pattern.search(text, timeout=timeout) is not None  # type: ignore[attr-defined]
    except TimeoutError:
        return False


def _remember_tail(tail: deque[bytes], data: bytes, count: int) -> None:
    """Keep the last ``count`` lines of ``data`` for context quoted from the next segment."""
    lines: list[bytes] = []
    end = len(data) - 1  # index of the final newline
    while len(lines) < count and end > 0:
        start = data.rfind(b"\n", 0, end) + 1
        lines.append(data[start:end])
        end = start - 1
    tail.extend(reversed(lines))


def _invalid_utf8_lines(data: bytes) -> int:
    """Lines of ``data`` that are not valid UTF-8: one decode pass, a jump per bad line."""
    view = memoryview(data)
    bad = 0
    pos = 0
    while True:
        try:
            codecs.decode(view[pos:], "utf-8")
        except UnicodeDecodeError as exc:
            bad += 1
            nl = data.find(b"\n", pos + exc.start)
            if nl == -1:
                return bad
            pos = nl + 1
        else:
            return bad
