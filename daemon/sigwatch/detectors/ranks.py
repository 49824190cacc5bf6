"""Facts to compare the ranks of a job: NCCL watchdog figures and training progress.

When one rank stops entering collectives, every other rank's NCCL watchdog times out waiting
for it and prints how far its process group got; the rank that lags is the one whose figures
are behind. This detector reads those figures in every wording PyTorch has printed, and the
ranks' progress lines (through the shared ``ProgressReader``: each line is parsed once for
every detector), and records them in the ``JobBook`` per (job, rank, process group). It makes
no detection of its own: the facts become gauges a fleet-wide Prometheus rule compares.

Wordings of ``ProcessGroupNCCL.cpp`` (PyTorch's NCCL process group), oldest first:

- 1.7: ``[Rank 0] Caught collective operation timeout for work: WorkNCCL(OpType=BROADCAST,
  TensorShape=[..], Timeout(ms)=1800000)`` (blocking wait);
- 1.8 to 1.9: ``[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE,
  TensorShape=[..], Timeout(ms)=1800000) ran for 1800473 milliseconds before timing out.``;
- 1.10 to 1.12: ``WorkNCCL(SeqNum=5, OpType=ALLREDUCE[, TensorShape=[..]], Timeout(ms)=..)``;
- 1.13 and 2.x: ``WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,
  Timeout(ms)=1800000)``; an NCCL error instead of a timeout: ``Collective WorkNCCL(..) raised
  the following async exception``;
- 2.2: ``[Rank 3] Timeout at NCCL work: 1234, last enqueued NCCL work: 1234, last completed NCCL
  work: 1233.``; 2.3 prefixes ``[PG 0 Rank 3]``, 2.4 ``[PG 0 (default_pg) Rank 3]``, 2.5 on
  ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` (the rank there is the rank *in that group*);
- 2.4 to 2.5: ``Exception (either an error or timeout) detected by watchdog at work: S, last
  enqueued NCCL work: E, last completed NCCL work: C.``; 2.6 on: ``Work timeout is detected by
  watchdog at work: ..`` and ``NCCL error is detected by watchdog at work: ..``;
- 2.3: ``Received a global timeout from another rank and will start to dump the debug info. Last
  enqueued NCCL work: E, last completed NCCL work: C.``; 2.4 on: ``Received a dump signal due to
  a collective timeout from rank 7 and we will try our best to dump the debug info. Last
  enqueued NCCL work: E, last completed NCCL work: C.`` (printed by ranks that did *not* time
  out: how far they got is exactly what tells the lagging rank apart); a later refactor spells
  the backend (``Last enqueued XCCL work``), so the backend word is any word.

A ``last completed`` above ``last enqueued`` is garbage (PyTorch 2.3 printed an uninitialised
value, e.g. ``last completed NCCL work: 76280750235782912``) and is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sigwatch.clock import Clock
from sigwatch.detectors.base import Chunk, LineEvent, StreamContext
from sigwatch.detectors.jobs import JobBook
from sigwatch.detectors.progress import Shape
from sigwatch.detectors.training import ProgressReader
from sigwatch.model import Detection

__all__ = ["RankFactsDetector", "WatchdogReport", "parse_watchdog"]

# Few branches, each starting with a literal: the pipeline joins every detector's interests
# into one alternation over the chunk. Every wording with figures says "<backend> work: <n>"
# ("Timeout at NCCL work: 7", "last enqueued NCCL work: 8") or "watchdog at work: <n>", the
# others name a WorkNCCL; ``parse_watchdog`` then tells the lines apart.
INTEREST = re.compile(rb"WorkNCCL\(|CCL work: -?\d|dog at work: -?\d")

_PREFIX = re.compile(
    r"\[(?:PG (?:ID )?(?P<pg>\d+)(?: PG GUID [^\s\]]+)?(?: \([^)\]]*\))? )?Rank (?P<rank>\d+)\]")
_WORK = re.compile(
    r"(?:[Cc]aught collective operation timeout(?: for work)?: |Collective )"
    r"WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+)")
_AT_WORK = re.compile(
    r"(?:Timeout at|detected by watchdog at) (?:\w+ )?work: (?P<seq>-?\d+), "
    r"last enqueued (?:\w+ )?work: (?P<enq>-?\d+), last completed (?:\w+ )?work: (?P<done>-?\d+)")
_PROGRESS = re.compile(
    r"[Ll]ast enqueued (?:\w+ )?work: (?P<enq>-?\d+), last completed (?:\w+ )?work: "
    r"(?P<done>-?\d+)")


@dataclass(frozen=True, slots=True)
class WatchdogReport:
    """What one watchdog line says about its rank's process group."""

    seqs: dict[str, int]  # kind (timed_out, last_enqueued, last_completed) -> sequence number
    failed: bool  # it reports a work that failed or timed out (then ``op`` when printed)
    op: str | None = None
    rank: str | None = None  # the rank the message names (in its process group)
    pg: str = ""  # the process group's id when the wording prints it


