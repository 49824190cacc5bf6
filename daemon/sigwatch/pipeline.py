"""The processing core: stream events in, detections out to every sink.

Used unchanged by ``sigwatch scan``, the daemon's runtime, the self-test and the bench, so all
of them run the same engine. Work per chunk is: count the lines, let the signature prefilter jump
from candidate to candidate, run ONE combined pass of every detector's interest patterns over the
chunk, and run Python code only on the lines found. Per-line detectors get those lines one by
one (``on_line``); per-chunk detectors (``ChunkDetector``) get the chunk once (``on_chunk``) with
the lines their interests selected. Each stream is known by a handle; a detection of a line below
the stream's replay point was delivered before a restart and is not delivered again.
"""

from __future__ import annotations

import codecs
import dataclasses
import re
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import structlog

from sigwatch.clock import Clock
from sigwatch.detectors.base import (
    Chunk,
    ChunkDetector,
    ChunkLine,
    Detector,
    LineEvent,
    Prepass,
    StreamContext,
    interests_of,
    prepass_of,
)
from sigwatch.detectors.folding import Folder
from sigwatch.detectors.jobs import JobBook
from sigwatch.detectors.rootcause import RootCauseCorrelator
from sigwatch.detectors.signatures import HOLD_SECONDS, SignatureDetector
from sigwatch.engine.cache import unigram
from sigwatch.engine.matcher import DEFAULT_REGEX_TIMEOUT, Matcher
from sigwatch.framing.lines import Segment
from sigwatch.framing.normalize import normalize, normalize_line
from sigwatch.model import Detection, LogLine, Match, StreamInfo, cap_detection
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.kinds import allowed_signatures, content_of
from sigwatch.sinks.base import Sink
from sigwatch.sources.base import ReplayNeed, StreamClosed, StreamEvent, StreamLines, StreamOpened
from sigwatch.sources.identity import JobIdentity
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["DETECTOR_MODES", "HOLD_SECONDS", "Engine", "Interests", "Pipeline"]

# "chunk": per-chunk detectors get ``on_chunk`` (the default); "line": every detector gets
# ``on_line`` for each line, as before per-chunk detectors existed (the reference the
# equivalence test compares the chunk path with).
DETECTOR_MODES = ("chunk", "line")

log = structlog.get_logger("sigwatch.pipeline")

# Lines of a stream kept from one chunk for the next whatever the signatures quote: what
# precedes a traceback says whether it was only logged (the generic layer reads two).
MIN_TAIL = 2

# Offsets of delivered detections remembered per stream (far more than a held detection of a
# detector whose held positions give way can wait behind).
MAX_SPOKEN = 1024


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
        self.regex_timeout = regex_timeout
        self.matcher = Matcher(patterns, timeout=regex_timeout,
                               on_timeout=on_timeout or (lambda _sig: None),
                               prefilter=prefilter)
        self.prefilter = self.matcher.prefilter
        self.max_context = max((s.context_before for s in patterns.signatures), default=0)


@dataclass(slots=True)
class _Stream:
    """What the pipeline keeps per stream handle."""

    ctx: StreamContext
    lineno: int
    replay_below: int
    pending: frozenset[int]
    tail: deque[bytes] = field(default_factory=lambda: deque(maxlen=1))
    content: str = "mixed"  # what the stream holds: kernel | job | mixed
    allowed: frozenset[str] | None = None  # signatures that apply (None: every one)
    # Offsets of the latest detections delivered (or found delivered before a restart), for
    # the held positions that give way to them (``Pipeline.need``).
    spoken: dict[int, None] = field(default_factory=dict)


class _Recent:
    """``RecentLines`` over the current chunk and the stream's tail."""

    __slots__ = ("_data", "_start", "_tail")

    def __init__(self, data: bytes, start: int, tail: deque[bytes]) -> None:
        self._data, self._start, self._tail = data, start, tail

    def before(self, count: int, rank: str | None = None) -> list[str]:
        data = self._data
        raw_lines: list[bytes] = []
        pos = self._start
        while len(raw_lines) < count and pos > 0:
            prev = data.rfind(b"\n", 0, pos - 1) + 1
            raw_lines.append(data[prev:pos - 1])
            pos = prev
        if len(raw_lines) < count:
            for older in reversed(self._tail):
                if len(raw_lines) >= count:
                    break
                raw_lines.append(older)
        out: list[str] = []
        for raw in reversed(raw_lines):
            for line_rank, text in normalize(raw.decode("utf-8", "replace")):
                if rank is not None and line_rank is not None and line_rank != rank:
                    continue
                out.append(text)
        return out


