"""The composition root: builds every component from a validated ``Config`` and runs the pump.

Only this module (and ``cli``) reads the config object; ``build_pipeline`` and
``build_runtime`` are the one place where sources, the pipeline, detectors and sinks are put
together, for the daemon, ``scan``, the test harness and the bench alike. Threads: the main
thread pumps; the watchdog observer only sets the wake event; each queued sink has a worker;
the HTTP server answers on its own threads. SIGTERM and SIGINT stop after a final commit; SIGHUP
reloads the patterns (a broken set keeps the old one).
"""

from __future__ import annotations

import functools
import gc
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from sigwatch import __version__
from sigwatch.clock import Clock, SystemClock
from sigwatch.detectors.base import Detector
from sigwatch.detectors.burst import BurstDetector
from sigwatch.detectors.folding import Folder
from sigwatch.detectors.generic import CodeTable, GenericDetector
from sigwatch.detectors.jobs import JobBook
from sigwatch.detectors.progress import Extractor
from sigwatch.detectors.templates import NovelErrorDetector
from sigwatch.detectors.training import (
    BadNumbersDetector,
    LossTrendDetector,
    ProgressReader,
    StallDetector,
    StepTimeDetector,
)
from sigwatch.errors import PatternError, SigwatchError
from sigwatch.model import Detection, Severity, StreamInfo
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import Sink

# What only the daemon needs (web, sources, config models, runtime, Prometheus) is imported
# where the daemon is built, so that ``scan`` (which builds a pipeline here too) starts fast.
if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from sigwatch.config import Config, DetectorSettings
    from sigwatch.faults.engine import FaultEngine
    from sigwatch.faults.verdict import VerdictWriter
    from sigwatch.runtime.pump import Runtime
    from sigwatch.sinks.eventlog import EventLogSink
    from sigwatch.sinks.queued import QueuedSink
    from sigwatch.sources.base import Source
    from sigwatch.sources.identity import JobIdentity
    from sigwatch.sources.watching import InotifyHints
    from sigwatch.telemetry.metrics import SelfMetrics
    from sigwatch.web.server import WebServer
    from sigwatch.web.status import Liveness
    from sigwatch.web.store import DetectionStore

__all__ = ["Daemon", "build_daemon", "build_faults", "build_generic", "build_pipeline",
           "build_runtime",
           "policy_problems", "run_daemon", "sd_notify", "tune_gc"]

# Seconds between full polls of every file while inotify hints are live.
INOTIFY_SAFETY_POLL = 3.0
# Seconds between looks at the sources' health and writes of the verdict for `health`.
VERDICT_EVERY = 2.0

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
        metrics.declare_signatures(
            ((s.id, s.severity.label,
              *((s.collateral_severity.label,) if s.collateral_severity else ()))
             for s in patterns.signatures), sources)
        return Engine(patterns, regex_timeout=timeout,
                      on_timeout=lambda sig: metrics.regex_timeouts.labels(sig).inc())
    return load


def build_pipeline(patterns: PatternSet | Engine, sinks: Sequence[Sink], *, clock: Clock,
                   metrics: SelfMetrics | None = None, host: str = "",
                   detectors: Sequence[Detector] = (),
                   regex_timeout: float | None = None,
                   content: Mapping[str, str] | None = None,
                   identify: Callable[[StreamInfo], JobIdentity | None] | None = None,
                   jobs: JobBook | None = None, folder: Folder | None = None) -> Pipeline:
    """The processing core every entry point uses: engine, detectors, root cause, sinks
    (and, for the daemon and ``exec``, job identity, the job book and incident folding)."""
    if isinstance(patterns, Engine):
        engine = patterns
    else:
        on_timeout = ((lambda sig: metrics.regex_timeouts.labels(sig).inc())
                      if metrics is not None else None)
        engine = Engine(patterns, regex_timeout=regex_timeout or 0.05, on_timeout=on_timeout)
    return Pipeline(engine, sinks, clock=clock, metrics=metrics, host=host,
                    detectors=detectors, content=content, identify=identify, jobs=jobs,
                    folder=folder)


