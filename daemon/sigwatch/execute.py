"""``sigwatch exec -- COMMAND...``: run a training command and watch its output live.

The command's stdout and stderr pass through unchanged (the same bytes, in the same order
within each stream, written as soon as they are read) while the same bytes are framed into
lines and matched by the daemon's pipeline, so detections go to the same sinks (event log,
metrics, ``--listen``). Each of our stdout/stderr that is a terminal is given to the command
as a pseudo-terminal of its own (output processing off, so ``\\n`` stays ``\\n``): programs
keep line buffering and colours as if run directly; otherwise a pipe, as a batch system gives.

Signals: the command runs in its own process group (like ``tini``), made the terminal's
foreground group when we have one, so a terminal's Ctrl-C reaches it once and directly.
SIGINT, SIGTERM and SIGHUP sent to us are forwarded to that group; if we are killed outright,
the kernel sends the command SIGTERM (``PR_SET_PDEATHSIG``), so it never runs on unwatched.
The exit status is the command's (128+N when signal N killed it; 127 when it cannot be
found, 126 when it cannot be run). An abnormal end (non-zero status or a signal) is itself a
detection, ``command_exited_abnormally``, which names the earlier detections as the likely
cause. Detections are printed on stderr (stdout belongs to the command).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import os
import pty
import select
import shlex
import signal
import socket
import subprocess
import termios
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import prometheus_client
import structlog
from prometheus_client import CollectorRegistry

from sigwatch import __version__
from sigwatch.app import build_pipeline, build_runtime
from sigwatch.clock import Clock, SystemClock
from sigwatch.detectors.base import Detector
from sigwatch.detectors.folding import Folder
from sigwatch.detectors.jobs import JobBook
from sigwatch.errors import SigwatchError
from sigwatch.model import Detection, Remediation, RootCause, Severity
from sigwatch.pipeline import Engine
from sigwatch.runtime.pump import Runtime
from sigwatch.sinks.base import Sink
from sigwatch.sinks.console import format_detection
from sigwatch.sinks.eventlog import EventLogSink
from sigwatch.sinks.metrics import MetricsSink
from sigwatch.sources.identity import JobIdentity, environment_identity
from sigwatch.sources.pipe import PipeSource
from sigwatch.telemetry.metrics import JobCollector, SelfMetrics
from sigwatch.web.app import WebApp, register_process_collectors
from sigwatch.web.server import WebServer
from sigwatch.web.status import Liveness

__all__ = ["EXIT_SIGNATURE", "ExecOptions", "exit_detection", "exit_status", "run_exec"]

log = structlog.get_logger("sigwatch.exec")

EXIT_SIGNATURE = "command_exited_abnormally"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
TAIL_BYTES = 4096  # of each stream, quoted in the exit detection
MAX_REMEMBERED = 1000


@dataclass(frozen=True, slots=True)
class ExecOptions:
    """What ``sigwatch exec`` takes besides the command (the daemon's sink/pattern options)."""

    patterns: Sequence[Path] = ()
    events: Path | None = None
    listen: str | None = None
    console: bool = True
    source: str = "exec"
    linger: float = 2.0  # after the command exits: how long to wait for its pipes to close
    regex_timeout: float = 0.05
    node: str = ""  # the node name of detections and gauges ("": the host name)
    fold: bool = True  # repeats fold into open incidents (the console shows counts)
    environment: Mapping[str, str] | None = None  # the launcher's (None: this process's)


def exit_status(returncode: int) -> int:
    """A shell's convention: the status, or 128+N when signal N ended the command."""
    return 128 - returncode if returncode < 0 else returncode


class _Recorder:
    """Remembers the detections so far (for the exit detection's likely cause)."""

    name = "exec_recorder"

    def __init__(self) -> None:
        self.detections: deque[Detection] = deque(maxlen=MAX_REMEMBERED)
        self.first: list[Detection] = []

    def emit(self, detection: Detection) -> None:
        if len(self.first) < 10:
            self.first.append(detection)
        self.detections.append(detection)

    def flush(self) -> None:
        return None

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        return None


class _StderrSink:
    """Detections as readable lines on our stderr, written at once (never on stdout)."""

    name = "console"

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write

    def emit(self, detection: Detection) -> None:
        text = "\n".join(f"sigwatch: {line}" for line in format_detection(detection).split("\n"))
        self._write((text + "\n").encode("utf-8", "replace"))

    def flush(self) -> None:
        return None

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        return None


def _write_all(fd: int) -> Callable[[bytes], None]:
    """A writer that puts every byte on ``fd`` (waiting when it is non-blocking and full).

    A closed reader (``sigwatch exec ... | head``) stops the pass-through, not the watching.
    """
    broken = False

    def write(data: bytes) -> None:
        nonlocal broken
        view = memoryview(data)
        while view and not broken:
            try:
                done = os.write(fd, view)
            except BlockingIOError:
                waiter = select.poll()
                waiter.register(fd, select.POLLOUT)
                waiter.poll(1000)
                continue
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF):
                    broken = True
                    return
                raise
            view = view[done:]
    return write