class Interests:
    """Every detector's interest patterns, folded into as few passes over a chunk as possible.

    Patterns are deduplicated (two detectors reading progress lines share one); each gets a
    bit. ``scan`` returns, for each line some pattern selects, its end and the bits of every
    pattern that selects it: one ``re`` search over the chunk finds the next selected line, and
    only on that line are the patterns told apart. Patterns a prepass covers (``covered``) are
    searched only on the lines the prepasses did not read (``scan``'s ``skip``): joined, those
    lines are a fraction of the chunk, and the lines the prepass read cost nothing here.
    """

    def __init__(self, patterns: Sequence[re.Pattern[bytes]],
                 covered: Sequence[re.Pattern[bytes]] = ()) -> None:
        self.patterns: list[re.Pattern[bytes]] = []
        index: dict[tuple[bytes, int], int] = {}
        for pat in patterns:
            key = (pat.pattern, pat.flags)
            if key not in index:
                index[key] = len(self.patterns)
                self.patterns.append(pat)
        self._index = index
        skip = {(p.pattern, p.flags) for p in covered}
        whole = [(1 << i, p) for i, p in enumerate(self.patterns)
                 if (p.pattern, p.flags) not in skip]
        gaps = [(1 << i, p) for i, p in enumerate(self.patterns)
                if (p.pattern, p.flags) in skip]
        self._whole = _Pass(whole)
        self._gaps = _Pass(gaps)
        self.combined = self._whole.combined  # the pass over whole chunks (tests look at it)

    def mask(self, patterns: Sequence[re.Pattern[bytes]]) -> int:
        bits = 0
        for pat in patterns:
            bits |= 1 << self._index[(pat.pattern, pat.flags)]
        return bits

    def scan(self, data: bytes,
             skip: Sequence[tuple[int, int]] = ()) -> dict[int, list[int]]:
        """Line start -> [line end, bits of the patterns that select the line].

        ``skip``: lines (start, newline index), in order, that the covered patterns need not
        be searched on.
        """
        found: dict[int, list[int]] = {}
        self._whole.scan(data, found)
        if not self._gaps.patterns:
            return found
        if not skip:
            self._gaps.scan(data, found)
            return found
        # The lines between the skipped ones, joined: one search over them, positions mapped
        # back (each gap is whole lines, so line boundaries stay where they were).
        gap_starts: list[int] = []
        pieces: list[bytes] = []
        pos = 0
        for start, end in skip:
            if start > pos:
                gap_starts.append(pos)
                pieces.append(data[pos:start])
            pos = end + 1
        if pos < len(data):
            gap_starts.append(pos)
            pieces.append(data[pos:])
        if not pieces:
            return found
        rest = b"".join(pieces)
        at = list(accumulate(map(len, pieces), initial=0))
        hits: dict[int, list[int]] = {}
        self._gaps.scan(rest, hits)
        for rstart, (rend, bits) in hits.items():
            g = bisect_right(at, rstart) - 1
            start = gap_starts[g] + rstart - at[g]
            entry = found.get(start)
            if entry is None:
                found[start] = [start + rend - rstart, bits]
            else:
                entry[1] |= bits
        return found


class _Pass:
    """Some interest patterns joined into one alternation, each with its bit.

    Patterns that are sets of literals (``literal_interest`` builds them so) are searched by
    their rarest bytes: each literal is entered from the byte of it that logs hold least, so
    the search stops on few bytes (an "error" found by its "rror", "MI300" by its "300"). A
    line found that way is then tested with every pattern itself, so the lines and bits are
    exactly those the patterns select.
    """

    def __init__(self, patterns: Sequence[tuple[int, re.Pattern[bytes]]]) -> None:
        self.patterns = list(patterns)
        self.combined: re.Pattern[bytes] | None = None
        self.rotated = False
        # Per pattern, its literals' rare-byte trie alone: a line it finds nothing in cannot
        # hold the pattern, which is then not searched there (most lines hit one pattern).
        self.quick: list[re.Pattern[bytes] | None] = []
        for _bit, p in self.patterns:
            lits = _literals(p)
            self.quick.append(re.compile(b"|".join(_rare_trie(lits)), p.flags)
                              if lits and len(self.patterns) > 1 else None)
        if len(self.patterns) > 1 or any(_literals(p) for _b, p in self.patterns):
            flags = {p.flags for _bit, p in self.patterns}
            literals: list[tuple[frozenset[int], ...]] = []
            others: list[bytes] = []
            for _bit, p in self.patterns:
                found = _literals(p)
                if found is None:
                    others.append(p.pattern)
                else:
                    literals.extend(found)
            branches = [*(_rare_trie(literals) if literals else []), *others]
            # Joined flat, not each in a group: an alternation whose every branch starts with
            # a literal byte lets ``re`` skip from candidate byte to candidate byte in C; a
            # group around a branch would make it try every position.
            try:
                if len(flags) == 1:
                    self.combined = re.compile(b"|".join(branches), flags.pop())
                    self.rotated = bool(literals)
            except re.error:  # global inline flags in a user pattern: one pass each
                self.combined = None
        elif self.patterns:
            self.combined = self.patterns[0][1]

    def scan(self, data: bytes, found: dict[int, list[int]]) -> None:
        """Add line start -> [line end, bits] for every line a pattern selects."""
        patterns = self.patterns
        if not patterns:
            return
        combined = self.combined
        size = len(data)
        if combined is None:  # patterns that cannot be joined: one pass each
            for bit, pattern in patterns:
                self._one(pattern, bit, data, found)
            return
        single = len(patterns) == 1 and not self.rotated
        exact = self.rotated
        search = combined.search
        pos = 0
        while True:  # one hit per line: continue from the end of the line hit
            hit = search(data, pos)
            if hit is None:
                break
            at = hit.start()
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            if end == -1:
                end = size - 1
            if single:
                bits = patterns[0][0]
            else:
                bits = 0
                # a rotated literal was found by its tail: the pattern starts before it
                frm = start if exact else at
                for (bit, pattern), quick in zip(patterns, self.quick, strict=True):
                    if quick is not None and quick.search(data, frm, end + 1) is None:
                        continue
                    if pattern.search(data, frm, end + 1) is not None:
                        bits |= bit
            if bits:
                entry = found.get(start)
                if entry is None:
                    found[start] = [end, bits]
                else:
                    entry[1] |= bits
            pos = end + 1

    @staticmethod
    def _one(pattern: re.Pattern[bytes], bit: int, data: bytes,
             found: dict[int, list[int]]) -> None:
        pos = 0
        while True:
            hit = pattern.search(data, pos)
            if hit is None:
                break
            at = hit.start()
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            if end == -1:
                end = len(data) - 1
            entry = found.get(start)
            if entry is None:
                found[start] = [end, bit]
            else:
                entry[1] |= bit
            pos = end + 1