def build_detectors(settings: DetectorSettings | None = None, *, clock: Clock, host: str = "",
                    metrics: SelfMetrics | None = None,
                    jobs: JobBook | None = None, generic: bool = True) -> list[Detector]:
    """The detectors beyond signatures, sharing one progress reader and one template miner.

    ``settings`` None: every detector with its defaults (what ``scan`` runs), without loading
    the config models; ``generic`` False leaves the generic layer out (``scan --no-generic``).
    ``jobs``: the rank facts detector fills this book too.
    """
    from sigwatch.detectors.ranks import RankFactsDetector

    if settings is None:
        reader = ProgressReader()
        novel = NovelErrorDetector(clock, host=host, metrics=metrics)
        found: list[Detector] = [
            novel,
            StepTimeDetector(clock, reader=reader, host=host, metrics=metrics),
            StallDetector(clock, reader=reader, host=host, metrics=metrics),
            BadNumbersDetector(clock, reader=reader, host=host, metrics=metrics),
            LossTrendDetector(clock, reader=reader, host=host, metrics=metrics),
            BurstDetector(clock, miner=novel.miner, host=host)]
        if jobs is not None:
            found.append(RankFactsDetector(clock, book=jobs, reader=reader))
        if generic:
            found.append(build_generic(clock=clock, host=host))
        return found
    reader = ProgressReader([Extractor.user(e.name, e.regex) for e in settings.extractors])
    out: list[Detector] = []
    if jobs is not None:
        out.append(RankFactsDetector(clock, book=jobs, reader=reader))
    novel = NovelErrorDetector(
        clock, learn_lines=settings.novel_error.learn_lines,
        learn_seconds=settings.novel_error.learn_hours * 3600.0,
        max_per_hour=settings.novel_error.max_per_hour, host=host, metrics=metrics)
    if settings.novel_error.enabled:
        out.append(novel)  # before the burst detector: it creates the templates bursts use
    if settings.step_time.enabled:
        out.append(StepTimeDetector(
            clock, reader=reader, ratio=settings.step_time.ratio,
            sustain=settings.step_time.sustain, warmup=settings.step_time.warmup, host=host,
            metrics=metrics))
    if settings.stall.enabled:
        out.append(StallDetector(clock, reader=reader, factor=settings.stall.factor,
                                 floor=settings.stall.floor_seconds, host=host,
                                 metrics=metrics))
    if settings.bad_numbers.enabled:
        out.append(BadNumbersDetector(
            clock, reader=reader, consecutive=settings.bad_numbers.consecutive,
            min_loss_scale=settings.bad_numbers.min_loss_scale, host=host, metrics=metrics))
        # the loss doubling and staying up: training numerics too, enabled with them
        out.append(LossTrendDetector(clock, reader=reader, host=host, metrics=metrics))
    if settings.burst.enabled:
        out.append(BurstDetector(clock, miner=novel.miner,
                                 window=settings.burst.window_seconds,
                                 factor=settings.burst.factor,
                                 min_count=settings.burst.min_count, host=host))
    if settings.generic.enabled:
        out.append(build_generic(clock=clock, host=host,
                                 hold_seconds=settings.generic.hold_seconds))
    return out


def build_generic(*, clock: Clock, host: str = "", enums: Path | None = None,
                  hold_seconds: float = 10.0) -> GenericDetector:
    """The generic layer, with the vendor error tables of ``enums`` (default: the library's
    ``_enums`` folder) compiled once."""
    folder = enums if enums is not None else builtin_pattern_dir() / "_enums"
    codes = _vendor_codes(str(folder))
    return GenericDetector(clock, codes=codes, host=host, hold_seconds=hold_seconds)


@functools.lru_cache(maxsize=4)
def _vendor_codes(folder: str) -> CodeTable:
    """The vendor tables of ``folder``, read once per process (they ship with the library)."""
    path = Path(folder)
    return CodeTable.load(path) if path.is_dir() else CodeTable()


def build_runtime(*, sources: Sequence[Source], pipeline: Pipeline, clock: Clock,
                  state_dir: Path | None, eventlog: EventLogSink | None,
                  metrics: SelfMetrics | None, checkpoint_interval: float = 1.0,
                  engine_loader: Callable[[], Engine] | None = None,
                  fsync: bool = True, notify: Callable[[str], None] | None = None) -> Runtime:
    """Sources, pipeline and the commit cycle (nothing starts yet)."""
    from sigwatch.runtime.checkpoint import CheckpointStore
    from sigwatch.runtime.pump import Runtime

    store = CheckpointStore(state_dir, fsync=fsync) if state_dir is not None else None
    return Runtime(sources=sources, pipeline=pipeline, clock=clock, store=store,
                   eventlog=eventlog, metrics=metrics, checkpoint_interval=checkpoint_interval,
                   engine_loader=engine_loader, notify=notify)


