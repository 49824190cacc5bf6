"""The composition root: builds every component from a validated ``Config`` and runs the pump.

Only this module (and ``cli``) reads the config object. Threads: the main thread pumps; the
watchdog observer only sets the wake event; prometheus_client serves /metrics. SIGTERM and
SIGINT stop after a final commit; SIGHUP reloads the patterns (a broken set keeps the old one).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

import prometheus_client
import structlog
from prometheus_client import CollectorRegistry

from sigwatch import __version__
from sigwatch.clock import Clock, SystemClock
from sigwatch.config import Config
from sigwatch.errors import PatternError, SigwatchError
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import Sink
from sigwatch.sinks.console import ConsoleSink
from sigwatch.sinks.eventlog import EventLogSink
from sigwatch.sinks.metrics import MetricsSink
from sigwatch.sources.checkpoint import CheckpointStore
from sigwatch.sources.discovery import ChangeHints, SourceSpec, watch_roots
from sigwatch.tailing import TailOptions, TailService
from sigwatch.telemetry.logging import configure_logging
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["Daemon", "build_daemon", "run_daemon", "sd_notify"]

# Seconds between full polls of every file while inotify hints are live.
INOTIFY_SAFETY_POLL = 3.0

log = structlog.get_logger("sigwatch.app")


def sd_notify(message: str) -> None:
    """Tell systemd about readiness or liveness (no-op outside systemd)."""
    target = os.environ.get("NOTIFY_SOCKET")
    if not target:
        return
    address = "\0" + target[1:] if target.startswith("@") else target
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError:
            pass


class _PatternLoadError(SigwatchError):
    def __init__(self, errors: list[PatternError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors[:5]))


def _engine_loader(dirs: list[Path], timeout: float, metrics: SelfMetrics,
                   sources: list[str]):  # noqa: ANN202 - returns Callable[[], Engine]
    def load() -> Engine:
        patterns, errors = load_patterns(dirs)
        if errors:
            raise _PatternLoadError(errors)
        metrics.declare_signatures(((s.id, s.severity.label) for s in patterns.signatures),
                                   sources)
        return Engine(patterns, regex_timeout=timeout,
                      on_timeout=lambda sig: metrics.regex_timeouts.labels(sig).inc())
    return load


class Daemon:
    """A built daemon: the tail service plus HTTP, hints and the stop/wake events."""

    def __init__(self, service: TailService, hints: ChangeHints | None,
                 roots: list[tuple[str, bool]], registry: CollectorRegistry,
                 listen: str | None, metrics: SelfMetrics) -> None:
        self.service = service
        self.hints = hints
        self.roots = roots
        self.registry = registry
        self.listen = listen
        self.metrics = metrics
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.http_port: int | None = None
        self._server: object | None = None
        if hints is not None:
            hints._wake = self.wake  # noqa: SLF001 - the daemon owns the wake event

    def serve_metrics(self) -> None:
        if not self.listen:
            return
        host, _, port = self.listen.rpartition(":")
        server, _thread = prometheus_client.start_http_server(
            int(port), addr=host.strip("[]"), registry=self.registry)
        self._server = server
        self.http_port = server.server_address[1]
        log.info("metrics_listening", address=f"{host}:{self.http_port}")

    def request_stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def request_reload(self) -> None:
        self.service.reload_requested.set()
        self.wake.set()

    def run(self) -> None:
        """Pump until asked to stop."""
        self.serve_metrics()
        if self.hints is not None:
            mode = self.hints.start(self.roots)
            if mode == "inotify":
                # inotify reports appends, truncations and renames as they happen; the full
                # poll of every file is then a safety net only, run less often (idle CPU).
                opts = self.service.options
                self.service.options = dataclasses.replace(
                    opts, poll_interval=max(opts.poll_interval, INOTIFY_SAFETY_POLL))
            self.metrics.watch_mode.labels(mode).set(1)
            log.info("watching", mode=mode, roots=[r for r, _ in self.roots])
        self.service.start()
        sd_notify("READY=1")
        self.ready.set()
        try:
            while not self.stopping.is_set():
                progressed = self.service.run_once()
                sd_notify("WATCHDOG=1")
                if progressed:
                    continue
                self.wake.wait(timeout=min(self.service.next_wakeup(), 1.0) or 0.05)
                self.wake.clear()
        finally:
            sd_notify("STOPPING=1")
            if self.hints is not None:
                self.hints.stop()
            self.service.stop()
            self.service.pipeline.close()
            if self._server is not None:
                self._server.shutdown()  # type: ignore[attr-defined]
            log.info("stopped")


def build_daemon(config: Config, *, clock: Clock | None = None,
                 registry: CollectorRegistry | None = None) -> Daemon:
    """Build every component from ``config`` (nothing starts yet)."""
    clock = clock or SystemClock()
    registry = registry or CollectorRegistry(auto_describe=True)
    prometheus_client.disable_created_metrics()
    metrics = SelfMetrics(registry, __version__)
    source_names = [s.name for s in config.sources]
    metrics.declare_sources(source_names)
    dirs = list(config.patterns) or [builtin_pattern_dir()]
    loader = _engine_loader(dirs, config.regex_timeout, metrics, source_names)
    engine = loader()
    metrics.patterns_loaded.set(len(engine.patterns))
    metrics.reload_success.set(1)
    metrics.reload_timestamp.set(clock.time())
    sinks: list[Sink] = [MetricsSink(metrics)]
    eventlog = EventLogSink(config.events) if config.events else None
    if eventlog is not None:
        sinks.append(eventlog)
    if config.console:
        sinks.append(ConsoleSink(sys.stdout))
    pipeline = Pipeline(engine, sinks, clock=clock, metrics=metrics, host=socket.gethostname())
    specs = [SourceSpec(s.name, tuple(s.paths), tuple(s.exclude), s.start_at)
             for s in config.sources]
    wake = threading.Event()
    hints = ChangeHints(wake) if config.inotify else None
    options = TailOptions(
        poll_interval=config.poll_interval, rescan_interval=config.rescan_interval,
        checkpoint_interval=config.checkpoint_interval, read_budget=config.read_budget_bytes,
        max_line_bytes=config.max_line_bytes, max_files=config.max_files)
    service = TailService(
        sources=specs, pipeline=pipeline, clock=clock, options=options,
        store=CheckpointStore(config.state_dir), eventlog=eventlog, metrics=metrics,
        hints=hints, engine_loader=loader)
    roots = watch_roots([p for s in config.sources for p in s.paths])
    if not config.inotify:
        metrics.watch_mode.labels("polling").set(1)
    return Daemon(service, hints, roots, registry, config.listen, metrics)


def raise_fd_limit() -> None:
    """Lift the soft open-files limit to the hard one: every followed file holds an fd."""
    try:
        import resource  # noqa: PLC0415 - POSIX only

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("fd_limit_raised", soft=soft, now=target)
    except (ImportError, ValueError, OSError) as exc:
        log.warning("fd_limit_unchanged", error=str(exc))


def run_daemon(config: Config) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status."""
    fmt = None if config.log_format == "auto" else config.log_format == "json"
    configure_logging(json=fmt, level=config.log_level)
    raise_fd_limit()
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.error("state_dir_unusable", state_dir=str(config.state_dir), error=str(exc))
    daemon = build_daemon(config)

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal", signal=signal.Signals(signum).name)
        daemon.request_stop()

    def on_hup(_signum: int, _frame: FrameType | None) -> None:
        daemon.request_reload()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_hup)
    log.info("sigwatch_starting", version=__version__,
             sources={s.name: s.paths for s in config.sources},
             state_dir=str(config.state_dir), events=str(config.events or ""))
    daemon.run()
    return 0
