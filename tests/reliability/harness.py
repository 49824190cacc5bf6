"""Drive the real runtime (file source, pipeline, commit) step by step, and count what reached the event log.

Used by the scenario tests, the model-based test and ``bench/reliability.py``. Lines that a
signature matches look like ``ERROR seq=<n>``; every detection in the event log carries the
``seq`` capture, so "exactly once" is a check on the multiset of seqs in the event log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from sigwatch.app import build_pipeline, build_runtime
from sigwatch.clock import FakeClock
from sigwatch.detectors.base import Detector
from sigwatch.detectors.folding import Folder
from sigwatch.patterns.loader import load_patterns
from sigwatch.pipeline import Engine
from sigwatch.runtime.pump import Runtime
from sigwatch.sinks.base import CollectingSink
from sigwatch.sinks.eventlog import EventLogSink
from sigwatch.sinks.metrics import MetricsSink
from sigwatch.sources.base import Source
from sigwatch.sources.discovery import SourceSpec
from sigwatch.sources.files import FileSource, TailOptions
from sigwatch.telemetry.metrics import SelfMetrics

REPO = Path(__file__).resolve().parents[2]

SEQ_SIGNATURE = """\
id = "test_error_seq"
title = "Test Error Seq"
severity = "error"
[match]
regex = 'ERROR seq=(?P<seq>\\d+)'
keywords = ["ERROR seq="]
"""

HOSTILE_SIGNATURE = """\
id = "test_hostile_backtrack"
title = "Test Hostile Backtrack"
severity = "warning"
[match]
regex = '(a|aa)+$'
keywords = ["aaaa"]
"""

# What the daemon says it lost, or may have lost (a truncation with no copy to tell).
LOSS_COUNTERS = ("sigwatch_data_loss_events_total", "sigwatch_data_loss_possible_total")


def write_patterns(root: Path, *, hostile: bool = False) -> Path:
    """A pattern folder with the ``ERROR seq=<n>`` signature (and optionally a ReDoS one)."""
    folder = root / "patterns" / "test"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_error_seq.toml").write_text(SEQ_SIGNATURE, encoding="utf-8")
    if hostile:
        (folder / "test_hostile_backtrack.toml").write_text(HOSTILE_SIGNATURE,
                                                            encoding="utf-8")
    return root / "patterns"


def error_line(seq: int, pad: int = 0) -> bytes:
    return f"ERROR seq={seq} {'x' * pad}\n".encode()


def read_seq_events(path: Path) -> Iterator[tuple[int, dict]]:
    """``(seq, event)`` for every event with a ``seq`` capture, in order.

    A torn last record (the daemon was killed mid-write) is ignored.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    for line in raw.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        seq = doc.get("captures", {}).get("seq")
        if seq is not None:
            yield int(seq), doc


def read_event_seqs(path: Path) -> list[int]:
    """Every ``seq`` capture in an event log, in order."""
    return [seq for seq, _doc in read_seq_events(path)]


def start_daemon_process(tmp: Path) -> subprocess.Popen[bytes]:
    """The real ``sigwatch run`` on tmp/logs/*.log with tmp/patterns; stderr to daemon.log."""
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or str(REPO / "daemon"))
    cmd = [sys.executable, "-m", "sigwatch", "run", "--watch", str(tmp / "logs" / "*.log"),
           "--events", str(tmp / "events.jsonl"), "--state-dir", str(tmp / "state"),
           "--listen", "127.0.0.1:0", "--patterns", str(tmp / "patterns"),
           "--start-at", "beginning", "--no-console"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / "daemon.log", "ab"))  # noqa: SIM115


def duplicates(seqs: Iterable[int]) -> dict[int, int]:
    return {s: c for s, c in Counter(seqs).items() if c > 1}