_Token = frozenset[int]  # the bytes one position of a literal may hold ({x} or {x, X})
_MAX_LITERALS = 1024


def _literals(pattern: re.Pattern[bytes]) -> list[tuple[_Token, ...]] | None:
    """The literals a pattern is a set of (an alternation of byte sequences, each position
    one byte or a few, such as both cases of a letter), or None for any other pattern."""
    if pattern.flags & ~re.ASCII & ~re.UNICODE & ~re.DEBUG & (re.IGNORECASE | re.MULTILINE
                                                               | re.DOTALL | re.VERBOSE):
        return None
    try:
        tree = re._parser.parse(pattern.pattern.decode("latin-1"), 0)
    except (re.error, UnicodeDecodeError):  # pragma: no cover - a compiled pattern parses
        return None
    found = _expand(list(tree.data))
    if found is None or not found or any(len(lit) < 2 for lit in found):
        return None
    return found


def _expand(items: list[tuple[Any, Any]]) -> list[tuple[_Token, ...]] | None:
    """Every literal a sequence of parsed items stands for (None: not a literal set)."""
    out: list[tuple[_Token, ...]] = [()]
    for op, av in items:
        name = str(op)
        alts: list[tuple[_Token, ...]]
        if name == "LITERAL":
            alts = [(frozenset((av,)),)]
        elif name == "IN":
            chars: set[int] = set()
            for iop, iav in av:
                if str(iop) == "LITERAL":
                    chars.add(iav)
                elif str(iop) == "RANGE" and iav[1] - iav[0] < 4:
                    chars.update(range(iav[0], iav[1] + 1))
                else:
                    return None
            if not chars or len(chars) > 4:
                return None
            alts = [(frozenset(chars),)]
        elif name == "BRANCH":
            alts = []
            for branch in av[1]:
                sub = _expand(list(branch.data))
                if sub is None:
                    return None
                alts.extend(sub)
        elif name == "SUBPATTERN" and av[1] == 0 and av[2] == 0:
            sub = _expand(list(av[3].data))
            if sub is None:
                return None
            alts = sub
        else:
            return None
        out = [head + tail for head in out for tail in alts]
        if len(out) > _MAX_LITERALS:
            return None
    return out


def _outside(pattern: re.Pattern[bytes], words: set[bytes],
             alphabet: set[int] | None = None) -> bool:
    """True when every match of ``pattern`` holds a run of letters that is part of none of
    ``words`` (lower case), or a byte outside ``alphabet``: a line whose runs of letters all
    are part of those words, and whose bytes all are in that alphabet, cannot hold a match."""
    literals = _literals(pattern)
    if literals is None:
        return False
    for lit in literals:
        if alphabet is not None and any(not (token & alphabet) for token in lit):
            continue  # a byte no such line holds
        runs: list[bytes] = []
        run = b""
        for token in lit:
            letters = {b | 0x20 for b in token if 65 <= (b & 0xDF) <= 90}
            if letters and len(letters) == 1 and all(65 <= (b & 0xDF) <= 90 for b in token):
                run += bytes(letters)
            else:
                if run:
                    runs.append(run)
                run = b""
        if run:
            runs.append(run)
        if not any(all(r not in w for w in words) for r in runs):
            return False
    return True


def _rare_trie(literals: list[tuple[_Token, ...]]) -> list[bytes]:
    """Alternatives (each led by one byte) that find every literal by its rarest part.

    Each literal is entered at the position whose bytes are rarest in logs (the engine's
    byte counts of its reference sample), keeping at least two positions after it, with a
    bias towards bytes already chosen for another literal (they cost no more stops).
    """
    counts = unigram()
    total = max(sum(counts), 1)

    def rate(token: Iterable[int]) -> float:
        return sum(counts[b] + 1 for b in token) / total

    def offsets(lit: tuple[_Token, ...]) -> range:
        return range(max(0, len(lit) - 3) + 1 if len(lit) >= 3 else 1)

    def cheapest(lit: tuple[_Token, ...], others: set[int]) -> int:
        return min(offsets(lit), key=lambda i: (rate(lit[i] - others), i))

    starts = [cheapest(lit, set()) for lit in literals]
    for _round in range(3):  # each literal again, given the bytes the others stop on
        for n, lit in enumerate(literals):
            others: set[int] = set()
            for m, (other, i) in enumerate(zip(literals, starts, strict=True)):
                if m != n:
                    others.update(other[i])
            starts[n] = cheapest(lit, others)
    root: dict[Any, Any] = {}
    for lit, i in zip(literals, starts, strict=True):
        key = lit[i:]
        for first in sorted(key[0]):
            node = root.setdefault(re.escape(bytes((first,))), {})
            for token in key[1:]:
                node = node.setdefault(_token_regex(token), {})
            node[b""] = {}

    def emit(node: dict[bytes, Any]) -> bytes:
        if b"" in node:
            return b""  # a shorter key ends here: it decides the stop already
        alts = [tok + emit(child) for tok, child in sorted(node.items())]
        return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"

    return [tok + emit(child) for tok, child in sorted(root.items())]


