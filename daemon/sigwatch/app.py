"""The composition root: builds every component from a validated ``Config`` and runs the pump.

Only this module (and ``cli``) reads the config object; ``build_pipeline`` and
``build_runtime`` are the one place where sources, the pipeline, detectors and sinks are put
together, for the daemon, ``scan``, the test harness and the bench alike. Threads: the main
thread pumps; the watchdog observer only sets the wake event; each queued sink has a worker;
the HTTP server answers on its own threads. SIGTERM and SIGINT stop after a final commit; SIGHUP
reloads the patterns (a broken set keeps the old one).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import prometheus_client
import structlog
from prometheus_client import CollectorRegistry

from sigwatch import __version__
from sigwatch.clock import Clock, SystemClock
from sigwatch.config import Config
from sigwatch.detectors.base import Detector
from sigwatch.errors import PatternError, SigwatchError
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.process import EarlySignals, InstanceLock, InstanceLockedError
from sigwatch.runtime.checkpoint import CheckpointStore
from sigwatch.runtime.pump import Runtime
from sigwatch.sinks.base import Sink
from sigwatch.sinks.console import ConsoleSink
from sigwatch.sinks.eventlog import EventLogSink
from sigwatch.sinks.metrics import MetricsSink
from sigwatch.sinks.queued import QueuedSink
from sigwatch.sources.base import Source
from sigwatch.sources.discovery import ChangeHints, SourceSpec, watch_roots
from sigwatch.sources.files import FileSource, TailOptions
from sigwatch.telemetry.logging import configure_logging
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["Daemon", "build_daemon", "build_pipeline", "build_runtime", "run_daemon",
           "sd_notify"]

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
        sock.setblocking(False)  # a full queue drops this ping; it never stalls the pump
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
                   sources: list[str]) -> Callable[[], Engine]:
    def load() -> Engine:
        patterns, errors = load_patterns(dirs)
        if errors:
            raise _PatternLoadError(errors)
        metrics.declare_signatures(((s.id, s.severity.label) for s in patterns.signatures),
                                   sources)
        return Engine(patterns, regex_timeout=timeout,
                      on_timeout=lambda sig: metrics.regex_timeouts.labels(sig).inc())
    return load


def build_pipeline(patterns: PatternSet | Engine, sinks: Sequence[Sink], *, clock: Clock,
                   metrics: SelfMetrics | None = None, host: str = "",
                   detectors: Sequence[Detector] = (),
                   regex_timeout: float | None = None) -> Pipeline:
    """The processing core every entry point uses: engine, detectors, root cause, sinks."""
    if isinstance(patterns, Engine):
        engine = patterns
    else:
        on_timeout = ((lambda sig: metrics.regex_timeouts.labels(sig).inc())
                      if metrics is not None else None)
        engine = Engine(patterns, regex_timeout=regex_timeout or 0.05, on_timeout=on_timeout)
    return Pipeline(engine, sinks, clock=clock, metrics=metrics, host=host,
                    detectors=detectors)


def build_runtime(*, sources: Sequence[Source], pipeline: Pipeline, clock: Clock,
                  state_dir: Path | None, eventlog: EventLogSink | None,
                  metrics: SelfMetrics | None, checkpoint_interval: float = 1.0,
                  engine_loader: Callable[[], Engine] | None = None,
                  fsync: bool = True) -> Runtime:
    """Sources, pipeline and the commit cycle (nothing starts yet)."""
    store = CheckpointStore(state_dir, fsync=fsync) if state_dir is not None else None
    return Runtime(sources=sources, pipeline=pipeline, clock=clock, store=store,
                   eventlog=eventlog, metrics=metrics, checkpoint_interval=checkpoint_interval,
                   engine_loader=engine_loader)


class Daemon:
    """A built daemon: the runtime plus HTTP, hints and the stop/wake events."""

    def __init__(self, runtime: Runtime, hints: ChangeHints | None,
                 roots: list[tuple[str, bool]], registry: CollectorRegistry,
                 listen: str | None, metrics: SelfMetrics, wake: threading.Event,
                 queued: Sequence[QueuedSink] = ()) -> None:
        self.runtime = runtime
        self.hints = hints
        self.roots = roots
        self.registry = registry
        self.listen = listen
        self.metrics = metrics
        self.wake = wake
        self.queued = list(queued)
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.http_port: int | None = None
        self._server: object | None = None

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
        self.runtime.reload_requested.set()
        self.wake.set()

    def run(self) -> None:
        """Pump until asked to stop."""
        self.serve_metrics()
        if self.hints is not None:
            mode = self.hints.start(self.roots)
            if mode == "inotify":
                # inotify reports appends, truncations and renames as they happen; the full
                # poll of every file is then a safety net only, run less often (idle CPU).
                for source in self.runtime.sources:
                    if isinstance(source, FileSource):
                        opts = source.options
                        source.options = TailOptions(**{
                            **{f: getattr(opts, f) for f in opts.__dataclass_fields__},
                            "poll_interval": max(opts.poll_interval, INOTIFY_SAFETY_POLL)})
            self.metrics.watch_mode.labels(mode).set(1)
            log.info("watching", mode=mode, roots=[r for r, _ in self.roots])
        self.runtime.start()
        sd_notify("READY=1")
        self.ready.set()
        try:
            while not self.stopping.is_set():
                progressed = self.runtime.run_once()
                sd_notify("WATCHDOG=1")
                for sink in self.queued:
                    self.metrics.sink_queue_depth.labels(sink.name).set(sink.depth())
                if progressed:
                    continue
                self.wake.wait(timeout=min(self.runtime.next_wakeup(), 1.0) or 0.05)
                self.wake.clear()
        finally:
            sd_notify("STOPPING=1")
            if self.hints is not None:
                self.hints.stop()
            self.runtime.stop()
            self.runtime.pipeline.close()
            if self._server is not None:
                self._server.shutdown()  # type: ignore[attr-defined]
            log.info("stopped")


def build_daemon(config: Config, *, clock: Clock | None = None,
                 registry: CollectorRegistry | None = None,
                 extra_sinks: Sequence[Sink] = ()) -> Daemon:
    """Build every component from ``config`` (nothing starts yet).

    ``extra_sinks`` are queued like the console (tests use it to plant a sink that hangs).
    """
    clock = clock or SystemClock()
    registry = registry or CollectorRegistry(auto_describe=True)
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = SelfMetrics(registry, __version__)
    source_names = [s.name for s in config.sources]
    metrics.declare_sources(source_names)
    dirs = list(config.patterns) or [builtin_pattern_dir()]
    loader = _engine_loader(dirs, config.regex_timeout, metrics, source_names)
    engine = loader()
    metrics.patterns_loaded.set(len(engine.patterns))
    metrics.reload_success.set(1)
    metrics.reload_timestamp.set(clock.time())

    def dropped(name: str, count: int) -> None:
        metrics.sink_dropped.labels(name).inc(count)

    def failed(name: str, _exc: BaseException) -> None:
        metrics.sink_errors.labels(name).inc()

    sinks: list[Sink] = [MetricsSink(metrics)]
    queued: list[QueuedSink] = []
    eventlog = EventLogSink(
        config.events, on_write_error=metrics.eventlog_write_errors.inc,
        on_reopen=lambda reason: metrics.eventlog_reopens.labels(reason).inc(),
    ) if config.events else None
    if eventlog is not None:
        sinks.append(eventlog)  # the commit log: written on the pump thread
    outputs: list[Sink] = [ConsoleSink(sys.stdout)] if config.console else []
    for output in [*outputs, *extra_sinks]:
        queued.append(QueuedSink(output, clock=clock, on_error=failed, on_drop=dropped))
    sinks.extend(queued)
    metrics.declare_sinks(s.name for s in sinks)
    pipeline = build_pipeline(engine, sinks, clock=clock, metrics=metrics,
                              host=socket.gethostname())
    specs = [SourceSpec(s.name, tuple(s.paths), tuple(s.exclude), s.start_at)
             for s in config.sources]
    wake = threading.Event()
    hints = ChangeHints(wake) if config.inotify else None
    options = TailOptions(
        poll_interval=config.poll_interval, rescan_interval=config.rescan_interval,
        checkpoint_interval=config.checkpoint_interval, read_budget=config.read_budget_bytes,
        max_line_bytes=config.max_line_bytes, max_files=config.max_files,
        confine_to_tree=os.geteuid() == 0 and not config.follow_symlinks_outside)
    files = FileSource(sources=specs, clock=clock, options=options, metrics=metrics,
                       hints=hints, exclude_paths=(str(config.events),) if config.events else (),
                       heartbeat=lambda: sd_notify("WATCHDOG=1"))
    runtime = build_runtime(sources=[files], pipeline=pipeline, clock=clock,
                            state_dir=config.state_dir, eventlog=eventlog, metrics=metrics,
                            checkpoint_interval=config.checkpoint_interval,
                            engine_loader=loader)
    roots = watch_roots([p for s in config.sources for p in s.paths])
    if not config.inotify:
        metrics.watch_mode.labels("polling").set(1)
    return Daemon(runtime, hints, roots, registry, config.listen, metrics, wake, queued)


def raise_fd_limit() -> None:
    """Lift the soft open-files limit to the hard one: every followed file holds an fd."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("fd_limit_raised", soft=soft, now=target)
    except (ImportError, ValueError, OSError) as exc:
        log.warning("fd_limit_unchanged", error=str(exc))