class Harness:
    """One watched folder, one state folder, one event log; daemons come and go."""

    def __init__(self, root: Path, globs: Iterable[str] = ("*.log",), *,
                 start_at: str = "beginning", options: TailOptions | None = None,
                 hostile: bool = False, regex_timeout: float = 0.05,
                 fsync: bool = False,
                 source_factory: Callable[[FakeClock, SelfMetrics], Source] | None = None,
                 detector_factory: Callable[[FakeClock], list[Detector]] | None = None,
                 fold: bool = True,
                 ) -> None:
        """``fold``: repeats fold into open incidents, as the daemon does by default (the
        event log still records every occurrence: a repeat is a compact record with the
        same captures, so exactly-once is checked the same way)."""
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.state = root / "state"
        self.events = root / "events.jsonl"
        self.patterns = write_patterns(root, hostile=hostile)
        self.globs = tuple(str(self.logs / g) for g in globs)
        self.start_at = start_at
        self.options = options or TailOptions(poll_interval=1.0, rescan_interval=1.0,
                                              checkpoint_interval=1.0, rotate_wait=5.0)
        self.regex_timeout = regex_timeout
        self.fsync = fsync
        self.source_factory = source_factory
        self.detector_factory = detector_factory
        self.fold = fold
        self.incidents = CollectingSink()  # what the console and pager would get
        self.files: FileSource | None = None
        self.clock = FakeClock()
        self.service: Runtime | None = None
        self.registry: CollectorRegistry | None = None
        self.metrics: SelfMetrics | None = None
        self.eventlog: EventLogSink | None = None
        self._totals: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()
        self.incarnations = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Runtime:
        assert self.service is None, "already running"
        patterns, errors = load_patterns([self.patterns])
        assert not errors, errors
        self.registry = CollectorRegistry()
        self.metrics = SelfMetrics(self.registry, "test")
        self.metrics.declare_sources(["files"])
        metrics = self.metrics
        engine = Engine(patterns, regex_timeout=self.regex_timeout,
                        on_timeout=lambda sig: metrics.regex_timeouts.labels(sig).inc())
        self.eventlog = EventLogSink(self.events, fsync=self.fsync)
        detectors = self.detector_factory(self.clock) if self.detector_factory else []
        pipeline = build_pipeline(engine, [MetricsSink(metrics), self.eventlog, self.incidents],
                                  clock=self.clock, metrics=metrics, host="test",
                                  detectors=detectors, folder=Folder() if self.fold else None)
        source: Source
        if self.source_factory is not None:
            source = self.source_factory(self.clock, metrics)
        else:
            source = self.files = FileSource(
                sources=[SourceSpec("files", self.globs, (), self.start_at)],
                clock=self.clock, options=self.options, metrics=metrics)
        self.service = build_runtime(
            sources=[source], pipeline=pipeline, clock=self.clock, state_dir=self.state,
            eventlog=self.eventlog, metrics=metrics,
            checkpoint_interval=self.options.checkpoint_interval, fsync=self.fsync)
        self.incarnations += 1
        self.service.start()
        return self.service

    def stop(self) -> None:
        """Graceful stop: final commit, files closed, event log closed."""
        assert self.service is not None
        self.service.stop()
        self.service.pipeline.close()
        self._bank()

    def crash(self) -> None:
        """SIGKILL between two pump passes: nothing more is committed or flushed."""
        assert self.service is not None
        if self.files is not None:
            for tailer in self.files.tailers.values():
                for stream in tailer.streams():
                    stream.close()
        if self.eventlog is not None:
            # Whatever is still in the process's buffer dies with it: point the file's fd
            # at /dev/null so a later flush or close cannot reach the event log.
            fd = self.eventlog._fd  # noqa: SLF001 - simulate the process dying
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
            os.close(fd)
            self.eventlog._pending.clear()  # noqa: SLF001 - records only in memory die too
        self._bank()

    def restart(self, *, crash: bool = False) -> Runtime:
        self.crash() if crash else self.stop()
        return self.start()

    def _bank(self) -> None:
        """Keep the counters of the daemon that just ended (a new one starts at zero)."""
        assert self.registry is not None
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    self._totals[key] += sample.value
        self.service = None
        self.registry = None

    # -- driving ------------------------------------------------------------------------------

    def tick(self, seconds: float | None = None) -> bool:
        """Advance the fake clock (one poll interval by default) and run one pass."""
        assert self.service is not None
        self.clock.advance(self.options.poll_interval if seconds is None else seconds)
        return self.service.run_once()

    def pump(self, max_passes: int = 10_000) -> None:
        """Run full passes until two in a row read nothing (everything readable is read)."""
        idle = 0
        for _ in range(max_passes):
            idle = 0 if self.tick() else idle + 1
            if idle >= 2:
                return
        raise AssertionError("pump did not go idle")

    def settle(self) -> None:
        """Read everything, let rotate_wait pass so drained files close, then commit."""
        self.pump()
        self.tick(self.options.rotate_wait + 1)
        self.pump()
        assert self.service is not None
        self.service.commit(force=True)

    # -- observing ----------------------------------------------------------------------------

    def seqs(self) -> list[int]:
        if self.eventlog is not None and self.service is not None:
            self.eventlog.flush()
        return read_event_seqs(self.events)

    def counter(self, name: str, **labels: str) -> float:
        """A counter summed over every daemon incarnation (labels filter, not match exactly)."""
        total = 0.0
        want = set(labels.items())
        for (sname, slabels), value in self._totals.items():
            if sname == name and want <= set(slabels):
                total += value
        if self.registry is not None:
            for family in self.registry.collect():
                for sample in family.samples:
                    if sample.name == name and want <= set(sample.labels.items()):
                        total += sample.value
        return total

    def losses_counted(self) -> float:
        return sum(self.counter(name) for name in LOSS_COUNTERS)

    def with_options(self, **kw: object) -> None:
        self.options = replace(self.options, **kw)  # type: ignore[arg-type]


class Writer:
    """Appends numbered lines to a path, opening it for each write (like O_APPEND loggers)."""

    def __init__(self, path: Path, *, filler: int = 0) -> None:
        self.path = path
        self.seq = 0
        self.written: list[int] = []
        self.filler = filler

    def lines(self, n: int, *, pad: int = 0) -> list[int]:
        out: list[int] = []
        with open(self.path, "ab") as fh:
            for _ in range(n):
                self.seq += 1
                fh.write(error_line(self.seq, pad))
                for i in range(self.filler):
                    fh.write(f"INFO step {self.seq}.{i} ok\n".encode())
                out.append(self.seq)
        self.written.extend(out)
        return out

    def to(self, path: Path) -> Writer:
        self.path = path
        return self
