"""``Runtime``: sources in, the pipeline in the middle, sinks out, one commit for all.

This is the daemon's pump minus process concerns (signals, HTTP, systemd), so tests drive it
step by step with ``run_once``. Exactly-once: every source's snapshot, the detectors' state and
the event log's size are committed together in one checkpoint record. After a crash the event
log is cut back to the committed size, detectors restore their state, and sources read again
from their committed positions, which writes the same events again and nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from sigwatch.clock import Clock
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.runtime.checkpoint import Checkpoint, CheckpointStore
from sigwatch.sinks.eventlog import EventLogSink
from sigwatch.sources.base import (
    ReplayNeed,
    Source,
    StreamClosed,
    StreamEvent,
    StreamOpened,
)
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["Runtime"]

log = structlog.get_logger("sigwatch.runtime")


class Runtime:
    """Owns the sources, the pipeline, the checkpoint and the commit cycle."""

    def __init__(
        self,
        *,
        sources: Sequence[Source],
        pipeline: Pipeline,
        clock: Clock,
        store: CheckpointStore | None,
        eventlog: EventLogSink | None = None,
        metrics: SelfMetrics | None = None,
        checkpoint_interval: float = 1.0,
        engine_loader: Callable[[], Engine] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.sources = list(sources)
        self.pipeline = pipeline
        self.clock = clock
        self.store = store
        self.eventlog = eventlog
        self.metrics = metrics
        self.checkpoint_interval = checkpoint_interval
        self.engine_loader = engine_loader
        self.notify = notify or (lambda _message: None)
        self.reload_requested = threading.Event()
        self.start_mode = "none"
        self._next_commit = 0.0
        self._dirty = False
        self._checkpoint_failing = False
        self._progress: dict[str, tuple[float | None, Any, float | None]] = {}
        # Each source numbers its own streams; with several sources the pipeline sees
        # runtime-wide handles: (source index, source's handle) -> pipeline handle.
        self._shared = len(self.sources) > 1
        self._handles: list[dict[int, int]] = [{} for _ in self.sources]
        self._next_handle = 1
        # The event log could not be written (disk full): sources are not read until it can,
        # retried with a growing pause; the watchdog is still fed by the caller's loop.
        self._eventlog_retry_at = 0.0
        self._eventlog_backoff = 0.0
        # A pattern reload runs on a worker thread; the pump swaps the result in.
        self._reload_thread: threading.Thread | None = None
        self._reload_result: list[Engine | BaseException] = []
        self._reload_again = False

    # -- start-up -------------------------------------------------------------------------

    def start(self) -> None:
        """Load the checkpoint, roll the event log back to it, restore detectors, start sources."""
        cp: Checkpoint | None = None
        if self.store is not None:
            result = self.store.load()
            cp, self.start_mode = result.checkpoint, result.mode
            for problem in result.problems:
                log.error("checkpoint_unusable", problem=problem)
            if result.mode in ("tmp", "previous", "corrupt") and self.metrics:
                self.metrics.checkpoint_recoveries.labels(result.mode).inc()
            if cp is not None and cp.migrated_from:
                log.info("checkpoint_migrated", from_version=cp.migrated_from)
        first_start = cp is None and self.start_mode == "none"
        if self.eventlog is not None and cp is not None:
            removed = self.eventlog.roll_back_to(cp.event_log)
            if removed and self.metrics:
                self.metrics.events_rolled_back.inc(removed)
        if self.start_mode == "corrupt":
            emitted = self._emitted_from_event_log()
            since = self._lost_checkpoint_time()
            for source in self.sources:
                recover = getattr(source, "recover", None)
                if recover is not None:
                    recover(emitted, since)
        if cp is not None:
            self.pipeline.restore(dict(cp.detectors))
        for source in self.sources:
            saved = cp.sources.get(source.name) if cp is not None else None
            source.start(saved, first_start=first_start)
        self.commit(force=True)

    def _lost_checkpoint_time(self) -> float:
        """About when the unusable checkpoint was written (its files' oldest mtime, a minute
        early): files rotated away after that may hold lines never read."""
        if self.store is None:
            return 0.0
        times = []
        for path in (self.store.path, self.store.tmp, self.store.prev):
            try:
                times.append(path.stat().st_mtime)
            except OSError:
                continue
        return min(times) - 60.0 if times else 0.0

    def _emitted_from_event_log(self) -> dict[str, int]:
        """Highest detection offset per stream in the event log (rebuilds a lost checkpoint)."""
        if self.eventlog is None:
            return {}
        emitted: dict[str, int] = {}
        try:
            with open(self.eventlog.path, "rb") as fh:
                for raw in fh:
                    try:
                        doc = json.loads(raw)
                        key, off = doc["stream"], doc["offset"]
                    except (ValueError, KeyError, TypeError):
                        continue
                    if isinstance(off, int):
                        emitted[key] = max(emitted.get(key, -1), off)
        except OSError:
            return {}
        return emitted

    # -- the pump -----------------------------------------------------------------------------

    def run_once(self) -> bool:
        """One pass over every source, then deadlines and the commit. True if anything read."""
        if self.reload_requested.is_set():
            self.reload_requested.clear()
            if self.eventlog is not None:
                self.eventlog.reopen("sighup")  # logrotate's postrotate
            self._start_reload()
        self._finish_reload()
        if not self._eventlog_writable():
            return False
        now = self.clock.monotonic()
        progressed = False
        pipeline = self.pipeline
        delivered = pipeline.delivered
        for index, source in enumerate(self.sources):
            for event in source.poll(now):
                pipeline.handle_event(self._translate(index, event) if self._shared else event)
                progressed = True
        deadline = pipeline.next_deadline()
        if deadline is not None and deadline <= self.clock.monotonic():
            pipeline.tick()
            self._dirty = True
        if progressed or pipeline.delivered != delivered:
            self._dirty = True
            pipeline.flush()
        if self.eventlog is not None and self.eventlog.pending_bytes:
            self._eventlog_blocked()
            return progressed
        reopened = self.eventlog is not None and self.eventlog.reopened
        if self._dirty and (reopened or self.clock.monotonic() >= self._next_commit):
            self.commit()
        self._update_progress()
        return progressed

    def _eventlog_writable(self) -> bool:
        """False while records wait for the event log (retried here, with a growing pause)."""
        log_ = self.eventlog
        if log_ is None or not log_.pending_bytes:
            return True
        if self.clock.monotonic() < self._eventlog_retry_at:
            return False
        log_.flush()
        if log_.pending_bytes:
            self._eventlog_blocked()
            return False
        self._eventlog_backoff = 0.0
        self._eventlog_retry_at = 0.0
        if self.metrics:
            self.metrics.eventlog_blocked.set(0)
        log.info("reading_resumed", reason="event log writable again")
        return True

    def _eventlog_blocked(self) -> None:
        if not self._eventlog_backoff:
            log.error("reading_paused", reason="the event log cannot be written",
                      waiting_bytes=self.eventlog.pending_bytes if self.eventlog else 0)
        self._eventlog_backoff = min(max(self._eventlog_backoff * 2, 0.25), 5.0)
        self._eventlog_retry_at = self.clock.monotonic() + self._eventlog_backoff
        if self.metrics:
            self.metrics.eventlog_blocked.set(1)

    def more_waiting(self) -> bool:
        return any(s.more_waiting() for s in self.sources)

    def progress(self, name: str) -> tuple[float | None, Any, float | None]:
        """(lag, unit, last read wall time) of a configured source name, for the status page."""
        return self._progress.get(name, (None, "none", None))

    def _update_progress(self) -> None:
        for source in self.sources:
            report = getattr(source, "progress", None)
            if report is None:
                continue
            for name, (lag, unit, last) in report().items():
                self._progress[name] = (lag, unit, last)
                if self.metrics is not None:
                    if lag is not None:
                        self.metrics.source_lag.labels(name, unit).set(lag)
                    if last is not None:
                        self.metrics.source_last_read.labels(name).set(last)

    def reading_problems(self) -> dict[str, str]:
        """Configured source name -> why it cannot read now (the monitor is blind there)."""
        out: dict[str, str] = {}
        for source in self.sources:
            report = getattr(source, "reading_problems", None)
            if report is not None:
                out.update(report())
        return out

    def next_wakeup(self) -> float:
        """Seconds until a source's timer or a detector's deadline."""
        now = self.clock.monotonic()
        times = [t for s in self.sources if (t := s.next_wakeup(now)) is not None]
        deadline = self.pipeline.next_deadline()
        if deadline is not None:
            times.append(deadline)
        if self._dirty:
            times.append(self._next_commit)
        if self.eventlog is not None and self.eventlog.pending_bytes:
            times = [self._eventlog_retry_at]
        if self._reload_thread is not None:
            times.append(now + 0.1)
        return max(0.0, min(times) - now) if times else 1.0

    # -- commit, reload, stop -----------------------------------------------------------------

    def commit(self, *, force: bool = False) -> None:
        """Make sinks durable, then write positions, detector state and the event log size."""
        _ = force
        if self.store is None:
            self._dirty = False
            return
        self.pipeline.flush()
        if self.eventlog is not None and self.eventlog.pending_bytes:
            return  # never commit positions past what the event log holds
        try:
            event_commit = self.eventlog.commit_point() if self.eventlog else None
            sources = {s.name: s.snapshot(self._need_of(i)) for i, s in enumerate(self.sources)}
            self.store.save(Checkpoint(sources, event_commit, time.time(),
                                       self.pipeline.snapshot()))
        except OSError as exc:
            if self.metrics:
                self.metrics.checkpoint_errors.inc()
            if not self._checkpoint_failing:
                log.error("checkpoint_write_failed", error=str(exc),
                          state_dir=str(self.store.state_dir))
            self._checkpoint_failing = True
            self._next_commit = self.clock.monotonic() + max(self.checkpoint_interval, 1.0)
            return
        if self._checkpoint_failing:
            log.info("checkpoint_write_recovered")
        self._checkpoint_failing = False
        self._dirty = False
        self._next_commit = self.clock.monotonic() + self.checkpoint_interval
        if self.metrics:
            self.metrics.checkpoint_writes.inc()

    def _start_reload(self) -> None:
        """Load the pattern set on a worker thread: a large set takes long to compile, and
        the pump (and the watchdog it feeds) must not wait for it."""
        if self.engine_loader is None:
            return
        if self._reload_thread is not None:
            self._reload_again = True  # asked again while loading: load once more after
            return
        loader = self.engine_loader
        self.notify(f"RELOADING=1\nMONOTONIC_USEC={int(time.monotonic() * 1e6)}")
        result = self._reload_result = []

        def work() -> None:
            try:
                result.append(loader())
            except BaseException as exc:  # noqa: BLE001 - reported on the pump thread
                result.append(exc)

        self._reload_thread = threading.Thread(target=work, name="sigwatch-reload",
                                               daemon=True)
        self._reload_thread.start()

    def _finish_reload(self) -> None:
        thread = self._reload_thread
        if thread is None or thread.is_alive():
            return
        thread.join()
        self._reload_thread = None
        outcome = self._reload_result[0] if self._reload_result else RuntimeError("no result")
        self._apply_reload(outcome)
        if self._reload_again:
            self._reload_again = False
            self._start_reload()

    def reload(self) -> bool:
        """Swap in a freshly loaded pattern set, or keep the old one if it has errors."""
        if self.engine_loader is None:
            return False
        try:
            engine: Engine | BaseException = self.engine_loader()
        except Exception as exc:  # noqa: BLE001 - any failure keeps the old set
            engine = exc
        return self._apply_reload(engine)

    def status_line(self) -> str:
        """One line for systemd's STATUS= and the start-up log."""
        signatures = len(self.pipeline.engine.patterns)
        streams = sum(sum(report().values()) for s in self.sources
                      if (report := getattr(s, "streams_by_source", None)) is not None)
        return (f"{signatures} signatures, {streams} files followed, "
                f"{self.pipeline.delivered} detections since start")

    def _apply_reload(self, engine: Engine | BaseException) -> bool:
        try:
            return self._swap_in(engine)
        finally:
            self.notify(f"READY=1\nSTATUS={self.status_line()}")

    def _swap_in(self, engine: Engine | BaseException) -> bool:
        if self.metrics:
            self.metrics.reload_timestamp.set(self.clock.time())
        if isinstance(engine, BaseException):
            exc = engine
            log.error("pattern_reload_failed", error=str(exc))
            if self.metrics:
                self.metrics.reload_success.set(0)
                self.metrics.reload_failures.inc()
            return False
        self.pipeline.swap(engine)
        self._dirty = True
        log.info("patterns_reloaded", signatures=len(engine.patterns))
        if self.metrics:
            self.metrics.reload_success.set(1)
            self.metrics.patterns_loaded.set(len(engine.patterns))
        return True

    def stop(self) -> None:
        """Final commit, then stop every source."""
        self.pipeline.report_incidents()  # counts not sent yet, before the state is saved
        self.commit(force=True)
        for index, source in enumerate(self.sources):
            for event in source.stop():
                self.pipeline.handle_event(self._translate(index, event) if self._shared
                                           else event)

    def _translate(self, index: int, event: StreamEvent) -> StreamEvent:
        """The event with the runtime-wide handle of its stream (several sources)."""
        handles = self._handles[index]
        if isinstance(event, StreamOpened):
            handles[event.handle] = self._next_handle
            self._next_handle += 1
        shared = handles.get(event.handle)
        if shared is None:  # a stream never announced: keep it apart from every other
            shared = handles[event.handle] = self._next_handle
            self._next_handle += 1
        if isinstance(event, StreamClosed):
            del handles[event.handle]
        return dataclasses.replace(event, handle=shared)

    def _need_of(self, index: int) -> Callable[[int], ReplayNeed]:
        if not self._shared:
            return self.pipeline.need
        handles = self._handles[index]

        def need(handle: int) -> ReplayNeed:
            shared = handles.get(handle)
            return self.pipeline.need(shared) if shared is not None else ReplayNeed()
        return need