def run_daemon(config: Config) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status.

    Raises ``InstanceLockedError`` (exit status 2, one line) when another daemon holds the
    state directory: checked before anything is opened or logged.
    """
    early = EarlySignals.install()
    lock = InstanceLock(config.state_dir)
    lock_error = ""
    try:
        lock.acquire()
    except InstanceLockedError as exc:
        raise SigwatchError(str(exc)) from None
    except OSError as exc:  # an unusable state dir is reported below; tailing goes on
        lock_error = str(exc)
    fmt = None if config.log_format == "auto" else config.log_format == "json"
    configure_logging(json=fmt, level=config.log_level)
    raise_fd_limit()
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.error("state_dir_unusable", state_dir=str(config.state_dir), error=str(exc))
    if lock_error:
        log.error("instance_lock_unavailable", state_dir=str(config.state_dir),
                  error=lock_error)
    daemon = build_daemon(config)

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal", signal=signal.Signals(signum).name)
        daemon.request_stop()

    def on_hup(_signum: int, _frame: FrameType | None) -> None:
        daemon.request_reload()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_hup)
    if early.reload:
        daemon.request_reload()
    if early.stop is not None:
        log.info("signal", signal=signal.Signals(early.stop).name)
        daemon.request_stop()
    log.info("sigwatch_starting", version=__version__,
             sources={s.name: s.paths for s in config.sources},
             state_dir=str(config.state_dir), events=str(config.events or ""))
    try:
        daemon.run()
    finally:
        lock.release()
    return 0
