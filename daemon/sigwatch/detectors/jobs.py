"""``JobBook``: the jobs this node runs now, and the facts to compare their ranks across nodes.

A job is known from its streams (``StreamInfo.job``: a path, a pod, ``sigwatch exec``'s
environment). It is **active** from the first line read from one of its streams until all its
streams are closed or none of them wrote for ``idle`` seconds; then everything kept about it is
dropped, so its gauges disappear (job ids only ever label gauges of active jobs).

Per active job the book keeps what a fleet-wide rule needs to name a culprit:

- the first fault of each signature (time, rank, owner, the line and the fix);
- per rank, the NCCL watchdog's collective figures per process group (``detectors/ranks.py``
  parses them) and the training progress (last step, step time, when).

The pump thread writes; HTTP threads read ``rows`` at scrape time: one lock guards both, taken
once per chunk or detection, never per line. Sizes are capped (jobs, ranks per job, process
groups per rank); what goes over is refused and counted, never silently merged.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sigwatch.model import Detection, Severity

__all__ = ["COLLECTIVE_KINDS", "JobBook", "JobLimits", "clean_label_text"]

COLLECTIVE_KINDS = ("timed_out", "last_enqueued", "last_completed")
MAX_LABEL_TEXT = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean_label_text(text: str, limit: int = MAX_LABEL_TEXT) -> str:
    """Log text fit for a label value: control characters become spaces, cut to ``limit``."""
    flat = _CONTROL.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class JobLimits:
    """How much the book keeps at most (per daemon)."""

    jobs: int = 64
    ranks: int = 1024  # per job
    pgs: int = 16  # process groups per rank


@dataclass(slots=True)
class _Fault:
    time: float
    rank: str
    owner: str
    line: str
    fix: str
    severity: str = "error"  # as delivered (after a collateral signature lowered it)


@dataclass(slots=True)
class _Collective:
    seqs: dict[str, int] = field(default_factory=dict)  # kind -> sequence number
    reported_at: float | None = None
    op: str = ""


@dataclass(slots=True)
class _Rank:
    step: int | None = None
    step_seconds: float | None = None
    progress_at: float | None = None
    pgs: dict[str, _Collective] = field(default_factory=dict)


@dataclass(slots=True)
class _Job:
    last_line: float
    streams: set[int] = field(default_factory=set)
    faults: dict[str, _Fault] = field(default_factory=dict)
    ranks: dict[str, _Rank] = field(default_factory=dict)


Row = tuple[str, tuple[str, ...], float]
"""(metric name, label values after ``node``, value) as the job collector exports it."""


class JobBook:
    """Active jobs, their first faults and their ranks' facts."""

    name = "jobs"

    def __init__(self, *, idle: float = 3600.0, limits: JobLimits | None = None,
                 on_refused: Callable[[str], None] | None = None,
                 min_severity: Severity = Severity.WARNING) -> None:
        self.idle = idle
        self.limits = limits or JobLimits()
        self.min_severity = min_severity
        self._on_refused = on_refused or (lambda _what: None)
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._stream_job: dict[int, str] = {}  # open stream handle -> its job
        self._waiting: dict[str, set[int]] = {}  # jobs with open streams but no line yet
        self._refused: set[tuple[str, ...]] = set()  # counted once each (bounded)

    # -- streams (pump thread) -----------------------------------------------------------------

    def stream_opened(self, handle: int, job: str) -> None:
        with self._lock:
            self._stream_job[handle] = job
            known = self._jobs.get(job)
            if known is not None:
                known.streams.add(handle)
            else:
                self._waiting.setdefault(job, set()).add(handle)

    def stream_closed(self, handle: int) -> None:
        with self._lock:
            job = self._stream_job.pop(handle, None)
            if job is None:
                return
            waiting = self._waiting.get(job)
            if waiting is not None:
                waiting.discard(handle)
                if not waiting:
                    del self._waiting[job]
            known = self._jobs.get(job)
            if known is not None:
                known.streams.discard(handle)
                if not known.streams:
                    del self._jobs[job]  # its last stream ended: the job ended here

    def lines_read(self, handle: int, now: float) -> None:
        """A stream of a job read lines: the job is active (again)."""
        job = self._stream_job.get(handle)
        if job is None:
            return
        known = self._jobs.get(job)
        if known is not None:
            known.last_line = now
            return
        with self._lock:
            self._activate(job, now)

    def _activate(self, job: str, now: float) -> _Job | None:
        known = self._jobs.get(job)
        if known is not None:
            known.last_line = max(known.last_line, now)
            return known
        if len(self._jobs) >= self.limits.jobs:
            self._refuse("job", job)
            return None
        streams = self._waiting.pop(job, set())
        streams.update(h for h, j in self._stream_job.items() if j == job)
        known = self._jobs[job] = _Job(now, streams)
        return known

    def _refuse(self, what: str, *key: str) -> None:
        """Count a refusal once per job, rank or group (it is retried on every chunk)."""
        if (what, *key) in self._refused:
            return
        if len(self._refused) >= 10_000:
            self._refused.clear()
        self._refused.add((what, *key))
        self._on_refused(what)

    def active_jobs(self) -> tuple[str, ...]:
        """The jobs active now, sorted (a kernel fault belongs to each of them)."""
        return tuple(sorted(self._jobs))

    def is_active(self, job: str) -> bool:
        return job in self._jobs

    def expire(self, now: float) -> list[str]:
        """End the jobs idle for ``idle`` seconds; returns them."""
        with self._lock:
            gone = [job for job, j in self._jobs.items() if now - j.last_line > self.idle]
            for job in gone:
                del self._jobs[job]
                for handle in [h for h, x in self._stream_job.items() if x == job]:
                    self._waiting.setdefault(job, set()).add(handle)
        return gone

    def next_expiry(self) -> float | None:
        """Wall-clock time the next active job would end if it stays idle."""
        if not self._jobs:
            return None
        return min(j.last_line for j in self._jobs.values()) + self.idle

    # -- facts (pump thread) ---------------------------------------------------------------------

    def fault(self, d: Detection, now: float) -> None:
        """Remember ``d`` as the first fault of its signature in each of its jobs."""
        if d.severity < self.min_severity or d.status == "resolved" or not d.jobs:
            return
        when = d.line_time if d.line_time is not None else d.time
        with self._lock:
            for job in d.jobs:
                known = self._jobs.get(job) or self._activate(job, now)
                if known is None or d.signature in known.faults:
                    continue
                known.faults[d.signature] = _Fault(
                    when, d.rank or "", d.owner, clean_label_text(d.text or d.about),
                    clean_label_text(d.remediation.summary), d.severity.label)

    def _rank(self, job: str, rank: str, now: float) -> _Rank | None:
        known = self._jobs.get(job) or self._activate(job, now)
        if known is None:
            return None
        found = known.ranks.get(rank)
        if found is None:
            if len(known.ranks) >= self.limits.ranks:
                self._refuse("rank", job, rank)
                return None
            found = known.ranks[rank] = _Rank()
        return found

    def collective(self, job: str, rank: str, pg: str, seqs: dict[str, int], *,
                   op: str | None, at: float | None, now: float) -> None:
        """A watchdog report of one rank: sequence numbers by kind; ``op`` and ``at`` when it
        reported a failed or timed-out work."""
        with self._lock:
            r = self._rank(job, rank, now)
            if r is None:
                return
            pg = self._same_report(r, pg, seqs.get("timed_out"))
            c = r.pgs.get(pg)
            if c is None:
                if len(r.pgs) >= self.limits.pgs:
                    self._refuse("pg", job, rank, pg)
                    return
                c = r.pgs[pg] = _Collective()
            c.seqs.update(seqs)
            if at is not None:
                c.reported_at = at
                c.op = op or c.op

    @staticmethod
    def _same_report(r: _Rank, pg: str, timed_out: int | None) -> str:
        """The process group a report belongs to. PyTorch 2.3 and later print the timed-out
        ``WorkNCCL`` line with ``[Rank N]`` only and the figures of the same timeout with
        ``[PG 0 Rank N]``: one report, so the figures without a group join the group that
        reported the same work (whichever line comes first)."""
        if timed_out is None:
            return pg
        if not pg:
            for other, c in r.pgs.items():
                if other and c.seqs.get("timed_out") == timed_out:
                    return other
            return pg
        loose = r.pgs.get("")
        if loose is not None and loose.seqs.get("timed_out") == timed_out:
            del r.pgs[""]
            c = r.pgs.setdefault(pg, _Collective())
            c.seqs = {**loose.seqs, **c.seqs}
            c.reported_at = c.reported_at if c.reported_at is not None else loose.reported_at
            c.op = c.op or loose.op
        return pg

    def progress(self, job: str, rank: str, *, step: int | None, step_seconds: float | None,
                 at: float, now: float) -> None:
        with self._lock:
            r = self._rank(job, rank, now)
            if r is None:
                return
            if step is not None:
                r.step = step
            if step_seconds is not None:
                r.step_seconds = step_seconds
            r.progress_at = at

    # -- reading (any thread) --------------------------------------------------------------------

    def rows(self) -> list[Row]:
        """Every gauge sample of every active job, for the collector."""
        with self._lock:
            return list(self._rows())

    def _rows(self) -> Iterator[Row]:
        for job, j in self._jobs.items():
            yield "sigwatch_job_active", (job,), 1.0
            for sig, f in j.faults.items():
                yield ("sigwatch_job_fault_first_seconds", (job, f.rank, sig, f.owner, f.severity),
                       f.time)
                yield ("sigwatch_job_fault_info",
                       (job, f.rank, sig, f.owner, f.severity, f.line, f.fix), 1.0)
            for rank, r in j.ranks.items():
                if r.step is not None:
                    yield "sigwatch_job_rank_step", (job, rank), float(r.step)
                if r.step_seconds is not None:
                    yield "sigwatch_job_rank_step_seconds", (job, rank), r.step_seconds
                if r.progress_at is not None:
                    yield "sigwatch_job_rank_last_progress_seconds", (job, rank), r.progress_at
                for pg, c in r.pgs.items():
                    for kind, seq in c.seqs.items():
                        yield ("sigwatch_job_rank_collective_seq", (job, rank, pg, kind),
                               float(seq))
                    if c.reported_at is not None:
                        yield ("sigwatch_job_rank_collective_report_seconds",
                               (job, rank, pg, c.op), c.reported_at)

    # -- checkpoint --------------------------------------------------------------------------------

    def snapshot(self) -> object:
        with self._lock:
            return {job: {
                "last_line": j.last_line,
                "faults": {s: [f.time, f.rank, f.owner, f.line, f.fix, f.severity]
                           for s, f in j.faults.items()},
                "ranks": {rank: {"step": r.step, "step_seconds": r.step_seconds,
                                 "progress_at": r.progress_at,
                                 "pgs": {pg: {"seqs": c.seqs, "at": c.reported_at, "op": c.op}
                                         for pg, c in r.pgs.items()}}
                          for rank, r in j.ranks.items()},
            } for job, j in self._jobs.items()}

    def restore(self, state: object) -> None:
        """Take the jobs back; each waits for its streams to open again (or to idle out)."""
        if not isinstance(state, dict):
            return
        with self._lock:
            for job, raw in state.items():
                try:
                    self._jobs[str(job)] = _restore_job(raw)
                except (KeyError, TypeError, ValueError, IndexError):
                    continue
            for handle, job in self._stream_job.items():
                if job in self._jobs:
                    self._jobs[job].streams.add(handle)
                    self._waiting.pop(job, None)


def _restore_job(raw: dict[str, Any]) -> _Job:
    j = _Job(float(raw["last_line"]))
    for sig, f in dict(raw.get("faults") or {}).items():
        j.faults[str(sig)] = _Fault(float(f[0]), str(f[1]), str(f[2]), str(f[3]), str(f[4]),
                                    str(f[5]) if len(f) > 5 else "error")
    for rank, r in dict(raw.get("ranks") or {}).items():
        kept = _Rank(None if r.get("step") is None else int(r["step"]),
                     None if r.get("step_seconds") is None else float(r["step_seconds"]),
                     None if r.get("progress_at") is None else float(r["progress_at"]))
        for pg, c in dict(r.get("pgs") or {}).items():
            kept.pgs[str(pg)] = _Collective(
                {str(k): int(v) for k, v in dict(c.get("seqs") or {}).items()},
                None if c.get("at") is None else float(c["at"]), str(c.get("op") or ""))
        j.ranks[str(rank)] = kept
    return j