def parse_watchdog(text: str) -> WatchdogReport | None:
    """The collective figures of one line, in any PyTorch wording (None: not such a line)."""
    prefix = _PREFIX.search(text)
    rank = prefix.group("rank") if prefix else None
    pg = (prefix.group("pg") or "") if prefix else ""
    m = _AT_WORK.search(text)
    if m is not None:
        seqs = {"timed_out": int(m.group("seq")), "last_enqueued": int(m.group("enq"))}
        _completed(seqs, int(m.group("done")))
        return WatchdogReport(seqs, True, None, rank, pg)
    m = _WORK.search(text)
    if m is not None:
        seqs = {"timed_out": int(m.group("seq"))} if m.group("seq") is not None else {}
        return WatchdogReport(seqs, True, m.group("op"), rank, pg)
    m = _PROGRESS.search(text)
    if m is not None:
        seqs = {"last_enqueued": int(m.group("enq"))}
        _completed(seqs, int(m.group("done")))
        return WatchdogReport(seqs, False, None, rank, pg)
    return None


def _completed(seqs: dict[str, int], done: int) -> None:
    if done <= seqs["last_enqueued"]:
        seqs["last_completed"] = done


def _time_at(chunk: Chunk, place: tuple[int, int]) -> float | None:
    """The log's own time of a part of a line (its line made on demand: the prepass's lines
    were never selected)."""
    return chunk.time(chunk.line_at(place[0], numbered=False), place[1])


class _Facts:
    """A chunk's progress records, per rank, folded as the book would take them one by one:
    the last step, the last step time, and where the last record with either was (its time
    is read from there once, at the end). Records of the per-line parse and of the prepass's
    columns come in any order: their place in the chunk decides."""

    __slots__ = ("_by_rank",)

    def __init__(self) -> None:
        # rank -> (place of the last step, step), (place, seconds), (place, place)
        self._by_rank: dict[str | None, list[tuple[tuple[int, int], Any]]] = {}

    def add(self, place: tuple[int, int], rank: str | None, step: int | None,
            seconds: float | None) -> None:
        if step is None and seconds is None:
            return
        got = self._by_rank.get(rank)
        if got is None:
            got = self._by_rank[rank] = [((-1, -1), None), ((-1, -1), None), ((-1, -1), None)]
        for slot, value in ((0, step), (1, seconds), (2, place)):
            if value is not None and place > got[slot][0]:
                got[slot] = (place, value)

    def add_shape(self, shape: Shape, default_rank: str | None) -> None:
        """The prepass's records of one shape, read from the last: a rank is left once its
        last step and last step time are found (its earlier records cannot change the fold),
        so a chunk of one rank's progress costs a record or two, not one call per line."""
        steps, seconds, ranks = shape.steps, shape.step_times, shape.ranks
        found: dict[str | None, list[bool] | None] = {rank: [False, False] for rank in set(ranks)}
        left = len(found)
        for i in range(len(shape) - 1, -1, -1):
            rank = ranks[i]
            seen = found[rank]
            step, secs = steps[i], seconds[i]
            if seen is None or (step is None and secs is None):
                continue
            self.add(shape.key(i), rank if rank is not None else default_rank, step, secs)
            seen[0] = seen[0] or step is not None
            seen[1] = seen[1] or secs is not None
            if seen[0] and seen[1]:
                found[rank] = None
                left -= 1
                if not left:
                    return

    def final(self) -> dict[str | None, tuple[int | None, float | None, tuple[int, int]]]:
        return {rank: (got[0][1], got[1][1], got[2][1]) for rank, got in self._by_rank.items()}


