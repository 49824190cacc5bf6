"""``FdWaker``: wake the pump when a source's descriptor has input (journal, kmsg, pipes).

The daemon's pump sleeps on one ``threading.Event`` (file-change hints, signals, timers set
it). Sources that read descriptors (journalctl's stdout, ``/dev/kmsg``, a FIFO) say which in
``fds()``; this thread waits on them and sets the event, then waits until the pump has polled
once (``polled``) before looking again, so a descriptor left readable is no busy loop.
"""

from __future__ import annotations

import contextlib
import select
import threading
from collections.abc import Sequence

from sigwatch.sources.base import Source

__all__ = ["FdWaker"]


class FdWaker:
    """A daemon thread: descriptors readable -> ``wake.set()``; one wake per pump pass."""

    def __init__(self, sources: Sequence[Source], wake: threading.Event,
                 idle_check: float = 1.0) -> None:
        self.sources = list(sources)
        self.wake = wake
        self.idle_check = idle_check
        self._go = threading.Event()
        self._go.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wanted(self) -> bool:
        """True when some source can give descriptors (only then is a thread worth it)."""
        return any(hasattr(s, "fds") for s in self.sources)

    def start(self) -> None:
        if not self.wanted():
            return
        self._thread = threading.Thread(target=self._run, name="sigwatch-fd-waker",
                                        daemon=True)
        self._thread.start()

    def polled(self) -> None:
        """The pump read its sources: look at the descriptors again."""
        self._go.set()

    def stop(self) -> None:
        self._stop.set()
        self._go.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _fds(self) -> list[int]:
        out: list[int] = []
        for source in self.sources:
            fds = getattr(source, "fds", None)
            if fds is not None:
                with contextlib.suppress(Exception):
                    out.extend(fds())
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self._go.wait()
            if self._stop.is_set():
                return
            fds = self._fds()
            if not fds:
                self._stop.wait(self.idle_check)
                continue
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN | select.POLLPRI)
            try:
                ready = poller.poll(self.idle_check * 1000)
            except OSError:
                ready = []
            if ready:
                self._go.clear()
                self.wake.set()