class Daemon:
    """A built daemon: the runtime plus HTTP, hints and the stop/wake events."""

    def __init__(self, runtime: Runtime, hints: InotifyHints | None,
                 roots: list[str], registry: CollectorRegistry,
                 server: WebServer | None, metrics: SelfMetrics, wake: threading.Event,
                 queued: Sequence[QueuedSink] = (), liveness: Liveness | None = None,
                 faults: FaultEngine | None = None, verdict: VerdictWriter | None = None,
                 ) -> None:
        self.runtime = runtime
        self.faults = faults
        self.verdict = verdict
        self._next_verdict = 0.0
        self._faults_version = -1
        self.hints = hints
        self.roots = roots
        self.registry = registry
        self.server = server
        self.metrics = metrics
        self.wake = wake
        self.queued = list(queued)
        self.liveness = liveness
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.http_port: int | None = None
        self.source_names: list[str] = []
        self._state_problem: str | None = None

    def serve_http(self) -> None:
        """Bind the listener first: a port in use is a start-up error (exit status 2)."""
        if self.server is None:
            return
        self.server.start()
        self.http_port = self.server.port
        log.info("http_listening", url=self.server.url())

    def request_stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def request_reload(self) -> None:
        self.runtime.reload_requested.set()
        self.wake.set()

    def run(self) -> None:
        """Pump until asked to stop."""
        self.serve_http()
        try:
            self._run()
        finally:
            if self.server is not None:
                self.server.stop()

    def _beat(self) -> None:
        sd_notify("WATCHDOG=1")
        if self.liveness is not None:
            self.liveness.beat()

    def report(self, *, force: bool = False) -> None:
        """Sources that cannot read (``sigwatch_source_up``) and the verdict for ``health``:
        looked at every ``VERDICT_EVERY`` seconds (a sum over every followed file), and at
        once when the open faults changed."""
        from sigwatch.faults.verdict import OpenFault

        clock = self.runtime.clock
        mono = clock.monotonic()
        version = self.faults.version if self.faults is not None else 0
        if not force and mono < self._next_verdict and version == self._faults_version:
            return
        self._faults_version = version
        self._next_verdict = mono + VERDICT_EVERY
        problems = self.runtime.reading_problems()
        names = list(self.source_names)
        for name in names:
            self.metrics.source_up.labels(name).set(0 if name in problems else 1)
        if self.verdict is None:
            return
        faults = [OpenFault(f.id, f.signature, f.state, f.outcome, f.opened_at)
                  for f in (self.faults.open_faults() if self.faults is not None else ())]
        self.verdict.update(clock.time(), mono, faults, problems, names)

    def _say_state(self) -> None:
        """Ready, or degraded while the state directory cannot take a checkpoint (read-only,
        full): reading and reporting go on, but a restart would read lines again or skip
        them. Said on ``/-/ready`` and in systemd's status; also counted
        (``sigwatch_checkpoint_errors_total``, alert ``SigwatchCheckpointFailing``)."""
        problem = self.runtime.checkpoint_problem
        if problem == self._state_problem:
            return
        self._state_problem = problem
        store = self.runtime.store
        where = store.state_dir if store is not None else ""
        if problem:
            why = (f"state directory {where} unusable ({problem}): detections are reported, "
                   "offsets are not saved")
            sd_notify(f"STATUS=degraded: {why}")
        else:
            why = ""
            sd_notify(f"STATUS={self.runtime.status_line()}")
        if self.liveness is not None:
            self.liveness.set_ready(not problem, why)

    def _run(self) -> None:
        from sigwatch.runtime.waking import FdWaker
        from sigwatch.sources.files import FileSource, TailOptions

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
                        source.watch_with(self.hints)
            self.metrics.watch_mode.labels(mode).set(1)
            log.info("watching", mode=mode, globs=self.roots)
        self.runtime.start()
        waker = FdWaker(self.runtime.sources, self.wake)
        waker.start()
        followed: dict[str, int] = {}
        for source in self.runtime.sources:
            report = getattr(source, "streams_by_source", None)
            if report is not None:
                followed.update(report())
        log.info("sigwatch_ready", signatures=len(self.runtime.pipeline.engine.patterns),
                 files_followed=followed)
        for name, count in followed.items():
            if count == 0:
                log.warning("source_matches_nothing", source=name)
        sd_notify(f"READY=1\nSTATUS={self.runtime.status_line()}")
        self._beat()
        self.report(force=True)
        self._say_state()
        self.ready.set()
        try:
            while not self.stopping.is_set():
                progressed = self.runtime.run_once()
                waker.polled()
                self._beat()
                self.report()
                self._say_state()
                for sink in self.queued:
                    self.metrics.sink_queue_depth.labels(sink.name).set(sink.depth())
                if progressed:
                    continue
                self.wake.wait(timeout=min(self.runtime.next_wakeup(), 1.0) or 0.05)
                self.wake.clear()
        finally:
            sd_notify("STOPPING=1")
            waker.stop()
            if self.hints is not None:
                self.hints.stop()
            self.runtime.stop()
            self.runtime.pipeline.close()
            log.info("stopped")