class RankFactsDetector:
    """Watchdog figures and progress of every rank of every active job, into the book."""

    name = "rank_facts"
    interest = None

    def __init__(self, clock: Clock, *, book: JobBook, reader: ProgressReader) -> None:
        self.clock = clock
        self.book = book
        self.reader = reader
        self._interests = (INTEREST, reader.interest)

    @property
    def interests(self) -> tuple[re.Pattern[bytes], ...]:
        return self._interests

    @property
    def prepass(self) -> ProgressReader | None:
        """The reader's whole-chunk pass: the progress lines it reads are taken from its
        columns, so the pipeline need not search them for the progress words (a detector
        without it would make every progress line selected, for every detector)."""
        return self.reader.prepass

    # -- per chunk -----------------------------------------------------------------------------

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        info = chunk.stream.info
        job = info.job
        if not job:
            return ()
        watchdog = chunk.mask((INTEREST,))
        progress = chunk.mask((self.reader.interest,))
        now = self.clock.time()
        facts = _Facts()
        for line in chunk.select(mask):
            wanted = line.interests & mask
            if not wanted:
                continue
            for k, part in enumerate(chunk.parts(line)):
                rank = part.rank if part.rank is not None else info.rank
                if wanted & watchdog:
                    report = parse_watchdog(part.text)
                    if report is not None:
                        self._record(job, rank, report, chunk.time(line, k), now)
                        continue
                if wanted & progress and not line.covered:  # covered: in the prepass's columns
                    found = self.reader.read_part(chunk, line, k, part.text)
                    if found is not None and not found.eval:
                        facts.add((line.start, k), rank, found.step, found.step_time)
        bulk = self.reader.bulk_of(chunk)
        for shape in bulk.shapes if bulk is not None else ():
            facts.add_shape(shape, info.rank)
        for rank, (step, seconds, place) in facts.final().items():
            self._progress(job, rank, step, seconds, _time_at(chunk, place), now)
        return ()

    # -- per line (the reference path) ---------------------------------------------------------

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        info = event.stream.info
        if not info.job:
            return ()
        line = event.line
        rank = line.rank if line.rank is not None else info.rank
        now = self.clock.time()
        report = parse_watchdog(line.text)
        if report is not None:
            self._record(info.job, rank, report, line.time, now)
            return ()
        found = self.reader.read(line)
        if found is not None and not found.eval:
            self._progress(info.job, rank, found.step, found.step_time, line.time, now)
        return ()

    def _record(self, job: str, rank: str | None, report: WatchdogReport, at: float | None,
                now: float) -> None:
        who = rank if rank is not None else (report.rank or "")
        self.book.collective(job, who, report.pg, report.seqs, op=report.op,
                             at=(at if at is not None else now) if report.failed else None,
                             now=now)

    def _progress(self, job: str, rank: str | None, step: int | None,
                  step_seconds: float | None, at: float | None, now: float) -> None:
        if step is None and step_seconds is None:
            return
        self.book.progress(job, rank or "", step=step, step_seconds=step_seconds,
                           at=at if at is not None else now, now=now)

    # -- the rest of the protocol: no detections, no state of its own ------------------------------

    def on_open(self, stream: StreamContext) -> None:
        _ = stream

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        _ = stream, clean
        return ()

    def tick(self, now: float) -> Sequence[Detection]:
        _ = now
        return ()

    def next_deadline(self) -> float | None:
        return None

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        _ = handle
        return None

    def held(self, handle: int) -> tuple[int, ...]:
        _ = handle
        return ()

    def snapshot(self) -> object:
        return None  # the facts live in the book, which the pipeline checkpoints

    def restore(self, state: object) -> None:
        _ = state
