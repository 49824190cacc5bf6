"""``QueuedSink``: any sink behind its own bounded queue and worker thread.

The pump only enqueues, so a slow or failing sink (an Alertmanager that is down, a console
on a stuck terminal) never delays reading, the other sinks, or the systemd watchdog ping. Every
exception the sink raises is caught and counted; when the queue is full the oldest detection is
dropped and counted (``sigwatch_sink_dropped_total{sink}``), never silently. The worker also
calls the sink's ``tick`` about once a second for re-sends and resolutions.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

import structlog

from sigwatch.clock import Clock
from sigwatch.model import Detection
from sigwatch.sinks.base import Sink

__all__ = ["QueuedSink"]

log = structlog.get_logger("sigwatch.sinks")

DEFAULT_CAPACITY = 10_000


class QueuedSink:
    """Runs ``inner`` on a worker thread; ``emit`` never blocks."""

    def __init__(self, inner: Sink, *, clock: Clock, capacity: int = DEFAULT_CAPACITY,
                 tick_interval: float = 1.0,
                 on_error: Callable[[str, BaseException], None] | None = None,
                 on_drop: Callable[[str, int], None] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self._clock = clock
        self._capacity = capacity
        self._tick_interval = tick_interval
        self._on_error = on_error or (lambda _n, _e: None)
        self._on_drop = on_drop or (lambda _n, _c: None)
        self._queue: collections.deque[Detection] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = False
        self._flush_requested = False
        self._thread = threading.Thread(target=self._work, name=f"sink-{self.name}",
                                        daemon=True)
        self._thread.start()

    # -- the pump's side -------------------------------------------------------------------

    def emit(self, detection: Detection) -> None:
        dropped = 0
        with self._cond:
            if len(self._queue) >= self._capacity:
                self._queue.popleft()
                dropped = 1
            self._queue.append(detection)
            self._cond.notify()
        if dropped:
            self._on_drop(self.name, dropped)

    def flush(self) -> None:
        """Ask the worker to flush once the queue is empty (never waits)."""
        with self._cond:
            self._flush_requested = True
            self._cond.notify()

    def tick(self, now: float) -> None:
        _ = now  # the worker ticks on its own timer

    def depth(self) -> int:
        with self._cond:
            return len(self._queue)

    def drain(self, timeout: float) -> bool:
        """Wait until everything queued was handed to the sink (tests, shutdown)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (up to ``timeout``), then close the sink."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            with self._cond:
                left = len(self._queue)
            if left:
                self._on_drop(self.name, left)
            log.error("sink_close_timed_out", sink=self.name, undelivered=left)

    # -- the worker ------------------------------------------------------------------------

    def _work(self) -> None:
        next_tick = self._clock.monotonic() + self._tick_interval
        while True:
            with self._cond:
                while not self._queue and not self._stopping and not self._flush_requested:
                    wait = next_tick - self._clock.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(min(wait, self._tick_interval))
                batch = list(self._queue)
                self._queue.clear()
                flush, self._flush_requested = self._flush_requested, False
                stopping = self._stopping
                self._busy = bool(batch) or flush
            for detection in batch:
                self._call(self.inner.emit, detection)
            if flush or batch:
                self._call(self.inner.flush)
            if self._clock.monotonic() >= next_tick:
                self._call(self.inner.tick, self._clock.time())
                next_tick = self._clock.monotonic() + self._tick_interval
            with self._cond:
                self._busy = False
                self._cond.notify_all()
                if stopping and not self._queue:
                    break
        self._call(self.inner.close)

    def _call(self, fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - a sink must never kill its worker
            self._on_error(self.name, exc)
            log.error("sink_failed", sink=self.name, error=str(exc))