def build_daemon(config: Config, *, clock: Clock | None = None,
                 registry: CollectorRegistry | None = None,
                 extra_sinks: Sequence[Sink] = ()) -> Daemon:
    """Build every component from ``config`` (nothing starts yet).

    ``extra_sinks`` are queued like the console (tests use it to plant a sink that hangs).
    """
    import prometheus_client
    from prometheus_client import CollectorRegistry

    from sigwatch.faults.verdict import VerdictWriter
    from sigwatch.inputs import build_sources
    from sigwatch.sinks.alertmanager import AlertmanagerSink
    from sigwatch.sinks.console import ConsoleSink
    from sigwatch.sinks.eventlog import EventLogSink
    from sigwatch.sinks.metrics import MetricsSink
    from sigwatch.sinks.queued import QueuedSink
    from sigwatch.sources.files import TailOptions
    from sigwatch.sources.watching import InotifyHints
    from sigwatch.telemetry.metrics import JobCollector, SelfMetrics
    from sigwatch.web.status import Liveness
    from sigwatch.web.store import DetectionStore, StatusPageSink

    clock = clock or SystemClock()
    registry = registry or CollectorRegistry(auto_describe=True)
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = SelfMetrics(registry, __version__, revision=_revision())
    source_names = [s.name for s in config.sources]
    metrics.declare_sources(source_names)
    dirs = (list(config.patterns) or [builtin_pattern_dir()]) + list(config.add_patterns)
    loader = _engine_loader(dirs, config.regex_timeout, metrics, source_names)
    engine = loader()
    metrics.build_info.info({"version": __version__, "revision": _revision(),
                             "prefilter": engine.prefilter.backend})
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
    host = config.node or socket.gethostname()
    if config.alerting.alertmanagers:
        link_base = config.web.external_url or _default_link_base(host, config.listen)
        pager = AlertmanagerSink(
            config.alerting.alertmanagers, node=host, clock=clock,
            page_severities=[Severity.parse(s) for s in config.alerting.page_severities],
            resend_interval=config.alerting.resend_interval,
            resolve_after=config.alerting.resolve_after,
            state_path=config.state_dir / "alerts.json", link_base=link_base, metrics=metrics)
        queued.append(QueuedSink(pager, clock=clock, on_error=failed, on_drop=dropped))
    store: DetectionStore | None = None
    if config.web.status_page:
        store = DetectionStore(config.state_dir / "status.jsonl", capacity=config.web.history)
        queued.append(QueuedSink(StatusPageSink(store), clock=clock, on_error=failed,
                                 on_drop=dropped))
    paging = list(queued)  # action notices go where pages and the console go

    def notify(notice: Detection) -> None:
        for sink in paging:
            sink.emit(notice)

    faults = build_faults(config, clock=clock, metrics=metrics,
                          patterns=lambda: runtime.pipeline.engine.patterns, notify=notify,
                          check=engine.patterns)
    queued.append(QueuedSink(faults, clock=clock, on_error=failed, on_drop=dropped))
    sinks.extend(queued)
    metrics.declare_sinks(s.name for s in sinks)
    jobs = JobBook(idle=config.jobs.idle_seconds,
                   on_refused=lambda what: metrics.job_series_refused.labels(what).inc())
    registry.register(JobCollector(host, jobs.rows))
    folder = (Folder(quiet=config.incidents.quiet_seconds,
                     update=config.incidents.update_seconds,
                     max_update=config.incidents.max_update_seconds)
              if config.incidents.fold else None)
    detectors = build_detectors(config.detectors, clock=clock, host=host, metrics=metrics,
                                jobs=jobs)
    wake = threading.Event()
    def watch_state(folders: int, watched: int, polled: int) -> None:
        metrics.watched_directories.set(folders)
        metrics.watch_trees.labels("inotify").set(watched)
        metrics.watch_trees.labels("polling").set(polled)

    hints = (InotifyHints(wake, on_overflow=metrics.watch_overflows.inc, on_state=watch_state)
             if config.inotify else None)
    options = TailOptions(
        poll_interval=config.poll_interval, rescan_interval=config.rescan_interval,
        checkpoint_interval=config.checkpoint_interval, read_budget=config.read_budget_bytes,
        max_line_bytes=config.max_line_bytes, max_files=config.max_files,
        confine_to_tree=os.geteuid() == 0 and not config.follow_symlinks_outside)
    inputs = build_sources(config.sources, clock=clock, options=options, metrics=metrics,
                           hints=hints,
                           exclude_paths=(str(config.events),) if config.events else (),
                           heartbeat=lambda: sd_notify("WATCHDOG=1"))
    pipeline = build_pipeline(engine, sinks, clock=clock, metrics=metrics, host=host,
                              detectors=detectors, content=inputs.content,
                              identify=inputs.identify, jobs=jobs, folder=folder)
    runtime = build_runtime(sources=inputs.sources, pipeline=pipeline, clock=clock,
                            state_dir=config.state_dir, eventlog=eventlog, metrics=metrics,
                            checkpoint_interval=config.checkpoint_interval,
                            engine_loader=loader, notify=sd_notify)
    roots = list(inputs.globs)
    if not config.inotify:
        metrics.watch_mode.labels("polling").set(1)
    liveness = Liveness(clock, max_silence=30.0)
    server = _build_web(config, registry, metrics, liveness, runtime, store, clock, faults)
    verdict = VerdictWriter(config.state_dir / "health.json", node=faults.node or host,
                            mode=config.policy.mode, every=VERDICT_EVERY)
    daemon = Daemon(runtime, hints, roots, registry, server, metrics, wake, queued, liveness,
                    faults=faults, verdict=verdict)
    faults.on_change = wake.set  # a fault opened or changed: the verdict is written now
    daemon.source_names = source_names
    return daemon