@dataclass
class _Tail:
    """The last bytes a stream passed through (quoted when the command dies)."""

    data: bytearray = field(default_factory=bytearray)

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * TAIL_BYTES:
            del self.data[:-TAIL_BYTES]

    def lines(self, count: int) -> list[str]:
        text = bytes(self.data[-TAIL_BYTES:]).decode("utf-8", "replace")
        return [line for line in text.splitlines() if line.strip()][-count:]


def _tee(write: Callable[[bytes], None], tail: _Tail) -> Callable[[bytes], None]:
    def tee(chunk: bytes) -> None:
        write(chunk)
        tail.add(chunk)
    return tee


def _output_pair(our_fd: int) -> tuple[int, int]:
    """(read end for us, write end for the command): a pty when ``our_fd`` is a terminal."""
    if os.isatty(our_fd):
        master, slave = pty.openpty()
        with contextlib.suppress(termios.error):
            attrs = termios.tcgetattr(slave)
            attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n": the bytes stay the command's
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
        _copy_window_size(our_fd, slave)
        os.set_inheritable(slave, False)
        return master, slave
    r, w = os.pipe()
    return r, w


def _copy_window_size(src: int, dst: int) -> None:
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(src, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(dst, termios.TIOCSWINSZ, size)


def _child_setup(parent: int) -> Callable[[], None]:
    """Runs in the child before exec: own process group, SIGTERM when we die."""
    prctl: Callable[..., int] | None = None
    with contextlib.suppress(OSError, AttributeError):
        prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # we died before the line above took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return setup


def _foreground(pgid: int) -> int | None:
    """Make ``pgid`` the terminal's foreground group when stdin is our controlling terminal.

    Returns the group to give the terminal back to afterwards (None: nothing changed).
    """
    try:
        if not os.isatty(0) or os.tcgetpgrp(0) != os.getpgrp():
            return None
    except OSError:
        return None
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(0, pgid)
    except OSError:
        return None
    finally:
        signal.signal(signal.SIGTTOU, old)
    return os.getpgrp()


def _restore_foreground(pgid: int | None) -> None:
    if pgid is None:
        return
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(0, pgid)
    finally:
        signal.signal(signal.SIGTTOU, old)


def exit_detection(command: Sequence[str], returncode: int, earlier: Sequence[Detection], *,
                   source: str, host: str, pid: int, started: float, now: float,
                   context: Sequence[str] = ()) -> Detection:
    """The command's abnormal end as a detection naming the earlier detections as its cause.

    The likely cause is the earliest detection that is not itself fallout of another (else
    the earliest); every earlier signature is listed in ``facts``.
    """
    name = shlex.join(command)
    facts: list[tuple[str, str]] = [("exit_status", str(exit_status(returncode)))]
    if returncode < 0:
        try:
            sig_name = signal.Signals(-returncode).name
        except ValueError:
            sig_name = f"signal {-returncode}"
        facts.append(("signal", sig_name))
        text = f"{name} was killed by {sig_name} (exit status {exit_status(returncode)})"
    else:
        text = f"{name} exited with status {returncode}"
    seen: list[str] = []
    for d in earlier:
        if d.signature not in seen and d.signature != EXIT_SIGNATURE:
            seen.append(d.signature)
    root: RootCause | None = None
    candidates = [d for d in earlier if d.signature != EXIT_SIGNATURE]
    if candidates:
        worst = max(d.severity for d in candidates)
        cause = next((d for d in candidates if d.root_cause is None and d.severity == worst),
                     candidates[0])
        root = RootCause(cause.signature, cause.title, cause.text or cause.about, cause.path,
                         cause.offset if cause.offset is not None else -1)
        facts.append(("earlier_detections", ", ".join(seen)))
        summary = (f"The command ended after {len(seen)} known failure signature(s); the "
                   f"likely cause is {cause.signature}: follow its fix first.")
    else:
        summary = ("No known failure signature matched the command's output before it "
                   "ended: read its last lines (context) and the node's kernel log.")
    return Detection(
        signature=EXIT_SIGNATURE, title="Command Exited Abnormally", severity=Severity.ERROR,
        status="stable", source=source, path=f"exec:{command[0] if command else ''}",
        stream_key=f"exec:{host}:{pid}:{started:.6f}", line=None, offset=None, text=text,
        time=now, remediation=Remediation(summary=summary), context=tuple(context),
        root_cause=root, host=host, about=text, key="exit", facts=tuple(facts))


class _Signals:
    """Signals arrive on a self-pipe (``set_wakeup_fd``); handlers only remember them."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        for fd in (self.r, self.w):
            os.set_blocking(fd, False)
        self.pending: list[int] = []
        self._old: dict[int, object] = {}
        self._old_fd = -1

    def install(self) -> None:
        self._old_fd = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        for signum in (*FORWARDED, signal.SIGCHLD, signal.SIGWINCH):
            self._old[signum] = signal.signal(signum, self._note)

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        self.pending.append(signum)

    def take(self) -> list[int]:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.r, 512):
                pass
        out, self.pending = self.pending, []
        return out

    def uninstall(self) -> None:
        for signum, handler in self._old.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._old_fd)
        for fd in (self.r, self.w):
            os.close(fd)


def _rank_facts(clock: Clock, jobs: JobBook) -> list[Detector]:
    """The per-rank facts (NCCL watchdog figures, progress) for the job gauges."""
    from sigwatch.detectors.ranks import RankFactsDetector
    from sigwatch.detectors.training import ProgressReader

    return [RankFactsDetector(clock, book=jobs, reader=ProgressReader())]


def _engine(options: ExecOptions, metrics: SelfMetrics) -> Engine:
    from sigwatch.app import _PatternLoadError
    from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

    patterns, errors = load_patterns(list(options.patterns) or [builtin_pattern_dir()])
    if errors:
        raise _PatternLoadError(errors)
    metrics.declare_signatures(
        [*((s.id, s.severity.label) for s in patterns.signatures), (EXIT_SIGNATURE, "error")],
        [options.source])
    return Engine(patterns, regex_timeout=options.regex_timeout,
                  on_timeout=lambda sig: metrics.regex_timeouts.labels(sig).inc())


def run_exec(command: Sequence[str], options: ExecOptions, *,
             clock: Clock | None = None) -> int:
    """Run ``command`` watched; returns its exit status (see the module docstring)."""
    if not command:
        raise SigwatchError("exec: no command given (sigwatch exec [options] -- COMMAND...)")
    clock = clock or SystemClock()
    registry = CollectorRegistry(auto_describe=True)
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = SelfMetrics(registry, __version__)
    metrics.declare_sources([options.source])
    engine = _engine(options, metrics)
    host = options.node or socket.gethostname()
    # The launcher's environment says which job and rank this command is (Slurm, torchrun,
    # MPI, Kubernetes): every detection and the job gauges carry them.
    identity = environment_identity(os.environ if options.environment is None
                                    else options.environment)
    jobs = JobBook(on_refused=lambda what: metrics.job_series_refused.labels(what).inc())
    registry.register(JobCollector(host, jobs.rows))
    out_write, err_write = _write_all(1), _write_all(2)
    recorder = _Recorder()
    sinks: list[Sink] = [MetricsSink(metrics), recorder]
    eventlog = EventLogSink(options.events) if options.events else None
    if eventlog is not None:
        sinks.append(eventlog)
    if options.console:
        sinks.append(_StderrSink(err_write))
    metrics.declare_sinks(s.name for s in sinks)
    def identify(_info: object) -> JobIdentity | None:
        return identity or None

    pipeline = build_pipeline(engine, sinks, clock=clock, metrics=metrics, host=host,
                              content={options.source: "job"}, identify=identify, jobs=jobs,
                              folder=Folder() if options.fold else None,
                              detectors=_rank_facts(clock, jobs))

    out_r, out_w = _output_pair(1)
    err_r, err_w = _output_pair(2)
    signals = _Signals()
    signals.install()
    started = clock.time()
    try:
        proc = subprocess.Popen(
            list(command), stdout=out_w, stderr=err_w, close_fds=True,
            preexec_fn=_child_setup(os.getpid()))  # noqa: PLW1509 - before any thread starts
    except OSError as exc:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        signals.uninstall()
        err_write(f"sigwatch: exec: cannot run {command[0]}: {exc.strerror}\n".encode())
        return 127 if exc.errno == errno.ENOENT else 126
    os.close(out_w)
    os.close(err_w)
    pgid = proc.pid
    given_back = _foreground(pgid)
    tails = {"stdout": _Tail(), "stderr": _Tail()}
    sources = [
        PipeSource(options.source, fd=out_r, label="stdout", kind="exec",
                   tee=_tee(out_write, tails["stdout"])),
        PipeSource(options.source, fd=err_r, label="stderr", kind="exec",
                   tee=_tee(err_write, tails["stderr"])),
    ]
    runtime = build_runtime(sources=sources, pipeline=pipeline, clock=clock, state_dir=None,
                            eventlog=eventlog, metrics=metrics)
    server, liveness = _serve(options.listen, registry, clock, metrics)
    log.info("exec_started", command=shlex.join(command), pid=proc.pid)
    try:
        runtime.start()
        returncode = _pump(runtime, sources, proc, pgid, signals, options.linger, liveness)
    finally:
        _restore_foreground(given_back)
        signals.uninstall()
    how = "ok" if returncode == 0 else ("signal" if returncode < 0 else "status")
    metrics.exec_exits.labels(how).inc()
    if returncode != 0:
        context = [f"stderr: {x}" for x in tails["stderr"].lines(6)]
        context += [f"stdout: {x}" for x in tails["stdout"].lines(4)]
        earlier = list(recorder.first) + [d for d in recorder.detections
                                          if d not in recorder.first]
        ended = exit_detection(command, returncode, earlier, source=options.source,
                               host=host, pid=proc.pid, started=started, now=clock.time(),
                               context=context)
        if identity.job:
            ended = dataclasses.replace(ended, jobs=(identity.job,), rank=identity.rank)
        pipeline.emit(ended)
    runtime.stop()
    pipeline.flush()
    pipeline.close()
    if server is not None:
        server.stop()
    return exit_status(returncode)


def _pump(runtime: Runtime, sources: Sequence[PipeSource], proc: subprocess.Popen[bytes],
          pgid: int, signals: _Signals, linger: float, liveness: Liveness | None) -> int:
    """Read and match until the command has exited and its output has ended."""
    exited_at: float | None = None
    last_data = time.monotonic()
    while True:
        if runtime.run_once():
            last_data = time.monotonic()
        if liveness is not None:
            liveness.beat()
        for signum in signals.take():
            if signum in FORWARDED and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signum)
                log.info("signal_forwarded", signal=signal.Signals(signum).name, pid=proc.pid)
            elif signum == signal.SIGWINCH:
                for src, ours in zip(sources, (1, 2), strict=True):
                    if src.fd is not None and os.isatty(src.fd):
                        _copy_window_size(ours, src.fd)
        if proc.returncode is None and proc.poll() is not None:
            exited_at = time.monotonic()
        if exited_at is not None:
            if all(s.ended for s in sources):
                break
            if runtime.more_waiting():
                continue
            if time.monotonic() - max(exited_at, last_data) > linger:
                break  # a grandchild still holds the output open: stop waiting for it
        elif runtime.more_waiting():
            continue
        fds = [signals.r, *(fd for s in sources for fd in s.fds())]
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        timeout = min(runtime.next_wakeup(), 1.0 if exited_at is None else 0.1)
        with contextlib.suppress(InterruptedError):
            poller.poll(timeout * 1000)
    assert proc.returncode is not None
    return proc.returncode


def _serve(listen: str | None, registry: CollectorRegistry, clock: Clock,
           metrics: SelfMetrics) -> tuple[WebServer | None, Liveness | None]:
    """``/metrics`` and health while the command runs, when ``--listen`` is given."""
    if not listen:
        return None, None
    register_process_collectors(registry)
    liveness = Liveness(clock, max_silence=30.0)
    liveness.beat()
    liveness.set_ready()
    server = WebServer(WebApp(registry=registry, liveness=liveness, clock=clock,
                              node=socket.gethostname()), listen,
                       on_event=lambda why: metrics.http_connections_dropped.labels(why).inc())
    server.start()
    log.info("http_listening", url=server.url())
    return server, liveness