def _token_regex(token: _Token) -> bytes:
    if len(token) == 1:
        return re.escape(bytes(token))
    return b"[" + b"".join(re.escape(bytes((b,))) for b in sorted(token)) + b"]"


class Pipeline:
    """Stream events → framing checks → match → detectors → root cause → sinks."""

    def __init__(
        self,
        engine: Engine,
        sinks: Sequence[Sink],
        *,
        clock: Clock,
        metrics: SelfMetrics | None = None,
        host: str = "",
        detectors: Sequence[Detector] = (),
        content: Mapping[str, str] | None = None,
        detector_mode: str = "chunk",
        identify: Callable[[StreamInfo], JobIdentity | None] | None = None,
        jobs: JobBook | None = None,
        folder: Folder | None = None,
    ) -> None:
        """``content``: source name -> what its streams hold (``kernel``/``job``/``mixed``)
        when the stream's kind does not say it (see ``sigwatch.patterns.kinds``).
        ``detector_mode``: see ``DETECTOR_MODES``. ``identify``: a stream's job and rank
        (``sigwatch.sources.identity``). ``jobs``: the active jobs and their facts (kernel
        faults are attributed to them). ``folder``: repeats fold into open incidents; sinks
        with ``every_occurrence`` still get each occurrence, the others the first and counts."""
        if detector_mode not in DETECTOR_MODES:
            raise ValueError(f"unknown detector mode {detector_mode!r}; one of {DETECTOR_MODES}")
        self.engine = engine
        self.content = dict(content or {})
        self._allowed: dict[str, frozenset[str] | None] = {}
        self.sinks = list(sinks)
        self.clock = clock
        self.metrics = metrics
        self.host = host
        self.signatures = SignatureDetector(
            engine.patterns, clock=clock, host=host, regex_timeout=engine.regex_timeout,
            lineno_of=self._lineno_of, folded=self._folded if folder is not None else None)
        self.detectors: list[Detector] = [self.signatures, *detectors]
        self.extra: list[Detector] = list(detectors)
        # Detectors fed per chunk; the others get each line they want through on_line.
        self._chunked: list[tuple[int, ChunkDetector]] = [
            (i, d) for i, d in enumerate(self.detectors)
            if detector_mode == "chunk" and isinstance(d, ChunkDetector)]
        chunked = {i for i, _d in self._chunked}
        wants = [interests_of(d) if i in chunked else
                 ((d.interest,) if d.interest is not None else ())
                 for i, d in enumerate(self.detectors)]
        # Prepasses of the per-chunk detectors (a shared one runs once per chunk). A pattern
        # is searched only outside the lines they read when every detector that wants it has
        # a prepass covering it.
        self._prepasses: list[Prepass] = []
        for _i, d in self._chunked:
            prepass = prepass_of(d)
            if prepass is not None and all(prepass is not p for p in self._prepasses):
                self._prepasses.append(prepass)
        covered: list[re.Pattern[bytes]] = []
        for i, want in enumerate(wants):
            prepass = prepass_of(self.detectors[i]) if i in chunked else None
            mine = ({(p.pattern, p.flags) for p in prepass.covers}
                    if prepass is not None else set())
            covered.extend(p for p in want if (p.pattern, p.flags) in mine)
        for i, want in enumerate(wants):  # a detector without that prepass needs it everywhere
            prepass = prepass_of(self.detectors[i]) if i in chunked else None
            mine = ({(p.pattern, p.flags) for p in prepass.covers}
                    if prepass is not None else set())
            needs = {(p.pattern, p.flags) for p in want} - mine
            covered = [p for p in covered if (p.pattern, p.flags) not in needs]
        # Patterns that cannot match any line a prepass reads (by its vocabulary) are not
        # searched on those lines either, whoever wants them.
        if self._prepasses:
            words: set[bytes] | None = set()
            alphabet: set[int] | None = set()
            for prepass in self._prepasses:
                vocabulary = getattr(prepass, "vocabulary", None)
                if vocabulary is None or words is None:
                    words = None
                else:
                    words |= vocabulary
                known = getattr(prepass, "alphabet", None)
                if known is None or alphabet is None:
                    alphabet = None
                else:
                    alphabet |= known
            if words is not None:
                covered += [p for want in wants for p in want
                            if _outside(p, words, alphabet)]
        self.interests = Interests([p for want in wants for p in want], covered)
        # Per detector: the bits of its interests in ``self.interests``.
        self._masks = [self.interests.mask(want) for want in wants]
        self._line_detectors = [(i, d) for i, d in enumerate(self.detectors) if i not in chunked]
        # Interests of the per-line detectors that read a line's own time (``line_time``):
        # the timestamp of a line only they get is not parsed for the others.
        self._timed_mask = 0
        for i, line_detector in self._line_detectors:
            if getattr(line_detector, "line_time", True):
                self._timed_mask |= self._masks[i]
        # Interests of the per-line detectors without an ``unmatched_gate``, and the gates of
        # the others (one per distinct test): an unmatched line that only gated detectors
        # want reaches them when its text passes one of their gates.
        self._ungated_mask = 0
        gates: dict[int, tuple[int, Callable[[str], bool]]] = {}
        for i, line_detector in self._line_detectors:
            gate = getattr(line_detector, "unmatched_gate", None)
            if gate is None:
                self._ungated_mask |= self._masks[i]
            else:
                mask, _gate = gates.get(id(gate), (0, gate))
                gates[id(gate)] = (mask | self._masks[i], gate)
        self._gates = list(gates.values())
        self._gate_of = {i: getattr(d, "unmatched_gate", None) for i, d in self._line_detectors}
        # Per-chunk detectors that may be reading a multi-line record across chunks.
        self._followers = [(i, d) for i, d in self._chunked
                           if callable(getattr(d, "following", None))]
        self._line_mask = 0
        self._chunk_mask = 0
        for i in range(len(self.detectors)):
            if i in chunked:
                self._chunk_mask |= self._masks[i]
            else:
                self._line_mask |= self._masks[i]
        self.correlator = RootCauseCorrelator(engine.patterns)
        self.identify = identify
        self.jobs = jobs
        self.folder = folder
        self._every = [s for s in self.sinks if getattr(s, "every_occurrence", False)]
        self._streams: dict[int, _Stream] = {}
        self._next_handle = -1  # scans allocate negative handles; sources use positive ones
        self.delivered = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def swap(self, engine: Engine) -> list[Detection]:
        """Use a new pattern set from the next line on.

        Open sequences whose signature still exists are kept; what the others held is
        released. Returns what was delivered.
        """
        self.engine = engine
        self._allowed = {}
        for stream in self._streams.values():
            stream.allowed = self._allowed_for(stream.content)
        self.correlator.swap(engine.patterns)
        released = self.signatures.swap(engine.patterns)
        self.signatures.regex_timeout = engine.regex_timeout
        width = max(engine.max_context, MIN_TAIL)
        for stream in self._streams.values():
            if stream.tail.maxlen != width:
                stream.tail = deque(stream.tail, maxlen=width)
        return self._deliver_all(released)

    def emit(self, detection: Detection) -> list[Detection]:
        """Deliver a detection no line triggered (a command's abnormal exit) to every sink."""
        return self._deliver_all((detection,))

    def flush(self) -> None:
        """Make every sink durable (before a checkpoint)."""
        for sink in self.sinks:
            try:
                sink.flush()
            except Exception as exc:  # noqa: BLE001 - a sink must never stop the pump
                self._sink_failed(sink, exc)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001
                self._sink_failed(sink, exc)

    # -- stream events -------------------------------------------------------------------------

    def handle_event(self, event: StreamEvent) -> list[Detection]:
        """One source event; returns what was delivered."""
        if isinstance(event, StreamLines):
            return self.process(event.handle, event.segments)
        if isinstance(event, StreamOpened):
            self.open(event)
            return []
        if isinstance(event, StreamClosed):
            return self.finish(event.handle, clean=event.clean)
        return []

    def new_handle(self) -> int:
        handle = self._next_handle
        self._next_handle -= 1
        return handle

    def open(self, event: StreamOpened) -> None:
        info = event.info
        found = self.identify(info) if self.identify is not None else None
        if found:
            info = dataclasses.replace(info, job=found.job, rank=found.rank,
                                       labels=found.labels())
        if self.jobs is not None and info.job:
            self.jobs.stream_opened(event.handle, info.job)
        ctx = StreamContext(event.handle, info, event.kind)
        content = content_of(event.kind, self.content.get(event.info.source))
        self._streams[event.handle] = _Stream(
            ctx, event.lineno, event.replay_below, frozenset(event.pending),
            deque(maxlen=max(self.engine.max_context, MIN_TAIL)), content,
            self._allowed_for(content))
        for detector in self.detectors:
            detector.on_open(ctx)

    def process(self, handle: int, segments: Iterable[Segment]) -> list[Detection]:
        """Run whole-line segments of one stream through the engine and the detectors."""
        stream = self._streams[handle]
        out: list[Detection] = []
        if self.jobs is not None and stream.ctx.info.job:
            self.jobs.lines_read(handle, self.clock.time())
        for seg in segments:
            out.extend(self._segment(stream, seg))
        out.extend(self._deliver(stream, self.signatures.after_chunk(handle)))
        return out

    def finish(self, handle: int, *, clean: bool = True) -> list[Detection]:
        """The stream ended: every detector releases what it held for it."""
        stream = self._streams.pop(handle, None)
        if stream is None:
            return []
        out: list[Detection] = []
        for detector in self.detectors:
            out.extend(self._deliver(stream, detector.on_close(stream.ctx, clean=clean)))
        if self.jobs is not None:
            self.jobs.stream_closed(handle)
        return out

    def tick(self) -> list[Detection]:
        """Run every detector whose deadline has passed."""
        now = self.clock.monotonic()
        out: list[Detection] = []
        for detector in self.detectors:
            deadline = detector.next_deadline()
            if deadline is not None and deadline <= now:
                out.extend(self._deliver_all(detector.tick(now)))
        wall = self.clock.time()
        if self.jobs is not None:
            self.jobs.expire(wall)
        if self.folder is not None:
            for update in self.folder.due(wall):
                self._emit(self.sinks, update, every=False)
        return out

    def report_incidents(self) -> None:
        """Send every count not reported yet (before the last checkpoint of a stop)."""
        if self.folder is not None:
            for update in self.folder.flush(self.clock.time()):
                self._emit(self.sinks, update, every=False)

    def open_incidents(self) -> list[Detection]:
        """Detections still open (a stall, a regression) from detectors that keep any."""
        out: list[Detection] = []
        for det in self.detectors:
            report = getattr(det, "open_incidents", None)
            if report is not None:
                out.extend(report())
        return out

    def next_deadline(self) -> float | None:
        deadlines = [d for det in self.detectors if (d := det.next_deadline()) is not None]
        walls = [w for w in (self.folder.next_deadline() if self.folder else None,
                             self.jobs.next_expiry() if self.jobs else None) if w is not None]
        if walls:  # folding and job activity keep wall-clock times (they survive restarts)
            deadlines.append(self.clock.monotonic() + max(min(walls) - self.clock.time(), 0.0))
        return min(deadlines) if deadlines else None

    def need(self, handle: int) -> ReplayNeed:
        """What the detectors still need of a stream (for the source's snapshot)."""
        stream = self._streams.get(handle)
        if stream is None:
            return ReplayNeed()
        floors = [f for det in self.detectors if (f := det.replay_floor(handle)) is not None]
        floor = min(floors) if floors else None
        held: set[int] = set()
        for det in self.detectors:
            mine = det.held(handle)
            if mine and getattr(det, "held_gives_way", False):
                # A pending position names every detection on its line: one already delivered
                # there would be delivered again after a restart. A detector that ranks below
                # the others (the generic layer) gives such a line up instead.
                mine = tuple(o for o in mine if o not in stream.spoken)
            held.update(mine)
        return ReplayNeed(position=floor[0] if floor else None,
                          lineno=floor[1] if floor else None,
                          held=tuple(sorted(held)), lineno_at_end=stream.lineno)

    def snapshot(self) -> dict[str, object]:
        """Detector state that replay cannot rebuild, by detector name."""
        out: dict[str, object] = {}
        for det in self.detectors:
            state = det.snapshot()
            if state is not None:
                out[det.name] = state
        if self.folder is not None:
            out[self.folder.name] = self.folder.snapshot()
        if self.jobs is not None:
            out[self.jobs.name] = self.jobs.snapshot()
        return out

    def restore(self, states: dict[str, object]) -> None:
        for det in self.detectors:
            if det.name in states:
                det.restore(states[det.name])
        for part in (self.folder, self.jobs):
            if part is not None and part.name in states:
                part.restore(states[part.name])

    def _allowed_for(self, content: str) -> frozenset[str] | None:
        """The signatures that apply to a stream holding ``content`` (cached per kind)."""
        if content not in self._allowed:
            patterns = self.engine.patterns
            allowed = allowed_signatures(patterns, content)
            self._allowed[content] = (None if len(allowed) == len(patterns.signatures)
                                      else allowed)
        return self._allowed[content]

    def _folded(self, signature: str, event: LineEvent) -> bool:
        """Whether a detection of ``signature`` on this line would repeat an open incident."""
        assert self.folder is not None
        stream = self._streams.get(event.stream.handle)
        if stream is None or event.replaying:
            return False
        info = stream.ctx.info
        job = info.job
        if not job and self.jobs is not None and stream.content == "kernel":
            job = ",".join(self.jobs.active_jobs())
        t = event.line.time if event.line.time is not None else self.clock.time()
        return self.folder.is_open((signature, info.source, job), t)

    def _lineno_of(self, handle: int) -> int:
        stream = self._streams.get(handle)
        return stream.lineno if stream is not None else 0

    # -- lines ---------------------------------------------------------------------------------

    def _segment(self, stream: _Stream, seg: Segment) -> list[Detection]:
        data = seg.data
        count = data.count(b"\n")
        source = stream.ctx.info.source
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
        engine = self.engine
        prefilter = engine.prefilter
        base_lineno = stream.lineno
        out: list[Detection] = []
        prepassed: dict[object, object] = {}
        skip: list[tuple[int, int]] = []
        for prepass in self._prepasses:
            result = prepassed[prepass] = prepass.run(data)
            skip = _union(skip, result.lines) if skip else list(result.lines)
        selected = self.interests.scan(data, skip) if self.interests.patterns else {}
        line_mask = self._line_mask
        wanted = ({start: (entry[0], entry[1]) for start, entry in selected.items()
                   if entry[1] & line_mask} if line_mask else {})
        matched: dict[int, dict[int, tuple[Match, ...]]] | None = (
            {} if self._chunked else None)
        seg_time: float | None = getattr(seg, "time", None)  # journal, kmsg, container logs
        if prefilter.filters_everything:
            candidates: Iterable[tuple[int, int, Sequence[tuple[int, int]]]]
            candidates = prefilter.candidates(data)
            if wanted:
                candidates = _merge(candidates, wanted)
            counted_to, lineno = 0, base_lineno
            for start, end, steps in candidates:
                lineno += data.count(b"\n", counted_to, start) + 1
                counted_to = end + 1
                out.extend(self._line(stream, data, seg.offset, start, end, lineno, steps,
                                      wanted.get(start), seg_time, matched))
        else:
            hits = {start: steps for start, _end, steps in prefilter.candidates(data)}
            forced = frozenset(prefilter.forced)
            start, lineno = 0, base_lineno
            while start < len(data):
                end = data.find(b"\n", start)
                lineno += 1
                extra = hits.get(start)
                steps = tuple(sorted(forced.union(extra))) if extra else prefilter.forced
                out.extend(self._line(stream, data, seg.offset, start, end, lineno, steps,
                                      wanted.get(start), seg_time, matched))
                start = end + 1
        stream.lineno = base_lineno + count
        if matched is not None:
            out.extend(self._chunk(stream, data, seg.offset, base_lineno, selected, matched,
                                   seg_time, prepassed, skip))
        _remember_tail(stream.tail, data, max(engine.max_context, MIN_TAIL))
        return out

    def _chunk(self, stream: _Stream, data: bytes, base: int, base_lineno: int,
               selected: dict[int, list[int]], matched: dict[int, dict[int, tuple[Match, ...]]],
               seg_time: float | None, prepassed: dict[object, object],
               covered: list[tuple[int, int]]) -> list[Detection]:
        """Hand the chunk to every per-chunk detector: the lines their interests selected,
        the lines signatures matched (each decoded at most once), what the prepasses read."""
        chunk_mask = self._chunk_mask
        starts = [s for s, entry in selected.items() if entry[1] & chunk_mask]
        detectors = self._chunked
        if matched:
            starts = sorted(set(starts).union(matched))
        elif not starts:
            handle = stream.ctx.handle
            detectors = [(i, d) for i, d in self._chunked
                         if (covered and prepass_of(d) is not None)
                         or (callable(getattr(d, "following", None))
                             and d.following(handle))]  # type: ignore[attr-defined]
            if not detectors:
                return []
        else:
            starts.sort()
        lines: list[ChunkLine] = []
        counted_to, lineno = 0, base_lineno
        count = data.count
        size = len(data)
        covered_starts = [c[0] for c in covered]
        for start in starts:
            lineno += count(b"\n", counted_to, start) + 1
            entry = selected.get(start)
            if entry is not None:
                end, bits = entry[0], entry[1] & chunk_mask
            else:
                end = data.find(b"\n", start)
                end, bits = (size if end == -1 else end), 0
            counted_to = end + 1
            c = bisect_right(covered_starts, start) - 1
            lines.append(ChunkLine(start, end, lineno, base + start, bits,
                                   matched.get(start) or {},
                                   c >= 0 and covered_starts[c] == start))
        tail = stream.tail
        chunk = Chunk(stream.ctx, data, lines, stream.replay_below, seg_time,
                      self.interests.mask, base=base, base_lineno=base_lineno,
                      recent=lambda start: _Recent(data, start, tail), prepassed=prepassed,
                      now=self.clock.time())
        out: list[Detection] = []
        for index, detector in detectors:
            out.extend(self._deliver(stream, detector.on_chunk(chunk, self._masks[index])))
        return out

    def _line(self, stream: _Stream, data: bytes, base: int, start: int, end: int,
              lineno: int, steps: Sequence[tuple[int, int]],
              interested: tuple[int, int] | None,
              seg_time: float | None = None,
              matched: dict[int, dict[int, tuple[Match, ...]]] | None = None,
              ) -> list[Detection]:
        raw = data[start:end].decode("utf-8", "replace")
        out: list[Detection] = []
        engine = self.engine
        recent: _Recent | None = None
        timed = self._timed_mask

        def bits_want_time(entry: tuple[int, int] | None) -> bool:
            return entry is not None and bool(entry[1] & timed)

        allowed = stream.allowed
        times: list[float | None] | None = None
        bits = interested[1] if interested is not None else 0
        # Only gated detectors want this line unless it matches: their gates decide.
        gated = bits and not bits & self._ungated_mask
        for part, (rank, text) in enumerate(normalize(raw)):
            line: LogLine | None = None
            matches: tuple[Match, ...] = ()
            if steps:
                line = LogLine(stream.ctx.info, base + start, lineno, text, rank, seg_time)
                matches = tuple(engine.matcher.match(line, steps))
            if matches and allowed is not None:
                matches = tuple(m for m in matches if m.signature in allowed)
            if matches and matched is not None:
                matched.setdefault(start, {})[part] = matches
            if not matches and (interested is None or (gated and not any(
                    mask & bits and gate(text) for mask, gate in self._gates))):
                continue
            if line is None:
                line = LogLine(stream.ctx.info, base + start, lineno, text, rank, seg_time)
            if recent is None:
                recent = _Recent(data, start, stream.tail)
            if seg_time is None and (matches or bits_want_time(interested)):
                # The line's own time, from its prefix: parsed for candidate lines only, and
                # only when a detector that gets it reads it.
                if times is None:
                    times = [n.time for n in normalize_line(raw, now=self.clock.time())]
                stamp = times[part] if part < len(times) else None
                if stamp is not None:
                    line = dataclasses.replace(line, time=stamp)
                    matches = tuple(dataclasses.replace(m, line=line) for m in matches)
            event = LineEvent(stream.ctx, line, matches, recent,
                              replaying=line.offset < stream.replay_below)
            masks = self._masks
            gate_of = self._gate_of
            for index, detector in self._line_detectors:
                if matches or (masks[index] & bits and (
                        (gate := gate_of[index]) is None or gate(text))):
                    out.extend(self._deliver(stream, detector.on_line(event)))
        return out

    # -- delivery ------------------------------------------------------------------------------

    def _deliver_all(self, detections: Iterable[Detection]) -> list[Detection]:
        out: list[Detection] = []
        for d in detections:
            stream = next((s for s in self._streams.values()
                           if s.ctx.info.key == d.stream_key), None)
            out.extend(self._deliver(stream, (d,)))
        return out

    def _deliver(self, stream: _Stream | None,
                 detections: Iterable[Detection]) -> list[Detection]:
        out: list[Detection] = []
        for found in detections:
            # Its job first: fallout is only explained by a cause in its own job.
            refined = self.correlator.refine(self._attribute(stream, self._capped(found)))
            if refined is None:
                continue  # a generic detection folded into a signature's on the same line
            d = refined
            if stream is not None and d.offset is not None:
                spoken = stream.spoken
                spoken.pop(d.offset, None)
                spoken[d.offset] = None
                if len(spoken) > MAX_SPOKEN:
                    del spoken[next(iter(spoken))]
            if (stream is not None and d.offset is not None and d.offset < stream.replay_below
                    and d.offset not in stream.pending):
                continue  # delivered before a crash; the replay only rebuilds state
            first = True
            if self.folder is not None:
                folded = self.folder.fold(d, self.clock.time())
                if folded.closed is not None:
                    self._emit(self.sinks, folded.closed, every=False)
                d, first = folded.detection, folded.first
            if first:
                if self.jobs is not None:
                    self.jobs.fault(d, self.clock.time())
                if self.metrics is not None:
                    self.metrics.incidents_opened.labels(d.severity.label).inc()
                self._emit(self.sinks, d)
            else:
                self._emit(self._every, d)
            out.append(d)
        self.delivered += len(out)
        return out

    def _emit(self, sinks: Sequence[Sink], d: Detection, *, every: bool = True) -> None:
        """``d`` to ``sinks``; ``every=False``: a count update, for the sinks that do not see
        every occurrence."""
        for sink in sinks:
            if not every and sink in self._every:
                continue
            try:
                sink.emit(d)
            except Exception as exc:  # noqa: BLE001 - a sink must never stop the pump
                self._sink_failed(sink, exc)

    def _attribute(self, stream: _Stream | None, d: Detection) -> Detection:
        """``d`` with its job(s): the stream's own, or for a kernel-log fault every job the
        node runs now; and the stream's rank when the line did not say one."""
        if d.jobs:
            return d
        if stream is not None and stream.ctx.info.job:
            info = stream.ctx.info
            return dataclasses.replace(d, jobs=(info.job,),
                                       rank=d.rank if d.rank is not None else info.rank)
        if self.jobs is not None and stream is not None and stream.content == "kernel":
            active = self.jobs.active_jobs()
            if active:
                return dataclasses.replace(d, jobs=active)
        return d

    def _capped(self, detection: Detection) -> Detection:
        """The detection within ``DetectionCaps`` (memory is not the log writer's to take);
        the bytes cut are counted."""
        capped, cut = cap_detection(detection)
        if cut and self.metrics is not None:
            for name, count in cut.items():
                self.metrics.detection_bytes_cut.labels(name).inc(count)
        return capped

    def _sink_failed(self, sink: Sink, exc: BaseException) -> None:
        if self.metrics is not None:
            self.metrics.sink_errors.labels(sink.name).inc()
        log.error("sink_write_failed", sink=sink.name, error=str(exc))


def _merge(candidates: Iterable[tuple[int, int, Sequence[tuple[int, int]]]],
           wanted: dict[int, tuple[int, int]],
           ) -> list[tuple[int, int, Sequence[tuple[int, int]]]]:
    """Signature candidates plus the lines detectors asked for, in line order."""
    merged: dict[int, tuple[int, Sequence[tuple[int, int]]]] = {
        start: (end, ()) for start, (end, _who) in wanted.items()}
    for start, end, steps in candidates:
        merged[start] = (end, steps)
    return [(start, end, steps) for start, (end, steps) in sorted(merged.items())]


def _union(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Two sorted lists of lines (start, newline index), merged without repeats."""
    return sorted(set(a).union(b))


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