def policy_problems(config: Config, patterns: PatternSet) -> list[tuple[str, str]]:
    """(field, reason) for each rule of ``[policy]`` the loaded signatures contradict."""
    from sigwatch.faults.policy import Policy

    return Policy(config.policy).check(patterns.signatures)


def slurm_node_name(config: Config) -> str:
    """The Slurm NodeName: ``[slurm] node``, else ``node``, else the short host name."""
    if config.slurm is not None and config.slurm.node:
        return config.slurm.node
    return config.node or socket.gethostname().split(".")[0]


def build_faults(config: Config, *, clock: Clock, metrics: SelfMetrics | None,
                 patterns: Callable[[], PatternSet] | None,
                 notify: Callable[[Detection], None] | None = None,
                 check: PatternSet | None = None, persistent: bool = True) -> FaultEngine:
    """The fault engine of ``config``: its policy, book, boot watch and Slurm client.

    ``persistent=False`` (``policy explain``): in memory, no boot watch, and no Slurm client
    whatever the config says: a replay never drains anything."""
    from sigwatch.faults.boot import BootWatch
    from sigwatch.faults.engine import FaultEngine, SlurmLimits
    from sigwatch.faults.model import ACTION_OUTCOMES, DECISIONS
    from sigwatch.faults.policy import Policy
    from sigwatch.faults.slurm import SlurmClient
    from sigwatch.faults.store import FaultStore

    policy = Policy(config.policy)
    if check is not None:
        problems = policy.check(check.signatures)
        if problems:
            raise SigwatchError("; ".join(f"{field}: {why}" for field, why in problems))
    if metrics is not None:
        metrics.declare_faults(DECISIONS, [(a, o) for a, outs in ACTION_OUTCOMES.items()
                                           for o in outs], config.policy.mode)
    node = slurm_node_name(config)
    slurm = limits = None
    if config.slurm is not None and persistent:
        s = config.slurm
        slurm = SlurmClient(node, scontrol=s.scontrol, sinfo=s.sinfo, conf=s.conf,
                            partition=s.partition, timeout=s.timeout_seconds)
        limits = SlurmLimits(max_share=s.max_share, max_per_hour=s.max_per_hour,
                             retry_seconds=s.retry_seconds)
    elif config.policy.mode == "act" and persistent:
        log.warning("policy_act_without_slurm",
                    detail="mode is act but no [slurm] table: faults are kept, nothing is "
                           "drained")
    return FaultEngine(
        policy, clock=clock,
        store=FaultStore(config.state_dir) if persistent else None,
        boot=BootWatch(config.policy.boot_id_path) if persistent else None,
        slurm=slurm, limits=limits, node=node, signatures=patterns, metrics=metrics,
        notify=notify,
        requests_dir=config.state_dir / "requests" if persistent else None,
        history_days=config.policy.history_days)


