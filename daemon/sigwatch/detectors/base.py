"""The ``Detector`` protocol: state machines over lines, matches and time.

The runtime reads lines from sources, runs the signature matcher on the lines its prefilter
selects, and hands every detector:

- ``on_open``/``on_close`` when a stream starts or ends;
- ``on_line`` for each line it wants: lines with signature matches, plus the lines its own
  cheap ``interest`` byte pattern selects (a miner wants error-looking lines, a step-time
  extractor wants progress lines), so nothing slow runs on every line;
- ``tick(now)`` when ``next_deadline`` has passed (a stall needs no input line at all).

A detector may instead work per chunk (``ChunkDetector``): it names the byte patterns it wants
in ``interests`` and gets ``on_chunk(chunk, mask)`` once per chunk of whole lines, with the lines
its interests selected (and the lines signatures matched) in ``chunk.select(mask)``. The runtime
folds every detector's interests into one pass over the chunk; a line is decoded and normalised
at most once whatever the number of detectors that read it (``Chunk.parts``), and results that
several detectors share (parsed progress records) are cached on the chunk (``Chunk.cache``).

A detector may also bring a ``prepass`` (``Prepass``): a reader of whole chunks that the runtime
runs once per chunk *before* the interest pass, such as the progress reader's bulk parser. The
lines it covers are then left out of the search for the interest patterns it ``covers`` (the
detector reads them from the prepass result, ``chunk.prepassed[prepass]``), so the lines that make
up most of a training log cost no per-line work at all.

A per-line detector that never reads ``event.line.time`` (the log's own time of the line) may
say so with ``line_time = False``: the runtime then does not parse the timestamp of lines that
only such detectors get.

A per-line detector that does nothing with a line no signature matched unless its text passes a
test may name that test as ``unmatched_gate`` (text -> bool; the error miner's is "reads like an
error"): the runtime builds no event for an unmatched line whose every part fails the gates of
all the detectors that wanted it. Most lines an error-word interest selects say ``INFO`` or
name a metric ``val_error``; they then cost a decode and a normalisation, nothing more.

Detectors return detections; they never write to sinks. State that replay cannot rebuild
(a deadline, a learned baseline) goes into ``snapshot``/``restore`` and the checkpoint.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from sigwatch.framing.normalize import normalize, normalize_line
from sigwatch.model import Detection, LogLine, Match, StreamInfo

__all__ = ["Chunk", "ChunkDetector", "ChunkLine", "Covered", "Detector", "LineEvent", "Part",
           "Prepass", "RecentLines", "StreamContext", "interests_of", "prepass_of"]


@dataclass(frozen=True, slots=True)
class StreamContext:
    """What a detector knows about the stream a line came from."""

    handle: int
    info: StreamInfo
    kind: str = "file"


class RecentLines(Protocol):
    """Lines just before the current one (from the chunk and the stream's tail)."""

    def before(self, count: int, rank: str | None = None) -> list[str]:
        """The ``count`` raw lines preceding the current one, normalised, oldest first.

        With ``rank``, parts that carry another rank are left out (interleaved launchers).
        """
        ...


@dataclass(frozen=True, slots=True)
class LineEvent:
    """One normalised line and the signature steps it matched (often none)."""

    stream: StreamContext
    line: LogLine
    matches: tuple[Match, ...]
    recent: RecentLines
    replaying: bool = False  # below the stream's replay point: rebuild state, emit nothing


class Detector(Protocol):
    """A state machine fed by the runtime on one thread."""

    name: str

    @property
    def interest(self) -> re.Pattern[bytes] | None:
        """A bytes regex selecting raw lines this detector wants besides matched ones."""
        ...

    def on_open(self, stream: StreamContext) -> None:
        """A stream started (or restarted after truncation) under a new handle."""
        ...

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        """Take one line; return what it completes."""
        ...

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        """The stream ended: release what is held for it."""
        ...

    def tick(self, now: float) -> Sequence[Detection]:
        """Time passed (monotonic ``now``): fire deadlines, release holds."""
        ...

    def next_deadline(self) -> float | None:
        """The monotonic time ``tick`` should next run; None when nothing is pending."""
        ...

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        """(position, lineno) of the oldest line of ``handle`` that open state started on."""
        ...

    def held(self, handle: int) -> tuple[int, ...]:
        """Positions of detections held back (not delivered yet) for ``handle``.

        A position names every detection on its line: after a restart the replay delivers again
        whatever is found on a pending line. A detector whose class sets ``held_gives_way =
        True`` (one that ranks below the others: the generic layer) has its held positions
        dropped where some other detection was already delivered, so that one is not delivered
        twice; the held one is then lost if the daemon dies before it is released.
        """
        ...

    def snapshot(self) -> object:
        """JSON-serialisable state that replay cannot rebuild (None if there is none)."""
        ...

    def restore(self, state: object) -> None:
        """Take back what ``snapshot`` returned before a restart."""
        ...


# -- per-chunk detectors --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Part:
    """One visible part of a raw line (a ``\\r`` rewrite makes several): its rank and text."""

    rank: str | None
    text: str


@dataclass(slots=True)
class ChunkLine:
    """One line of a chunk that some detector's interest selected or a signature matched.

    ``start``/``end``: the line's bytes are ``chunk.data[start:end]``; ``interests``: bit ``i``
    is set when interest ``i`` of the pipeline selected it; ``matches``: part index -> the
    signature steps that matched that part (empty for most lines); ``covered``: a prepass read
    the line (the interests it covers were not searched on it).
    """

    start: int
    end: int
    lineno: int
    offset: int
    interests: int = 0
    matches: dict[int, tuple[Match, ...]] = field(default_factory=dict)
    covered: bool = False


class Chunk:
    """Whole lines of one stream read together, as the per-chunk detectors see them.

    Lines are decoded, split and normalised only when a detector asks (``parts``), once;
    a line's own time (its timestamp) is parsed only when asked (``time``), once.
    """

    __slots__ = ("_parts", "_recent", "_select", "_times", "base", "base_lineno", "cache",
                 "data", "lines", "mask", "now", "prepassed", "replay_below", "seg_time",
                 "stream")

    def __init__(self, stream: StreamContext, data: bytes, lines: list[ChunkLine],
                 replay_below: int, seg_time: float | None = None,
                 mask: Callable[[Sequence[re.Pattern[bytes]]], int] | None = None, *,
                 base: int = 0, base_lineno: int = 0,
                 recent: Callable[[int], RecentLines] | None = None,
                 prepassed: dict[object, object] | None = None,
                 now: float | None = None) -> None:
        """``mask``: the bits ``ChunkLine.interests`` uses for given interest patterns.
        ``base``/``base_lineno``: the stream position of ``data[0]`` and the number of the
        line before it (a detector that reads lines no interest selected numbers them);
        ``recent``: the lines before a line start, across the chunk boundary; ``prepassed``:
        each prepass's result for this chunk; ``now``: the runtime's clock when the chunk was
        read (it places stamps that carry no year)."""
        self.mask = mask or (lambda _patterns: 0)
        self.stream = stream
        self.data = data
        self.lines = lines
        self.replay_below = replay_below
        self.seg_time = seg_time
        self.now = now
        self.base = base
        self.base_lineno = base_lineno
        self._recent = recent
        self.prepassed: dict[object, object] = prepassed if prepassed is not None else {}
        self.cache: dict[object, object] = {}
        self._parts: dict[int, list[Part]] = {}
        self._times: dict[int, list[float | None]] = {}
        self._select: dict[int, list[ChunkLine]] = {}

    def select(self, mask: int) -> list[ChunkLine]:
        """Lines with any of the ``mask`` interests, or with a signature match, in order."""
        found = self._select.get(mask)
        if found is None:
            found = [ln for ln in self.lines if ln.interests & mask or ln.matches]
            self._select[mask] = found
        return found

    def raw(self, line: ChunkLine) -> str:
        return self.data[line.start:line.end].decode("utf-8", "replace")

    def parts(self, line: ChunkLine) -> list[Part]:
        """The line's visible parts (ANSI removed, ``\\r`` split, launcher prefix cut)."""
        found = self._parts.get(line.start)
        if found is None:
            found = [Part(rank, text) for rank, text in normalize(self.raw(line))]
            self._parts[line.start] = found
        return found

    def time(self, line: ChunkLine, part: int) -> float | None:
        """The log's own time of one part: the segment's, or the line prefix's timestamp."""
        if self.seg_time is not None:
            return self.seg_time
        found = self._times.get(line.start)
        if found is None:
            found = [n.time for n in normalize_line(self.raw(line), now=self.now)]
            self._times[line.start] = found
        return found[part] if part < len(found) else None

    def replaying(self, line: ChunkLine) -> bool:
        return line.offset < self.replay_below

    def line_at(self, start: int, *, numbered: bool = True) -> ChunkLine:
        """A ``ChunkLine`` for any line of the chunk (one no interest selected: a line a
        prepass read), placed, and numbered unless ``numbered`` is False (lineno 0)."""
        data = self.data
        end = data.find(b"\n", start)
        if end == -1:
            end = len(data)
        lineno = 0
        if numbered:
            # count from the nearest line already numbered before it
            lines = self.lines
            i = bisect_right(lines, start, key=_start_of) - 1
            if i >= 0:
                lineno = lines[i].lineno + data.count(b"\n", lines[i].start, start)
            else:
                lineno = self.base_lineno + data.count(b"\n", 0, start) + 1
        return ChunkLine(start, end, lineno, self.base + start, covered=True)

    def before(self, start: int) -> RecentLines:
        """The lines before the line starting at ``data[start]`` (those of earlier chunks too,
        as far as the stream's tail reaches)."""
        if self._recent is not None:
            return self._recent(start)
        return _ChunkOnly(self.data, start)


class _ChunkOnly:
    """``RecentLines`` within one chunk (a chunk built without the stream's tail)."""

    __slots__ = ("_data", "_start")

    def __init__(self, data: bytes, start: int) -> None:
        self._data, self._start = data, start

    def before(self, count: int, rank: str | None = None) -> list[str]:
        out: list[str] = []
        pos = self._start
        while len(out) < count and pos > 0:
            prev = self._data.rfind(b"\n", 0, pos - 1) + 1
            parts = normalize(self._data[prev:pos - 1].decode("utf-8", "replace"))
            out[:0] = [text for line_rank, text in parts
                       if rank is None or line_rank is None or line_rank == rank]
            pos = prev
        return out[-count:] if count else []


def _start_of(line: ChunkLine) -> int:
    return line.start


@runtime_checkable
class ChunkDetector(Protocol):
    """A detector fed per chunk of whole lines instead of per line (see the module doc).

    It keeps the rest of ``Detector`` (open, close, tick, state); ``on_line`` stays for
    drivers that feed one line at a time and must give the same detections.
    """

    name: str

    @property
    def interests(self) -> tuple[re.Pattern[bytes], ...]:
        """Bytes regexes; a line any of them finds is given to ``on_chunk``."""
        ...

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        """Take the lines ``chunk.select(mask)`` returns; return what they complete."""
        ...


class Covered(Protocol):
    """What a prepass read in one chunk: the lines it covers, as (start, newline index)."""

    @property
    def lines(self) -> Sequence[tuple[int, int]]:
        """The covered lines, in order."""
        ...


class Prepass(Protocol):
    """A reader of whole chunks, run once per chunk before the interest pass (see module doc)."""

    @property
    def covers(self) -> tuple[re.Pattern[bytes], ...]:
        """Interest patterns that need not be searched on the lines the prepass covers."""
        ...

    @property
    def vocabulary(self) -> frozenset[bytes] | None:
        """Every run of letters a covered line can hold is part of one of these words
        (lower case), or None when that is not known. A pattern whose every match needs
        another run of letters is then not searched on the covered lines either."""
        ...

    @property
    def alphabet(self) -> frozenset[int] | None:
        """The bytes a covered line can hold (None: any). A pattern whose every match needs
        another byte is not searched on the covered lines either."""
        ...

    def run(self, data: bytes) -> Covered:
        """Read ``data`` (whole lines, each ending with a newline)."""
        ...


def prepass_of(detector: object) -> Prepass | None:
    """A detector's prepass (its ``prepass`` attribute), if it has one."""
    found = getattr(detector, "prepass", None)
    return found if found is not None else None


# A per-chunk detector may also define ``following(handle) -> bool``: True while it reads a
# multi-line record of that stream line by line (a traceback not finished at the end of the
# last chunk). The runtime then hands it the next chunk even when no interest selected any of
# its lines (``chunk.data`` holds them all; ``base``/``base_lineno`` place them).


def interests_of(detector: object) -> tuple[re.Pattern[bytes], ...]:
    """A detector's interest patterns: ``interests`` when it has them, else ``interest``."""
    many = getattr(detector, "interests", None)
    if many is not None:
        return tuple(many)
    one = getattr(detector, "interest", None)
    return (one,) if one is not None else ()