def _revision() -> str:
    """The git commit of a source checkout, else ``SIGWATCH_REVISION``, else "unknown"."""
    if os.environ.get("SIGWATCH_REVISION"):
        return os.environ["SIGWATCH_REVISION"]
    head = Path(__file__).resolve().parents[2] / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            return (head.parent / ref[5:]).read_text().strip()[:12]
        return ref[:12]
    except OSError:
        return "unknown"


def _default_link_base(host: str, listen: str) -> str:
    """Where alert links point when ``[web] external_url`` is not set: this node's listener."""
    from sigwatch.web.server import parse_listen

    port = parse_listen(listen).port
    return f"http://{host}:{port}"


def _build_web(config: Config, registry: CollectorRegistry, metrics: SelfMetrics,
               liveness: Liveness, runtime: Runtime, store: DetectionStore | None,
               clock: Clock, faults: FaultEngine | None = None) -> WebServer:
    """The HTTP listener: /metrics, health, and (unless turned off) the status page."""
    from sigwatch.web.app import WebApp, register_process_collectors
    from sigwatch.web.server import WebServer, parse_listen
    from sigwatch.web.settings import exposure_warning
    from sigwatch.web.status import RegistryStatus, signature_infos

    register_process_collectors(registry)
    listen = parse_listen(config.listen)
    web = config.web
    warning = exposure_warning(listen, tls=web.tls_server_config is not None,
                               auth=bool(web.basic_auth_users))
    if warning:
        log.warning("http_exposed", detail=warning)
    status = RegistryStatus(
        registry, [(s.name, "file" if s.kind == "files" else s.kind) for s in config.sources],
        signatures=lambda: signature_infos(runtime.pipeline.engine.patterns.signatures),
        open_incidents=runtime.pipeline.open_incidents,
        progress=runtime.progress)
    app = WebApp(registry=registry, liveness=liveness,
                 status=status if store is not None else None, store=store,
                 auth=web.basic_auth(), clock=clock, node=config.node or socket.gethostname(),
                 incident_window=web.incident_window, faults=faults)
    return WebServer(app, listen, tls=web.tls_config(), limits=web.server_limits(),
                     on_event=lambda why: metrics.http_connections_dropped.labels(why).inc())


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


def tune_gc() -> None:
    """Once everything is built: what start-up made (modules, the compiled library) is frozen
    out of the cyclic collector, and it runs less often. Reading a log allocates many small
    tuples that reference counting frees at once; a full collection walking the whole library
    every few thousand of them cost about a tenth of the detectors' time."""
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)


def run_daemon(config: Config) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status.

    Exit status 2 with one line when another daemon holds the state directory, or when the
    directory cannot be made or opened (then it cannot be locked, and a daemon never runs
    without its lock): checked before anything is opened or logged. A directory that can be
    locked but not written (read-only, full) is run degraded: see ``Daemon``.
    """
    from sigwatch.process import EarlySignals, InstanceLock, InstanceLockedError
    from sigwatch.telemetry.logging import configure_logging

    early = EarlySignals.install()
    lock = InstanceLock(config.state_dir)
    try:
        lock.acquire()
    except InstanceLockedError as exc:
        raise SigwatchError(str(exc)) from None
    except OSError as exc:
        raise SigwatchError(f"state directory {config.state_dir} cannot be locked: "
                            f"{exc.strerror}; refusing to run without the instance lock"
                            ) from None
    fmt = None if config.log_format == "auto" else config.log_format == "json"
    configure_logging(json=fmt, level=config.log_level)
    raise_fd_limit()
    if lock.problem:
        log.warning("instance_lock_file_unusable", state_dir=str(config.state_dir),
                    error=lock.problem, note="the state directory itself is locked")
    daemon = build_daemon(config)
    tune_gc()

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
